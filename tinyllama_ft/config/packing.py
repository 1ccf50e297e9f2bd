"""The long-row policies and the packing strategy they need (shared by ``config`` and ``lengths``).

A module of its own so that the configuration can validate ``long_rows`` without importing the length
measurement (which takes its defaults from the configuration).
"""

from __future__ import annotations

from typing import Literal, get_args

#: The long-row policies a conversation run takes (a conversation split over windows loses its turns' context).
ConversationLongRows = Literal["drop", "truncate"]
#: ``FinetuneConfig.long_rows``: the one declaration of its values (``typing.get_args`` reads them).
LongRows = Literal[ConversationLongRows, "split"]
#: ``FinetuneConfig.long_rows`` values, read from ``LongRows``.
LONG_ROWS: tuple[str, ...] = get_args(LongRows)


def resolve_packing_strategy(long_rows: str, packing: bool, packing_strategy: str, prefix: str = "") -> str:
    """The packing strategy a run must use for ``long_rows``; refuses contradictory combinations.

    Args:
        long_rows: ``"drop"``, ``"truncate"`` or ``"split"``.
        packing: whether TRL packs rows into ``max_seq_length`` windows.
        packing_strategy: TRL's ``"bfd"``, ``"bfd_split"`` or ``"wrapped"`` (ignored without packing).
        prefix: put before the field names in messages (``"FinetuneConfig."``).

    Returns:
        ``packing_strategy``, except ``"bfd_split"`` for ``long_rows="split"`` with ``"bfd"``.

    Raises:
        ValueError: unknown ``long_rows``; ``"split"`` without packing or with ``"wrapped"`` (neither splits
            rows); ``"truncate"`` with ``"bfd_split"`` (that strategy splits, it does not truncate).
    """
    if long_rows not in LONG_ROWS:
        raise ValueError(f"{prefix}long_rows={long_rows!r} is not allowed: one of {LONG_ROWS}")
    if long_rows == "split":
        if not packing:
            raise ValueError(
                f"{prefix}long_rows='split' needs {prefix}packing=True: without packing TRL truncates "
                "each row to max_seq_length tokens; use long_rows='drop' or 'truncate'"
            )
        if packing_strategy == "wrapped":
            raise ValueError(
                f"{prefix}long_rows='split' needs {prefix}packing_strategy='bfd_split' (or 'bfd', "
                "which it replaces), not 'wrapped'"
            )
        return "bfd_split"
    if long_rows == "truncate" and packing and packing_strategy == "bfd_split":
        raise ValueError(
            f"{prefix}long_rows='truncate' contradicts {prefix}packing_strategy='bfd_split', which "
            "splits long rows: use long_rows='split', or packing_strategy='bfd'"
        )
    return packing_strategy

"""Rows longer than ``max_seq_length`` tokens: counted and reported before training, then handled by a policy.

A row's length is its token count as the trainer gets it (``tokenization.tokenize_dataset``'s ``input_ids``,
or TRL's tokenization of a ``text`` column). The policy (``FinetuneConfig.long_rows``: ``"drop"``,
``"truncate"``, ``"split"``) decides before TRL, whose handling of each packing strategy is in
docs/internals.md; a row whose prompt alone fills the window is dropped under every policy.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..config.finetune import DEFAULTS
from ..config.packing import resolve_packing_strategy
from .alpaca_prompts import RESPONSE_MARKER, add_eos
from .tokenization import training_rows, without_rows

#: How many row indices a summary names.
SHOW_ROWS = 5
#: Rows per tokenizer call (one batched call per chunk keeps memory flat on large datasets).
TOKENIZE_CHUNK = 2000


@dataclass
class LengthReport:
    """Token lengths of a text dataset against ``max_seq_length``, and what happens to the long rows.

    Attributes:
        max_seq_length: the window, in tokens.
        packing: whether the trainer packs.
        packing_strategy: TRL's strategy when packing, else None.
        lengths: tokens per row (BOS and EOS included), in dataset order.
        long: 0-based dataset indices of rows longer than ``max_seq_length`` tokens.
        prompt_overflow: the subset of ``long`` whose prompt alone (up to and including
            ``"### Response:\\n"``) has at least ``max_seq_length`` tokens: no response token fits.
        row_ids: the index each dataset row had in the source (``DataReport`` order), used in messages;
            None: the dataset's own 0-based index.
        policy: the ``long_rows`` policy applied (``apply_long_rows``), None before.
        dropped: 0-based dataset indices of the rows the policy removed.
    """

    max_seq_length: int
    packing: bool
    packing_strategy: str | None
    lengths: list[int]
    long: list[int]
    prompt_overflow: list[int]
    row_ids: list[int] | None = None
    policy: str | None = None
    dropped: list[int] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows measured."""
        return len(self.lengths)

    @property
    def longest(self) -> int:
        """Tokens in the longest row (0 for no rows)."""
        return max(self.lengths, default=0)

    @property
    def kept_long(self) -> list[int]:
        """0-based dataset indices of long rows that stay after the policy (all of them before it)."""
        gone = set(self.dropped)
        return [i for i in self.long if i not in gone]

    @property
    def tokens_over(self) -> int:
        """Tokens past ``max_seq_length`` in the long rows kept: cut away by "bfd" or no packing, moved to
        further pieces by "bfd_split", carried into the next window by "wrapped"."""
        return sum(self.lengths[i] - self.max_seq_length for i in self.kept_long)

    def source_index(self, i: int) -> int:
        """The 0-based source row index of dataset row ``i`` (``i`` itself without ``row_ids``)."""
        return self.row_ids[i] if self.row_ids is not None else i

    def handling(self) -> str:
        """What the trainer does to kept rows longer than ``max_seq_length`` (TRL 1.15 / 1.16 behaviour)."""
        n = self.max_seq_length
        if not self.packing:
            return (
                f"without packing TRL truncates each to its first {n} tokens (truncation_mode='keep_start'): "
                "the rest of the response and the EOS are not trained on"
            )
        return {
            "bfd": f"'bfd' packing truncates each to its first {n} tokens: the rest, EOS included, is discarded",
            "bfd_split": (
                f"'bfd_split' packing splits each into pieces of at most {n} tokens, packed as separate "
                "samples: no token is lost, but a later piece does not see the prompt and its first "
                "token is not trained on"
            ),
            "wrapped": (
                f"'wrapped' packing cuts each at {n}-token window edges (it cuts every row that crosses "
                "an edge, long or not): no token is lost, the part past an edge loses its context"
            ),
        }[self.packing_strategy]

    def _rows(self, indices: Sequence[int]) -> str:
        shown = ", ".join(str(self.source_index(i)) for i in indices[:SHOW_ROWS])
        return shown + (", ..." if len(indices) > SHOW_ROWS else "")

    def summary(self) -> str:
        """One line for the notebook: counts, longest row, first row indices (0-based), and the handling.

        Returns:
            e.g. ``"lengths (tokens, BOS+EOS included) vs max_seq_length=512 ('bfd' packing): 5000 rows, longest
            4312; 2320 longer (source rows from 0: 0, 2, 3, 4, 5, ...), 43 of them with the prompt alone >= 512
            tokens (source rows 5, 38, 51, 86, 92, ...; always dropped); long_rows='drop': 2320 dropped, 2680
            rows left"``; before ``apply_long_rows``, what the trainer would do to the long rows instead.
        """
        strategy = f"'{self.packing_strategy}' packing" if self.packing else "no packing"
        index = "source row" if self.row_ids is not None else "row"
        line = (
            f"lengths (tokens, BOS+EOS included) vs max_seq_length={self.max_seq_length} ({strategy}): "
            f"{self.rows} rows, longest {self.longest}; {len(self.long)} longer"
        )
        if self.long:
            line += f" ({index}s from 0: {self._rows(self.long)})"
        if self.prompt_overflow:
            line += (
                f", {len(self.prompt_overflow)} of them with the prompt alone >= {self.max_seq_length} tokens "
                f"({index}s {self._rows(self.prompt_overflow)}; always dropped)"
            )
        if self.policy is None:
            return line + (f"; {self.handling()}" if self.long else "")
        line += f"; long_rows={self.policy!r}: {len(self.dropped)} dropped, {self.rows - len(self.dropped)} rows left"
        kept = self.kept_long
        if kept:
            line += f"; {len(kept)} long rows kept ({self.tokens_over} tokens past the window): {self.handling()}"
        if self.packing and self.packing_strategy == "wrapped":
            line += "; note: 'wrapped' packing also cuts shorter rows at window edges"
        return line

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts for ``run_summary.json`` (lengths in tokens; source row indices from 0, first 20)."""
        return {
            "max_seq_length": self.max_seq_length,
            "packing": self.packing,
            "packing_strategy": self.packing_strategy,
            "rows": self.rows,
            "longest": self.longest,
            "long_rows": len(self.long),
            "long_row_indices": [self.source_index(i) for i in self.long[:20]],
            "prompt_overflow_rows": len(self.prompt_overflow),
            "prompt_overflow_indices": [self.source_index(i) for i in self.prompt_overflow[:20]],
            "policy": self.policy,
            "dropped": len(self.dropped),
            "kept_long_rows": len(self.kept_long),
            "tokens_past_window": self.tokens_over,
        }


def token_ids(texts: Sequence[str], tokenizer, append_eos: bool = True) -> list[list[int]]:
    """One list of token ids per training text, as TRL's trainer tokenizes it (special tokens included;
    ``append_eos``: ``tokenizer.eos_token`` appended where missing, as TRL does), ``TOKENIZE_CHUNK`` texts a call."""
    ids: list[list[int]] = []
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        chunk = texts[start : start + TOKENIZE_CHUNK]
        if append_eos:
            chunk = [add_eos(t, tokenizer.eos_token) for t in chunk]
        ids.extend(tokenizer(text=list(chunk), return_attention_mask=False)["input_ids"])
    return ids


def _prompt_text(text: str, output: str | None, eos: str) -> str | None:
    """The prompt part of a training text: up to the response (the ``output`` column when the text ends
    with it, else the last ``"### Response:\\n"``); None when neither finds it."""
    body = text.removesuffix(eos)
    if output and body.endswith(output):
        return body[: len(body) - len(output)]
    at = body.rfind(RESPONSE_MARKER)
    return body[: at + len(RESPONSE_MARKER)] if at >= 0 else None


def length_report(
    dataset,
    tokenizer,
    *,
    max_seq_length: int = DEFAULTS.max_seq_length,
    packing: bool = DEFAULTS.packing,
    packing_strategy: str = DEFAULTS.packing_strategy,
    data_report=None,
    text_column: str = "text",
    output_column: str = DEFAULTS.output_column,
    template: str = DEFAULTS.template,
) -> LengthReport:
    """Measure every row of a dataset against ``max_seq_length``, before training, as the trainer gets it.

    Args:
        dataset: ``datasets.Dataset`` of tokenized rows (``input_ids`` + ``completion_mask``,
            ``tokenization.tokenize_dataset`` output: the prompt is where the mask is 0), or of Alpaca rows
            (tokenized the same way here, as ``build_trainer`` does), or with only a ``text_column`` (measured
            as TRL tokenizes it; the ``output_column`` it was built from, when there, marks where the
            response starts; without it the last ``"### Response:\\n"`` does).
        tokenizer: the run's tokenizer (the one passed to ``build_trainer``).
        max_seq_length: the trainer's window, in tokens.
        packing: whether the trainer packs.
        packing_strategy: TRL's packing strategy (``"bfd"``, ``"bfd_split"``, ``"wrapped"``); ignored
            without packing.
        data_report: the ``data.DataReport`` of ``load_instruction_data``: messages then give the row's
            index in the source (0-based, as the data report's), not in ``dataset``.
        text_column, output_column: column names.
        template: as ``alpaca_prompts.format_prompt``, for Alpaca rows.

    Returns:
        A ``LengthReport`` (no policy applied yet; ``summary()`` says what the trainer would do).

    Raises:
        ValueError: ``max_seq_length`` is not a positive number of tokens, ``packing_strategy`` is unknown,
            or ``data_report`` kept a different number of rows than ``dataset`` holds.
    """
    if max_seq_length <= 0:
        raise ValueError(f"max_seq_length={max_seq_length!r} is not allowed: a positive number of tokens")
    if packing and packing_strategy not in ("bfd", "bfd_split", "wrapped"):
        raise ValueError(f"packing_strategy={packing_strategy!r} is not one of 'bfd', 'bfd_split', 'wrapped'")
    rows = training_rows(dataset, tokenizer, template=template)
    if "completion_mask" in rows.column_names:  # our tokenization: the prompt is where the mask is 0
        masks = rows["completion_mask"]
        lengths = [len(m) for m in masks]
        long = [i for i, n in enumerate(lengths) if n > max_seq_length]
        overflow = [i for i in long if 1 not in masks[i][:max_seq_length]]
    else:
        lengths, long, overflow = _text_lengths(dataset, tokenizer, max_seq_length, text_column, output_column)
    row_ids = None
    if data_report is not None:
        bad = {b.index for b in data_report.bad}
        row_ids = [i for i in range(data_report.total) if i not in bad]
        if len(row_ids) != len(lengths):
            raise ValueError(
                f"data_report kept {len(row_ids)} rows but the dataset has {len(lengths)}: pass the "
                "report of the rows this dataset was built from, or data_report=None"
            )
    return LengthReport(
        max_seq_length, packing, packing_strategy if packing else None, lengths, long, overflow, row_ids
    )


def _text_lengths(dataset, tokenizer, max_seq_length, text_column, output_column):
    """``(lengths, long, prompt_overflow)`` of a ``text`` dataset, tokenized as TRL tokenizes it."""
    texts = dataset[text_column]
    ids = token_ids(texts, tokenizer)
    lengths = [len(x) for x in ids]
    long = [i for i, n in enumerate(lengths) if n > max_seq_length]
    outputs = dataset[output_column] if output_column in dataset.column_names else [None] * len(texts)
    prompts = {i: _prompt_text(texts[i], outputs[i], tokenizer.eos_token) for i in long}
    measurable = [i for i in long if prompts[i] is not None]
    prompt_ids = token_ids([prompts[i] for i in measurable], tokenizer, append_eos=False)
    # the response starts where the prompt's tokens stop matching the full text's (they may merge at the edge)
    overflow = [i for i, p in zip(measurable, prompt_ids) if len(os.path.commonprefix([p, ids[i]])) >= max_seq_length]
    return lengths, long, overflow


def apply_long_rows(dataset, report: LengthReport, *, policy: str = DEFAULTS.long_rows):
    """Apply the ``long_rows`` policy to the dataset ``report`` measured, before ``build_trainer``.

    Args:
        dataset: the dataset given to ``length_report`` (same rows, same order).
        report: its ``LengthReport``.
        policy: ``"drop"``: remove every row longer than ``report.max_seq_length`` tokens; ``"truncate"``:
            keep them for the trainer to truncate (or, with ``"wrapped"``, cut at window edges);
            ``"split"``: keep them for ``"bfd_split"`` packing. Rows whose prompt alone fills the window
            are removed under every policy.

    Returns:
        ``(dataset, report)``: the rows kept (original order) and a copy of ``report`` with ``policy`` and
        ``dropped`` (0-based indices into the given dataset) filled in.

    Raises:
        ValueError: ``policy`` is unknown or contradicts the report's packing (as
            ``resolve_packing_strategy``; ``"split"`` needs ``report.packing_strategy == "bfd_split"``);
            the dataset is not the one measured; or no row is left (naming ``max_seq_length`` and
            ``long_rows``), so a run never trains zero steps on an empty dataset.
    """
    strategy = report.packing_strategy or "bfd"
    needed = resolve_packing_strategy(policy, report.packing, strategy)
    if report.packing and needed != strategy:
        raise ValueError(
            f"long_rows={policy!r} needs packing_strategy={needed!r}, but the report was made for "
            f"{strategy!r}: measure with the strategy the trainer will use"
        )
    if len(dataset) != report.rows:
        raise ValueError(f"the dataset has {len(dataset)} rows but the report measured {report.rows}")
    dropped = sorted(set(report.long if policy == "drop" else report.prompt_overflow))
    out = dataclasses.replace(report, policy=policy, dropped=dropped)
    if dropped and len(dropped) == report.rows:
        raise ValueError(
            f"long_rows={policy!r} leaves no rows: all {report.rows} are longer than max_seq_length="
            f"{report.max_seq_length} tokens (longest {report.longest})"
            + (" with the prompt alone filling it" if policy != "drop" else "")
            + ": raise max_seq_length, or choose another long_rows policy\n"
            + out.summary()
        )
    return without_rows(dataset, dropped), out

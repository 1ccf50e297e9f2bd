"""A fingerprint of the training rows, recorded in the run identity so a resume on changed data is refused.

``data_fingerprint`` hashes the checked rows (not the rendered prompts, which a chat template may date), in
order: the same rows in another order give another split and batch order, another run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping

#: The row fields hashed (``instructions.check_rows``'s output columns).
FINGERPRINT_FIELDS = ("instruction", "input", "output")


def data_fingerprint(rows: Iterable[Mapping[str, Any]], *, fields: tuple[str, ...] = FINGERPRINT_FIELDS) -> str:
    """SHA-256 over the canonical JSON of each row, in order.

    Args:
        rows: the kept training rows, in training order: a ``datasets.Dataset`` or a list of dicts with
            ``fields`` (other columns, e.g. a rendered ``text``, are ignored).
        fields: the columns hashed (``FINGERPRINT_FIELDS``).

    Returns:
        ``"sha256:<64 hex digits>"``; each row is hashed as ``json.dumps({field: value}, sort_keys=True,
        ensure_ascii=False, separators=(",", ":"))`` plus a newline, so the value depends only on the rows'
        text and order (not on dict key order, the file format, or whether it came from a Dataset).

    Raises:
        KeyError: a row lacks one of ``fields`` (names the row's index and the field).
    """
    digest = hashlib.sha256()
    for index, row in enumerate(rows):
        try:
            canonical = {name: row[name] for name in fields}
        except KeyError as e:
            raise KeyError(f"data_fingerprint: row {index} has no field {e.args[0]!r}") from None
        digest.update(json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        digest.update(b"\n")
    return "sha256:" + digest.hexdigest()

"""Raw-text documents for continued pretraining (``dataset_format: text``): read, checked, tokenized, chunked.

A document is one ``.txt`` / ``.md`` file (a folder: every such file under it, sorted by path), or one row's ``text``
of a ``.jsonl`` / ``.json`` / ``.csv`` / ``.parquet`` file or Hub dataset. A bad document (an empty, binary or
non-UTF-8 file; a row without a string ``text``) is dropped and counted in the ``DataReport`` like a bad Alpaca row
(``strict``: raised, naming the file or row). Each document's ids end with the tokenizer's EOS and carry the loss on
every token; one longer than ``max_seq_length`` is split into consecutive windows of ``max_seq_length`` tokens (the
last one shorter), each its own sequence: the rule for a long file too (``chunk_ids``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from .instructions import DataReport, _field_problem, load_instruction_data, mapped_by, split_train_eval
from .row_files import DataError, UnreadableRow, _read_text, read_rows

#: The files read as one document each.
TEXT_SUFFIXES = (".txt", ".md")
#: The column a row file's documents are read from.
TEXT_COLUMN = "text"


def _file_document(path: str) -> dict | UnreadableRow:
    """``{"text": ..., "source": path}`` of one text file, or the ``UnreadableRow`` saying why it is none."""
    try:
        text = _read_text(path)
    except DataError as err:
        kind = "binary" if "NUL byte" in str(err) else "undecodable"
        return UnreadableRow(path, str(err).removeprefix(f"{path}: "), kind)
    if not text.strip():
        return UnreadableRow(path, "is empty" if not text else "is whitespace-only", "empty")
    return {TEXT_COLUMN: text, "source": path}


def text_files(folder: str) -> list[str]:
    """The ``TEXT_SUFFIXES`` files under ``folder`` (recursively, hidden entries skipped), sorted by path."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(root, f) for f in files if f.lower().endswith(TEXT_SUFFIXES) and not f.startswith(".")]
    return sorted(found)


def load_documents(source: str, *, split: str = "train", config: str | None = None, strict: bool = False):
    """``(dataset, report)``: the documents of ``source`` as a ``datasets.Dataset`` with a ``text`` column.

    Args:
        source: a ``.txt`` / ``.md`` file (one document), a folder holding such files (one document each; a folder
            without any is read by ``row_files.read_rows``), or a row file / Hub id whose ``text`` column holds one
            document per row.
        split, config: as ``row_files.read_rows``.
        strict: raise at the first bad document instead of dropping and counting it.

    Returns:
        The kept documents, text exactly as read, in file or row order; ``report``: an
        ``instructions.DataReport`` counting documents read, kept and dropped (by reason: ``"empty"``, ``"binary"``,
        ``"undecodable"``, ``"missing"``, ``"wrong type"``, ...), printed.

    Raises:
        DataError: no document left (naming the source and why), or with ``strict`` the first bad one (its row
            index and file or field); ``row_files.read_rows``' errors for a row file.
    """
    from datasets import Dataset

    from ..config.locations import check_source

    path = check_source(source, "dataset", repo_type="dataset")
    files = [path] if os.path.isfile(path) and path.lower().endswith(TEXT_SUFFIXES) else []
    if os.path.isdir(path):
        files = text_files(path)
    rows = [_file_document(f) for f in files] if files else read_rows(source, split, config)
    report = DataReport(source=source, columns={TEXT_COLUMN: mapped_by("dataset_format") + " ('text' reads 'text')"})

    def check(row):
        problem = _field_problem(row, TEXT_COLUMN, True)
        return (problem, None) if problem else (None, {TEXT_COLUMN: row[TEXT_COLUMN]})

    clean = report.keep_each(rows, check, strict=strict)
    report.print_and_require(clean)
    return Dataset.from_list(clean), report


def chunk_ids(ids: Sequence[int], max_seq_length: int) -> list[list[int]]:
    """``ids`` cut into consecutive windows of ``max_seq_length`` tokens, the last one shorter (TRL's ``bfd_split``
    rule, which training applies): nothing dropped, nothing overlapping. Raises ValueError: max_seq_length < 1."""
    if max_seq_length < 1:
        raise ValueError(f"max_seq_length={max_seq_length}: at least 1 token per window")
    return [list(ids[i : i + max_seq_length]) for i in range(0, len(ids), max_seq_length)]


def document_ids(tokenizer, text: str) -> list[int]:
    """A document's token ids as training reads them: the tokenizer's own special tokens at the start (BOS where it
    adds one), special-token text kept as text, then one EOS (the tokenizer's ``eos_token_id``)."""
    ids = tokenizer(text, split_special_tokens=True)["input_ids"]
    return [*ids, tokenizer.eos_token_id]


@dataclass(frozen=True)
class ChunkReport:
    """How the documents fit ``max_seq_length``: ``documents`` tokenized, ``tokens`` in them (EOS included),
    ``long`` documents longer than ``max_seq_length``, and the ``windows`` all of them make."""

    documents: int
    tokens: int
    long: int
    windows: int
    max_seq_length: int

    def summary(self) -> str:
        split = f"{self.long} longer than {self.max_seq_length} tokens, split into windows (none cut)"
        return (
            f"text: {self.documents} documents, {self.tokens:,} tokens with their EOS; {split}: "
            f"{self.windows} training sequences of at most {self.max_seq_length} tokens"
        )


def tokenize_documents(dataset, tokenizer, *, max_seq_length: int):
    """``(dataset, report)``: ``dataset`` (a ``text`` column) with ``input_ids`` (``document_ids``: the whole
    document, EOS last) and ``completion_mask`` (1 on every token: the loss is on all of them); a ``ChunkReport``
    of the windows ``chunk_ids`` makes of them. Raises DataError: the tokenizer has no EOS."""
    if tokenizer.eos_token_id is None:
        raise DataError("dataset_format='text': the tokenizer has no eos_token, and each document must end with it")

    def encode(row):
        ids = document_ids(tokenizer, row[TEXT_COLUMN])
        return {"input_ids": ids, "completion_mask": [1] * len(ids)}

    dataset = dataset.map(encode, desc="tokenizing documents")
    lengths = [len(ids) for ids in dataset["input_ids"]]
    report = ChunkReport(
        documents=len(lengths),
        tokens=sum(lengths),
        long=sum(n > max_seq_length for n in lengths),
        windows=sum(-(-n // max_seq_length) for n in lengths),
        max_seq_length=max_seq_length,
    )
    return dataset, report


def forgetting_rows(cfg) -> list[dict]:
    """The Alpaca rows of ``cfg.forgetting_dataset`` a text run scores before and after training (the forgetting
    check): the part ``split_train_eval`` holds out of them with the run's ``test_size``, ``eval_split`` and
    ``seed`` (the rows an Alpaca run on them with those values holds out), as ``{"instruction", "input",
    "output"}`` dicts; [] without ``forgetting_dataset``. Raises DataError: as
    ``instructions.load_instruction_data``."""
    if not cfg.forgetting_dataset:
        return []
    rows, _ = load_instruction_data(cfg.forgetting_dataset, strict=cfg.strict)
    held_out = split_train_eval(rows, test_size=cfg.test_size, seed=cfg.seed, eval_split=cfg.eval_split)[1]
    return [] if held_out is None else held_out.to_list()

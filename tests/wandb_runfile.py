"""Read an offline W&B run back: the records and the logged history of its ``run-<id>.wandb`` file."""

from __future__ import annotations

import glob
import json
import os
import struct
import time
import zlib


# W&B's run file (``run-<id>.wandb``): a 7-byte header (":W&B", magic 0xBEE1, version 0), then LevelDB
# log records (https://github.com/google/leveldb/blob/main/doc/log_format.md) in 32 KiB blocks, each
# record a serialized ``wandb_internal_pb2.Record``. The installed wandb (0.31) ships no Python reader
# of this file (its reader lives in the Go ``wandb-core``), so this is the format's documented reader.
_LOG_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")  # crc32 of (type byte + data), length, type
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: str) -> list:
    """Every complete record of a W&B run file, in order.

    Args:
        path: a ``run-<id>.wandb`` file.

    Returns:
        ``wandb_internal_pb2.Record`` objects; a record still being written at the end is left out.

    Raises:
        ValueError: ``path`` is not a W&B run file, or a record's checksum is wrong (offset named).
    """
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    ident, magic, _ = _LOG_HEADER.unpack_from(data) if len(data) >= _LOG_HEADER.size else (b"", 0, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"path={path!r} is not a W&B run file (no ':W&B' header)")
    records, pending, pos = [], None, _LOG_HEADER.size
    while pos + _CHUNK_HEADER.size <= len(data):
        if _BLOCK - pos % _BLOCK < _CHUNK_HEADER.size:  # block trailer: zero padding
            pos += _BLOCK - pos % _BLOCK
            continue
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        chunk = data[pos + _CHUNK_HEADER.size : pos + _CHUNK_HEADER.size + length]
        if kind == 0 or len(chunk) < length:  # preallocated zeros, or a record still being written
            break
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise ValueError(f"path={path!r}: bad checksum in the record at byte {pos}")
        pos += _CHUNK_HEADER.size + length
        if kind in (_FULL, _FIRST):
            pending = chunk
        elif pending is not None:
            pending += chunk
        if kind in (_FULL, _LAST) and pending is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = None
    return records


def read_offline_metrics(run_dir: str, wait_s: float = 10.0) -> list[dict]:
    """The history rows (what ``wandb.log`` and the trainer logged) of a W&B run, read from its run file.

    Args:
        run_dir: the run folder (``offline-run-*``), its ``files`` folder (``Tracking.run_dir``), or
            the ``run-<id>.wandb`` file itself.
        wait_s: W&B's service process may still be writing after ``wandb.finish()``: wait up to this
            long for the run's exit record before reading what is there.

    Returns:
        One dict per logged step, ``{"train/loss": 3.2, "_step": 0, ...}``, values decoded from JSON;
        a logged nested dict comes back flattened with dots (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``), as
        W&B's own history has it.

    Raises:
        FileNotFoundError: no ``run-*.wandb`` file in ``run_dir``.
        ValueError: as ``wandb_records``.
    """
    if os.path.isfile(run_dir):
        path = run_dir
    else:
        folder = os.path.dirname(run_dir) if os.path.basename(os.path.normpath(run_dir)) == "files" else run_dir
        found = sorted(glob.glob(os.path.join(folder, "run-*.wandb")))
        if not found:
            raise FileNotFoundError(f"run_dir={run_dir!r} holds no run-*.wandb file: not a W&B run folder")
        path = found[-1]
    deadline = time.monotonic() + wait_s
    records = wandb_records(path)
    while not any(r.WhichOneof("record_type") == "exit" for r in records) and time.monotonic() < deadline:
        time.sleep(0.1)
        records = wandb_records(path)
    return [
        {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]

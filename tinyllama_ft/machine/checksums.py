"""File checksums: what a download or a cached conversion is checked against."""

from __future__ import annotations

import os


def sha256_of(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (``huggingface_hub.utils.sha.sha_fileobj``)."""
    from huggingface_hub.utils.sha import sha_fileobj

    with open(path, "rb") as f:
        return sha_fileobj(f).hex()

"""Temporaries named after their owner, and the cleanup of those a killed run left behind.

A killed run (SIGKILL, a Colab disconnect) leaves its temporaries: an export's staging folder (gigabytes), a
``.partial`` GGUF, the converter's download folder. ``make_temporary`` names each
``<prefix><host>-<pid>-<token><suffix>`` so the next run tells a dead process's from a live one's, and
``clean_stale`` removes them in one printed line. Kept over ``tempfile``, whose names say nothing of their owner
(tests/test_export_leftovers.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import time
import uuid
from pathlib import Path

#: Seconds without a write after which a temporary without an owner in its name (``.staging-k3x_9a2b``) is stale.
UNOWNED_STALE_S = 3600.0
#: Temporaries this process made and still uses (a pid alone does not say: a restarted container reuses it).
_LIVE: set[str] = set()


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def make_temporary(parent: str | os.PathLike, prefix: str, suffix: str = "", *, create: str | None = "dir") -> Path:
    """A hidden temporary in ``parent`` named ``<prefix><host>-<pid>-<token><suffix>`` (``stale_temporaries`` reads it).

    Args:
        parent: the folder (created if missing). prefix, suffix: the name's ends (``".staging-"``, ``".partial"``).
        create: ``"dir"`` (mode 0700), ``"file"`` (empty, mode 0600), or None (the name only, for an ``os.replace``).

    Returns:
        Its path; ``discard_temporary`` removes it (or forgets it once renamed).

    Raises:
        OSError: ``parent`` cannot be written.
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    while True:
        path = parent / f"{prefix}{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"
        _LIVE.add(str(path))  # before it exists: another thread's cleanup never sees it unowned
        try:
            if create == "dir":
                path.mkdir(mode=0o700)
            elif create == "file":
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            elif os.path.lexists(path):
                raise FileExistsError(path)
            return path
        except FileExistsError:
            _LIVE.discard(str(path))


def discard_temporary(path: str | os.PathLike) -> None:
    """Remove a ``make_temporary`` folder or file (already gone is fine) and stop counting it as in use; what cannot
    be removed stays for a later ``clean_stale``. Raises nothing."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
    _LIVE.discard(str(path))


def replace_folder(staged: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move the complete folder ``staged`` to ``target``; an older ``target`` is replaced only once the new one is
    whole (moved aside to ``.<name>.old-<host>-<pid>-<token>`` first, which ``clean_stale`` finds if killed here)."""
    target = Path(target)
    old = None
    if target.exists():
        old = make_temporary(target.parent, f".{target.name}.old-", create=None)
        os.replace(target, old)
    os.replace(staged, target)
    if old:
        discard_temporary(old)


def _started_after(pid: int, when: float) -> bool:
    """True when process ``pid`` began after ``when`` (epoch s), so it cannot have made a thing written then."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="utf-8") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK") > when + 1.0  # btime is whole seconds, rounded down
    except (OSError, ValueError, IndexError, StopIteration):
        return False


def _changed(path: Path) -> float:
    """When ``path`` was last changed itself, a rename included (ctime), or written (mtime): after it was made."""
    st = os.lstat(path)
    return max(st.st_mtime, st.st_ctime)


def _tree(path: Path) -> tuple[int, float]:
    """Bytes of the files under ``path`` (or of the file) and the newest modification time there."""
    try:
        top = os.lstat(path)
    except OSError:
        return 0, 0.0
    size, newest = top.st_size if not path.is_dir() else 0, top.st_mtime
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(folder, name))
                size, newest = size + st.st_size, max(newest, st.st_mtime)
    return size, newest


def stale_temporaries(
    parent: str | os.PathLike, prefix: str, suffix: str = ""
) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The temporaries named ``<prefix>...<suffix>`` in ``parent`` (as ``make_temporary`` made them) no live run uses.

    Stale: made on this host by a process that has exited, whose pid now belongs to a process begun after the
    temporary last changed, or that is this process's pid but not one it made (a restarted container); without an
    owner in the name, not written for ``UNOWNED_STALE_S`` seconds.

    Returns:
        ``(stale, foreign)``, sorted by name: paths to remove, and ``(path, host)`` of those made on another host
        (whose processes this machine cannot see). A missing or unreadable ``parent``: ``([], [])``.
    """
    from .lock import _pid_alive  # the package's one liveness rule (zombies count as gone)

    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return [], []
    stale: list[Path] = []
    foreign: list[tuple[Path, str]] = []
    for name in names:
        rest = name[len(prefix) : len(name) - len(suffix)]
        if not name.startswith(prefix) or not name.endswith(suffix) or not rest:
            continue
        path = Path(parent) / name
        owned = re.fullmatch(r"(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}", rest) or re.fullmatch(r"(?P<pid>\d+)", rest)
        if owned is None:
            if re.fullmatch(r"[0-9a-z_]{8}", rest) and time.time() - _tree(path)[1] > UNOWNED_STALE_S:
                stale.append(path)  # tempfile.mkdtemp's name, from before the owner was in it
            continue
        host, pid = owned.groupdict().get("host") or _host(), int(owned["pid"])
        if host != _host():
            foreign.append((path, host))
        elif str(path) not in _LIVE and (
            pid == os.getpid() or not _pid_alive(pid) or _started_after(pid, _changed(path))
        ):
            stale.append(path)
    return stale, foreign


def format_bytes(n: int) -> str:
    """``n`` (bytes, an int >= 0) as ``"2.05 GiB"``, ``"40.00 MiB"`` or ``"3.0 KiB"`` (binary units)."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def clean_stale(parent: str | os.PathLike, patterns: list[tuple[str, str]], *, label: str, left_by: str) -> list[str]:
    """Remove the ``stale_temporaries`` of each ``(prefix, suffix)`` in ``parent``, printing what went.

    Args:
        parent: the folder (missing: nothing to do). patterns: ``(prefix, suffix)`` pairs as for ``make_temporary``.
        label, left_by: the line's first word and who left them (``"export"``, ``"a killed export"``).

    Returns:
        The lines printed (``[]`` for none): ``"<label>: removed N temporaries left by <left_by> in <parent>: <name>
        (<size>), ...; <total> freed"``, and a ``"<label>: kept <name> ..."`` line for each made on another host.
        Raises nothing: one that cannot be removed is left out of the line and tried again next time.
    """
    removed: list[str] = []
    freed = 0
    lines = []
    for prefix, suffix in patterns:
        stale, foreign = stale_temporaries(parent, prefix, suffix)
        for path in stale:
            size = _tree(path)[0]
            discard_temporary(path)
            if not os.path.lexists(path):
                removed.append(f"{path.name} ({format_bytes(size)})")
                freed += size
        lines += [
            f"{label}: kept {path.name} in {parent} ({format_bytes(_tree(path)[0])}): made on host {host!r}, "
            f"whose processes this machine cannot see; delete it by hand if nothing runs there"
            for path, host in foreign
        ]
    if removed:
        noun = "temporary" if len(removed) == 1 else "temporaries"
        lines.insert(
            0,
            f"{label}: removed {len(removed)} {noun} left by {left_by} in {parent}: {', '.join(removed)}; "
            f"{format_bytes(freed)} freed",
        )
    for line in lines:
        print(line, flush=True)
    return lines

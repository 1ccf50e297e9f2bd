"""One run per output folder at a time: ``<output_dir>/run.lock``, a JSON file with a heartbeat.

Kept over filelock's ``SoftFileLease``, which creates its marker empty before writing it and takes a lease over only
after watching it unchanged for a whole lease: ours appears complete (``os.link``) and a lock whose heartbeat is older
than ``STALE_AFTER_S``, or whose process on this host is gone, is taken over at once (tests/test_lock.py). Only the
main process of a launch takes it; this process's own lock is reused (docs/internals.md).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

from .distributed import is_main_process  # the one rule for "main process only" (re-exported)
from .paths import expand_path

#: The lock file's name inside ``output_dir``.
LOCK_FILE = "run.lock"
#: Seconds between heartbeats of a live run.
HEARTBEAT_S = 30.0
#: Seconds after its last heartbeat that another machine's lock is stale: ten missed heartbeats, room for Google
#: Drive's sync delay between Colab runtimes.
STALE_AFTER_S = 300.0

_HELD: dict[str, "RunLock"] = {}


class RunLockedError(RuntimeError):
    """``output_dir`` is locked by another live run."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is gone too
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def read_lock(output_dir: str) -> dict | None:
    """The lock's fields (``host``, ``pid``, ``started``, ``heartbeat``, ``token``), or None without a readable lock."""
    try:
        value = json.loads(Path(output_dir, LOCK_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _staged(path: str, text: str, token: str) -> str:
    """A complete temporary copy of ``text`` beside ``path``, named after ``token``; returns its path."""
    tmp = Path(f"{path}.{token}.tmp")
    tmp.write_text(text, encoding="utf-8")
    return str(tmp)


class RunLock:
    """This process's lock on ``output_dir`` (from ``acquire_run_lock``); a context manager that releases it."""

    def __init__(self, output_dir: str, heartbeat_s: float):
        self.output_dir = output_dir
        self.path = os.path.join(output_dir, LOCK_FILE)
        now = time.time()
        self.info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": now,
            "heartbeat": now,
            "started_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now)),
            "token": uuid.uuid4().hex,
        }
        self.heartbeat_s = heartbeat_s
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _owned(self) -> bool:
        current = read_lock(self.output_dir)
        return current is not None and current.get("token") == self.info["token"]

    def beat(self) -> bool:
        """Rewrite the heartbeat now (atomically). Returns False, once with a warning, if the lock was taken from us."""
        if self.lost or not self._owned():
            if not self.lost:
                print(
                    f"run lock: {self.path} no longer holds this run's lock (taken over as stale?); "
                    f"another run may now write into {self.output_dir!r}",
                    file=sys.stderr,
                )
            self.lost = True
            return False
        self.info["heartbeat"] = time.time()
        self._write()
        return True

    def _write(self) -> None:
        os.replace(_staged(self.path, json.dumps(self.info, indent=2), self.info["token"]), self.path)

    def _run(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                if not self.beat():
                    return
            except OSError as e:  # a Drive hiccup: try again at the next beat
                print(f"run lock: heartbeat on {self.path} failed ({e}); retrying", file=sys.stderr)

    def release(self) -> None:
        """Stop the heartbeat and remove the lock file if it is still ours (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        key = os.path.realpath(self.output_dir)
        if _HELD.get(key) is self:
            del _HELD[key]
        if self._owned():
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _create(path: str, text: str, token: str) -> bool:
    """Create ``path`` holding ``text`` unless it exists, atomically. Returns False when it exists."""
    tmp = _staged(path, text, token)
    try:
        os.link(tmp, path)  # atomic, and the file is complete the moment it appears
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links here (some FUSE mounts): exclusive create, then write
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return True
    finally:
        os.remove(tmp)


def _judge(path: str, current: dict | None, stale_after_s: float) -> tuple[str, str]:
    """``("own" | "live" | "stale", description)`` of the lock file at ``path``."""
    now = time.time()
    if current is None:  # being written, or garbled: judged by the file's age
        try:
            age = now - os.path.getmtime(path)
        except FileNotFoundError:
            return "stale", "gone"
        return ("stale" if age > stale_after_s else "live"), f"an unreadable lock file, modified {age:.0f} s ago"
    host, pid = current.get("host"), current.get("pid")
    age = max(0.0, now - float(current.get("heartbeat", 0)))
    who = f"host {host!r}, process {pid}, started {current.get('started_utc', '?')}, last heartbeat {age:.0f} s ago"
    if host == socket.gethostname() and isinstance(pid, int):
        if pid == os.getpid():
            return "own", who
        if not _pid_alive(pid):
            return "stale", f"{who}; that process no longer exists"
    if age > stale_after_s:
        return "stale", f"{who}, more than {stale_after_s:.0f} s: that run is dead"
    return "live", who


def acquire_run_lock(
    output_dir: str, *, stale_after_s: float = STALE_AFTER_S, heartbeat_s: float = HEARTBEAT_S
) -> RunLock | None:
    """Take ``<output_dir>/run.lock`` for this run, or fail naming the run that holds it.

    Args:
        output_dir: the run's output folder (created if missing; ``~`` and ``$VARS`` expanded).
        stale_after_s: seconds after its last heartbeat that another machine's lock is stale (``STALE_AFTER_S``).
        heartbeat_s: seconds between this run's heartbeats (``HEARTBEAT_S``).

    Returns:
        The held ``RunLock`` (the same object when this process already holds it), or None in a non-main process of
        a multi-process launch (``is_main_process``).

    Raises:
        RunLockedError: a live run holds the lock: names the folder, its host and process id, when it started and
            how old its heartbeat is.
    """
    output_dir = expand_path(output_dir)
    if not is_main_process():
        return None
    key = os.path.realpath(output_dir)
    held = _HELD.get(key)
    if held is not None and not held.lost and held._owned():
        return held
    os.makedirs(output_dir, exist_ok=True)
    lock = RunLock(output_dir, heartbeat_s)
    for _ in range(5):
        if _create(lock.path, json.dumps(lock.info, indent=2), lock.info["token"]):
            break
        try:
            raw = Path(lock.path).read_bytes()
        except FileNotFoundError:
            continue
        state, who = _judge(lock.path, read_lock(output_dir), stale_after_s)
        if state == "own":  # this process's lock, from an earlier cell run: hand it to the new object
            lock._write()
            break
        if state == "live":
            raise RunLockedError(
                f"output_dir={output_dir!r} is in use by another run ({who}; lock file {lock.path}). Wait for it "
                f"to finish, or choose another output_dir. A dead run's lock expires {stale_after_s:.0f} s after "
                f"its last heartbeat (at once for a dead process on this host); if no run writes there, delete "
                f"{lock.path}"
            )
        print(f"run lock: taking over the stale lock in {output_dir!r} ({who})")
        _break(lock.path, raw, lock.info["token"])
    else:
        raise RunLockedError(f"output_dir={output_dir!r}: could not take {lock.path}: other runs keep taking it")
    if held is not None:
        held.release()
    _HELD[key] = lock
    lock._thread = threading.Thread(target=lock._run, name=f"run-lock-heartbeat {output_dir}", daemon=True)
    lock._thread.start()
    return lock


def _break(path: str, raw: bytes, token: str) -> None:
    """Remove the stale lock file whose bytes were ``raw``, unless another run replaced it meanwhile."""
    aside = f"{path}.{token}.stale"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if Path(aside).read_bytes() != raw:  # a fresh lock appeared between our read and the rename: put it back
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    os.remove(aside)


def release_run_lock(output_dir: str) -> bool:
    """Release this process's lock on ``output_dir``. Returns True when one was held."""
    lock = _HELD.get(os.path.realpath(expand_path(output_dir)))
    if lock is not None:
        lock.release()
    return lock is not None


@atexit.register
def _release_all() -> None:
    for lock in list(_HELD.values()):
        lock.release()

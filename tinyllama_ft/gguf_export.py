"""GGUF files for llama.cpp, Ollama and LM Studio, written by llama.cpp's own converter.

llama.cpp's ``convert_hf_to_gguf.py`` (with its ``conversion/`` package and ``gguf-py``, pure Python, MIT)
writes what llama.cpp's loader checks and transformers' GGUF reader does not: the pre-tokenizer
(``tokenizer.ggml.pre``), token types, ``add_bos``. It is not on PyPI as a package of its own, but it ships
inside the ``llama-cpp-python`` source distribution. ``llama_cpp_converter`` downloads that sdist (77 MB) once,
checks its SHA-256 against the pinned one, and extracts only the converter's files into a cache folder; every
later export runs offline from there. The download builds nothing: it reads the file's link off the package
index pip is configured with (``pip config``/``PIP_*``: index-url, extra-index-url, find-links, proxy, cert,
trusted-host) and streams it with urllib. ``pip download`` itself would prepare the sdist's metadata first,
which installs its build backend, scikit-build-core, and under ``--no-binary :all:`` builds it and its own build
tools from source (hatchling, setuptools, flit_core, ... and ninja when it is not installed): the first fetch took
43 s on 2 cores (161 s without ninja; ~6 min reported on Colab), now 2.2 s (2026-12-02). Only when no source
answers does it fall back to pip (``--no-binary llama-cpp-python``: the backend from wheels, ~4 s).
On a machine that never reaches PyPI, pass ``sdist=`` a copy of the same file.

A run killed mid-way leaves its temporaries (the fetch folder, a ``.partial`` GGUF, ``export``'s staging
folder); ``make_temporary`` names each after its host and process, and the next run removes those of processes
that no longer exist (``clean_stale``), saying what it removed and how much space that freed.

The converter runs as a subprocess of the current Python (its module-level state, logging and
``sys.path`` insertions stay out of this process), with ``HF_HUB_OFFLINE=1``: it reads the local folder only.

``q4_k_m`` is a k-quant that only llama.cpp's C++ quantizer writes (``gguf-py`` has no k-quant encoder):
``quantize_gguf`` uses the ``llama_model_quantize`` binding of an installed ``llama-cpp-python`` or a
``llama-quantize`` binary on PATH.
"""

from __future__ import annotations

import contextlib
import ctypes
import html.parser
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

from .gguf_source import default_cache_dir, sha256_of

#: The llama-cpp-python release whose vendored llama.cpp converter we run (llama.cpp of 2026-10).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: SHA-256 of ``llama_cpp_python-0.3.36.tar.gz`` as PyPI serves it (checked before extraction).
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
#: PyPI's simple index, where pip looks unless configured otherwise.
PYPI_SIMPLE = "https://pypi.org/simple"
#: Where PyPI keeps the pinned sdist (for downloading it by hand; the index names the same file).
LLAMA_CPP_PYTHON_URL = ("https://files.pythonhosted.org/packages/ec/e9/"
                        "e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz")
#: pip settings the download follows (config files' ``[global]`` and ``[download]``, then ``PIP_*`` variables).
PIP_SETTINGS = ("index-url", "extra-index-url", "no-index", "find-links", "proxy", "cert", "trusted-host")
#: The converter's files inside ``<sdist>/vendor/llama.cpp/`` (folders are taken whole).
CONVERTER_FILES = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/gguf/", "LICENSE")
#: Converter ``--outtype`` per GGUF format name.
OUTTYPES = {"gguf_f16": "f16", "gguf_bf16": "bf16", "gguf_q8_0": "q8_0"}
#: llama.cpp's ``LLAMA_FTYPE_MOSTLY_Q4_K_M`` (include/llama.h), for the binding.
LLAMA_FTYPE_MOSTLY_Q4_K_M = 15
QUANTIZER_MISSING = (
    "gguf_q4_k_m needs llama.cpp's quantizer, and neither is here: install the binding with "
    "`pip install llama-cpp-python` (it builds llama.cpp from source, ~40 min on 2 cores; prebuilt wheels: "
    "`pip install llama-cpp-python --extra-index-url https://abetlen.github.io/llama-cpp-python/whl/cpu`), or put "
    "llama.cpp's `llama-quantize` on PATH (e.g. `brew install llama.cpp`, or a release from "
    "github.com/ggml-org/llama.cpp). gguf_q8_0 needs neither."
)


#: Seconds without a write after which a temporary named the earlier way (no owner in its name, e.g.
#: ``.staging-k3x_9a2b``) counts as left by a killed run.
UNOWNED_STALE_S = 3600.0
#: Temporaries this process made and still uses (a pid alone does not say: a restarted container reuses it).
_LIVE: set[str] = set()


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def make_temporary(parent: str | os.PathLike, prefix: str, suffix: str = "", *, create: str | None = "dir") -> Path:
    """A hidden temporary in ``parent`` whose name says who owns it: ``<prefix><host>-<pid>-<token><suffix>``.

    A run killed with it in place leaves it behind; ``stale_temporaries`` finds it again by that name, and tells it
    from one that a live process (this one included) still uses.

    Args:
        parent: the folder (created if missing).
        prefix: the name's start, e.g. ``".staging-"``.
        suffix: the name's end, e.g. ``".partial"``.
        create: ``"dir"`` (a folder, mode 0700 like ``tempfile.mkdtemp``), ``"file"`` (an empty file, mode 0600),
            or None (only the name, reserved for an ``os.replace`` into it).

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
    """Remove a ``make_temporary`` folder or file and stop counting it as in use.

    Args:
        path: the temporary; already gone (renamed into place, removed) is fine.

    Raises:
        Nothing: what cannot be removed stays, and a later run's ``clean_stale`` takes it once this process ends.
    """
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
    _LIVE.discard(str(path))


def _started_after(pid: int, when: float) -> bool:
    """True when process ``pid`` began after ``when`` (epoch s), so it cannot have made a thing written then (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
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


def stale_temporaries(parent: str | os.PathLike, prefix: str,
                      suffix: str = "") -> tuple[list[Path], list[tuple[Path, str]]]:
    """The temporaries named ``<prefix>...<suffix>`` in ``parent`` that no live run uses.

    Stale: made on this host by a process that has exited, or whose pid now belongs to a process that began after
    the temporary was last changed (Linux), or that is this process's pid but not one it made (a restarted
    container's pid 1); and, from before names carried their owner (``.staging-k3x_9a2b``), ones not written for
    ``UNOWNED_STALE_S`` seconds. A live process's are kept, this process's own included.

    Args:
        parent: the folder to look in (missing: nothing found).
        prefix, suffix: as given to ``make_temporary``.

    Returns:
        ``(stale, foreign)``: stale paths to remove, and ``(path, host)`` of those made on another host (a shared
        folder), whose processes this machine cannot see; both sorted by name. An unreadable ``parent``: ``([], [])``.
    """
    from .lock import _pid_alive  # the package's one liveness rule (zombies count as gone)

    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return [], []
    stale: list[Path] = []
    foreign: list[tuple[Path, str]] = []
    for name in names:
        rest = name[len(prefix):len(name) - len(suffix)]
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
        elif str(path) not in _LIVE and (pid == os.getpid() or not _pid_alive(pid)
                                         or _started_after(pid, _changed(path))):
            stale.append(path)
    return stale, foreign


def format_bytes(n: int) -> str:
    """``n`` (bytes, an int >= 0) as ``"2.05 GiB"``, ``"40.00 MiB"`` or ``"3.0 KiB"`` (binary units)."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def clean_stale(parent: str | os.PathLike, patterns: list[tuple[str, str]], *, label: str, left_by: str) -> list[str]:
    """Remove the ``stale_temporaries`` of each ``(prefix, suffix)`` in ``parent`` and print what went, in one line.

    Args:
        parent: the folder (missing: nothing to do).
        patterns: ``(prefix, suffix)`` pairs, as given to ``make_temporary``.
        label: the line's first word, e.g. ``"export"``.
        left_by: who left them, e.g. ``"a killed export"``.

    Returns:
        The lines printed (``[]`` when nothing was there): ``"<label>: removed N temporaries left by <left_by> in
        <parent>: <name> (<size>), ...; <total> freed"``, and for each one made on another host ``"<label>: kept
        <name> in <parent> (<size>): made on host '<host>', whose processes this machine cannot see; delete it by
        hand if nothing runs there"``. Sizes are the files' bytes (``format_bytes``).

    Raises:
        Nothing: a temporary that cannot be removed is left out of the line and tried again next time.
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
        lines += [f"{label}: kept {path.name} in {parent} ({format_bytes(_tree(path)[0])}): made on host {host!r}, "
                  f"whose processes this machine cannot see; delete it by hand if nothing runs there"
                  for path, host in foreign]
    if removed:
        noun = "temporary" if len(removed) == 1 else "temporaries"
        lines.insert(0, f"{label}: removed {len(removed)} {noun} left by {left_by} in {parent}: {', '.join(removed)}; "
                        f"{format_bytes(freed)} freed")
    for line in lines:
        print(line, flush=True)
    return lines


def pip_settings() -> dict[str, str]:
    """pip's own settings for ``pip download``: where it looks for packages, its proxy and certificates.

    Read from ``pip config list`` (its configuration files, ``[download]`` over ``[global]``; ``PIP_CONFIG_FILE``
    honoured), then the ``PIP_INDEX_URL``-style environment variables over them, as pip ranks them. Without pip
    (a uv-made environment) only the environment variables count.

    Returns:
        ``{name: value}`` for the names in ``PIP_SETTINGS`` that are set (values as pip's text: lists are
        whitespace-separated).

    Raises:
        Nothing: pip missing, failing or silent for 60 s counts as no configuration files.
    """
    import ast

    ranked: dict[str, tuple[int, str]] = {}
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        listing = done.stdout if done.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        listing = ""
    rank = {"global": 0, "download": 1}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        section, _, name = key.rpartition(".")
        if not sep or section not in rank or name not in PIP_SETTINGS:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            continue
        if name not in ranked or ranked[name][0] <= rank[section]:
            ranked[name] = (rank[section], str(value))
    settings = {name: value for name, (_, value) in ranked.items()}
    for name in PIP_SETTINGS:
        value = os.environ.get("PIP_" + name.upper().replace("-", "_"))
        if value is not None:
            settings[name] = value
    return settings


class _Links(html.parser.HTMLParser):
    """The ``<a href>`` targets of a simple-index (or find-links) HTML page."""

    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


class _Fetcher:
    """urllib with pip's proxy, certificates, trusted hosts and index credentials (``https://user:pw@host/...``)."""

    def __init__(self, settings: dict[str, str], timeout_s: float):
        import ssl
        import urllib.request

        self.timeout_s = timeout_s
        self.trusted = set(settings.get("trusted-host", "").split())
        self.auth: dict[str, str] = {}
        context = ssl.create_default_context(cafile=settings.get("cert") or None)
        if not settings.get("cert"):
            try:  # pip trusts certifi's roots too (where Python's own store is empty, e.g. python.org's macOS build)
                import certifi

                context.load_verify_locations(certifi.where())
            except (ImportError, OSError):
                pass
        unverified = ssl._create_unverified_context()
        proxy = settings.get("proxy")
        proxies = urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else None)
        self.openers = {verify: urllib.request.build_opener(proxies, urllib.request.HTTPSHandler(context=ctx))
                        for verify, ctx in ((True, context), (False, unverified))}

    def open(self, url: str, accept: str | None = None):
        """A readable response for ``url`` (``file:`` too: a folder means its ``index.html``, as pip reads it)."""
        import base64
        import urllib.parse
        import urllib.request

        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "file":
            path = Path(urllib.request.url2pathname(parts.path))
            return open(path / "index.html" if path.is_dir() else path, "rb")  # noqa: SIM115
        if parts.username is not None:  # credentials in an index URL go to that host only, as pip sends them
            login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.auth[parts.hostname] = "Basic " + base64.b64encode(login.encode()).decode()
            url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
        headers = {"User-Agent": "tinyllama_ft (urllib)"}
        if accept:
            headers["Accept"] = accept
        if parts.hostname in self.auth:
            headers["Authorization"] = self.auth[parts.hostname]
        verify = parts.hostname not in self.trusted and parts.netloc not in self.trusted
        return self.openers[verify].open(urllib.request.Request(url, headers=headers), timeout=self.timeout_s)

    def links(self, page: str, filename: str) -> list[tuple[str, str | None]]:
        """``(url, sha256 or None)`` of each link to ``filename`` on an index or find-links page (JSON or HTML)."""
        import json
        import urllib.parse

        with self.open(page, accept="application/vnd.pypi.simple.v1+json, text/html;q=0.1") as response:
            body = response.read()
            base = response.geturl() if hasattr(response, "geturl") else page
            kind = response.headers.get("Content-Type", "") if hasattr(response, "headers") else ""
        found = []
        if "json" in kind:
            for entry in json.loads(body).get("files", []):
                if entry.get("filename") == filename:
                    found.append((urllib.parse.urljoin(base, entry["url"]), entry.get("hashes", {}).get("sha256")))
            return found
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        for href in parser.hrefs:
            url, _, fragment = urllib.parse.urljoin(base, href).partition("#")
            if urllib.parse.unquote(url.rsplit("/", 1)[-1]) == filename:
                found.append((url, fragment[len("sha256="):] if fragment.startswith("sha256=") else None))
        return found

    def save(self, url: str, into: Path, expected: str | None) -> Path:
        """Stream ``url`` to ``into/<its name>``, checking ``expected`` SHA-256; a mismatch leaves no file."""
        import hashlib

        target = into / url.rsplit("/", 1)[-1]
        digest, deadline = hashlib.sha256(), time.monotonic() + self.timeout_s
        try:
            with self.open(url) as response, open(target, "wb") as out:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    digest.update(chunk)
                    out.write(chunk)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"not complete within {self.timeout_s:.0f} s")
            if expected is not None and digest.hexdigest() != expected:
                raise ValueError(f"its SHA-256 is {digest.hexdigest()}, not {expected}")
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return target


def _download_sdist(into: Path, version: str, timeout_s: float, sha256: str | None = None) -> Path:
    """``llama_cpp_python-<version>.tar.gz`` from where pip looks (find-links folders, then its indexes), by urllib.

    Nothing is built: pip's own ``pip download`` of an sdist prepares its metadata, which installs (under
    ``--no-binary :all:``, builds) the build backend; this reads the file's link off the index and streams it.
    Only when no source answers does it fall back to ``pip download --no-binary llama-cpp-python`` (pip's own
    network stack: keyring, .netrc, the OS certificate store; its metadata step installs scikit-build-core's wheel).
    """
    import urllib.parse
    import urllib.request

    filename = f"llama_cpp_python-{version}.tar.gz"
    settings = pip_settings()
    fetcher = _Fetcher(settings, timeout_s)
    errors: list[str] = []
    pages = []
    for link in settings.get("find-links", "").split():
        local = Path(urllib.request.url2pathname(urllib.parse.urlsplit(link).path)) if link.startswith("file:") \
            else Path(link) if "://" not in link else None
        if local is None:
            pages.append(link)
        elif (local / filename).is_file():
            if sha256 is None or sha256_of(local / filename) == sha256:
                return local / filename
            errors.append(f"{local / filename}: another file (SHA-256 differs)")
    if settings.get("no-index", "").lower() not in ("1", "true", "yes", "on"):
        indexes = (settings.get("index-url") or PYPI_SIMPLE).split()[:1] + settings.get("extra-index-url", "").split()
        pages += [f"{index.rstrip('/')}/llama-cpp-python/" for index in indexes]
    for page in pages:
        netloc = urllib.parse.urlsplit(page).netloc
        shown = page.replace(netloc, netloc.rsplit("@", 1)[-1], 1)  # an index's credentials stay out of messages
        try:
            links = fetcher.links(page, filename)
        except Exception as err:  # noqa: BLE001 - every source is tried, each failure reported
            errors.append(f"{shown}: {err}")
            continue
        if not links:
            errors.append(f"{shown}: no {filename}")
        for url, listed in links:
            print(f"gguf: downloading llama.cpp's converter once (~77 MB): {url}", flush=True)
            try:
                return fetcher.save(url, into, sha256 or listed)
            except Exception as err:  # noqa: BLE001
                errors.append(f"{url}: {err}")
    if pages:  # pip's own network stack, the file's build backend installed from wheels (no compiling)
        print("gguf: no index gave the file directly; asking pip (it installs the sdist's build backend, "
              "scikit-build-core, from a wheel first)", flush=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
               "--disable-pip-version-check", "-q", "-d", str(into), f"llama-cpp-python=={version}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            detail = (done.stderr or done.stdout).strip()[-600:].replace("\n", "\n    ")
        except (OSError, subprocess.TimeoutExpired) as err:
            detail = str(err)
        found = into / filename
        if found.is_file():
            return found
        errors.append(f"pip download --no-deps --no-binary llama-cpp-python: {detail or 'no file'}")
    where = f"download {LLAMA_CPP_PYTHON_URL}" if version == LLAMA_CPP_PYTHON_VERSION else \
        f"run `pip download --no-deps --no-binary llama-cpp-python llama-cpp-python=={version}`"
    raise RuntimeError(
        f"could not download llama.cpp's converter ({filename}, the llama-cpp-python=={version} source, ~77 MB):\n  "
        + "\n  ".join(errors or ["no index to look in (pip's no-index is set and no find-links folder has it)"])
        + f"\nOn a machine with internet {where} and pass the .tar.gz as sdist=... "
        "(or put it in a pip find-links folder)")


def llama_cpp_converter(*, cache_dir: str | os.PathLike | None = None, sdist: str | os.PathLike | None = None,
                        version: str = LLAMA_CPP_PYTHON_VERSION, sha256: str | None = LLAMA_CPP_PYTHON_SHA256,
                        timeout_s: float = 600.0) -> Path:
    """The folder holding llama.cpp's converter scripts, fetched once and cached.

    Args:
        cache_dir: where converters are kept (default ``gguf_source.default_cache_dir()``, where converted models
            are kept too: ``~/.cache/tinyllama_ft``); the converter lands in
            ``<cache_dir>/llama.cpp-converter-<version>/``.
        sdist: a local ``llama_cpp_python-<version>.tar.gz`` to extract instead of downloading (offline).
        version: llama-cpp-python release (default ``LLAMA_CPP_PYTHON_VERSION``).
        sha256: expected SHA-256 of the sdist; ``None`` skips the check (only for another ``version``).
        timeout_s: seconds allowed for the download (each source; pip's fallback too).

    The download (``_download_sdist``) builds nothing: it looks where pip would (find-links folders, then
    ``index-url`` and ``extra-index-url``, with pip's proxy and certificates), streams the file and keeps the first
    copy whose SHA-256 is ``sha256``; only if none answers does it run ``pip download --no-deps --no-binary
    llama-cpp-python``. It prints the URL before and one ``gguf: llama.cpp's converter ready in ...`` line after.
    Fetch folders left by a killed download (``.llama.cpp-converter-<version>.fetching-<host>-<pid>-<token>``) are
    removed first, with a line saying so.

    Returns:
        The converter folder (``convert_hf_to_gguf.py``, ``convert_lora_to_gguf.py``, ``conversion/``,
        ``gguf-py/gguf/``).

    Raises:
        RuntimeError: not cached and the download failed (the message lists each source's error and says how to
            get the file by hand); the sdist's checksum differs from ``sha256``; the sdist lacks the converter.
            Nothing is left in the cache.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"llama.cpp-converter-{version}"
    clean_stale(root, [(f".{target.name}.fetching-", "")], label="gguf", left_by="a killed converter download")
    if (target / "convert_hf_to_gguf.py").is_file():
        return target
    staging = make_temporary(root, f".{target.name}.fetching-")
    try:
        start = time.perf_counter()
        archive = Path(sdist) if sdist is not None else _download_sdist(staging, version, timeout_s, sha256)
        found = sha256_of(archive) if sha256 is not None else None
        if found is not None and found != sha256:
            raise RuntimeError(f"{archive} has SHA-256 {found}, not the pinned {sha256} of "
                               f"llama-cpp-python=={version}: refusing to run it")
        prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
        out = staging / "converter"
        with tarfile.open(archive, "r:gz") as tar:
            members = [m for m in tar.getmembers() if (m.isfile() or m.isdir()) and m.name.startswith(prefix)
                       and any(m.name[len(prefix):].startswith(f) for f in CONVERTER_FILES)]
            for m in members:
                m.name = m.name[len(prefix):]
            tar.extractall(out, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        if not (out / "convert_hf_to_gguf.py").is_file() or not (out / "gguf-py" / "gguf").is_dir():
            raise RuntimeError(f"{archive} holds no vendor/llama.cpp/convert_hf_to_gguf.py with gguf-py")
        try:
            os.replace(out, target)
        except OSError:  # another process finished the same fetch first: its copy is as good
            if not (target / "convert_hf_to_gguf.py").is_file():
                raise
        if sdist is None:
            print(f"gguf: llama.cpp's converter ready in {target} ({time.perf_counter() - start:.1f} s, SHA-256 "
                  f"checked); later exports run offline", flush=True)
    finally:
        discard_temporary(staging)
    return target


def _run_converter(cmd: list[str], what: str, timeout_s: float) -> float:
    import time

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("NO_LOCAL_GGUF", None)  # the converter must use its own gguf-py, not an older installed gguf
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"{what}: llama.cpp's converter ran over {timeout_s:.0f} s") from err
    if done.returncode != 0:
        raise RuntimeError(f"{what}: llama.cpp's converter failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def _atomic_target(target: Path) -> Path:
    """An empty ``.<name>.<host>-<pid>-<token>.partial`` beside ``target``, after removing ones of killed runs."""
    clean_stale(target.parent, [(f".{target.name}.", ".partial")], label="gguf", left_by="a killed conversion")
    return make_temporary(target.parent, f".{target.name}.", ".partial", create="file")


def convert_to_gguf(*, model_dir: str | os.PathLike, target: str | os.PathLike, outtype: str, converter: Path,
                    timeout_s: float = 3600.0) -> float:
    """Convert a Hugging Face model folder to one GGUF file with ``convert_hf_to_gguf.py``.

    Args:
        model_dir: the merged model (safetensors, ``config.json``, tokenizer files, chat template).
        target: the ``.gguf`` path; written under a temporary name in the same folder and renamed when
            complete, so a failure leaves no file (and an older file there is kept).
        outtype: ``"f16"``, ``"bf16"``, ``"q8_0"`` (or another converter ``--outtype``).
        converter: ``llama_cpp_converter()``.
        timeout_s: seconds allowed.

    Returns:
        Seconds the conversion took.

    Raises:
        RuntimeError: the converter failed (its stderr tail in the message) or ran over ``timeout_s``.
    """
    target = Path(target)
    tmp = _atomic_target(target)
    try:
        seconds = _run_converter([str(converter / "convert_hf_to_gguf.py"), str(model_dir), "--outfile", str(tmp),
                                  "--outtype", outtype], f"GGUF {outtype} of {model_dir}", timeout_s)
        os.replace(tmp, target)
    finally:
        discard_temporary(tmp)
    return seconds


def convert_lora_to_gguf(*, adapter_dir: str | os.PathLike, base_dir: str | os.PathLike, target: str | os.PathLike,
                         converter: Path, outtype: str = "f16", timeout_s: float = 3600.0) -> float:
    """The adapter alone as a GGUF LoRA (llama.cpp's ``--lora``, Ollama's ``ADAPTER``), with ``convert_lora_to_gguf.py``.

    Args:
        adapter_dir: the PEFT adapter folder.
        base_dir: a local folder with the base model's ``config.json`` and tokenizer (weights not read).
        target: the ``.gguf`` path, written atomically as in ``convert_to_gguf``.
        converter: ``llama_cpp_converter()``.
        outtype: ``"f16"`` (default), ``"bf16"``, ``"f32"`` or ``"q8_0"``.
        timeout_s: seconds allowed.

    Returns:
        Seconds the conversion took.

    Raises:
        RuntimeError: as ``convert_to_gguf`` (e.g. an architecture or LoRA target the converter lacks).
    """
    target = Path(target)
    tmp = _atomic_target(target)
    try:
        seconds = _run_converter([str(converter / "convert_lora_to_gguf.py"), "--outfile", str(tmp), "--outtype",
                                  outtype, "--base", str(base_dir), str(adapter_dir)],
                                 f"GGUF LoRA of {adapter_dir}", timeout_s)
        os.replace(tmp, target)
    finally:
        discard_temporary(tmp)
    return seconds


def find_quantizer() -> str | None:
    """Which llama.cpp quantizer is here: ``"llama_cpp"`` (the binding), ``"llama-quantize"`` (PATH) or None."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is not None:
        return "llama_cpp"
    return "llama-quantize" if shutil.which("llama-quantize") else None


def quantize_gguf(*, source: str | os.PathLike, target: str | os.PathLike, timeout_s: float = 3600.0) -> float:
    """Quantize a 16-bit GGUF to Q4_K_M with llama.cpp's quantizer (``find_quantizer``).

    Args:
        source: an f16/bf16 GGUF (``convert_to_gguf``).
        target: the Q4_K_M ``.gguf``, written atomically.
        timeout_s: seconds allowed for the ``llama-quantize`` binary.

    Returns:
        Seconds the quantization took.

    Raises:
        RuntimeError: no quantizer installed (``QUANTIZER_MISSING`` names what to install), or it failed.
    """
    import time

    which = find_quantizer()
    if which is None:
        raise RuntimeError(QUANTIZER_MISSING)
    target = Path(target)
    tmp = _atomic_target(target)
    start = time.perf_counter()
    try:
        if which == "llama_cpp":
            import llama_cpp

            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M)
            status = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
            if status != 0:
                raise RuntimeError(f"llama_model_quantize({source}) returned {status}")
        else:
            done = subprocess.run(["llama-quantize", str(source), str(tmp), "Q4_K_M"], capture_output=True, text=True,
                                  timeout=timeout_s)
            if done.returncode != 0:
                raise RuntimeError(f"llama-quantize failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        os.replace(tmp, target)
    finally:
        discard_temporary(tmp)
    return time.perf_counter() - start

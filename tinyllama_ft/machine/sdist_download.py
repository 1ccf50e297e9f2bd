"""Download one pinned source distribution from where pip looks, building nothing.

The file's link is read off pip's find-links and index pages and streamed with urllib; ``pip download`` runs only
when no source answers. Kept: pip prepares an sdist's metadata by running its build backend first
(tests/test_converter_fetch.py's tripwire backend; docs/export.md has the timings).
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from .checksums import sha256_of

#: PyPI's simple index, where pip looks unless configured otherwise.
PYPI_SIMPLE = "https://pypi.org/simple"
#: pip settings the download follows (config files' ``[global]`` and ``[download]``, then ``PIP_*`` variables).
PIP_SETTINGS = ("index-url", "extra-index-url", "no-index", "find-links", "proxy", "cert")
_HREF = re.compile(r"""<a\s[^>]*?href=["']([^"']+)["']""", re.IGNORECASE)


def pip_settings() -> dict[str, str]:
    """pip's settings for where ``pip download`` looks: ``pip config list`` (``[download]`` over ``[global]``), then
    the ``PIP_*`` environment variables over them, as pip ranks them.

    Returns:
        ``{name: value}`` for the ``PIP_SETTINGS`` that are set (lists whitespace-separated). Raises nothing: pip
        missing, failing or silent for 60 s counts as no configuration files.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        listing = done.stdout if done.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        listing = ""
    settings = {}
    for section in ("global", "download"):
        for name, value in re.findall(rf"^{section}\.([\w-]+)='(.*)'$", listing, re.MULTILINE):
            if name in PIP_SETTINGS:
                settings[name] = value
    for name in PIP_SETTINGS:
        value = os.environ.get("PIP_" + name.upper().replace("-", "_"))
        if value is not None:
            settings[name] = value
    return settings


def _open(url: str, timeout_s: float, settings: dict[str, str]):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":  # a folder means its index.html, as pip reads it
        path = Path(urllib.request.url2pathname(parts.path))
        return open(path / "index.html" if path.is_dir() else path, "rb")  # noqa: SIM115
    proxy = settings.get("proxy")
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else None),
        urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=settings.get("cert") or None)),
    )
    request = urllib.request.Request(url, headers={"User-Agent": "tinyllama_ft (urllib)"})
    return opener.open(request, timeout=timeout_s)


def _links(page: str, filename: str, timeout_s: float, settings: dict[str, str]) -> list[tuple[str, str | None]]:
    """``(url, sha256 or None)`` of each link to ``filename`` on a simple-index or find-links HTML page."""
    with _open(page, timeout_s, settings) as response:
        body = response.read().decode("utf-8", "replace")
        base = getattr(response, "url", None) or page
    found = []
    for href in _HREF.findall(body):
        url, _, fragment = urllib.parse.urljoin(base, href).partition("#")
        if urllib.parse.unquote(url.rsplit("/", 1)[-1]) == filename:
            found.append((url, fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None))
    return found


def _save(url: str, into: Path, expected: str | None, timeout_s: float, settings: dict[str, str]) -> Path:
    """Stream ``url`` to ``into/<its name>``, checking ``expected`` SHA-256; a failure leaves no file."""
    target = into / urllib.parse.unquote(url.rsplit("/", 1)[-1])
    digest, deadline = hashlib.sha256(), time.monotonic() + timeout_s
    try:
        with _open(url, timeout_s, settings) as response, open(target, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not complete within {timeout_s:.0f} s")
        if expected is not None and digest.hexdigest() != expected:
            raise ValueError(f"its SHA-256 is {digest.hexdigest()}, not {expected}")
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target


def download_sdist(
    into: Path,
    *,
    package: str,
    version: str,
    timeout_s: float,
    sha256: str | None = None,
    what: str = "the source distribution",
    size: str = "",
    manual_url: str | None = None,
    label: str = "download",
) -> Path:
    """``<package>-<version>.tar.gz`` from pip's find-links folders, then its indexes (by urllib), then
    ``pip download --no-deps --no-binary <package>`` when none answers.

    Args:
        into: the folder the file is saved in.
        package, version: the distribution's name on the index (``"llama-cpp-python"``) and exact version.
        timeout_s: seconds allowed for each page and for the download.
        sha256: the expected SHA-256 (a file with another is skipped for the next source); None: the index's.
        what, size, label: for messages (``"llama.cpp's converter"``, ``"~77 MB"``, the first word ``"gguf"``).
        manual_url: where a person can download it by hand, named in the error.

    Returns:
        The saved (or, from a find-links folder, the found) file's path.

    Raises:
        RuntimeError: no source gave the file: names each source and its error, and how to pass the file by hand.
    """
    filename = f"{package.replace('-', '_')}-{version}.tar.gz"
    settings = pip_settings()
    errors: list[str] = []
    pages = []
    for link in settings.get("find-links", "").split():
        if "://" in link and not link.startswith("file:"):
            pages.append(link)
            continue
        local = Path(urllib.request.url2pathname(urllib.parse.urlsplit(link).path) if "://" in link else link)
        if (local / filename).is_file():
            if sha256 is None or sha256_of(local / filename) == sha256:
                return local / filename
            errors.append(f"{local / filename}: another file (SHA-256 differs)")
    if settings.get("no-index", "").lower() not in ("1", "true", "yes", "on"):
        indexes = (settings.get("index-url") or PYPI_SIMPLE).split()[:1] + settings.get("extra-index-url", "").split()
        pages += [f"{index.rstrip('/')}/{package}/" for index in indexes]
    for page in pages:
        netloc = urllib.parse.urlsplit(page).netloc
        shown = page.replace(netloc, netloc.rsplit("@", 1)[-1], 1)  # an index's credentials stay out of messages
        try:
            links = _links(page, filename, timeout_s, settings)
        except Exception as err:  # noqa: BLE001 - every source is tried, each failure reported
            errors.append(f"{shown}: {err}")
            continue
        if not links:
            errors.append(f"{shown}: no {filename}")
        for url, listed in links:
            print(f"{label}: downloading {what} once{f' ({size})' if size else ''}: {url}", flush=True)
            try:
                return _save(url, into, sha256 or listed, timeout_s, settings)
            except Exception as err:  # noqa: BLE001
                errors.append(f"{url}: {err}")
    if pages:
        print(
            f"{label}: no index gave {filename} directly; asking pip (it installs the sdist's build backend from a wheel "
            f"first)",
            flush=True,
        )
        pip = ["pip", "download", "--no-deps", "--no-binary", package, "--disable-pip-version-check", "-q"]
        try:
            done = subprocess.run(
                [sys.executable, "-m", *pip, "-d", str(into), f"{package}=={version}"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            detail = (done.stderr or done.stdout).strip()[-600:].replace("\n", "\n    ")
        except (OSError, subprocess.TimeoutExpired) as err:
            detail = str(err)
        if (into / filename).is_file():
            return into / filename
        errors.append(f"pip download --no-deps --no-binary {package}: {detail or 'no file'}")
    where = (
        f"download {manual_url}"
        if manual_url
        else f"run `pip download --no-deps --no-binary {package} {package}=={version}`"
    )
    raise RuntimeError(
        f"could not download {what} ({filename}, the {package}=={version} source{f', {size}' if size else ''}):\n  "
        + "\n  ".join(errors or ["no index to look in (pip's no-index is set and no find-links folder has it)"])
        + f"\nOn a machine with internet {where} and pass the .tar.gz as sdist=... "
        "(or put it in a pip find-links folder)"
    )

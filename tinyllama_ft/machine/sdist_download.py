"""Download a source distribution from the package index pip is configured with, building nothing.

``pip download`` of an sdist prepares its metadata first, which installs its build backend (under
``--no-binary :all:`` it builds the backend and its own build tools from source: 43 s on 2 cores for
llama-cpp-python's scikit-build-core, 161 s without ninja, ~6 min reported on Colab). ``download_sdist`` reads the
file's link off the index instead (``pip config`` / ``PIP_*``: index-url, extra-index-url, no-index, find-links,
proxy, cert, trusted-host; find-links folders first, read offline) and streams it with urllib, checking its SHA-256.
Only when no source answers does it ask pip (``--no-binary <package>``: the backend from wheels, nothing compiled).
"""

from __future__ import annotations

import html.parser
import os
import subprocess
import sys
import time
from pathlib import Path

from .checksums import sha256_of

#: PyPI's simple index, where pip looks unless configured otherwise.
PYPI_SIMPLE = "https://pypi.org/simple"
#: pip settings the download follows (config files' ``[global]`` and ``[download]``, then ``PIP_*`` variables).
PIP_SETTINGS = ("index-url", "extra-index-url", "no-index", "find-links", "proxy", "cert", "trusted-host")


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
        self.openers = {
            verify: urllib.request.build_opener(proxies, urllib.request.HTTPSHandler(context=ctx))
            for verify, ctx in ((True, context), (False, unverified))
        }

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
                found.append((url, fragment[len("sha256=") :] if fragment.startswith("sha256=") else None))
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
    """``<package>-<version>.tar.gz`` from where pip looks (find-links folders, then its indexes), by urllib.

    Nothing is built: this reads the file's link off the index and streams it. Only when no source answers does it
    fall back to ``pip download --no-binary <package>`` (pip's own network stack: keyring, .netrc, the OS
    certificate store; its metadata step installs the build backend from a wheel).

    Args:
        into: the folder the file is saved in.
        package: the distribution's name on the index (``"llama-cpp-python"``).
        version: its exact version.
        timeout_s: seconds allowed for each page and for the download.
        sha256: the file's expected SHA-256 (a file with another is skipped for the next source); None: the index's.
        what: what the file is, for messages (``"llama.cpp's converter"``).
        size: its size, for messages (``"~77 MB"``).
        manual_url: where a person can download it by hand, named in the error.
        label: the first word of the progress lines (``"gguf"``).

    Returns:
        The saved (or, from a find-links folder, the found) file's path.

    Raises:
        RuntimeError: no source gave the file: names each source and its error, and how to pass the file by hand.
    """
    import urllib.parse
    import urllib.request

    filename = f"{package.replace('-', '_')}-{version}.tar.gz"
    settings = pip_settings()
    fetcher = _Fetcher(settings, timeout_s)
    errors: list[str] = []
    pages = []
    for link in settings.get("find-links", "").split():
        local = (
            Path(urllib.request.url2pathname(urllib.parse.urlsplit(link).path))
            if link.startswith("file:")
            else Path(link)
            if "://" not in link
            else None
        )
        if local is None:
            pages.append(link)
        elif (local / filename).is_file():
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
            links = fetcher.links(page, filename)
        except Exception as err:  # noqa: BLE001 - every source is tried, each failure reported
            errors.append(f"{shown}: {err}")
            continue
        if not links:
            errors.append(f"{shown}: no {filename}")
        for url, listed in links:
            print(f"{label}: downloading {what} once{f' ({size})' if size else ''}: {url}", flush=True)
            try:
                return fetcher.save(url, into, sha256 or listed)
            except Exception as err:  # noqa: BLE001
                errors.append(f"{url}: {err}")
    if pages:  # pip's own network stack, the file's build backend installed from wheels (no compiling)
        print(
            f"{label}: no index gave {filename} directly; asking pip (it installs the sdist's build backend from a wheel "
            f"first)",
            flush=True,
        )
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            package,
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(into),
            f"{package}=={version}",
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            detail = (done.stderr or done.stdout).strip()[-600:].replace("\n", "\n    ")
        except (OSError, subprocess.TimeoutExpired) as err:
            detail = str(err)
        found = into / filename
        if found.is_file():
            return found
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

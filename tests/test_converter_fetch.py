"""llama.cpp's converter is fetched without building anything, from where pip is configured to look.

The sdist's ``pip download`` prepares its metadata, which runs the sdist's build backend (and, under
``--no-binary :all:``, builds that backend and its build tools from source: 43 s on 2 cores with cmake and
ninja installed, 161 s without ninja, against 2.2 s for the direct download). Here a local package index serves
a stand-in sdist whose build backend is a tripwire: it writes a marker file when anything imports it, and fails.
The fetch must bring the converter back with the tripwire untouched and no ``pip download`` run; a mirror
serving another file is passed over by its SHA-256; a find-links folder is read offline; a fetch that cannot
reach any source says where it looked and which file to fetch by hand. The slow test fetches the real sdist
from PyPI into an empty cache (2.0 s here).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import socket
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from tinyllama_ft.machine import sdist_download
from tinyllama_ft.export.gguf_export import LLAMA_CPP_PYTHON_URL, LLAMA_CPP_PYTHON_VERSION, llama_cpp_converter

NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
TRIPWIRE_BACKEND = (
    "import os, pathlib\n"
    "pathlib.Path(os.environ['TRIPWIRE']).write_text('the build backend ran')\n"
    "raise SystemExit('tripwire: the sdist build backend was run')\n"
)


def stand_in_sdist(path: Path, converter_text: str = "print('converter')\n") -> str:
    """A ``llama_cpp_python-<version>.tar.gz`` with the converter's layout and a tripwire build backend; its SHA-256."""
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {LLAMA_CPP_PYTHON_VERSION}\n",
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "tripwire"\nbackend-path = ["."]\n',
        "tripwire.py": TRIPWIRE_BACKEND,
        "vendor/llama.cpp/convert_hf_to_gguf.py": converter_text,
        "vendor/llama.cpp/gguf-py/gguf/__init__.py": "",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{NAME}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture()
def index(tmp_path, monkeypatch):
    """A package index on 127.0.0.1: ``/good/`` lists the stand-in sdist, ``/bad/`` another file of the same name.

    pip's configuration files are switched off (``PIP_CONFIG_FILE=/dev/null``): only the variables set here count.
    """
    site = tmp_path / "site"
    good = stand_in_sdist(site / "files" / "good" / f"{NAME}.tar.gz")
    bad = stand_in_sdist(site / "files" / "bad" / f"{NAME}.tar.gz", converter_text="print('tampered')\n")
    for which, sha in (("good", good), ("bad", bad)):
        page = site / which / "llama-cpp-python" / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(
            f'<html><body><a href="../../files/{which}/{NAME}.tar.gz#sha256={sha}">{NAME}.tar.gz</a></body></html>\n',
            encoding="utf-8",
        )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in (
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_NO_INDEX",
        "PIP_PROXY",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("TRIPWIRE", str(tmp_path / "tripwire-ran"))
    try:
        yield {
            "url": f"http://127.0.0.1:{server.server_address[1]}",
            "good": good,
            "bad": bad,
            "tripwire": tmp_path / "tripwire-ran",
        }
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def commands(monkeypatch):
    """Every command ``gguf_export`` runs through ``subprocess.run``."""
    seen: list[list[str]] = []
    real = subprocess.run

    def recording(cmd, *args, **kwargs):
        seen.append([str(c) for c in cmd])
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(sdist_download.subprocess, "run", recording)
    return seen


def _pip_downloads(commands):
    return [c for c in commands if c[1:4] == ["-m", "pip", "download"]]


def test_the_converter_is_fetched_from_the_configured_index_without_building(
    index, commands, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PIP_INDEX_URL", f"{index['url']}/good")
    folder = llama_cpp_converter(cache_dir=tmp_path / "cache", sha256=index["good"])
    assert (folder / "convert_hf_to_gguf.py").read_text() == "print('converter')\n"
    assert not index["tripwire"].exists(), "the sdist's build backend ran"
    assert _pip_downloads(commands) == []
    out = capsys.readouterr().out
    assert f"gguf: downloading llama.cpp's converter once (~77 MB): {index['url']}/files/good/{NAME}.tar.gz" in out
    assert f"gguf: llama.cpp's converter ready in {folder} (" in out
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [folder.name]  # no fetch folder left


def test_a_mirror_serving_another_file_is_passed_over_for_the_next_index(
    index, commands, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PIP_INDEX_URL", f"{index['url']}/bad")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"{index['url']}/good")
    folder = llama_cpp_converter(cache_dir=tmp_path / "cache", sha256=index["good"])
    assert (folder / "convert_hf_to_gguf.py").read_text() == "print('converter')\n"
    out = capsys.readouterr().out
    assert out.index("/files/bad/") < out.index("/files/good/")
    assert not index["tripwire"].exists() and _pip_downloads(commands) == []


def test_a_find_links_folder_holding_the_file_is_used_offline(index, commands, tmp_path, monkeypatch):
    links = tmp_path / "wheels"
    sha = stand_in_sdist(links / f"{NAME}.tar.gz")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    folder = llama_cpp_converter(cache_dir=tmp_path / "cache", sha256=sha)
    assert (folder / "convert_hf_to_gguf.py").is_file() and _pip_downloads(commands) == []


def test_an_unreachable_index_names_each_source_and_the_file_to_fetch_by_hand(index, tmp_path, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/simple"
    monkeypatch.setenv("PIP_INDEX_URL", closed)
    with pytest.raises(RuntimeError) as err:
        llama_cpp_converter(cache_dir=tmp_path / "cache", timeout_s=30)
    message = str(err.value)
    print(message)
    assert message.startswith(
        f"could not download llama.cpp's converter ({NAME}.tar.gz, the llama-cpp-python=="
        f"{LLAMA_CPP_PYTHON_VERSION} source, ~77 MB):\n  {closed}/llama-cpp-python/: "
    )
    assert "\n  pip download --no-deps --no-binary llama-cpp-python: " in message
    assert message.endswith(
        f"On a machine with internet download {LLAMA_CPP_PYTHON_URL} and pass the .tar.gz as "
        f"sdist=... (or put it in a pip find-links folder)"
    )
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.slow
def test_the_first_fetch_from_pypi_builds_nothing(tmp_path, commands):
    """The real sdist (77 MB) from PyPI, with this machine's pip configuration, into an empty cache."""
    start = time.perf_counter()
    folder = llama_cpp_converter(cache_dir=tmp_path / "cache")
    seconds = time.perf_counter() - start
    print(f"converter fetched in {seconds:.1f} s")
    assert (folder / "convert_hf_to_gguf.py").is_file() and (folder / "gguf-py" / "gguf").is_dir()
    assert _pip_downloads(commands) == []

"""What a killed export leaves behind is removed by the next one, and what a live export uses is not.

A real export of a stories260K adapter is SIGKILLed in a subprocess once its staging folder holds the full
merged copy; the next export into the same folder removes that folder and prints one line naming it and the
space freed. Around it, with folders named as ``temporaries.make_temporary`` names them: a dead process's are
removed; a live process's, this process's own and another host's are kept; a folder left between
``temporaries.replace_folder``'s two renames is put back; a fetch folder of a killed converter download and a ``.partial``
GGUF of a killed conversion are removed by the next fetch and conversion.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import trained_stories_adapter
from tinyllama_ft.export import gguf_export
from tinyllama_ft.machine import temporaries
from tinyllama_ft.export.adapter_export import _clean_stale_exports, export_adapter

HOST = temporaries._host()


def dead_pid() -> int:
    """The id of a process that has exited (and was reaped)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def folder_of(path: Path, size: int = 1 << 20) -> Path:
    """``path`` as a folder holding one file of ``size`` bytes."""
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"\0" * size)
    return path


@pytest.fixture(scope="module")
def adapter(stories_dir, tmp_path_factory):
    return trained_stories_adapter(stories_dir, tmp_path_factory.mktemp("run"))


DRIVER = textwrap.dedent("""
    import sys, time
    import tinyllama_ft.export.adapter_export as export
    real = export.save_merged

    def save_then_hang(**kwargs):  # the merged copy is complete in the staging folder: the kill comes here
        out = real(**kwargs)
        print("SAVED", out, flush=True)
        time.sleep(600)

    export.save_merged = save_then_hang
    export.export_adapter(adapter_dir=sys.argv[1], formats=["merged_16bit"], output_dir=sys.argv[2])
""")


def test_a_killed_exports_staging_folder_is_removed_by_the_next_export(adapter, tmp_path, cpu, capsys):
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, adapter, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("SAVED"), line
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    left = [p for p in (out / "export").iterdir() if p.name.startswith(".staging-")]
    assert len(left) == 1 and left[0].name.startswith(f".staging-{HOST}-{proc.pid}-")
    size = sum(f.stat().st_size for f in left[0].rglob("*") if f.is_file())
    assert (left[0] / "merged_16bit" / "model.safetensors").is_file() and size > 100_000
    capsys.readouterr()

    results = export_adapter(adapter_dir=adapter, formats=["merged_16bit"], output_dir=str(out), hardware=cpu)
    printed = capsys.readouterr().out
    print(printed)
    assert (
        f"export: removed 1 temporary left by a killed export in {out / 'export'}: {left[0].name} "
        f"({temporaries.format_bytes(size)}); {temporaries.format_bytes(size)} freed\n" in printed
    )
    assert sorted(p.name for p in (out / "export").iterdir()) == ["merged_16bit"]
    assert (Path(results["merged_16bit"].path) / "model.safetensors").is_file()


def test_only_the_leftovers_of_dead_processes_on_this_host_are_removed(tmp_path, capsys):
    root = tmp_path / "export"
    dead = dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        killed = folder_of(root / f".staging-{HOST}-{dead}-0a1b2c3d")
        killed_old = folder_of(root / f".merged_16bit.old-{HOST}-{dead}-4e5f6a7b", size=2 << 20)
        folder_of(root / "merged_16bit")
        unfinished = folder_of(
            root / f".gguf_f16.old-{HOST}-{dead}-8c9d0e1f"
        )  # killed between replace_folder's renames
        restarted = folder_of(root / f".staging-{HOST}-{os.getpid()}-2a3b4c5d")  # this pid, an earlier container's
        unowned_old = folder_of(root / ".staging-k3x_9a2b")  # tempfile.mkdtemp's name, before names said whose
        os.utime(unowned_old / "model.safetensors", (time.time() - 7200,) * 2)
        os.utime(unowned_old, (time.time() - 7200,) * 2)
        kept = [
            folder_of(root / f".staging-{HOST}-{live.pid}-6e7f8a9b"),  # a live export's
            temporaries.make_temporary(root, ".staging-"),  # this process's, in use
            folder_of(root / ".staging-q7w_2e4r"),  # unowned and written a moment ago
            folder_of(root / ".staging-notes"),  # not a name we make
            folder_of(root / f".staging-otherbox-{dead}-3c4d5e6f"),
        ]  # another host's: its pids mean nothing here
        lines = _clean_stale_exports(root)
    finally:
        live.kill()
        live.wait()
    removed = sorted([killed, restarted, unowned_old]) + [killed_old]  # by name, staging folders first
    assert lines == [
        f"export: restored {root / 'gguf_f16'} from {unfinished.name} (an export killed while replacing it)",
        f"export: removed 4 temporaries left by a killed export in {root}: {removed[0].name} (1.00 MiB), "
        f"{removed[1].name} (1.00 MiB), {removed[2].name} (1.00 MiB), {killed_old.name} (2.00 MiB); 5.00 MiB freed",
        f"export: kept {kept[-1].name} in {root} (1.00 MiB): made on host 'otherbox', whose processes this machine "
        f"cannot see; delete it by hand if nothing runs there",
    ]
    assert capsys.readouterr().out == "".join(f"{line}\n" for line in lines)
    assert not any(p.exists() for p in removed) and all(p.exists() for p in kept)
    assert (root / "gguf_f16" / "model.safetensors").is_file() and not unfinished.exists()
    assert (root / "merged_16bit" / "model.safetensors").is_file()
    temporaries.discard_temporary(kept[1])
    capsys.readouterr()
    again = _clean_stale_exports(root)  # the "live" export's process has ended since: its folder goes now
    assert again[0].startswith(f"export: removed 1 temporary left by a killed export in {root}: {kept[0].name} (")
    assert again[1:] == [lines[-1]] and not kept[0].exists()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="process start times are read from /proc")
def test_a_pid_reused_by_a_later_process_does_not_keep_a_leftover(tmp_path, monkeypatch):
    root = tmp_path / "export"
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert temporaries._started_after(later.pid, time.time() - 3600)
        assert not temporaries._started_after(later.pid, time.time())
        assert not temporaries._started_after(os.getpid(), time.time() - 1)
        reused = folder_of(root / f".staging-{HOST}-{later.pid}-1a2b3c4d")
        recent = folder_of(root / f".staging-{HOST}-{later.pid}-5e6f7a8b")
        assert temporaries.stale_temporaries(root, ".staging-") == ([], [])  # both changed after it began: its own
        # a folder last changed (ctime: renames included) an hour before that process began was not made by it
        real = temporaries._changed
        monkeypatch.setattr(temporaries, "_changed", lambda p: time.time() - 3600 if p == reused else real(p))
        assert temporaries.stale_temporaries(root, ".staging-") == ([reused], [])
    finally:
        later.kill()
        later.wait()
    assert recent.exists()


def test_a_killed_converter_download_and_a_partial_gguf_are_removed(tmp_path, capsys):
    from test_converter_fetch import stand_in_sdist

    cache = tmp_path / "cache"
    fetching = folder_of(cache / f".llama.cpp-converter-0.3.36.fetching-{HOST}-{dead_pid()}-0f1e2d3c", size=3 << 20)
    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    sha = stand_in_sdist(sdist, converter_text="import sys\nsys.exit('converter failed on purpose')\n")
    converter = gguf_export.llama_cpp_converter(cache_dir=cache, sdist=sdist, sha256=sha)
    assert capsys.readouterr().out == (
        f"gguf: removed 1 temporary left by a killed converter download in {cache}: "
        f"{fetching.name} (3.00 MiB); 3.00 MiB freed\n"
    )
    assert sorted(p.name for p in cache.iterdir()) == [converter.name]

    target = tmp_path / "out" / "model-f16.gguf"
    partial = target.parent / f".model-f16.gguf.{HOST}-{dead_pid()}-9a8b7c6d.partial"
    target.parent.mkdir()
    partial.write_bytes(b"GGUF" + b"\0" * 2048)
    with pytest.raises(RuntimeError, match="converter failed"):
        gguf_export.convert_to_gguf(model_dir=tmp_path, target=target, outtype="f16", converter=converter)
    assert capsys.readouterr().out == (
        f"gguf: removed 1 temporary left by a killed conversion in {target.parent}: "
        f"{partial.name} (2.0 KiB); 2.0 KiB freed\n"
    )
    assert list(target.parent.iterdir()) == []

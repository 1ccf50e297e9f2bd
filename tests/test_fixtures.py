"""The test inputs themselves: all inside the repository, small, each real file with its licence and source."""

from __future__ import annotations

from conftest import FIXTURES

#: folder (or file stem) -> the files that must stand beside it: a NOTICE naming the source, the licence text
LICENSED = {
    "stories260k": ("NOTICE", "LICENSE-llama2.c"),
    "tinyllama": ("NOTICE", "LICENSE-llama2"),
}


def test_fixtures_stay_under_10_mb():
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert size < 10 * 2**20, f"tests/fixtures holds {size / 2**20:.1f} MB"


def test_each_real_fixture_has_its_notice_and_licence():
    for folder, needed in LICENSED.items():
        for name in needed:
            assert (FIXTURES / folder / name).is_file(), f"tests/fixtures/{folder}/{name} is missing"
    notice = (FIXTURES / "alpaca_long.NOTICE").read_text(encoding="utf-8")
    assert "CC BY-NC 4.0" in notice and "yahma/alpaca-cleaned" in notice
    assert "Llama 2 is licensed under the LLAMA 2 Community License" in (FIXTURES / "tinyllama" / "NOTICE").read_text(
        encoding="utf-8"
    )

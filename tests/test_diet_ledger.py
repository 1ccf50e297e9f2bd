"""scripts/diet_ledger.py attributes each first-parent commit's line delta to an issue and checks the sum."""

import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import diet_ledger  # noqa: E402


def _git(*args):
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def _commit(path, text, message):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    _git("add", "-A")
    _git("commit", "-q", "-m", message)
    return _git("rev-parse", "HEAD")


def test_ledger_splits_the_diet_from_other_issues_and_opens_an_unlisted_merge(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _git("init", "-q")
    pkg = tmp_path / diet_ledger.FOLDER
    start = _commit(pkg / "a.py", '"""Doc."""\n\nx = 1\ny = 2\nz = 3\n', "start")
    feature = _commit(pkg / "b.py", "p = 1\nq = 2\n", "issue 30 adds two lines")
    # a commit that mixes issues: the file row attributes b.py, the * row the rest
    (pkg / "b.py").write_text("p = 1\nq = 2\nr = 3\n", encoding="utf-8")
    mixed = _commit(pkg / "a.py", '"""Doc."""\n\nx = 1\n', "issue 29 cuts a.py, issue 30 adds to b.py")
    _git("checkout", "-q", "-b", "side")
    cut = _commit(pkg / "b.py", "p = 1\n", "issue 29 on a branch")
    _git("checkout", "-q", "main")
    _commit(tmp_path / "README", "not counted\n", "no package lines")
    _git("merge", "-q", "--no-ff", "-m", "merge side", "side")
    ledger = tmp_path / "ledger.tsv"
    ledger.write_text(
        "# comment\n"
        f"{feature[:7]}\t30\t*\tadded by issue 30\n"
        f"{mixed[:7]}\t29\t*\ttrims a.py\n"
        f"{mixed[:7]}\t30\t{diet_ledger.FOLDER}/b.py\tadded by issue 30\n"
        f"{cut[:7]}\t29\t*\tcuts b.py\n",
        encoding="utf-8",
    )
    assert diet_ledger.main(["--start", start, "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert "start " + start + ": code 3 total 5" in out
    assert "diet (issue 29): code -4 total -4" in out  # y, z, then q, r on the branch
    assert "excluded, added by issue 30: code +3 total +3" in out  # p, q, r
    assert "unattributed" not in out
    assert "HEAD: code 2 total 4" in out and "check OK" in out


def test_a_commit_without_a_row_is_reported_unattributed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _git("init", "-q")
    start = _commit(tmp_path / diet_ledger.FOLDER / "a.py", "x = 1\n", "start")
    added = _commit(tmp_path / diet_ledger.FOLDER / "a.py", "x = 1\ny = 2\n", "no row")
    (tmp_path / "ledger.tsv").write_text("", encoding="utf-8")
    assert diet_ledger.main(["--start", start, "--ledger", "ledger.tsv"]) == 0
    out = capsys.readouterr().out
    assert "unattributed: code +1 total +1" in out
    assert f"no ledger row: {added[:7]} {diet_ledger.FOLDER}/a.py code +1 total +1" in out

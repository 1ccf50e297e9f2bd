"""Issue 29's honest measure: each first-parent commit's line delta, attributed to an issue by docs/diet-ledger.tsv.

``python scripts/diet_ledger.py [--start 2248998] [--ledger docs/diet-ledger.tsv] [--commits]`` walks
``git log --first-parent START..HEAD``; each commit (a merge against its first parent) gets the count_lines delta
(code, total) of ``tinyllama_ft``. A ledger row (commit prefix, issue, ``*`` or one file, reason) attributes it; a
file row wins over the ``*`` row. A merge with no row is opened: its branch's commits are attributed the same way
and what the merge itself changed beyond them is reported as its own line. Printed: the issue-29 sum (the diet),
each other issue's sum (excluded), anything unattributed, and the check start + every delta == HEAD.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from count_lines import count_source

FOLDER = "tinyllama_ft"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def _counts(commit: str, path: str) -> tuple[int, int]:
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True)
    if shown.returncode:
        return 0, 0
    counts = count_source(shown.stdout)
    return counts["code"], counts["total"]


def file_deltas(commit: str, parent: str) -> dict[str, tuple[int, int]]:
    """Each changed ``.py`` file's (code, total) delta from ``parent`` to ``commit`` (git revisions); zero ones left out."""
    deltas = {}
    for path in _git("diff", "--name-only", parent, commit, "--", FOLDER).split():
        if path.endswith(".py"):
            (code_a, total_a), (code_b, total_b) = _counts(parent, path), _counts(commit, path)
            if (code_b - code_a, total_b - total_a) != (0, 0):
                deltas[path] = (code_b - code_a, total_b - total_a)
    return deltas


def read_ledger(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """{(commit prefix, ``*`` or file): (issue, reason)} from the TSV at ``path``; ``#`` lines and blank lines skipped.

    Raises:
        ValueError: a row without its four tab-separated fields (names the line).
    """
    rows = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            fields = line.split("\t")
            if len(fields) != 4:
                raise ValueError(f"{path}:{number}: want commit, issue, file or *, reason (tab-separated): {line!r}")
            commit, issue, file, reason = (field.strip() for field in fields)
            rows[commit, file] = (issue, reason)
    return rows


def _row(ledger: dict, commit: str, file: str) -> tuple[str, str] | None:
    for (prefix, where), row in ledger.items():
        if commit.startswith(prefix) and where == file:
            return row
    return None


def attribute(start: str, end: str, ledger: dict) -> list[tuple[str, str, str, int, int]]:
    """(commit, file, issue, code delta, total delta) for every file change on the first-parent path start..end.

    ``issue`` is ``?`` where the ledger has no row; a merge with no row is opened (see the module docstring) and its
    remainder is reported under the merge's own hash with file ``(merge)``.
    """
    out = []
    for commit in _git("rev-list", "--first-parent", "--reverse", f"{start}..{end}").split():
        parent = f"{commit}^1"
        deltas = file_deltas(commit, parent)
        parents = _git("rev-list", "--parents", "-n1", commit).split()[1:]
        if len(parents) > 1 and deltas and not any(commit.startswith(prefix) for prefix, _ in ledger):
            base = _git("merge-base", parents[0], parents[1]).strip()
            inner = attribute(base, parents[1], ledger)
            out += inner
            code = sum(d[0] for d in deltas.values()) - sum(row[3] for row in inner)
            total = sum(d[1] for d in deltas.values()) - sum(row[4] for row in inner)
            if (code, total) != (0, 0):
                out.append((commit, "(merge)", "?", code, total))
            continue
        for file, (code, total) in deltas.items():
            issue, _ = _row(ledger, commit, file) or _row(ledger, commit, "*") or ("?", "")
            out.append((commit, file, issue, code, total))
    return out


def _total(commit: str) -> tuple[int, int]:
    code = total = 0
    for path in _git("ls-tree", "-r", "--name-only", commit, "--", FOLDER).split():
        if path.endswith(".py"):
            counts = _counts(commit, path)
            code, total = code + counts[0], total + counts[1]
    return code, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2248998", help="the commit issue 29 starts from")
    parser.add_argument("--end", default="HEAD")
    parser.add_argument("--ledger", type=Path, default=Path("docs/diet-ledger.tsv"))
    parser.add_argument("--commits", action="store_true", help="one line per commit and issue too")
    args = parser.parse_args(argv)
    rows = attribute(args.start, args.end, read_ledger(args.ledger))
    per_issue: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    per_commit: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for commit, file, issue, code, total in rows:
        for key in (per_issue[issue], per_commit[commit[:7], issue]):
            key[0] += code
            key[1] += total
    if args.commits:
        for (commit, issue), (code, total) in per_commit.items():
            print(f"{commit}  issue {issue:>2}  code {code:+6d}  total {total:+6d}")
    start, head = _total(args.start), _total(args.end)
    diet = per_issue.pop("29", [0, 0])
    print(f"start {args.start}: code {start[0]} total {start[1]}")
    print(f"diet (issue 29): code {diet[0]:+d} total {diet[1]:+d}")
    for issue, (code, total) in sorted(per_issue.items()):
        label = "unattributed" if issue == "?" else f"excluded, added by issue {issue}"
        print(f"{label}: code {code:+d} total {total:+d}")
    for commit, file, issue, code, total in rows:
        if issue == "?":
            print(f"  no ledger row: {commit[:7]} {file} code {code:+d} total {total:+d}")
    summed = [start[0] + sum(r[3] for r in rows), start[1] + sum(r[4] for r in rows)]
    ok = tuple(summed) == head
    print(f"check: start + all deltas = code {summed[0]} total {summed[1]}; {args.end}: code {head[0]} total {head[1]}")
    print("check " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

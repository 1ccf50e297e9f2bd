"""Count a package's lines: total, blank, comment, docstring and code (the rest), per file and in all.

Issue 29 measures the library-first diet with it: ``python scripts/count_lines.py [folder] [--at COMMIT]``
(default folder ``tinyllama_ft``; ``--at`` reads the files as they were at a commit, through git).
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path


def count_source(text: str) -> dict[str, int]:
    """Line counts of one Python source.

    Args:
        text (str): the file's text.
    Returns:
        dict[str, int]: ``total`` (lines), ``blank`` (whitespace only), ``comment`` (lines holding only a comment),
        ``docstring`` (lines of module, class and function docstrings, and attribute docstrings: a string
        statement right after an assignment in a module or class body, PEP 257's and Sphinx's, which jsonargparse
        shows as a field's help), ``code`` (total minus the other three).
    Raises:
        SyntaxError: the text does not parse.
    """
    lines = text.splitlines()
    blank = {i for i, line in enumerate(lines, 1) if not line.strip()}
    docstring: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstring.update(range(first.lineno, first.end_lineno + 1))
        if isinstance(node, (ast.Module, ast.ClassDef)):
            for before, after in zip(node.body, node.body[1:]):
                if (
                    isinstance(before, (ast.Assign, ast.AnnAssign))
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    docstring.update(range(after.lineno, after.end_lineno + 1))
    has_code: set[int] = set()
    comment: set[int] = set()
    skip = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            comment.add(tok.start[0])
        elif tok.type not in skip:
            has_code.update(range(tok.start[0], tok.end[0] + 1))
    comment -= has_code
    docstring -= blank
    total = len(lines)
    return {
        "total": total,
        "blank": len(blank),
        "comment": len(comment),
        "docstring": len(docstring),
        "code": total - len(blank) - len(comment) - len(docstring),
    }


def _files(folder: str, at: str | None) -> dict[str, str]:
    if at is None:
        return {str(p): p.read_text(encoding="utf-8") for p in sorted(Path(folder).rglob("*.py"))}
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", at, "--", folder], capture_output=True, text=True, check=True
    ).stdout.split()
    return {
        name: subprocess.run(["git", "show", f"{at}:{name}"], capture_output=True, text=True, check=True).stdout
        for name in names
        if name.endswith(".py")
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="tinyllama_ft")
    parser.add_argument("--at", help="a git commit: count the files as they were there")
    parser.add_argument("--per-file", action="store_true", help="one line per file too")
    args = parser.parse_args(argv)
    totals = dict.fromkeys(("total", "blank", "comment", "docstring", "code"), 0)
    for name, text in _files(args.folder, args.at).items():
        counts = count_source(text)
        for key in totals:
            totals[key] += counts[key]
        if args.per_file:
            print(f"{counts['code']:6d} code {counts['total']:6d} total  {name}")
    print(
        " ".join(f"{key} {value}" for key, value in totals.items()) + f"  ({args.folder} at {args.at or 'work tree'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

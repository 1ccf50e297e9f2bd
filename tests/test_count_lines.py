"""scripts/count_lines.py, the measure of issue 29's diet, counts each kind of line once."""

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
from count_lines import count_source  # noqa: E402


def test_each_line_is_counted_as_one_kind():
    text = '''"""Module docstring,
on two lines."""

# a comment
import os  # a trailing comment is code


def f(x):
    """One line."""

    return x  # code
'''
    assert count_source(text) == {"total": 11, "blank": 4, "comment": 1, "docstring": 3, "code": 3}

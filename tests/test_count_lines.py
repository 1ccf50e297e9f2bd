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


def test_an_attribute_docstring_is_a_docstring():
    # PEP 257's attribute docstring (what jsonargparse and Sphinx show as a dataclass field's help) documents the
    # field above it, as a function's docstring does; a string statement elsewhere stays code.
    text = '''class Section:
    lora_r: int = 16
    """LoRA rank,
    on two lines."""
    x = 1


def f():
    y = 2
    "not an attribute docstring"
'''
    assert count_source(text) == {"total": 10, "blank": 2, "comment": 0, "docstring": 2, "code": 6}

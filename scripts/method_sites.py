"""Print the places in ``tinyllama_ft`` that decide by training method outside its method table
(``config/methods.py``): explicit tests of a ``method`` value, sniffs of a method's columns (chosen/rejected/completion
ids, label, prompt ids), ``hasattr`` on a trainer, ``isinstance`` on a format class (issue 41's count; the rule of
the session's ``method_sites.py``). ``tests/test_package.py`` keeps the count at most ``LIMIT``.

    python scripts/method_sites.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tinyllama_ft"
#: The method table: the one place that may name methods.
TABLE = "*/config/methods.py"
#: Sites allowed outside the table (issue 41: at most 10).
LIMIT = 10
PATTERNS = [
    re.compile(r"\bmethod\s*(==|!=|\bin\b|\bnot in\b)\s*[\"'(\[{A-Z]"),
    re.compile(r"[\"'](dpo|orpo|kto|grpo|sft|simpo|cpo)[\"']\s*(==|!=)\s*\w*method"),
    re.compile(
        r"[\"'](chosen_ids|rejected_ids|completion_ids|chosen_input_ids|label|kl_completion_ids|prompt_ids)[\"']"
        r"\s+(not\s+)?in\s+"
    ),
    re.compile(r"hasattr\(\s*trainer\s*,"),
    re.compile(r"isinstance\([^)]*(Grpo|Preference|Alpaca|Conversation|Text)\w*Format"),
    re.compile(r"[\"']grpo[\"']\s+in\s+\w+"),
]


def method_sites(package: Path = PACKAGE) -> list[str]:
    """``"path:line: code"`` for each site, files in sorted order; comment lines and the table are skipped."""
    sites = []
    for path in sorted(package.rglob("*.py")):
        if path.match(TABLE):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip().startswith("#") and any(p.search(line) for p in PATTERNS):
                sites.append(f"{path.relative_to(package.parent)}:{i}: {line.strip()[:110]}")
    return sites


if __name__ == "__main__":
    found = method_sites()
    print("\n".join(found + [f"{len(found)} method decision sites (at most {LIMIT})"]))
    sys.exit(len(found) > LIMIT)

"""The lm-evaluation-harness tasks that ship with the package, registered through ``TaskManager(include_path=
TASKS_DIR)``: ``tinyllama_ft_mmlu`` (four MMLU subjects from the original test files, MIT: ``mmlu/NOTICE``) and
``tinyllama_ft_arithmetic`` (the GRPO demo's held-out problems, exact match); ``functions.py`` holds what their YAML
files name with ``!function``.
"""

from pathlib import Path

#: The folder of the shipped task YAML files (lm-eval's ``--include_path``).
TASKS_DIR = Path(__file__).resolve().parent
#: The shipped tasks by name: what they measure, for messages and docs/evaluation.md.
SHIPPED_TASKS = {
    "tinyllama_ft_mmlu": "497 MMLU test questions over 4 subjects, multiple choice, lm-eval's mmlu prompt",
    "tinyllama_ft_arithmetic": "the GRPO demo's 100 held-out arithmetic word problems, exact match on the number",
}

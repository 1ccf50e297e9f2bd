"""GRPO (issue 31): the arithmetic problems the package generates, the answer layout, the GRPO fields' checks."""

from __future__ import annotations

import math
import re
from decimal import Decimal

import pytest

from tinyllama_ft.config.coercion import ConfigError
from tinyllama_ft.config.finetune import DEFAULTS, FinetuneConfig
from tinyllama_ft.data.answers import extract_number, follows_layout, reference_number
from tinyllama_ft.data.arithmetic import KINDS, answer_of, arithmetic_problems, arithmetic_splits, problem_pool


def _key(row):
    return row["kind"], tuple(sorted(row["operands"]))


def test_arithmetic_problems_are_seeded_balanced_correct_and_held_out_apart():
    train, held = arithmetic_problems(400)
    assert (len(train), len(held)) == (400, 100)
    assert {k: sum(r["kind"] == k for r in held) for k in KINDS} == {k: 25 for k in KINDS}
    assert {k: sum(r["kind"] == k for r in train) for k in KINDS} == {
        "sum2": 102,
        "sum3": 102,
        "product2": 101,
        "product3": 95,
    }  # product3's 120 sets used up
    assert not {_key(r) for r in train} & {_key(r) for r in held}  # no arithmetic in both, in any story or order
    assert len({_key(r) for r in train}) == 400  # nor twice in training
    for row in train + held:
        values = row["operands"]
        assert row["answer"] == (sum(values) if row["kind"].startswith("sum") else math.prod(values))
        assert [int(n) for n in re.findall(r"\d+", row["question"])] == values  # the operands, in the story's order
        assert row["question"].endswith("?")
    assert arithmetic_problems(400) == (train, held)  # the same seed, the same rows
    assert arithmetic_problems(400, seed=1)[1] != held
    assert arithmetic_problems(10)[1] == held  # the held-out problems do not depend on how many train
    assert answer_of("product3", (2, 3, 4)) == 24 and len(problem_pool("product3")) == 120  # C(8 + 2, 3) multisets


def test_a_test_set_of_fresh_problems_beside_the_validation_problems_the_values_were_tuned_on():
    # issue 40, item 6: the old held-out problems stay the validation set; the test set shares no arithmetic with them
    # or with training
    train, validation, test = arithmetic_splits(1000)
    old_train, old_held = arithmetic_problems(1000)
    assert validation == old_held and len(test) == 100 and len(train) == 1000
    assert [sum(row["kind"] == kind for row in test) for kind in KINDS] == [25, 25, 25, 25]

    def arithmetic(rows):
        return {(row["kind"], tuple(sorted(row["operands"]))) for row in rows}

    assert len(arithmetic(train + validation + test)) == 1200  # no operand set twice, in any part
    assert arithmetic_splits(1000, test=0) == (old_train, old_held, [])  # no test set: arithmetic_problems' rows
    assert arithmetic_splits(1000) == (train, validation, test)  # seeded
    with pytest.raises(ValueError, match="more than the kinds hold"):
        arithmetic_splits(0, validation=4 * 60, test=4 * 61)  # product3 has 120 operand sets


def test_a_grpo_run_with_eval_split_checks_the_test_problems():
    import datasets

    from tinyllama_ft.data.formats import data_format
    from tinyllama_ft.data.grpo_format import held_out_after_drops
    from tinyllama_ft.data.instructions import split_train_eval

    _, validation, test = arithmetic_splits(1000)
    for split, expected in (("test", test), ("validation", validation)):
        cfg = FinetuneConfig(method="grpo", dataset="arithmetic", dataset_format="messages", eval_split=split)
        fmt = data_format(cfg)
        rows, _ = fmt.load(cfg)
        assert fmt.held_out_first == (100, 100) and len(rows) == 1200
        rows = datasets.Dataset.from_list([{"answer": str(r["answer"])} for r in rows])  # as read, text or number
        train, held = split_train_eval(rows, test_size=cfg.test_size, first=fmt.held_out_first, eval_split=split)
        assert held["answer"] == [str(r["answer"]) for r in expected] and len(train) == 1000
    assert held_out_after_drops((100, 100), [3, 99, 100, 250]) == (98, 99)
    assert held_out_after_drops(100, [3, 150]) == 99


def test_asking_for_more_problems_than_a_kind_has_is_refused():
    with pytest.raises(ValueError, match="more than the kinds hold"):
        arithmetic_problems(0, held_out=4 * 121)  # product3 has 120 operand sets
    with pytest.raises(ValueError, match="more than the kinds hold"):
        arithmetic_problems(sum(len(problem_pool(k)) for k in KINDS) - 99)
    with pytest.raises(ValueError, match="counts must be >= 0"):
        arithmetic_problems(-1)


@pytest.mark.parametrize(
    "text, layout, number",
    [
        ("3 + 4 = 7\n#### 7", True, "7"),
        ("#### 1,234", True, "1234"),
        ("The total is 12.\n\n####  -5.\n", True, "-5"),
        ("#### $40", True, "40"),
        ("So 2 + 2 = 4. #### 4", False, "4"),  # the line holds more than the answer
        ("#### 4\nDone.", False, "4"),  # not the last line
        ("There are 4 * 7 = 28 apples.", False, "28"),  # no mark: the last number
        ("#### 6 and then 7", False, "6"),  # the number after the mark wins over a later one
        ("no number here", False, None),
        ("", False, None),
    ],
)
def test_the_layout_and_the_number_a_completion_gives(text, layout, number):
    assert follows_layout(text) is layout
    assert extract_number(text) == (None if number is None else Decimal(number))


def test_references_parse_as_numbers_from_ints_strings_and_gsm8k_answers():
    assert reference_number(42) == reference_number("42") == reference_number("6 * 7 = 42\n#### 42") == Decimal(42)
    assert reference_number(2.5) == Decimal("2.5")
    assert [reference_number(v) for v in (None, True, "none")] == [None, None, None]


def test_grpo_fields_defaults_and_checks():
    assert (DEFAULTS.num_generations, DEFAULTS.max_completion_length, DEFAULTS.temperature) == (4, 256, 1.0)
    assert (DEFAULTS.reward_funcs, DEFAULTS.prompt_column, DEFAULTS.answer_column) == (
        ("correct_number", "answer_format"),
        "question",
        "answer",
    )
    cfg = FinetuneConfig(method="grpo", reward_funcs="correct_number,my_rewards:score", loss_type="dr_grpo")
    assert (cfg.beta, cfg.reward_funcs, cfg.loss_type) == (0.0, ("correct_number", "my_rewards:score"), ("dr_grpo",))
    assert FinetuneConfig(method="dpo").beta == 0.1 and FinetuneConfig(method="grpo", beta=0.04).beta == 0.04
    refused = {
        "num_generations=1 is not allowed: 2 or more": dict(num_generations=1),
        "at most one of \\['dapo', 'grpo'": dict(loss_type="dapo,grpo"),
        "loss_type=\\['sigmoid'\\] is not allowed for method='grpo'": dict(loss_type="sigmoid"),
        "loss_weights=\\[1.0\\] is read by method \\['dpo'\\] only, and method='grpo'": dict(loss_weights="1"),
        "long_rows='truncate' does not apply to method='grpo'": dict(long_rows="truncate"),
        "method='grpo' reads its prompts from dataset alone": dict(dataset_format="sharegpt"),
        "max_completion_length=512 leaves no room for a prompt": dict(max_completion_length=512, max_seq_length=512),
        "reward_funcs=\\(\\) is not allowed: at least one reward function": dict(reward_funcs=""),
        "beta=-0.1 is not allowed": dict(beta=-0.1),
        "temperature=0.0 is not allowed": dict(temperature=0),
        "prompt_column and answer_column are both 'question': the reference answer would be the question": dict(
            answer_column="question"
        ),
        "reward_weights=\\[1.0\\] has 1 weight\\(s\\) for 2 reward_funcs": dict(reward_weights="1"),
        "scale_rewards='std' is not allowed": dict(scale_rewards="std"),
    }
    for message, fields in refused.items():
        with pytest.raises(ConfigError, match=message):
            FinetuneConfig(method="grpo", **fields)


# --- rewards -------------------------------------------------------------------------------------------------------

TEXT = ["7 + 5 = 12\n#### 12", "It is 13.", "#### 12 apples", "no idea"]
CHAT = [[{"role": "assistant", "content": c}] for c in TEXT]


@pytest.mark.parametrize("completions", [TEXT, CHAT], ids=["text", "conversational"])
def test_builtin_rewards_score_text_and_chat_completions(completions):
    from tinyllama_ft.train.rewards import answer_format, correct_number

    prompts = ["q"] * 4
    assert correct_number(prompts, completions, answer=["12", "13", 12, "5 + 7\n#### 12"]) == [1.0, 1.0, 1.0, 0.0]
    assert correct_number(prompts, completions[:2], answer=["no number", "13"]) == [None, 1.0]  # TRL leaves out None
    assert answer_format(prompts, completions, completion_ids=None, trainer_state=None) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="no 'answer' column"):
        correct_number(prompts, completions)


def test_soft_overlong_punishment_is_trls_under_the_builtin_name():
    from trl.rewards import get_soft_overlong_punishment
    from trl.trainer.utils import get_callable_name

    from tinyllama_ft.train.rewards import resolve_rewards

    [penalty] = resolve_rewards(["soft_overlong_punishment"], max_completion_length=10)  # ramps over the last 2 tokens
    trls = get_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=2)
    assert type(penalty) is type(trls) and vars(penalty) == {**vars(trls), "__name__": "soft_overlong_punishment"}
    ids = [[1] * n for n in (3, 8, 9, 10)]
    assert penalty(prompts=["q"] * 4, completions=["a"] * 4, completion_ids=ids) == [
        0.0,
        0.0,
        -0.5,
        -1.0,
    ]  # as TRL calls
    # the cache: 20% of the limit, at least 1 token
    assert [resolve_rewards([penalty.__name__], max_completion_length=n)[0].soft_punish_cache for n in (3, 64)] == [
        1,
        13,
    ]
    # TRL's logs it under another name: why the built-in renames it
    assert get_callable_name(trls) != "soft_overlong_punishment" == get_callable_name(penalty)


def test_reward_name_is_trls_get_callable_name():
    import functools

    from trl.trainer.utils import get_callable_name

    from tinyllama_ft.train.rewards import answer_format, correct_number, resolve_rewards, reward_name

    class Scorer:
        def __call__(self, completions, **kwargs):
            return [1.0] * len(completions)

    [penalty] = resolve_rewards(["soft_overlong_punishment"], max_completion_length=8)
    funcs = [correct_number, functools.partial(functools.partial(answer_format)), penalty, Scorer()]
    funcs.append(lambda completions, **kwargs: [])
    assert [reward_name(f) for f in funcs] == [get_callable_name(f) for f in funcs]
    assert [reward_name(f) for f in funcs] == [
        "correct_number",
        "answer_format",
        "soft_overlong_punishment",
        "Scorer",
        "<lambda>",
    ]


REWARDS_MODULE = """
import math

def score(prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
    return [float(len(c)) for c in completions]

def no_kwargs(prompts, completions):
    return [0.0] * len(completions)

def no_completions(prompts, **kwargs):
    return [0.0] * len(prompts)

class Scorer:
    def __call__(self, completions, **kwargs):
        return [1.0] * len(completions)

scorer = Scorer()
constant = 3
"""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(REWARDS_MODULE, encoding="utf-8")
    (tmp_path / "broken_rewards.py").write_text("import not_installed_anywhere\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_user_rewards_resolve_from_module_file_and_callable(rewards_module):
    from tinyllama_ft.train.rewards import answer_format, correct_number, resolve_rewards

    def mine(prompts, completions, **kwargs):
        return [0.5] * len(completions)

    funcs = resolve_rewards(
        ["correct_number", "my_rewards:score", f"{rewards_module / 'my_rewards.py'}:scorer", mine, answer_format]
    )
    assert funcs[0] is correct_number and funcs[3] is mine and funcs[4] is answer_format
    assert funcs[1](prompts=["q"], completions=["abc"], trainer_state=None, answer=["1"]) == [3.0]
    assert funcs[2](prompts=["q"], completions=["abc"], completion_ids=[[1]], log_metric=None) == [1.0]
    assert resolve_rewards(["my_rewards.score"]) == [funcs[1]]  # a dotted path, as pkgutil.resolve_name reads it


def test_rewards_trl_could_not_call_are_refused_naming_them(rewards_module):
    from tinyllama_ft.train.rewards import RewardError, resolve_rewards

    refused = {
        "reward_funcs\\[0\\]='nope_rewards:score': no module named 'nope_rewards'": ["nope_rewards:score"],
        "no module named 'not_installed_anywhere' \\(importing 'broken_rewards'\\)": ["broken_rewards:f"],
        "reward_funcs\\[1\\]='my_rewards:missing': module 'my_rewards' has no attribute 'missing'": [
            "answer_format",
            "my_rewards:missing",
        ],
        "'my_rewards:constant' is a int, not a function": ["my_rewards:constant"],
        "'my_rewards:Scorer' is a class": ["my_rewards:Scorer"],
        "'my_rewards:no_kwargs' has no \\*\\*kwargs": ["my_rewards:no_kwargs"],
        "'my_rewards:no_completions' has no 'completions' or 'completion_ids' parameter": ["my_rewards:no_completions"],
        "no such file": ["missing_file.py:score"],
        "'corect_number' is no built-in reward .* \\(did you mean correct_number\\?\\)": ["corect_number"],
        "reward_funcs\\[1\\].* is logged as 'correct_number', as reward_funcs\\[0\\] is": [
            "correct_number",
            "tinyllama_ft.train.rewards:correct_number",
        ],
        "reward_funcs is empty": [],
        "reward_funcs\\[0\\] \\(3\\) is a int, not a function": [3],
    }
    for message, funcs in refused.items():
        with pytest.raises(RewardError, match=message):
            resolve_rewards(funcs)


def test_a_bad_reward_is_refused_before_torch_is_even_imported(rewards_module):
    import subprocess
    import sys

    code = (
        "import sys\nfrom tinyllama_ft.train.rewards import RewardError, resolve_rewards\n"
        "try:\n    resolve_rewards(['correct_number', 'my_rewards:no_kwargs'])\nexcept RewardError as e:\n"
        "    print(e)\nprint('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], cwd=rewards_module, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    # -P: the working folder is not on sys.path (as for a console script); the module is found there all the same
    assert "reward_funcs[1]='my_rewards:no_kwargs' has no **kwargs" in out[0]
    assert out[-1] == "False False"


# --- prompt rows ---------------------------------------------------------------------------------------------------


def test_prompt_rows_bad_rows_are_dropped_and_counted_and_strict_names_row_and_field():
    from tinyllama_ft.data.grpo_prompts import check_prompt_rows

    rows = [
        {"question": "What is 2 + 3?", "answer": 5},
        {"question": "What is 2 + 3?", "answer": "5"},  # the same row once its answer is text
        {"question": "  ", "answer": 1},
        {"answer": 1},
        {"question": "q", "answer": None},
        {"question": "q", "answer": True},
        {"question": [{"role": "user", "content": "hi"}], "answer": "1"},  # the other form
        ["not", "an", "object"],
        {"question": "What is 2 * 3?\n", "answer": "2 * 3 = 6\n#### 6", "extra": 1},
    ]
    clean, report, form = check_prompt_rows(rows, source="q.jsonl")
    assert form == "text" and (report.total, report.kept) == (9, 2)
    assert clean == [  # every column as read; the prompt as "prompt", the reference as "answer"
        {"question": "What is 2 + 3?", "prompt": "What is 2 + 3?", "answer": 5},
        {"question": "What is 2 * 3?\n", "prompt": "What is 2 * 3?\n", "answer": "2 * 3 = 6\n#### 6", "extra": 1},
    ]
    assert report.by_reason == {
        "duplicate": 1,
        "empty": 1,
        "missing": 1,
        "null": 1,
        "wrong type": 2,
        "not an object": 1,
    }
    with pytest.raises(ValueError, match="q.jsonl: row 1: field '<row>' duplicates row 0"):
        check_prompt_rows(rows[:1] * 3 + rows[3:4], source="q.jsonl", strict=True)


def test_chat_prompts_must_end_with_a_user_turn():
    from tinyllama_ft.data.grpo_prompts import check_prompt_rows

    user, assistant = {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}
    rows = [
        {"prompt": [{"role": "system", "content": "Be brief."}, user], "solution": 1},
        {"prompt": [user, assistant, user], "solution": 2},
        {"prompt": [user, assistant], "solution": 3},
        {"prompt": [assistant, user], "solution": 4},
        {"prompt": [], "solution": 5},
        {"prompt": "text", "solution": 6},
    ]
    clean, report, form = check_prompt_rows(rows, prompt_column="prompt", answer_column="solution")
    assert form == "conversation" and [(r["answer"], r["solution"]) for r in clean] == [(1, 1), (2, 2)]
    assert [str(b) for b in report.bad] == [
        "row 2: field 'prompt[1]' is the last turn but not the user's",
        "row 3: field 'prompt[0]' is a 'assistant' turn out of order (expected 'user')",
        "row 4: field 'prompt' has no turns",
        "row 5: field 'prompt' is text, but the first rows' prompts are conversation",
    ]


def test_grpo_prompts_ask_for_the_layout_in_the_runs_form():
    from tinyllama_ft.data.alpaca_prompts import format_prompt
    from tinyllama_ft.data.answers import LAYOUT_INSTRUCTION
    from tinyllama_ft.data.grpo_prompts import grpo_prompts

    text = [{"prompt": "What is 2 + 3?", "answer": "5"}]
    chat = [
        {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 2 + 3?"}], "answer": 5}
    ]
    asked = f"What is 2 + 3?\n{LAYOUT_INSTRUCTION}"
    assert grpo_prompts(text)[0] == {"prompt": format_prompt(asked, "", ""), "answer": "5"}
    assert grpo_prompts(chat)["answer"] == [5]  # a number stays a number
    assert grpo_prompts(text, dataset_format="messages")["prompt"] == [[{"role": "user", "content": asked}]]
    assert grpo_prompts(chat)["prompt"][0][1] == {"role": "user", "content": asked}
    assert chat[0]["prompt"][1]["content"] == "What is 2 + 3?"  # the caller's rows are left as they were
    assert grpo_prompts(text, suffix="", template="alpaca_no_input")["prompt"][0].count("What is 2 + 3?\n\n###") == 1
    with pytest.raises(ValueError, match="row 0: the prompt is chat messages, and dataset_format='alpaca'"):
        grpo_prompts(chat, dataset_format="alpaca")


def test_prompts_too_long_for_the_window_are_dropped_as_trl_tokenizes_them():
    from chat_fixtures import smollm2_tokenizer

    from tinyllama_ft.data.grpo_prompts import drop_long_prompts, grpo_prompts, prompt_token_ids

    tokenizer = smollm2_tokenizer()
    rows = [{"prompt": "What is 2 + 3?", "answer": "5"}, {"prompt": "word " * 200, "answer": "1"}]
    for dataset_format in ("alpaca", "messages"):
        prompts = grpo_prompts(rows, dataset_format=dataset_format)
        lengths = [len(prompt_token_ids(tokenizer, p)) for p in prompts["prompt"]]
        assert lengths[0] < 100 < lengths[1]
        kept, dropped = drop_long_prompts(prompts, tokenizer, max_prompt_tokens=100)
        assert dropped == [1] and kept["answer"] == ["5"]
        with pytest.raises(ValueError, match="every prompt is longer than 8 tokens"):
            drop_long_prompts(prompts, tokenizer, max_prompt_tokens=8)
    chat = grpo_prompts(rows[:1], dataset_format="messages")["prompt"][0]
    rendered = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert prompt_token_ids(tokenizer, chat) == tokenizer(rendered, add_special_tokens=False)["input_ids"]


# --- the trainer ---------------------------------------------------------------------------------------------------

#: TRL's GRPO reads transformers' deprecated ``is_gradient_checkpointing`` (as its DPO does:
#: tests/test_preference_training.py): TRL's read, not this package's.
TRL_READS_DEPRECATED = "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"


def _grpo_cfg(output_dir, **fields):
    values = dict(
        method="grpo",
        report_to="none",
        output_dir=str(output_dir),
        dataset_format="messages",
        max_seq_length=512,
        num_generations=2,
        max_completion_length=32,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        max_steps=2,
        warmup_ratio=0.0,
        learning_rate=1e-4,
        save_steps=1000,
        gradient_checkpointing=False,
    )
    return FinetuneConfig(**{**values, **fields})


def _prompts(n: int):
    from tinyllama_ft.data.grpo_prompts import check_prompt_rows, grpo_prompts

    train, _ = arithmetic_problems(n, held_out=4)
    return grpo_prompts(check_prompt_rows(train)[0], dataset_format="messages")


def _tiny_grpo(tmp_path, *, from_adapter=False, rewards=None, train_dataset=None, progress=False, **fields):
    from chat_fixtures import smollm2_tokenizer, tiny_model

    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.train.grpo_trainer import build_grpo_trainer
    from tinyllama_ft.train.plan import plan_run

    tokenizer = smollm2_tokenizer()
    model = add_lora(tiny_model("llama", tokenizer), gradient_checkpointing=False, lora_r=4, lora_alpha=8)
    cfg = _grpo_cfg(tmp_path, **fields)
    trainer = build_grpo_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=_prompts(8) if train_dataset is None else train_dataset,
        cfg=cfg,
        plan=plan_run(cfg, Hardware()),
        reward_funcs=rewards,
        from_adapter=from_adapter,
        progress=progress,
    )
    return trainer, model


@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_the_grpo_trainer_takes_the_configs_values_on_both_library_sets(tmp_path):
    from helpers import reference_kind as grpo_reference

    trainer, model = _tiny_grpo(tmp_path, reward_funcs="correct_number,answer_format,soft_overlong_punishment")
    args = trainer.args
    assert (args.num_generations, args.max_completion_length, args.temperature, args.beta) == (2, 32, 1.0, 0.0)
    assert (args.loss_type, args.generation_batch_size, args.learning_rate) == ("dapo", 4, 1e-4)  # TRL's loss
    assert list(trainer.reward_func_names) == ["correct_number", "answer_format", "soft_overlong_punishment"]
    assert trainer.ref_model is None and grpo_reference(trainer) == "none (beta 0)"
    assert trainer.train_dataset.column_names == ["prompt", "question", "answer", "kind", "operands"]

    assert (args.reward_weights, args.scale_rewards, args.mask_truncated_completions) == (None, "group", False)
    fresh, model = _tiny_grpo(
        tmp_path / "fresh",
        beta=0.04,
        loss_type="grpo",
        temperature=0.7,
        reward_weights="1,0.2",
        scale_rewards="none",
        mask_truncated_completions=True,
    )
    assert (fresh.args.beta, fresh.args.loss_type, fresh.args.temperature) == (0.04, "grpo", 0.7)
    assert (fresh.args.scale_rewards, fresh.args.mask_truncated_completions) == ("none", True)
    assert fresh.reward_weights.tolist() == pytest.approx([1.0, 0.2])
    assert "ref" not in model.peft_config and grpo_reference(fresh) == "base with adapters disabled"
    continued, model = _tiny_grpo(tmp_path / "continued", beta=0.04, from_adapter=True)
    assert "ref" in model.peft_config and grpo_reference(continued).startswith("frozen copy of the starting adapter")


@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_out_of_memory_advice_names_grpos_sizes(tmp_path):
    """GRPOConfig has no max_length: the advice names the group and completion length instead (it raised
    AttributeError inside the out-of-memory handler before)."""
    from tinyllama_ft.train.loop import out_of_memory_advice

    trainer, _ = _tiny_grpo(tmp_path)
    advice = out_of_memory_advice(trainer)
    assert "num_generations=2, max_completion_length=32 and gradient_checkpointing=False" in advice
    assert "lower max_completion_length or num_generations" in advice and "No checkpoint was written yet" in advice


def test_the_grpo_trainer_refuses_what_cannot_train(tmp_path):
    import dataclasses

    from chat_fixtures import smollm2_tokenizer, tiny_model

    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.config.coercion import ConfigError
    from tinyllama_ft.train.grpo_trainer import build_grpo_trainer
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.rewards import RewardError

    cfg = _grpo_cfg(tmp_path)
    plan = plan_run(cfg, Hardware())
    # TRL's GRPOConfig refuses a step holding part of a group, at plan time (before any model loads)
    split = dict(per_device_train_batch_size=2, gradient_accumulation_steps=3, num_generations=4)
    with pytest.raises(ConfigError, match=r"GRPOConfig refuses .*per_device_train_batch_size=2.*divisible by num_gen"):
        plan_run(dataclasses.replace(cfg, **split), Hardware())
    tokenizer = smollm2_tokenizer()
    bare = tiny_model("llama", tokenizer)
    common = dict(tokenizer=tokenizer, train_dataset=_prompts(4), plan=plan)
    with pytest.raises(ValueError, match="not a PEFT model"):
        build_grpo_trainer(model=bare, cfg=cfg, **common)
    from tinyllama_ft.models.lora import add_lora

    model = add_lora(bare, gradient_checkpointing=False, lora_r=4, lora_alpha=8)
    with pytest.raises(ValueError, match="no 'prompt' column"):
        build_grpo_trainer(
            model=model, cfg=cfg, **{**common, "train_dataset": _prompts(4).rename_column("prompt", "q")}
        )
    with pytest.raises(RewardError, match="reward_funcs\\[0\\]='nope:f': no module named 'nope'"):
        build_grpo_trainer(model=model, cfg=cfg, reward_funcs=["nope:f"], **common)


@pytest.mark.slow
@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_grpo_trains_smollm2_on_arithmetic_prompts_logging_each_reward(tmp_path, capsys):
    """Two real GRPO steps on SmolLM2-135M-Instruct (CPU, 2 prompts x 2 completions of at most 32 tokens per step): a
    notebook's own reward gets the completions, the answer column and the trainer state; every reward's mean is logged
    and printed each step, the summed reward is their sum, and the adapter's B matrices (zero at the start, untouched by
    weight decay) moved. TRL 1.15 (the GPU machine's set) computes GRPO's log-probabilities with a Triton kernel a CPU
    torch lacks: there the trainer is only built."""
    import torch
    from chat_fixtures import cpu_trl_cannot_train, smollm2_dir

    from tinyllama_ft.data.formats import ConversationFormat
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.train.grpo_trainer import build_grpo_trainer, reward_history
    from tinyllama_ft.train.plan import plan_run

    seen = []

    def brevity(prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
        seen.append((len(completions), kwargs["answer"], trainer_state.global_step))
        return [1.0 - len(ids) / 32 for ids in completion_ids]

    cfg = _grpo_cfg(tmp_path, reward_funcs="correct_number,answer_format,soft_overlong_punishment")
    model, tokenizer = load_model(
        smollm2_dir(), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=Hardware()
    )
    targets = ConversationFormat("messages").prepare(model, tokenizer, cfg)
    model = add_lora(model, lora_r=16, lora_alpha=32, target_modules=targets, gradient_checkpointing=False, seed=3407)
    prompts = _prompts(8)
    trainer = build_grpo_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=prompts,
        cfg=cfg,
        plan=plan_run(cfg, Hardware()),
        reward_funcs=[*cfg.reward_funcs, brevity],
    )
    names = list(trainer.reward_func_names)
    assert names == ["correct_number", "answer_format", "soft_overlong_punishment", "brevity"]
    if cpu_trl_cannot_train():
        return
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    assert all(not p.any() for p in before.values())
    trainer.train()
    history = reward_history(trainer.state.log_history, names)
    assert [h["step"] for h in history] == [1, 2]
    for step in history:
        means = step["rewards"]
        assert 0 <= means["correct_number"] <= 1 and 0 <= means["answer_format"] <= 1
        assert -1 <= means["soft_overlong_punishment"] <= 0 and 0 <= means["brevity"] <= 1
        assert step["reward"] == pytest.approx(sum(means.values()), rel=1e-5, abs=1e-6)  # a floor for a sum near 0
        assert 0 < step["completion_length"] <= 32
    assert [s[0] for s in seen] == [4, 4] and [s[2] for s in seen] == [0, 1]
    assert all(set(answers) <= set(prompts["answer"]) and len(set(answers)) == 2 for _, answers, _ in seen)
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if n in before)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(lines) == 2 and all("correct_number" in line and "brevity" in line for line in lines)


# --- the held-out checks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset_format", ["messages", "alpaca"])
def test_held_out_checks_answer_as_trls_rollouts_prompt_and_score_as_the_rewards(dataset_format):
    """Greedy answers from the checks equal ``generate`` on the prompt ids TRL's GRPOTrainer builds (its own
    ``_tokenize_prompts``), one prompt at a time and stopped on TRL's ids; the scores follow from those answers."""
    import torch
    from chat_fixtures import smollm2_tokenizer, tiny_model
    from trl import GRPOConfig, GRPOTrainer

    from tinyllama_ft.data.grpo_prompts import check_prompt_rows, grpo_prompts
    from tinyllama_ft.evaluate.grpo_checks import grpo_scores, rollout_stop_ids
    from tinyllama_ft.train.rewards import resolve_rewards
    from tinyllama_ft.train.trainers import spelled_kwargs

    tokenizer = smollm2_tokenizer()
    model = tiny_model("llama", tokenizer, seed=1)
    _, held = arithmetic_problems(0, held_out=5)
    rows = grpo_prompts(check_prompt_rows(held)[0], dataset_format=dataset_format)
    funcs = resolve_rewards(["correct_number", "answer_format", "soft_overlong_punishment"], max_completion_length=12)
    scores = grpo_scores(model, tokenizer, rows, reward_funcs=funcs, max_new_tokens=12, batch_size=3)

    args = dict(output_dir="unused", per_device_train_batch_size=2, num_generations=2, report_to=[], use_cpu=True)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=GRPOConfig(**spelled_kwargs({**args, "gradient_checkpointing": False}, GRPOConfig)),
        train_dataset=rows,
        processing_class=tokenizer,
    )
    prompt_ids = trainer._tokenize_prompts(list(rows["prompt"]))[0]
    stops = rollout_stop_ids(tokenizer, model)
    assert stops == trainer.eos_token_ids
    expected, lengths, ended = [], [], []
    model.eval()
    for ids in prompt_ids:
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=stops)
        new = out[0, len(ids) :].tolist()
        end = next((j for j, t in enumerate(new) if t in stops), None)
        expected.append(tokenizer.decode(new[:end], skip_special_tokens=True))
        lengths.append(len(new) if end is None else end + 1)  # TRL counts the stop token
        ended.append(end is not None)
    assert scores.answers == expected
    assert (scores.completion_length, scores.stopped) == (sum(lengths) / 5, sum(ended))
    assert scores.format_compliance == sum(map(follows_layout, expected)) / 5
    refs = [reference_number(a) for a in rows["answer"]]
    assert scores.accuracy == sum(extract_number(t) == r for t, r in zip(expected, refs)) / 5
    assert scores.rewards["answer_format"] == scores.format_compliance
    assert scores.rewards["correct_number"] == scores.accuracy
    assert -1 <= scores.rewards["soft_overlong_punishment"] <= 0


# --- what a reward receives (issue 40, items 2 and 3) ----------------------------------------------------------------


def _recording(calls: list):
    """A reward that keeps the columns TRL passes it (its extras left out) and scores 0."""

    def seen(prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
        calls.append({k: v for k, v in kwargs.items() if k not in ("log_extra", "log_metric", "environments")})
        return [0.0] * len(completions)

    return seen


@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_every_column_reaches_the_rewards_by_name_with_its_values_as_read(tmp_path):
    """A third column (``level``) and the answer column under its own name (``solution``) reach a reward, in TRL's
    own call and in the held-out checks; numbers stay numbers (the arithmetic problems' ``answer`` too); the built-ins
    read ``answer`` as a number or as text. At the starting commit a reward got ``answer`` only, as text."""
    import json

    from tinyllama_ft.data.grpo_prompts import grpo_prompts, load_prompt_rows
    from tinyllama_ft.evaluate.grpo_checks import grpo_scores
    from tinyllama_ft.train.rewards import correct_number

    problems = [
        {"question": "What is 2 + 3?", "solution": 5, "level": 1},
        {"question": "What is 2 * 3?", "solution": "2 * 3 = 6\n#### 6", "level": 2},
        {"question": "What is 67 + 67?", "solution": 134, "level": None},
        {"question": "What is 3 + 4?", "solution": 7, "level": 3},
    ]
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in problems), encoding="utf-8")
    rows, _, _ = load_prompt_rows(str(path), answer_column="solution")
    dataset = grpo_prompts(rows, dataset_format="messages")
    calls = []
    trainer, model = _tiny_grpo(tmp_path, rewards=["correct_number", _recording(calls)], train_dataset=dataset)
    inputs = [trainer.train_dataset[i] for i in range(4)]  # what TRL's sampler hands its generation step
    completions = [[{"role": "assistant", "content": f"#### {n}"}] for n in (5, 6, 7, 7)]
    rewards = trainer._calculate_rewards(inputs, [x["prompt"] for x in inputs], completions, [[1]] * 4)
    assert rewards[:, 0].tolist() == [1.0, 1.0, 0.0, 1.0]  # correct_number: 5 (a number), "... #### 6" (text), ...
    [kwargs] = calls
    references = [5, "2 * 3 = 6\n#### 6", 134, 7]
    assert kwargs["solution"] == kwargs["answer"] == references and type(kwargs["answer"][2]) is int
    assert kwargs["level"] == [1, 2, None, 3] and kwargs["question"] == [p["question"] for p in problems]

    scores = grpo_scores(
        model, tokenizer=trainer.processing_class, rows=dataset, reward_funcs=[_recording(calls)], max_new_tokens=2
    )
    assert scores.prompts == 4 and {k: calls[1][k] for k in kwargs} == kwargs  # the checks pass the same columns

    arithmetic = _prompts(4)  # the package's own problems: 'answer': 134 reaches the rewards as 134
    assert all(type(a) is int for a in arithmetic["answer"]) and set(arithmetic.column_names) >= {"kind", "operands"}
    assert correct_number(None, ["#### 134", "134"], answer=[134, "134"]) == [1.0, 1.0]


def test_a_csvs_numeric_columns_reach_the_rewards_as_numbers(tmp_path):
    """A CSV holds text only: its numeric answer column reached the rewards as "4", so a reward comparing with the
    number scored 0 (issue 40 adversarial test). A column whose every non-empty cell is a JSON number is read as
    numbers, as a JSON file holds them; a column with any other cell, and the prompt column, stay text."""
    from tinyllama_ft.data.grpo_prompts import grpo_prompts, load_prompt_rows

    path = tmp_path / "q.csv"
    lines = [
        "question,solution,level,code,ratio",
        "1,4,1,007,3/4",
        "What is 2.5 * 2?,5.0,,12,2",
        "What is 10 - 3?,-7e0,3,5,1",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows, _, _ = load_prompt_rows(str(path), answer_column="solution")
    assert [r["solution"] for r in rows] == [4, 5.0, -7.0] and type(rows[0]["answer"]) is int
    assert [r["level"] for r in rows] == [1, None, 3]
    assert [r["code"] for r in rows] == ["007", "12", "5"] and [r["ratio"] for r in rows] == ["3/4", "2", "1"]
    assert rows[0]["question"] == "1"  # the prompt stays text
    dataset = grpo_prompts(rows, suffix="")
    assert dataset["answer"] == [4, 5.0, -7.0] and dataset["solution"] == [4, 5.0, -7.0]


def test_columns_of_mixed_kinds_reach_the_rewards_as_read():
    """Arrow holds one type per column: a column mixing numbers and text, ints and floats, bools and numbers, or
    holding dicts is stored as JSON and read back as it was (a text "134" stays text, 5 stays an int); a column of one
    kind keeps Arrow's type; None stays None; a column some rows lack is None there. The held-out split (a
    ``train_test_split``) and ``to_list`` read the same values."""
    from datasets.features import Json

    from tinyllama_ft.data.grpo_prompts import grpo_prompts

    rows = [
        {"prompt": "a", "answer": 5, "weight": 1, "flag": True, "tags": ["x"], "meta": {"k": 1}, "level": 1},
        {"prompt": "b", "answer": "134", "weight": 2.5, "flag": 1, "meta": {"j": [1, "y"]}, "level": 2},
        {"prompt": "c", "answer": None, "weight": None, "flag": None, "tags": None, "meta": None, "level": None},
        {"prompt": "d", "answer": 2.5, "weight": 3, "flag": False, "tags": [], "meta": {}, "level": 4},
    ]
    dataset = grpo_prompts(rows, suffix="")
    expected = {name: [row.get(name) for row in rows] for name in ("answer", "weight", "flag", "meta", "level")}
    for name, values in expected.items():
        assert [type(v) for v in dataset[name]] == [type(v) for v in values] and list(dataset[name]) == values
    assert list(dataset["tags"]) == [["x"], None, None, []]
    assert isinstance(dataset.features["answer"], Json) and not isinstance(dataset.features["level"], Json)
    split = dataset.train_test_split(test_size=2, seed=0)
    read = [*split["test"]["answer"], *split["train"]["answer"]]
    assert sorted(map(repr, read)) == sorted(map(repr, expected["answer"]))
    assert dataset.to_list()[1]["answer"] == "134" and dataset[0]["answer"] == 5


def test_a_column_the_rewards_could_not_receive_by_its_name_is_refused_naming_it():
    from tinyllama_ft.data.grpo_prompts import check_prompt_rows

    with pytest.raises(ValueError, match="q.jsonl: column 'completions': TRL passes every reward an argument of"):
        check_prompt_rows([{"question": "q", "answer": 1, "completions": 2}], source="q.jsonl")
    with pytest.raises(ValueError, match="a column 'answer' besides answer_column='solution'"):
        check_prompt_rows([{"question": "q", "solution": 1, "answer": 2}], answer_column="solution")
    with pytest.raises(ValueError, match="a column 'prompt' besides prompt_column='question'"):
        check_prompt_rows([{"question": "q", "answer": 1, "prompt": "p"}])


# --- zero-std groups (issue 40, item 5) ------------------------------------------------------------------------------


def test_zero_std_groups_counts_equal_summed_rewards_within_a_relative_tolerance():
    """Eight completions each scoring 1 and 1, weighted 1 and 0.2: every sum is 1.2, and the float32 spread TRL
    tests for exactly 0 is 1.3e-7, so TRL's figure says 0%; ours says 100%."""
    import torch
    from trl.trainer.utils import nanstd

    from tinyllama_ft.train.grpo_trainer import zero_std_share

    weights = torch.tensor([1.0, 0.2])
    same = torch.ones(8, 2)
    summed = (same * weights).nansum(dim=1).view(-1, 8)
    assert not torch.isclose(nanstd(summed, dim=1), torch.zeros(1)).item()  # TRL's test misses this group
    assert zero_std_share(same, weights, 8) == 1.0
    assert zero_std_share(torch.full((8, 1), 3.0), torch.ones(1), 8) == 1.0  # a constant reward
    mixed = torch.cat([same, torch.tensor([[1.0, 1.0]] * 7 + [[0.0, 1.0]])])  # a second group with one differing
    assert zero_std_share(mixed, weights, 8) == 0.5
    large = torch.full((4, 1), 1e6) + torch.tensor([[0.0], [5.0], [0.0], [0.0]])  # std 2.2 > 1e-6 x 1e6: not equal
    assert zero_std_share(large, torch.ones(1), 4) == 0.0
    unscored = torch.tensor([[float("nan")] * 2] * 4 + [[1.0, float("nan")], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    assert zero_std_share(unscored, weights, 4) == 0.5  # a group no reward scored has nothing to learn
    with pytest.raises(ValueError, match="7 completions are not whole groups of 4"):
        zero_std_share(torch.ones(7, 1), torch.ones(1), 4)


def _one(prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
    return [1.0] * len(completions)


def _also_one(prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
    return [1.0] * len(completions)


@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_a_step_whose_completions_all_score_the_same_logs_100_percent_zero_std_groups(tmp_path, capsys):
    """The demo's weights 1 / 0.2 on rewards every completion scores 1: the step line, the log history and
    ``reward_history`` say 100% (at the starting commit the line showed TRL's 0%)."""
    from chat_fixtures import cpu_trl_cannot_train

    from tinyllama_ft.train.grpo_trainer import reward_history

    if cpu_trl_cannot_train():
        pytest.skip("TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
    trainer, _ = _tiny_grpo(
        tmp_path,
        rewards=[_one, _also_one],
        reward_weights="1,0.2",
        num_generations=8,
        per_device_train_batch_size=8,
        max_completion_length=8,
        max_steps=1,
        logging_steps=1,
        progress=True,
    )
    trainer.train()
    [step] = reward_history(trainer.state.log_history, ["_one", "_also_one"])
    assert step["zero_std_groups"] == 1.0 and step["reward"] == pytest.approx(1.2)
    assert "zero-std groups 100%" in capsys.readouterr().out


# --- a GRPO adapter's prompt after the run (issue 40, item 4; the whole run: tests/test_grpo_run.py) -----------------


def test_the_recorded_suffix_reaches_chat_answers_and_both_ollama_templates():
    """A model ``load_adapter`` returns carries its record: chat answers ask as the run asked (the same greedy ids as
    the suffixed question on a model without it); the Alpaca ``TEMPLATE`` and a chat model's one-turn ``TEMPLATE``
    (rendered from its suffixed chat template) give the run's prompt."""
    from chat_fixtures import smollm2_tokenizer, tiny_model

    from tinyllama_ft.data.alpaca_prompts import format_prompt
    from tinyllama_ft.data.formats import recorded_data_format
    from tinyllama_ft.data.grpo_prompts import LAYOUT_SUFFIX
    from tinyllama_ft.export.ollama import modelfile_text
    from tinyllama_ft.infer.chat_generation import chat_generate
    from tinyllama_ft.models.chat_templates import chat_prompt
    from tinyllama_ft.models.run_record import RECORD_ATTRIBUTE, adapter_record, with_suffix

    question = "Ana has 3 apples and gets 4 more. How many apples does Ana have now?"
    tokenizer = smollm2_tokenizer()
    model = tiny_model("llama", tokenizer, seed=1)
    expected = chat_generate(model, tokenizer, with_suffix(question, LAYOUT_SUFFIX), max_new_tokens=6, return_ids=True)
    record = {"dataset_format": "messages", "prompt_suffix": LAYOUT_SUFFIX}
    setattr(model, RECORD_ATTRIBUTE, record)
    assert chat_generate(model, tokenizer, question, max_new_tokens=6, return_ids=True) == expected

    class Grpo:  # what adapter_record reads of a GRPO run's format
        name, prompt_suffix = "messages", LAYOUT_SUFFIX

    assert adapter_record(FinetuneConfig(method="grpo"), data_format=Grpo())["prompt_suffix"] == LAYOUT_SUFFIX
    assert "prompt_suffix" not in adapter_record(FinetuneConfig())
    assert recorded_data_format({}).prompt_suffix == ""

    body, stops = recorded_data_format({"prompt_suffix": LAYOUT_SUFFIX}).ollama_template(tokenizer)
    alpaca = modelfile_text(gguf_name="m.gguf", template=body, stops=stops)
    body = alpaca.split('TEMPLATE """')[1].split('"""')[0]
    assert body.replace("{{ .Prompt }}", question).replace("{{ .Response }}", "") == format_prompt(
        question + LAYOUT_SUFFIX, "", ""
    )
    run_prompt = chat_prompt(tokenizer, with_suffix(question, LAYOUT_SUFFIX))
    chat_format = recorded_data_format({**record, "stop_token_ids": [tokenizer.convert_tokens_to_ids("<|im_end|>")]})
    tokenizer.chat_template = chat_format.exported_chat_template(tokenizer)
    assert chat_prompt(tokenizer, question) == run_prompt  # what the exported model's chat template renders
    assert chat_format.exported_chat_template(tokenizer) == tokenizer.chat_template  # suffixed once only
    body, stops = chat_format.ollama_template(tokenizer)
    chat = modelfile_text(gguf_name="m.gguf", template=body, stops=stops)
    body = chat.split('TEMPLATE """')[1].split('"""')[0]
    assert body.replace("{{ .Prompt }}", question).replace("{{ .Response }}", "") == run_prompt
    assert 'PARAMETER stop "<|im_end|>"' in chat

"""Small builders shared by the CPU tests: a LoRA-wrapped stories260K and a formatted Alpaca slice."""

from __future__ import annotations

import json
from pathlib import Path


def alpaca_rows(path: Path, n: int) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def reference_kind(trainer) -> str:
    """What a built trainer's log-probabilities are compared with, read from the trainer itself, for the tests to
    hold the plan's ``reference`` (``methods.Method.reference_of``, decided before the model loads) against."""
    if getattr(trainer, "beta", None) == 0:
        return "none (beta 0)"
    if not hasattr(trainer, "ref_model"):  # ORPO's and CPO's trainers: no reference
        from tinyllama_ft.config.methods import METHODS

        (m,) = (m for m in METHODS.values() if m.resolve("config") is type(trainer.args))
        return f"none ({m.shown})"
    if trainer.ref_model is not None:
        return "separate reference model"
    model = trainer.accelerator.unwrap_model(trainer.model)
    if "ref" in getattr(model, "peft_config", {}):
        return "frozen copy of the starting adapter ('ref')"
    return "base with adapters disabled"


def stories_lora(stories_dir: Path, hardware, max_seq_length: int = 512, seed: int = 3407):
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model

    model, tokenizer = load_model(
        str(stories_dir),
        max_seq_length=max_seq_length,
        dtype=None,
        load_in_4bit=False,
        backend="transformers",
        hardware=hardware,
    )
    return add_lora(model, gradient_checkpointing=False, seed=seed), tokenizer


def trained_stories_adapter(stories_dir: Path, out_dir: Path, hardware=None) -> str:
    """A saved stories260K adapter whose LoRA B matrices are non-zero (as after training), so merging matters."""
    import torch

    from tinyllama_ft.models.adapters import save_adapter
    from tinyllama_ft.machine.hardware import Hardware

    model, tokenizer = stories_lora(stories_dir, hardware or Hardware())
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return save_adapter(model, tokenizer, str(out_dir / "lora_model"))


def text_dataset(rows: list[dict], tokenizer, template: str = "alpaca"):
    import datasets

    from tinyllama_ft.data.alpaca_prompts import make_formatting_func

    ds = datasets.Dataset.from_list([{k: r[k] for k in ("instruction", "input", "output")} for r in rows])
    return ds.map(make_formatting_func(tokenizer.eos_token, template=template), batched=True)


def sft_trainer(model, tokenizer, train_dataset, output_dir, eval_dataset=None, **fields):
    """A real ``build_trainer`` on the CPU with ``FinetuneConfig(**fields)`` (no W&B, no worker processes)."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.trainers import build_trainer

    cfg = FinetuneConfig(report_to="none", output_dir=str(output_dir), dataset_num_proc=None, **fields)
    return build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        cfg=cfg,
        plan=plan_run(cfg, Hardware()),
    )


#: Answer prefixes that meet the header's / prompt's last characters at a turn boundary: with SmolLM2's byte-level
#: BPE "\n" + " " becomes one token 'ĊĠ', "\n" + "\n" 'ĊĊ'; after a header ending in a space every vocabulary
#: merges that space with the answer's first word ('ĠThe', '▁The').
LEADING_WHITESPACE = ("\n", " \n", "  ", "\n\n", "   ", "\t", " ", "\n \n ", "")


def expected_boundary_mask(offsets, regions) -> list[int]:
    """Independent reader of the turn-boundary rule: 1 for each token whose ``(start, end)`` span overlaps one of
    the supervised character ``regions`` ``[(lo, hi), ...]`` (a zero-width span counts as the character at its
    start), so a token holding the prompt's end and the answer's start is supervised."""
    out = []
    for s, e in offsets:
        e = max(e, s + 1)
        out.append(int(any(s < hi and e > lo for lo, hi in regions)))
    return out


def default_sigint() -> None:
    """A ``subprocess.Popen`` ``preexec_fn``: Ctrl-C's default action in the child, as a terminal's command has it (a
    test runner started in the background ignores SIGINT, an ignored signal stays ignored in its children, and Python
    then raises no KeyboardInterrupt)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def whole_checkpoint_steps(folder: Path) -> list[int]:
    """The steps of ``folder``'s whole checkpoints (``trainer_state.json``, which the trainer writes last), ascending."""
    return sorted(int(p.parent.name.split("-")[1]) for p in Path(folder).glob("checkpoint-*/trainer_state.json"))


def wait_for_a_whole_checkpoint(folder: Path, process, timeout_s: float = 600) -> None:
    """Poll until ``folder`` holds a whole checkpoint of any step (the trainer rotates them: save_total_limit 2), the
    process ends, or ``timeout_s`` seconds pass."""
    import time

    deadline = time.monotonic() + timeout_s
    while not whole_checkpoint_steps(folder) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)

"""What every benchmark configuration shares: the data, the clock and the result line.

Imports nothing from tinyllama_ft, so the article's recipe (article_recipe.py) stays independent of the
package it is compared with. It imports transformers: a script that uses Unsloth imports ``unsloth``
before this module.

Measured as shared/tools/reference_recipe_gpu.py measures, so the two agree within noise:

* time: ``time.time()`` after ``torch.cuda.synchronize()`` at the end of every optimizer step; the timed
  window runs from the end of step ``warmup + 1`` (index ``warmup``) to the end of the last step;
* tokens: the non-padding tokens fed to the model, the trainer's ``state.num_input_tokens_seen`` with
  ``include_num_input_tokens_seen="non_padding"``, read at the same step ends (one way for every
  configuration; with packed windows it is ~99% of batch x accumulation x seq, the reference's count);
* memory: ``torch.cuda.max_memory_allocated()`` over ``train.()``, after resetting the peak.
"""

import inspect
import json
import tempfile
import time

import torch
from datasets import Dataset
from transformers import TrainerCallback

#: The article's Alpaca template (shared/ARTICLE.md), Input block always, whether or not input is empty.
ALPACA_PROMPT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{}\n\n### Input:\n{}\n\n### Response:\n{}"
)
#: Optimizer steps left out of the timed window (compilation, allocator and kernel autotuning warm-up).
WARMUP = 3


def recipe_sft_config(name: str, steps: int, seq: int, bf16: bool, **overrides):
    """``trl.SFTConfig`` with the article's cell-6/7 values, for configurations (1) and (2) alike.

    Ported to the installed TRL: ``max_length`` (was ``max_seq_length``), ``warmup_steps=0.1`` where
    ``warmup_ratio`` is gone, no eval / W&B / checkpoints (training is what is timed), ``max_steps=steps``
    (was one epoch), and the non-padding token counter the measurement reads. ``overrides`` replace
    values (benchmarks/levers.py changes one lever at a time); ``gradient_checkpointing`` is passed under
    the installed spelling.
    """
    from trl import SFTConfig

    warmup = (
        {"warmup_ratio": 0.1}
        if "warmup_ratio" in inspect.signature(SFTConfig.__init__).parameters
        else {"warmup_steps": 0.1}
    )
    values = dict(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        **warmup,
        max_steps=steps,
        learning_rate=2e-5,
        fp16=not bf16,
        bf16=bf16,
        optim="adamw_8bit",
        weight_decay=0.1,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir=tempfile.mkdtemp(prefix=f"bench-{name}-"),
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        max_length=seq,
        packing=True,
        dataset_text_field="text",
        dataset_num_proc=2,
        gradient_checkpointing=True,
        include_num_input_tokens_seen="non_padding",
    )
    values.update(overrides)
    params = inspect.signature(SFTConfig.__init__).parameters
    if "gradient_checkpointing" not in params and "activation_checkpointing" in params:
        values["activation_checkpointing"] = values.pop("gradient_checkpointing")
    return SFTConfig(**values)


def read_rows(path: str) -> Dataset:
    """Alpaca rows (``instruction``, ``input``, ``output``) of a .jsonl file as a ``datasets.Dataset``."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return Dataset.from_dict({k: [r.get(k) or "" for r in rows] for k in ("instruction", "input", "output")})


def alpaca_texts(eos_token: str):
    """A batched ``Dataset.map`` function: rows -> ``{"text": template filled + eos_token}`` (the article's cell 4)."""

    def formatting_func(batch):
        rows = zip(batch["instruction"], batch["input"], batch["output"])
        return {"text": [ALPACA_PROMPT.format(ins, inp, out) + eos_token for ins, inp, out in rows]}

    return formatting_func


class Clock(TrainerCallback):
    """Records, at each optimizer step's end, the time (after a CUDA sync) and the tokens seen; and each logged loss."""

    def __init__(self):
        self.t, self.tokens, self.loss = [], [], []

    def on_step_end(self, args, state, control, **kwargs):
        torch.cuda.synchronize()
        self.t.append(time.time())
        self.tokens.append(state.num_input_tokens_seen)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.loss.append(logs["loss"])


def train_and_report(trainer, clock: Clock, name: str, seq: int, bs: int, ga: int, warmup: int = WARMUP) -> dict:
    """Train, then print one ``RESULT {json}`` line (and return the dict) from ``clock``'s records.

    Raises:
        RuntimeError: the trainer does not count non-padding tokens, or ran fewer than 2 steps.
    """
    if trainer.args.include_num_input_tokens_seen != "non_padding":
        raise RuntimeError("set include_num_input_tokens_seen='non_padding': tokens are counted one way for all")
    torch.cuda.reset_peak_memory_stats()
    start = time.time()
    trainer.train()
    wall = time.time() - start
    if len(clock.t) < 2:
        raise RuntimeError(f"{len(clock.t)} steps recorded: the timed window needs at least 2")
    skip = min(warmup, len(clock.t) - 2)
    tokens = clock.tokens[-1] - clock.tokens[skip]
    if tokens <= 0:
        raise RuntimeError("state.num_input_tokens_seen did not grow during training: nothing to time")
    result = dict(
        name=name,
        tokens_per_s=round(tokens / (clock.t[-1] - clock.t[skip]), 1),
        peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
        loss_first=clock.loss[0] if clock.loss else None,
        loss_last=clock.loss[-1] if clock.loss else None,
        steps=len(clock.t),
        seq=seq,
        bs=bs,
        ga=ga,
        train_wall_s=round(wall, 1),
    )
    if trainer.args.world_size > 1:  # DDP: tokens above are all processes'; memory is per GPU, rank 0 reports
        peaks = trainer.accelerator.gather(torch.tensor([result["peak_gib"]], device=trainer.args.device)).tolist()
        result.update(processes=trainer.args.world_size, peak_gib_per_gpu=peaks, peak_gib=max(peaks))
        if not trainer.is_world_process_zero():
            return result
    print("RESULT " + json.dumps(result), flush=True)
    return result

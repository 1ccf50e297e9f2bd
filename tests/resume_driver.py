"""One short fine-tuning run through the package's own helpers, as the notebook does (cells 2-7).

Run by ``test_resume.py`` in a subprocess so that the test can SIGKILL it mid-run, as a Colab disconnect
does, and run it again with ``--resume``. Writes ``--result`` (JSON): the logs this process emitted (one
dict per ``on_log``, with ``"step"``), the learning rate each optimizer step took (``"used_lr"``, by step) and
``train_and_evaluate``'s result. ``test_continuing.py`` calls ``main`` in-process.

``--step-delay S --delay-after N`` sleeps S seconds after every optimizer step past step N (test hook: it
gives the killer time to strike between checkpoint N and the end of the run; it does not change the
numbers trained).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def command(model, data, output_dir, result, *extra: str, **flags) -> list[str]:
    """This driver's command line: ``python resume_driver.py`` with the four paths, ``flags`` as options
    (``max_steps=8`` -> ``--max-steps 8``) and ``extra`` last; ``command(...)[2:]`` is ``main``'s ``argv``."""
    argv = [sys.executable, os.path.abspath(__file__), "--model", str(model), "--data", str(data)]
    argv += ["--output-dir", str(output_dir), "--result", str(result)]
    for name, value in flags.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv + list(extra)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--rows", type=int, default=240)
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument("--save-steps", type=int, default=4)
    p.add_argument("--eval-steps", type=int, default=6)
    p.add_argument("--max-seq-length", type=int, default=256)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--overwrite-output-dir", action="store_true")
    p.add_argument("--learning-rate", type=float, default=2e-3)
    p.add_argument("--lr-scheduler-type", default="linear")
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=3407)
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--step-delay", type=float, default=0.0)
    p.add_argument("--delay-after", type=int, default=0)
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)  # the test runs two of these side by side on a 2-core CI machine

    from transformers import TrainerCallback

    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.instructions import load_instruction_data, split_train_eval
    from tinyllama_ft.data.fingerprint import data_fingerprint
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.machine.lock import release_run_lock
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.data.alpaca_prompts import make_formatting_func
    from tinyllama_ft.train.output_dir import prepare_output_dir
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.data.eos_check import eos_supervision
    from tinyllama_ft.train.trainers import build_trainer, training_plan
    from tinyllama_ft.train.loop import train_and_evaluate

    cfg = FinetuneConfig(
        model_name=a.model,
        dataset=a.data,
        max_seq_length=a.max_seq_length,
        backend="transformers",
        load_in_4bit=False,
        gradient_checkpointing=False,
        learning_rate=a.learning_rate,
        lr_scheduler_type=a.lr_scheduler_type,
        warmup_ratio=a.warmup_ratio,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        lora_dropout=a.lora_dropout,
        max_steps=a.max_steps,
        save_steps=a.save_steps,
        eval_steps=a.eval_steps,
        test_size=0.05,
        report_to="none",
        dataset_num_proc=None,
        seed=a.seed,
        output_dir=a.output_dir,
        resume=a.resume,
        overwrite_output_dir=a.overwrite_output_dir,
    )
    rows, _ = load_instruction_data(
        cfg.dataset,
        split=cfg.dataset_split,
        config=cfg.dataset_config,
        instruction_column=cfg.instruction_column,
        input_column=cfg.input_column,
        output_column=cfg.output_column,
        strict=cfg.strict,
    )
    rows = rows.select(range(min(a.rows, len(rows))))
    prepare_output_dir(cfg, data_fingerprint=data_fingerprint(rows))  # the rows as they train
    hardware = Hardware()
    model, tokenizer = load_model(
        cfg.model_name,
        max_seq_length=cfg.max_seq_length,
        dtype=cfg.dtype,
        load_in_4bit=cfg.load_in_4bit,
        backend=cfg.backend,
        hardware=hardware,
    )
    model = add_lora(
        model,
        lora_r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        lora_bias=cfg.lora_bias,
        target_modules=cfg.target_modules,
        use_rslora=cfg.use_rslora,
        gradient_checkpointing=cfg.gradient_checkpointing,
        seed=cfg.seed,
    )
    rows = rows.map(make_formatting_func(tokenizer.eos_token, template=cfg.template), batched=True)
    train_dataset, eval_dataset = split_train_eval(rows, test_size=cfg.test_size, seed=cfg.seed)

    logged: list[dict] = []
    used_lr: dict[int, float] = {}  # the learning rate each optimizer step took, by step

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append({"step": state.global_step, **(logs or {})})

        def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            used_lr[state.global_step + 1] = optimizer.param_groups[0]["lr"]

        def on_step_end(self, args, state, control, **kwargs):
            if a.step_delay and state.global_step > a.delay_after:
                time.sleep(a.step_delay)

    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        cfg=cfg,
        callbacks=[Record()],
        plan=plan_run(cfg, hardware),
    )
    training_plan(trainer), eos_supervision(trainer)  # as the notebook's cell 6: iterates a batch before training
    results = train_and_evaluate(trainer, resume=cfg.resume)
    release_run_lock(cfg.output_dir)  # the run's end (the notebook's last cell)
    with open(a.result, "w", encoding="utf-8") as f:
        json.dump({"logged": logged, "used_lr": used_lr, "results": results}, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

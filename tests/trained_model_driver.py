"""Train a few steps on one execution plan, then call every helper that takes a model on the model just
trained, in the same process, as a user copying the notebook's (or Unsloth's) cells does.

Plans (``--plan``): ``cpu`` (the CPU plan: transformers, SDPA), ``bf16_fast`` (a bf16 GPU's fast plan:
transformers 4-bit + PEFT, flex attention, Liger), ``t4_unsloth`` (the T4 stand-in: capability 7.5
injected, fp16, 15 GiB cap, the fast plan -> Unsloth). Each GPU plan runs in its own process (Unsloth
patches transformers for the whole process): ``tests/gpu/test_gpu_trained_model.py`` starts them.

Writes ``--result`` (JSON): the plan, every helper call's outcome (``"ok"`` or the error's type and
message), the attention implementation before/after generating, and the answers. ``--repro`` first
calls transformers' ``generate`` directly on the trained model as the package did before (flex attention
left on) and records what happens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: helpers

QUESTIONS = ["Give three tips for staying healthy.", "What is the capital of France?"]


def run(
    plan: str,
    model_dir: str,
    data: str,
    out: str,
    steps: int = 3,
    rows: int = 240,
    max_seq_length: int = 512,
    repro: bool = False,
    eval_rows: int = 0,
) -> dict:
    """Train ``steps`` steps on ``plan``, call the helpers, return the record (see the module docstring).

    ``eval_rows`` > 0: that many further rows are an eval set, evaluated before training, after every step
    (``eval_steps=1``: the Trainer's own eval loop between training steps) and after training."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.machine.hardware import Hardware, cap_gpu_memory, detect_hardware
    from tinyllama_ft.train.plan import plan_run

    real = detect_hardware()
    hardware = {
        "cpu": Hardware(),
        "bf16_fast": real,
        "t4_unsloth": Hardware(
            cuda=True, capability=(7, 5), gpu_name="T4 stand-in", total_memory_gib=real.total_memory_gib
        ),
    }[plan]
    cfg = FinetuneConfig(
        model_name=model_dir,
        max_seq_length=max_seq_length,
        report_to="none",
        max_steps=steps,
        save_steps=10**6,
        output_dir=os.path.join(out, "run"),
        dataset_num_proc=None,
        long_rows="truncate",
        gpu_memory_cap_gib=15 if plan == "t4_unsloth" else 0,
        dtype="float32" if plan == "cpu" else None,
        eval_steps=1,
    )
    run_plan = plan_run(cfg, hardware, budget_gib=15 if plan == "t4_unsloth" else None)
    record: dict = {
        "plan": plan,
        "run_plan": run_plan.summary(),
        "backend": run_plan.backend,
        "dtype": run_plan.dtype,
        "attn_implementation": run_plan.attn_implementation,
        "use_liger_kernel": run_plan.use_liger_kernel,
        "calls": {},
        "answers": {},
    }
    if run_plan.backend == "unsloth":
        import unsloth  # noqa: F401  before transformers, as the notebook's Unsloth runs do
    cap_gpu_memory(cfg.gpu_memory_cap_gib, real)

    from helpers import alpaca_rows, text_dataset
    from tinyllama_ft.models.adapters import load_adapter, save_adapter
    from tinyllama_ft.data.eos_check import eos_supervision
    from tinyllama_ft.infer.core import GRAPH_FAILED, prepare_for_inference
    from tinyllama_ft.infer.generation import generate, stream
    from tinyllama_ft.models.attention import attention_implementation
    from tinyllama_ft.models.lora import add_lora, trainable_parameters
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.train.trainers import build_trainer, training_plan
    from tinyllama_ft.train.loop import train_and_evaluate

    load = dict(
        max_seq_length=cfg.max_seq_length,
        dtype=run_plan.dtype,
        load_in_4bit=run_plan.load_in_4bit,
        backend=run_plan.backend,
        hardware=hardware,
    )
    model, tokenizer = load_model(cfg.model_name, attn_implementation=run_plan.attn_implementation, **load)
    model = add_lora(model, gradient_checkpointing=run_plan.gradient_checkpointing, backend=run_plan.backend)
    every = alpaca_rows(Path(data), rows + eval_rows)
    train = text_dataset(every[:rows], tokenizer)
    held_out = text_dataset(every[rows:], tokenizer) if eval_rows else None
    trainer = build_trainer(
        model=model, tokenizer=tokenizer, train_dataset=train, eval_dataset=held_out, cfg=cfg, plan=run_plan
    )
    record["train"] = {k: v for k, v in train_and_evaluate(trainer).items() if k != "log_history"}

    def call(name, fn):
        try:
            value = fn()
            record["calls"][name] = "ok"
            if isinstance(value, list):
                record["answers"][name] = value
            return value
        except Exception as e:  # noqa: BLE001  recorded: the test says which helper failed and how
            record["calls"][name] = f"{type(e).__name__}: {str(e)[:600]}"
            traceback.print_exc()
            return None

    record["attention_before"] = attention_implementation(model)
    from tinyllama_ft.models.loading import loaded_backend

    record["loaded_backend"] = loaded_backend(model)  # what prepare_for_inference reads
    record["for_inference_calls"] = 0
    if run_plan.backend == "unsloth":  # count Unsloth's own for_inference calls (the real one still runs)
        from unsloth import FastLanguageModel

        real_for_inference = FastLanguageModel.for_inference

        def counted(*args, **kwargs):
            record["for_inference_calls"] += 1
            return real_for_inference(*args, **kwargs)

        FastLanguageModel.for_inference = counted
    if repro:  # what stream() did before the fix: transformers' generate on the model as trained
        import torch
        from transformers import TextStreamer

        def raw_generate(prompts):
            tokenizer.padding_side = "left"
            batch = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
            tokenizer.padding_side = "right"
            model.eval()
            with torch.inference_mode():
                out_ids = model.generate(
                    **batch,
                    max_new_tokens=24,
                    do_sample=False,
                    streamer=TextStreamer(tokenizer) if len(prompts) == 1 else None,
                    pad_token_id=tokenizer.pad_token_id,
                )
            return out_ids[:, batch["input_ids"].shape[1] :].tolist()

        import signal

        def bounded(fn, seconds=120):  # a compile that runs away must not eat the GPU session
            def alarm(*_):
                raise TimeoutError(f"still running after {seconds} s")

            signal.signal(signal.SIGALRM, alarm)
            signal.alarm(seconds)
            try:
                return fn()
            finally:
                signal.alarm(0)

        call("repro_raw_generate_two_prompts", lambda: bounded(lambda: raw_generate(QUESTIONS)))
        call("repro_raw_generate_one_prompt_streamed", lambda: bounded(lambda: raw_generate(QUESTIONS[:1])))
    call("generate_empty", lambda: generate(model, tokenizer, [], max_new_tokens=24))
    call("generate_batch", lambda: generate(model, tokenizer, QUESTIONS, max_new_tokens=24))
    call("generate_one", lambda: generate(model, tokenizer, QUESTIONS[0], max_new_tokens=24))
    call("stream_auto", lambda: stream(model, tokenizer, QUESTIONS, max_new_tokens=24))
    call("stream_plain", lambda: stream(model, tokenizer, QUESTIONS, max_new_tokens=24, decode="plain"))
    call(
        "stream_sampled",
        lambda: stream(model, tokenizer, QUESTIONS[:1], max_new_tokens=16, do_sample=True, temperature=0.8, top_p=0.9),
    )
    record["attention_after"] = attention_implementation(model)
    call("prepare_for_inference", lambda: prepare_for_inference(model))
    call("trainable_parameters", lambda: list(trainable_parameters(model)))
    call("training_plan", lambda: training_plan(trainer))
    call("eos_supervision", lambda: eos_supervision(trainer))
    adapter_dir = call("save_adapter", lambda: save_adapter(model, tokenizer, os.path.join(out, "lora_model")))
    if adapter_dir:
        for merged in (True, False):
            tag = "merged" if merged else "adapter"
            loaded = call(f"load_adapter_{tag}", lambda: list(load_adapter(adapter_dir, merged=merged, **load)))
            if loaded:
                reloaded, reloaded_tokenizer = loaded
                record[f"{tag}_type"] = type(reloaded).__name__
                call(
                    f"{tag}_generate_batch",
                    lambda: generate(reloaded, reloaded_tokenizer, QUESTIONS, max_new_tokens=24),
                )
                call(f"{tag}_stream_auto", lambda: stream(reloaded, reloaded_tokenizer, QUESTIONS, max_new_tokens=24))
                call(
                    f"{tag}_stream_plain",
                    lambda: stream(reloaded, reloaded_tokenizer, QUESTIONS, max_new_tokens=24, decode="plain"),
                )
                record[f"{tag}_graph_failed"] = GRAPH_FAILED.get(reloaded)
                del reloaded, loaded
    # training goes on after generating (flex attention restored)
    trainer.args.max_steps = steps + 1
    call("train_again", lambda: [trainer.train(resume_from_checkpoint=None).global_step])
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True, choices=("cpu", "bf16_fast", "t4_unsloth"))
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--max-seq-length", type=int, default=1024)
    p.add_argument("--repro", action="store_true")
    p.add_argument("--eval-rows", type=int, default=0)
    a = p.parse_args(argv)
    record = run(
        a.plan, a.model, a.data, a.out, a.steps, max_seq_length=a.max_seq_length, repro=a.repro, eval_rows=a.eval_rows
    )
    with open(a.result, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, default=str)
    print(json.dumps(record["calls"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GRPO rollout speed (issue 31 item 6): TRL's rollout options on the TinyLlama-shaped model, each in its own process.

Each variant runs ``--steps`` GRPO optimizer steps through ``train.grpo_trainer.build_grpo_trainer`` on the package's
arithmetic prompts and records rollout tokens/s (completion tokens over the time in TRL's ``_generate_single_turn``),
step times and peak GiB; ``t4`` is the T4 stand-in (fp16, 15 GiB cap, the package's GRPO defaults, plan_run's split).
Random weights never sample the end token, so every completion runs to ``max_completion_length``.

    python3 benchmarks/grpo_rollout_gpu.py --model /tmp/tinyllama-shaped --out /tmp/out/grpo_rollout.json \\
        [--variants generate,static,continuous,unsloth,t4] [--prompts 1,16] [--steps 8]

``t4_generate``, ``t4`` and ``t4_transformers`` (issue 44) are the T4 plan with TRL's/Unsloth's ``generate``, with
``rollout_decoder="auto"`` (the fused decoder on Unsloth's 4-bit model), and on transformers + bitsandbytes 4-bit;
``t4_dequant`` is ``t4`` with the base dequantized again each step (the plan's tier where a kept base does not fit).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: variant -> (backend, the GRPOConfig fields it sets; ``CONTINUOUS`` stands for the installed TRL's spelling).
CONTINUOUS = "<continuous batching>"
VARIANTS = {
    "generate": ("transformers", {}),
    "static": ("transformers", {"cache_implementation": "static"}),
    "continuous": ("transformers", {CONTINUOUS: True}),
    "unsloth": ("unsloth", {}),
    "static_compile": ("transformers", {"cache_implementation": "static"}),  # + TRL's disable_compile lifted
    "t4": ("auto", {}),
    "fused": ("transformers", {}),  # rollout_decoder="fused": the package's decoder as TRL's rollout_func
    "t4_generate": ("auto", {}),  # the T4 plan with rollout_decoder="generate": its rollouts before issue 44
    "t4_transformers": ("transformers", {}),  # the T4 plan on transformers + bitsandbytes 4-bit, rollouts "auto"
    "t4_dequant": ("auto", {}),  # as t4, the 4-bit base dequantized again each step (the plan's tier without room)
}
#: The T4 stand-in's variants: the package's plan on a capped fp16 GPU (``--t4-cap-gib``); run once, not per prompts.
T4_VARIANTS = ("t4", "t4_generate", "t4_transformers", "t4_dequant")
#: What each variant does besides the field it sets, read in TRL 1.15's and 1.16's GRPOTrainer.
VARIANT_NOTES = {
    "generate": "model.generate, dynamic cache, padded batch (TRL's GenerationConfig has disable_compile=True)",
    "static": "cache_implementation='static' without compilation (TRL sets disable_compile=True)",
    "continuous": "model.generate_batch (paged cache); TRL casts the model, LoRA weights included, to the bf16/fp16 "
    "training dtype before each rollout",
    "unsloth": "FastLanguageModel + get_peft_model; Unsloth's patched GRPOTrainer, its generate, no vLLM",
    "static_compile": "static cache with TRL's disable_compile lifted: transformers compiles the decoding step",
    "t4": "the package's GRPO defaults, plan_run on a 15 GiB fp16 GPU (backend, 4-bit, split, checkpointing), "
    "rollout_decoder='auto'",
    "t4_generate": "as t4 with rollout_decoder='generate': Unsloth's generate, the T4 plan's rollouts before issue 44",
    "t4_transformers": "as t4 on backend='transformers' (bitsandbytes 4-bit, PEFT, SDPA), rollout_decoder='auto'",
    "t4_dequant": "as t4 with fused_rollout(keep_base=False): the 4-bit base dequantized into the merged copy before "
    "each step's rollouts, as the plan runs where the kept base would pass the budget",
    "fused": "rollout_decoder='fused': train.grpo_rollout.fused_rollout (the fused CUDA-graph decoder, the adapter merged in "
    "place each step, sampled in the graph) as TRL's rollout_func",
}
DEFAULT_VARIANTS = ("generate", "static", "continuous", "unsloth", "fused", "t4")
#: TRL's continuous-batching switch, newest spelling first (``use_transformers_paged`` is deprecated since TRL 1.2).
CONTINUOUS_NAMES = ("use_transformers_continuous_batching", "use_transformers_paged")
NOTE = (
    "random weights: the end token is (almost) never sampled, so every completion runs to max_completion_length "
    "(mean_completion_length and clipped_ratio show it); a real model's rollouts stop earlier"
)


def continuous_field(config_cls) -> str | None:
    """The installed ``GRPOConfig``'s continuous-batching field, or None when it has none."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    return next((n for n in CONTINUOUS_NAMES if n in names), None)


@contextlib.contextmanager
def grpo_config_with(fields: dict):
    """``trl.GRPOConfig`` replaced, while inside, by a subclass that adds ``fields`` to every construction: the
    package's ``build_grpo_trainer`` sets the run's fields, this adds the rollout option being measured."""
    import trl

    if not fields:
        yield
        return
    base = trl.GRPOConfig
    unknown = [k for k in fields if k not in {f.name for f in dataclasses.fields(base)}]
    if unknown:
        raise TypeError(f"the installed {base.__name__} has no field {unknown}")

    class WithRollout(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, **fields})
            self.__class__ = base  # a plain GRPOConfig from here on: the trainer pickles it into checkpoints

    WithRollout.__init__.__signature__ = inspect.signature(base.__init__)  # spelled_kwargs reads the signature
    trl.GRPOConfig = WithRollout
    try:
        yield
    finally:
        trl.GRPOConfig = base


class RolloutClock:
    """Times every call of the trainer's ``rollout_func`` when set, else ``_generate_single_turn`` (each of TRL's own
    rollout paths goes through it; a CUDA sync on both sides) and counts the completion tokens it returns; records
    each optimizer step's end."""

    def __init__(self, trainer, sync):
        self.sync, self.calls, self.step_ends, self.start = sync, [], [], None
        name = "rollout_func" if getattr(trainer, "rollout_func", None) is not None else "_generate_single_turn"
        inner = getattr(trainer, name)

        self.phases: dict[str, float] = {}  # the current call's seconds per phase (``time_fused_phases``)

        def timed(*args, **kwargs):
            sync()
            self.phases = {}
            t0 = time.perf_counter()
            out = inner(*args, **kwargs)
            sync()
            ids = out["completion_ids"] if isinstance(out, dict) else out[0]
            self.calls.append(
                dict(
                    step=trainer.state.global_step,
                    seconds=time.perf_counter() - t0,
                    tokens=sum(len(c) for c in ids),
                    completions=len(ids),
                    **({"phases": {k: round(v, 4) for k, v in self.phases.items()}} if self.phases else {}),
                )
            )
            return out

        setattr(trainer, name, timed)

    def time_fused_phases(self) -> None:
        """Split each fused rollout call (``train.grpo_rollout.fused_rollout``) into ``refresh`` (the adapter written
        into the decoder's weights: ``fused_weights``), ``capture`` (the CUDA graph, first call), ``prefill`` (the
        prompts' forward pass) and ``decode`` (``FusedLlamaDecoder.decode`` whole; its loop = decode - prefill -
        capture), each between CUDA syncs, by wrapping those functions for this process."""
        from tinyllama_ft.infer.fast import graph_decoder
        from tinyllama_ft.train import grpo_rollout

        clock = self

        def wrap(owner, name, phase, when=lambda *a, **k: True):
            inner = getattr(owner, name)

            def timed(*args, **kwargs):
                if not when(*args, **kwargs):
                    return inner(*args, **kwargs)
                clock.sync()
                t0 = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    clock.sync()
                    clock.phases[phase] = clock.phases.get(phase, 0.0) + time.perf_counter() - t0

            setattr(owner, name, timed)

        decoder = graph_decoder.FusedLlamaDecoder
        wrap(grpo_rollout, "fused_weights", "refresh")
        wrap(decoder, "decode", "decode")
        wrap(decoder, "_capture", "capture")
        wrap(decoder, "_forward", "prefill", lambda self, ids, *a, **k: ids.shape[1] > 1)

    def callback(self):
        from transformers import TrainerCallback

        clock = self

        class StepEnds(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                clock.sync()
                clock.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                clock.sync()
                clock.step_ends.append(time.perf_counter())

        return StepEnds()

    def summary(self) -> dict:
        ends = [self.start, *self.step_ends]
        steps = [b - a for a, b in zip(ends, ends[1:])]
        later = [c for c in self.calls if c["step"] >= 1]  # the rollouts of steps 2.. (global_step counts done steps)
        first = [c for c in self.calls if c["step"] == 0]

        def rate(calls):
            seconds = sum(c["seconds"] for c in calls)
            return round(sum(c["tokens"] for c in calls) / seconds, 1) if seconds else None

        phases = {}
        for name in ("refresh", "capture", "prefill", "decode"):
            seen = [c["phases"].get(name, 0.0) for c in later if "phases" in c]
            if seen:
                phases[name] = round(statistics.median(seen), 4)
        if phases:
            phases["loop"] = round(phases["decode"] - phases.get("prefill", 0) - phases.get("capture", 0), 4)
        return dict(
            rollout_tokens_per_s=rate(later) or rate(self.calls),
            rollout_s=[round(c["seconds"], 3) for c in self.calls],
            rollout_phases_median=phases or None,
            rollout_phases=[c.get("phases") for c in self.calls],
            rollout_tokens_per_s_first_step=rate(first),
            rollout_s_per_step=round(statistics.median(c["seconds"] for c in later), 3) if later else None,
            rollout_calls=len(self.calls),
            completions_per_step=self.calls[0]["completions"] if self.calls else None,
            step_s_median=round(statistics.median(steps[1:]), 3) if len(steps) > 1 else None,
            first_step_s=round(steps[0], 3) if steps else None,
            steps=len(steps),
            step_s=[round(s, 3) for s in steps],
        )


def child(spec: dict) -> dict:
    """One variant at one batch: load, add LoRA, build the trainer, train ``spec["steps"]`` steps, measure."""
    variant, backend = spec["variant"], VARIANTS[spec["variant"]][0]
    from tinyllama_ft.config.finetune import FinetuneConfig  # these import neither transformers nor TRL
    from tinyllama_ft.machine.hardware import cap_gpu_memory, detect_hardware
    from tinyllama_ft.train.plan import plan_run

    hardware = detect_hardware()
    common = dict(
        method="grpo",
        model_name=spec["model"],
        dataset_format="alpaca",
        max_steps=spec["steps"],
        report_to="none",
        output_dir=tempfile.mkdtemp(prefix=f"grpo-{variant}-"),
        save_steps=10_000,
        warmup_ratio=0.0,
        logging_steps=1,
    )
    if variant in T4_VARIANTS:  # the package's GRPO defaults on a 15 GiB fp16 GPU: the plan picks split, 4-bit
        cap_gpu_memory(spec["t4_cap_gib"], hardware)
        cfg = FinetuneConfig(
            **common,
            dtype="float16",
            gpu_memory_cap_gib=spec["t4_cap_gib"],
            backend=backend,
            rollout_decoder="generate" if variant == "t4_generate" else "auto",
        )
    else:  # the configured split as it is (recipe "article"), bf16 weights, no checkpointing
        completions = spec["prompts"] * spec["num_generations"]
        cfg = FinetuneConfig(
            **common,
            recipe="article",
            backend=backend,
            dtype=spec["dtype"],
            load_in_4bit=False,
            lora_r=spec["lora_r"],
            lora_alpha=2 * spec["lora_r"],
            num_generations=spec["num_generations"],
            max_completion_length=spec["max_completion_length"],
            per_device_train_batch_size=min(spec["batch_size"], completions),
            gradient_accumulation_steps=max(1, completions // spec["batch_size"]),
            gradient_checkpointing=False,
            max_seq_length=spec["max_seq_length"],
            learning_rate=1e-5,
            rollout_decoder="fused" if variant == "fused" else "generate",
        )
    plan = plan_run(cfg, hardware)
    print(plan.summary(), flush=True)
    if plan.backend == "unsloth":
        import unsloth  # noqa: F401  before transformers, TRL and peft: it patches them (GRPOTrainer included)
    import torch

    from tinyllama_ft.data.arithmetic import arithmetic_problems
    from tinyllama_ft.data.grpo_prompts import check_prompt_rows, drop_long_prompts, grpo_prompts
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.train.grpo_trainer import build_grpo_trainer

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, tokenizer = load_model(
        cfg.model_name,
        max_seq_length=cfg.max_seq_length,
        dtype=plan.dtype,
        load_in_4bit=plan.load_in_4bit,
        backend=plan.backend,
        hardware=hardware,
        attn_implementation=plan.attn_implementation,
    )
    model = add_lora(
        model,
        lora_r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        target_modules=cfg.target_modules,
        gradient_checkpointing=plan.gradient_checkpointing,
        seed=cfg.seed,
        backend=plan.backend,
    )
    prompts_per_step = plan.effective_batch_size // cfg.num_generations
    train, _ = arithmetic_problems(max(400, prompts_per_step * cfg.max_steps))
    dataset = grpo_prompts(check_prompt_rows(train)[0], dataset_format=cfg.dataset_format)
    dataset, _ = drop_long_prompts(dataset, tokenizer, max_prompt_tokens=cfg.max_seq_length - cfg.max_completion_length)

    from trl import GRPOConfig

    fields = dict(VARIANTS[variant][1])
    if CONTINUOUS in fields:
        name = continuous_field(GRPOConfig)
        if name is None:
            raise RuntimeError(f"the installed TRL's GRPOConfig has none of {CONTINUOUS_NAMES}")
        fields[name] = fields.pop(CONTINUOUS)
    with grpo_config_with(fields):
        trainer = build_grpo_trainer(model=model, tokenizer=tokenizer, train_dataset=dataset, cfg=cfg, plan=plan)
    if variant == "static_compile":  # TRL builds its GenerationConfig with disable_compile=True
        trainer.generation_config.disable_compile = False
    if variant == "t4_dequant":
        import functools

        from tinyllama_ft.train.grpo_rollout import fused_rollout

        trainer.rollout_func = functools.partial(fused_rollout, keep_base=False)
    rollout_path = "rollout_func" if getattr(trainer, "rollout_func", None) is not None else "generate"
    clock = RolloutClock(trainer, sync)
    if rollout_path == "rollout_func" and spec.get("phases"):
        clock.time_fused_phases()
    trainer.add_callback(clock.callback())
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    logs = [e for e in trainer.state.log_history if "completions/mean_length" in e]
    gib = 2**30
    return dict(
        name=spec["name"],
        variant=variant,
        rollout_fields=fields,
        how=VARIANT_NOTES[variant],
        trainer_class=type(trainer).__name__,
        rollout_path=rollout_path,
        backend=plan.backend,
        dtype=plan.dtype,
        load_in_4bit=plan.load_in_4bit,
        lora_r=cfg.lora_r,
        prompts_per_step=prompts_per_step,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        per_device_train_batch_size=plan.per_device_train_batch_size,
        gradient_accumulation_steps=plan.gradient_accumulation_steps,
        gradient_checkpointing=plan.gradient_checkpointing,
        reference=plan.reference,
        **clock.summary(),
        mean_completion_length=round(statistics.mean(e["completions/mean_length"] for e in logs), 1) if logs else None,
        clipped_ratio=round(statistics.mean(e.get("completions/clipped_ratio", 0.0) for e in logs), 3)
        if logs
        else None,
        peak_gib=round(torch.cuda.max_memory_allocated() / gib, 3) if cuda else None,
        peak_reserved_gib=round(torch.cuda.max_memory_reserved() / gib, 3) if cuda else None,
        memory_cap_gib=spec["t4_cap_gib"] if variant in T4_VARIANTS else None,
        rollout_gib=plan.rollout_gib,
        train_wall_s=round(wall, 1),
        plan=plan.summary(),
    )


COLUMNS = (
    ("name", "{}"),
    ("rollout_tokens_per_s", "{:,.0f}"),
    ("rollout_s_per_step", "{:.2f}"),
    ("step_s_median", "{:.2f}"),
    ("first_step_s", "{:.1f}"),
    ("peak_gib", "{:.2f}"),
    ("mean_completion_length", "{:.0f}"),
)


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table (a failed row: its error's last line)."""
    head = "| " + " | ".join(name for name, _ in COLUMNS) + " |"
    lines = [head, "|" + " --- |" * len(COLUMNS)]
    for row in rows:
        if "failed" in row:
            why = row["failed"].split(": exit status")[0] if row["failed"].startswith("stopped") else ""
            lines.append(f"| {row['name']} | failed: {why or row['failed'].splitlines()[-1][:160]} |")
            continue
        cells = ["-" if row.get(k) is None else fmt.format(row[k]) for k, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="/tmp/tinyllama-shaped", help="the TinyLlama-shaped folder")
    ap.add_argument("--out", help="the JSON file to write (required); an earlier one's other rows are kept")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated, of {list(VARIANTS)}")
    ap.add_argument("--prompts", default="1,16", help="prompts per optimizer step, comma-separated (t4: its own)")
    ap.add_argument("--steps", type=int, default=8, help="GRPO optimizer steps per run")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-completion-length", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8, help="per_device_train_batch_size (completions)")
    ap.add_argument("--max-seq-length", type=int, default=1024, help="prompt + completion tokens at most")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--dtype", default="bfloat16", help="the H200 variants' dtype (float32 for a CPU try)")
    ap.add_argument("--t4-cap-gib", type=float, default=15.0)
    ap.add_argument("--timeout", type=float, default=420, help="seconds per run before it is stopped")
    ap.add_argument("--phases", action="store_true", help="time the fused rollouts' refresh / prefill / decode")
    ap.add_argument("--tag", default="", help="appended to each row's name (e.g. _before for another checkout's code)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return

    from runner import gpu_name, run_configuration

    if not args.out:
        ap.error("--out is required")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {unknown}; choose among {list(VARIANTS)}")
    prompts = [int(p) for p in args.prompts.split(",")]
    settings = dict(
        model=str(Path(args.model).resolve()) if Path(args.model).exists() else args.model,
        steps=args.steps,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        batch_size=args.batch_size,
        max_seq_length=args.max_seq_length,
        lora_r=args.lora_r,
        dtype=args.dtype,
        t4_cap_gib=args.t4_cap_gib,
        phases=args.phases,
    )
    from tinyllama_ft.train.summary import library_versions

    out = Path(args.out)
    earlier = json.loads(out.read_text(encoding="utf-8"))["rows"] if out.is_file() else []
    rows = []

    def write() -> list[dict]:
        """The file with this call's rows so far (an earlier call's other rows kept): a timeout keeps what finished."""
        names = {r["name"] for r in rows}
        kept = [r for r in earlier if r["name"] not in names] + rows  # several calls, one file
        record = dict(
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            gpu=gpu_name(),
            versions=library_versions(
                ("torch", "transformers", "trl", "peft", "accelerate", "unsloth", "liger-kernel", "bitsandbytes")
            ),
            settings=settings,
            note=NOTE,
            rows=kept,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        return kept

    for variant in variants:
        for count in [None] if variant in T4_VARIANTS else prompts:
            name = (variant if count is None else f"{variant}@{count}x{args.num_generations}") + args.tag
            spec = dict(settings, variant=variant, prompts=count, name=name)
            row = run_configuration(
                name, Path(__file__).name, ["--child", json.dumps(spec)], tempfile.gettempdir(), timeout_s=args.timeout
            )
            rows.append(row)
            write()
            print(table([row]), flush=True)
    print(f"\n{NOTE}\n\n{table(write())}\n\nwrote {args.out}")


if __name__ == "__main__":
    main()

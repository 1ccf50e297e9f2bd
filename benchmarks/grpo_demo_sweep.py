"""Tune the offline GRPO demo (issue 31 item 5): SmolLM2-135M-Instruct on the package's arithmetic problems, fp32.

Each configuration (a JSON dict of FinetuneConfig fields over the demo's base, ``BASE``) trains in its own process,
in parallel, with the package's pieces (load_model, add_lora, grpo_prompts, build_grpo_trainer); the held-out checks
(greedy, ``evaluate.grpo_checks``) run before, every ``--check-every`` steps and after. One JSON and a table out.

    python3 benchmarks/grpo_demo_sweep.py --model ~/.cache/tinyllama_ft/models/SmolLM2-135M-Instruct.Q4_1-<hash> \\
        --configs benchmarks/grpo_demo_sweep.json (or '[{"learning_rate": 2e-4, "max_steps": 40}, ...]') \\
        --device cuda --check-every 10 --out /tmp/out/grpo_sweep.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: The demo's configuration; each swept dict replaces some of it (any FinetuneConfig field).
BASE = dict(
    method="grpo",
    dataset_format="messages",
    reward_funcs=["correct_number", "answer_format"],
    max_seq_length=512,
    num_generations=8,
    max_completion_length=128,
    per_device_train_batch_size=8,
    gradient_accumulation_steps=2,
    learning_rate=2e-4,
    max_steps=40,
    warmup_ratio=0.0,
    temperature=1.0,
    beta=0.0,
    lora_r=16,
    lora_alpha=32,
    gradient_checkpointing=False,
    load_in_4bit=False,
    backend="transformers",
    dtype="float32",
    optim="adamw_torch",
    recipe="article",  # the configured split as it is, on the GPU as on a CPU
    report_to="none",
    save_steps=100_000,
    logging_steps=1,
)
#: Keys of a swept dict that are this script's, not FinetuneConfig's.
OWN_KEYS = ("name", "check_max_new_tokens", "train_problems", "trl_args")


def kind_scores(held: list[dict], answers: list[str]) -> dict:
    """Accuracy and format compliance per problem kind (sum2, sum3, product2, product3)."""
    from tinyllama_ft.data.answers import extract_number, follows_layout, reference_number

    out = {}
    for kind in dict.fromkeys(r["kind"] for r in held):
        pairs = [(r, a) for r, a in zip(held, answers) if r["kind"] == kind]
        right = sum(extract_number(a) == reference_number(r["answer"]) for r, a in pairs)
        out[kind] = dict(accuracy=right / len(pairs), format=sum(follows_layout(a) for _, a in pairs) / len(pairs))
    return out


def child(spec: dict) -> dict:
    """Train one configuration: checks before, along the steps and after; the per-step reward means."""
    import torch
    from transformers import TrainerCallback

    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.arithmetic import arithmetic_problems
    from tinyllama_ft.data.formats import ConversationFormat
    from tinyllama_ft.data.grpo_prompts import check_prompt_rows, drop_long_prompts, grpo_prompts
    from tinyllama_ft.evaluate.grpo_checks import grpo_scores
    from tinyllama_ft.machine.hardware import detect_hardware
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.train.grpo_trainer import build_grpo_trainer, reward_history
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.rewards import resolve_rewards

    started = time.perf_counter()
    torch.set_num_threads(spec["threads"])
    own = {k: spec["config"][k] for k in OWN_KEYS if k in spec["config"]}
    fields = {**BASE, **{k: v for k, v in spec["config"].items() if k not in OWN_KEYS}}
    cfg = FinetuneConfig(**fields, model_name=spec["model"], output_dir=spec["output_dir"])
    if own.get("trl_args"):  # GRPOConfig fields FinetuneConfig does not hold (yet): laid over the run's kwargs
        import tinyllama_ft.train.grpo_trainer as grpo_trainer

        plain = grpo_trainer.grpo_config_kwargs
        grpo_trainer.grpo_config_kwargs = lambda *a, **k: {**plain(*a, **k), **own["trl_args"]}
    hardware = detect_hardware()
    plan = plan_run(cfg, hardware)
    rewards = resolve_rewards(cfg.reward_funcs, max_completion_length=cfg.max_completion_length)
    model, tokenizer = load_model(
        cfg.model_name,
        max_seq_length=cfg.max_seq_length,
        dtype=plan.dtype,
        load_in_4bit=False,
        backend="transformers",
        hardware=hardware,
    )
    targets = ConversationFormat(cfg.dataset_format).prepare(model, tokenizer, cfg)
    model = add_lora(
        model,
        lora_r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        target_modules=targets,
        gradient_checkpointing=False,
        seed=cfg.seed,
        backend="transformers",
    )
    train, held = arithmetic_problems(own.get("train_problems", spec["train_problems"]), held_out=spec["held_out"])
    dataset = grpo_prompts(check_prompt_rows(train)[0], dataset_format=cfg.dataset_format)
    dataset, _ = drop_long_prompts(dataset, tokenizer, max_prompt_tokens=cfg.max_seq_length - cfg.max_completion_length)
    held_rows = grpo_prompts(check_prompt_rows(held)[0], dataset_format=cfg.dataset_format)
    budget = own.get("check_max_new_tokens", cfg.max_completion_length)
    checks = []

    def check(step: int) -> None:
        t0 = time.perf_counter()
        scores = grpo_scores(
            model,
            tokenizer,
            held_rows,
            reward_funcs=rewards,
            max_new_tokens=budget,
            batch_size=spec["check_batch_size"],
            decode="plain",  # transformers' generate, on a GPU as on a CPU
        )
        entry = dict(
            step=step,
            accuracy=scores.accuracy,
            format_compliance=scores.format_compliance,
            rewards=scores.rewards,
            completion_length=round(scores.completion_length, 1),
            stopped=scores.stopped,
            kinds=kind_scores(held, scores.answers),
            seconds=round(time.perf_counter() - t0, 1),
            answers=scores.answers[:3],
        )
        checks.append(entry)
        print(f"check at step {step}: {scores} ({entry['seconds']} s)", flush=True)

    class Along(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if (
                spec["check_every"]
                and state.global_step % spec["check_every"] == 0
                and state.global_step < cfg.max_steps
            ):
                check(state.global_step)

    setup_s = time.perf_counter() - started
    check(0)
    trainer = build_grpo_trainer(
        model=model, tokenizer=tokenizer, train_dataset=dataset, cfg=cfg, plan=plan, callbacks=[Along()]
    )
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0 - sum(c["seconds"] for c in checks[1:])
    check(cfg.max_steps)
    history = reward_history(trainer.state.log_history, trainer.reward_func_names)
    zero = [h["zero_std_groups"] for h in history if h["zero_std_groups"] is not None]
    before, after = checks[0], checks[-1]
    return dict(
        name=spec["name"],
        config={**own, **{k: v for k, v in fields.items() if k not in BASE or BASE[k] != v}},
        fields={k: (list(v) if isinstance(v, tuple) else v) for k, v in fields.items()},
        device=plan.device,
        threads=spec["threads"],
        prompts_per_step=plan.effective_batch_size // cfg.num_generations,
        accuracy_before=before["accuracy"],
        accuracy_after=after["accuracy"],
        format_before=before["format_compliance"],
        format_after=after["format_compliance"],
        format_gain_points=round(100 * (after["format_compliance"] - before["format_compliance"]), 1),
        accuracy_gain_points=round(100 * (after["accuracy"] - before["accuracy"]), 1),
        zero_std_share_mean=sum(zero) / len(zero) if zero else None,
        checks=checks,
        steps=history,
        setup_s=round(setup_s, 1),
        train_s=round(train_s, 1),
        check_s=round(sum(c["seconds"] for c in checks), 1),
        wall_s=round(time.perf_counter() - started, 1),
    )


def parse_configs(text: str) -> list[dict]:
    """``--configs``: a JSON list of dicts, or a path to a file holding one; each gets a ``name`` (``c0``, ...)."""
    path = Path(text).expanduser()
    data = json.loads(path.read_text(encoding="utf-8") if not text.lstrip().startswith("[") else text)
    if not isinstance(data, list) or not all(isinstance(c, dict) for c in data):
        raise ValueError("--configs: a JSON list of objects (FinetuneConfig fields)")
    return [{"name": c.get("name", f"c{i}"), **c} for i, c in enumerate(data)]


def table(rows: list[dict]) -> str:
    """The configurations side by side, as Markdown."""
    lines = [
        "| name | config | format before -> after | accuracy before -> after | zero-std groups | train s | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "failed" in row:
            lines.append(f"| {row['name']} | failed: {row['failed'].splitlines()[-1][:160]} | | | | | |")
            continue
        zero = "-" if row["zero_std_share_mean"] is None else f"{row['zero_std_share_mean']:.0%}"
        lines.append(
            f"| {row['name']} | {json.dumps(row['config'])} | {row['format_before']:.0%} -> {row['format_after']:.0%} "
            f"| {row['accuracy_before']:.0%} -> {row['accuracy_after']:.0%} | {zero} | {row['train_s']:.0f} "
            f"| {row['wall_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="SmolLM2-135M-Instruct folder (default: the package's demo_model_path())")
    ap.add_argument("--configs", help="JSON list of dicts (FinetuneConfig fields over BASE), or a .json file")
    ap.add_argument("--out", help="the JSON file to write")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--jobs", type=int, default=0, help="configurations at once (0: all)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per configuration (0: cores / jobs)")
    ap.add_argument("--check-every", type=int, default=0, help="held-out checks every K steps too (0: before/after)")
    ap.add_argument("--held-out", type=int, default=100, help="held-out problems checked (25 per kind at 100)")
    ap.add_argument("--train-problems", type=int, default=400, help="training problems generated")
    ap.add_argument("--check-batch-size", type=int, default=0, help="prompts per check batch (0: 50 GPU, 4 CPU)")
    ap.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "grpo_sweep"), help="logs, outputs")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per configuration (0: none)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        result = child(spec)
        Path(spec["result"]).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        return
    if not args.configs or not args.out:
        ap.error("--configs and --out are required")
    configs = parse_configs(args.configs)
    if args.model is None:
        from tinyllama_ft.models.demo_model import demo_model_path

        args.model = str(demo_model_path())
    model = str(Path(args.model).expanduser().resolve())
    jobs = args.jobs or len(configs)
    threads = args.threads or max(1, (os.cpu_count() or 1) // min(jobs, len(configs)))
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    pending, running, rows = list(configs), [], {}
    print(f"{len(configs)} configurations, {jobs} at once, {threads} threads each, on {args.device}; logs in {work}")
    while pending or running:
        while pending and len(running) < jobs:
            config = pending.pop(0)
            name = config["name"]
            spec = dict(
                name=name,
                config={k: v for k, v in config.items() if k != "name"},
                model=model,
                output_dir=str(work / name),
                result=str(work / f"{name}.json"),
                threads=threads,
                check_every=args.check_every,
                held_out=args.held_out,
                train_problems=args.train_problems,
                check_batch_size=args.check_batch_size or (50 if args.device == "cuda" else 4),
            )
            Path(spec["result"]).unlink(missing_ok=True)
            log = open(work / f"{name}.log", "w", encoding="utf-8")  # noqa: SIM115  closed when the process ends
            proc = subprocess.Popen(
                [sys.executable, __file__, "--child", json.dumps(spec)], stdout=log, stderr=subprocess.STDOUT, env=env
            )
            running.append((name, proc, log, time.time(), spec["result"]))
            print(f"started {name}: {json.dumps(spec['config'])}", flush=True)
        time.sleep(2)
        for item in list(running):
            name, proc, log, t0, result = item
            if proc.poll() is None and args.timeout and time.time() - t0 > args.timeout:
                proc.kill()
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            if proc.returncode == 0 and Path(result).is_file():
                rows[name] = json.loads(Path(result).read_text(encoding="utf-8"))
            else:
                tail = (work / f"{name}.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
                rows[name] = {"name": name, "failed": f"exit status {proc.returncode}:\n" + "\n".join(tail)}
            print(f"finished {name} ({time.time() - t0:.0f} s)\n{table([rows[name]])}", flush=True)
    ordered = [rows[c["name"]] for c in configs]
    from tinyllama_ft.train.summary import library_versions

    record = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        model=model,
        device=args.device,
        versions=library_versions(("torch", "transformers", "trl", "peft")),
        base=BASE,
        held_out=args.held_out,
        check_every=args.check_every,
        rows=ordered,
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"\n{table(ordered)}\n\nwrote {args.out}")


if __name__ == "__main__":
    main()

"""The notebooks' whole run, as a person pressing *Run all* meets it: each configuration runs a notebook under
papermill in a fresh process, on the default plan or the baseline (the same notebook with only ``-p recipe
article``), and the time of every phase is read back: load, the held-out check before, step 1, steady and whole
``train()`` tokens/s, the checks and side-by-side table after, save / export / reload, the answers, the tokens
each phase generated, and the *Run all* wall time (the first code cell after the install cell to the last cell).

    python3 benchmarks/notebook_runs.py --model /tmp/tinyllama-shaped \\
        --dataset .device-data/alpaca/alpaca_cleaned_5k.jsonl --out-dir runs/notebook_runs [--only NAME,...]

"Fresh" means ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR`` and Unsloth's ``UNSLOTH_COMPILE_LOCATION`` point
at new empty folders, as on a new Colab runtime (and the datasets cache too); a name ending in ``_warm`` reuses
the folders of the run without the suffix, which must have run before it in the same ``--work`` folder. Per-cell
seconds come from papermill's cell metadata, mapped to phases by the notebooks' section titles and each cell's
helper; steps, generation batches and compile counts from ``notebook_probe.py``, which two cells added to the
benchmark's copy of the notebook load (the install cell's neighbour and a cell after the last one, outside the
*Run all* window's last cell). ``notebook_runs.json`` in ``--out-dir`` is rewritten after each configuration (rows
already there from an earlier call are kept unless run again), so a timeout keeps the finished rows; each run's
papermill log (its last 400 kB) lies beside it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from runner import CHILD_ENV  # noqa: E402  (benchmarks/ is no package)

#: name -> (notebook, papermill parameters beyond the common ones). "_baseline" is the same notebook with
#: only the recipe field changed; "_t4" the T4 stand-in (fp16, CUDA memory capped at 15 GiB).
CONFIGURATIONS = {
    "alpaca_default": ("finetune_tinyllama", []),
    "alpaca_baseline": ("finetune_tinyllama", ["recipe", "article"]),
    "chat_default": ("finetune_chat", []),
    "chat_baseline": ("finetune_chat", ["recipe", "article"]),
    "alpaca_t4_default": ("finetune_tinyllama", ["dtype", "float16", "gpu_memory_cap_gib", "15"]),
    "alpaca_t4_baseline": ("finetune_tinyllama", ["dtype", "float16", "gpu_memory_cap_gib", "15", "recipe", "article"]),
}
WARM = "_warm"
#: Where the added cells go: after the cell that holds this text (the install cell), and after the last cell.
INSTALL_CELL_TEXT = 'find_spec("tinyllama_ft")'
PROBE_TAG = "bench-probe"
#: (text in a cell's source, phase), first match wins; a cell matching none takes its section's phase.
CELL_PHASES = (
    ("before = held_out_check", "checks_before"),
    ("train_and_evaluate(", "train_cell"),
    ("after = held_out_check", "checks_after"),
    ("load_model(", "load"),
    ("add_lora(", "load"),
    ("fmt.tokenize(", "tokenize"),
    ("build_trainer(", "trainer"),
    ("check_first_batch", "trainer"),
    ("save_adapter(", "save_export"),
    ("export_adapter(", "save_export"),
    ("load_adapter(", "reload"),
    ("answers = generate(", "generate"),
    ("streamed = stream(", "stream"),
    ("tryout_box(", "tryout"),
    ("write_run_summary(", "summary"),
    ("loss_curve(", "summary"),
)
LOG_TAIL_BYTES = 400_000
#: Steps before the steady window (as benchmarks/common.py: from the end of step 4 to the end of the last).
STEADY_FROM = 4


def notebook_copy(stem: str, probe_out: Path, path: Path) -> None:
    """The notebook with the probe's two cells added: ``install()`` after the install cell, ``dump`` at the end."""
    import nbformat

    nb = nbformat.read(REPO / "notebooks" / f"{stem}.ipynb", as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and INSTALL_CELL_TEXT in c.source)
    load = f"import sys\nsys.path.insert(0, {str(HERE)!r})\nimport notebook_probe\n"
    first = nbformat.v4.new_code_cell(load + "notebook_probe.install()")
    last = nbformat.v4.new_code_cell(load + f"notebook_probe.dump(globals(), {str(probe_out)!r})")
    for cell in (first, last):
        cell.metadata["tags"] = [PROBE_TAG]
    nb.cells.insert(at + 1, first)
    nb.cells.append(last)
    nbformat.write(nb, path)


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def cell_times(executed: Path) -> tuple[list[dict], float | None]:
    """Per code cell of the executed notebook: section, phase, seconds; and the *Run all* wall time (from the start
    of the first code cell after the install cell, the probe's included, to the end of the notebook's last cell)."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    section, cells, after_install = "", [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heads = [line[3:].strip() for line in cell.source.splitlines() if line.startswith("## ")]
            section = heads[0] if heads else section
            continue
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("papermill", {})
        tags = cell.metadata.get("tags", [])
        if INSTALL_CELL_TEXT in cell.source:
            after_install = True
            continue
        if not after_install:
            continue
        phase = next((p for text, p in CELL_PHASES if text in cell.source), None)
        if PROBE_TAG in tags:
            phase = "probe"
        elif phase is None:
            phase = "parameters" if ("parameters" in tags or "injected-parameters" in tags) else "setup"
        first_line = next(
            (s for s in cell.source.splitlines() if s and not s.startswith(("#", "from ", "import "))), ""
        )
        cells.append(
            {
                "section": section,
                "phase": phase,
                "code": first_line[:80],
                "s": meta.get("duration"),
                "start": _seconds(meta["start_time"]) if meta.get("start_time") else None,
                "end": _seconds(meta["end_time"]) if meta.get("end_time") else None,
                "status": meta.get("status"),
            }
        )
    window = cells[:-1] if cells and cells[-1]["phase"] == "probe" else cells  # the dump cell is not the notebook's
    done = bool(window) and window[-1]["status"] == "completed" and window[0]["start"] is not None
    return cells, (window[-1]["end"] - window[0]["start"]) if done else None


def _sum(items, key="s") -> float:
    return round(sum(i[key] or 0.0 for i in items), 2)


def train_figures(events: list[dict]) -> dict:
    """Step 1, steps 2-4 and the steady state from the probe's trainer events."""
    begin = next((e for e in events if e["e"] == "train_begin"), None)
    ends = {e["step"]: e for e in events if e["e"] == "step_end"}
    starts = {e["step"] + 1: e for e in events if e["e"] == "step_begin"}  # global_step before the step runs
    if begin is None or 1 not in ends:
        return {}
    last = max(ends)
    steps = sorted(ends)
    durations = {k: ends[k]["t"] - starts[k]["t"] for k in steps if k in starts}
    tokens = {k: ends[k]["tokens"] - (ends[k - 1]["tokens"] if k > 1 else begin["tokens"]) for k in steps}
    steady = [k for k in steps if k > STEADY_FROM and k in durations]
    out = {
        "step1_s": round(ends[1]["t"] - begin["t"], 2),
        "steps_2_4_s": [round(durations[k], 2) for k in steps if 2 <= k <= STEADY_FROM and k in durations],
        "tokens_step1": tokens[1],
        "steps": last,
        "step_s_median": round(statistics.median(durations[k] for k in steady), 4) if steady else None,
        "step_s_max_steady": round(max(durations[k] for k in steady), 3) if steady else None,
        "steady_tokens_per_s": round(sum(tokens[k] for k in steady) / sum(durations[k] for k in steady), 1)
        if steady
        else None,
        "dynamo_unique_graphs_by_step": {
            k: ends[k].get("dynamo", {}).get("unique_graphs") for k in steps if k <= 8 or k == last
        },
    }
    evals = [e for e in events if e["e"] == "evaluate"]
    saves = [e for e in events if e["e"] == "save"]
    out["evaluations_in_train"] = len([e for e in evals if e["t"] > begin["t"]])
    out["saves"] = len(saves)
    return out


def compile_figures(compiled: dict, events: list[dict]) -> dict:
    """Dynamo's compiles: how many, their seconds, those inside step 1, per function, and the recompile reasons."""
    metrics = compiled.get("metrics") if isinstance(compiled, dict) else None
    if not metrics:
        return {}
    begin = next((e["t"] for e in events if e["e"] == "train_begin"), None)
    step1 = next((e["t"] for e in events if e["e"] == "step_end" and e["step"] == 1), None)
    by_name: dict[str, dict] = {}
    for m in metrics:
        row = by_name.setdefault(m.get("co_name") or "?", {"compiles": 0, "s": 0.0, "failed": 0})
        row["compiles"] += 1
        row["s"] = round(row["s"] + (m.get("entire_frame_compile_time_s") or 0.0), 2)
        row["failed"] += bool(m.get("fail_type"))
    in_step1 = [m for m in metrics if begin and step1 and m.get("start_time") and begin <= m["start_time"] <= step1]
    reasons = []
    for m in metrics:
        r = m.get("recompile_reason")
        if r and r not in reasons:
            reasons.append(r)
    return {
        "compiles": len(metrics),
        "compile_s": _sum(metrics, "entire_frame_compile_time_s"),
        "compiles_in_step1": len(in_step1),
        "compile_s_in_step1": _sum(in_step1, "entire_frame_compile_time_s"),
        "by_function": by_name,
        "recompile_reasons": [r[:300] for r in reasons[:12]],
        "stats": (compiled.get("counters") or {}).get("stats"),
        "each": [  # one row per compile: seconds after train() began, the frame, dynamo / backend / inductor seconds
            {
                "at_s": round(m["start_time"] - begin, 2) if begin and m.get("start_time") else None,
                "co_name": m.get("co_name"),
                "s": m.get("entire_frame_compile_time_s"),
                "backend_s": m.get("backend_compile_time_s"),
                "inductor_s": m.get("inductor_compile_time_s"),
                "recompile_reason": (m.get("recompile_reason") or "")[:160] or None,
            }
            for m in metrics
        ],
    }


def generation_figures(probe: dict) -> dict:
    """Per generating phase: decoders used, batches, new tokens and seconds."""
    out: dict[str, dict] = {}
    for d in probe.get("decode", []):
        top = (d["inside"] or "other").split("/")
        name = top[0]
        if name.startswith("held_out_check#"):
            name = ("checks_before" if name.endswith("#0") else "checks_after") + "/stopping"
        elif name.startswith("side_by_side"):
            name = "side_by_side"
        elif name.startswith(("generate", "stream")):
            name = name.split("#")[0]
        row = out.setdefault(name, {"modes": [], "batches": 0, "new_tokens": 0, "s": 0.0, "stopped": 0})
        if d["mode"] + (" (failed: generate)" if d["graph_failed"] else "") not in row["modes"]:
            row["modes"].append(d["mode"] + (" (failed: generate)" if d["graph_failed"] else ""))
        row["batches"] += 1
        row["new_tokens"] += d["new_tokens"]
        row["stopped"] += d["stopped"]
        row["s"] = round(row["s"] + d["s"], 2)
        row["rows_per_batch"] = max(row.get("rows_per_batch", 0), d["rows"])
    for row in out.values():
        row["tokens_per_s"] = round(row["new_tokens"] / row["s"], 1) if row["s"] else None
    calls = probe.get("calls", [])
    for label, key in (("scores", "scores_s"),):
        for c in calls:
            if c["label"] == label and c["inside"].startswith("held_out_check#"):
                phase = "checks_before" if c["inside"].endswith("#0") else "checks_after"
                out.setdefault(f"{phase}/scores", {})[key] = round(c["s"], 2)
    return out


def summarize(name: str, probe: dict, cells: list[dict], run_all: float | None) -> dict:
    """One row: the phases' seconds, the training figures, generation per phase, compiles."""
    by_phase: dict[str, float] = {}
    by_section: dict[str, float] = {}
    for c in cells:
        by_phase[c["phase"]] = round(by_phase.get(c["phase"], 0.0) + (c["s"] or 0.0), 2)
        section = c["section"] or "(before section 1)"
        by_section[section] = round(by_section.get(section, 0.0) + (c["s"] or 0.0), 2)
    results = probe.get("results") if isinstance(probe.get("results"), dict) else {}
    events = probe.get("events", [])
    train = train_figures(events)
    begin = next((e["t"] for e in events if e["e"] == "train_begin"), None)
    end = next((e["t"] for e in events if e["e"] == "train_end"), None)
    calls = {(c["label"], c["n"]): c for c in probe.get("calls", [])}
    runtime = results.get("train_runtime_s")
    row = {
        "name": name,
        "run_all_s": round(run_all, 1) if run_all else None,
        "plan": {
            k: (probe.get("plan") or {}).get(k)
            for k in (
                "backend",
                "dtype",
                "load_in_4bit",
                "attn_implementation",
                "use_liger_kernel",
                "per_device_train_batch_size",
                "gradient_accumulation_steps",
                "gradient_checkpointing",
                "optim",
            )
        },
        "phases_s": by_phase,
        "sections_s": by_section,
        "load_s": by_phase.get("load"),
        "checks_before_s": by_phase.get("checks_before"),
        "train_cell_s": by_phase.get("train_cell"),
        "eval_before_s": round(begin - calls[("train_and_evaluate", 0)]["start"], 2)
        if begin and ("train_and_evaluate", 0) in calls
        else None,
        "train_s": runtime,
        "train_events_s": round(end - begin, 2) if begin and end else None,
        "train_tokens": results.get("train_tokens"),
        "whole_train_tokens_per_s": round(results["train_tokens"] / runtime, 1) if runtime else None,
        "train_tokens_per_s_without_evals": results.get("tokens_per_s"),
        "eval_in_train_s": results.get("eval_in_train_s"),
        "peak_memory_gib": results.get("peak_memory_gib"),
        "eval_loss_before": results.get("eval_loss_before"),
        "eval_loss_after": results.get("eval_loss_after"),
        **train,
        "checks_after_s": round(calls[("held_out_check", 1)]["s"], 2) if ("held_out_check", 1) in calls else None,
        "side_by_side_s": round(calls[("side_by_side", 0)]["s"], 2) if ("side_by_side", 0) in calls else None,
        "checks_and_side_by_side_after_s": by_phase.get("checks_after"),
        "save_export_s": by_phase.get("save_export"),
        "reload_s": by_phase.get("reload"),
        "generate_s": by_phase.get("generate"),
        "stream_s": by_phase.get("stream"),
        "generation": generation_figures(probe),
        "reloaded_decoder": probe.get("reloaded_decoder"),
        "stopped": {
            "before": (probe.get("before") or {}).get("stopped"),
            "after": (probe.get("after") or {}).get("stopped"),
            "of": (probe.get("before") or {}).get("total"),
        },
        "heldout_before": (probe.get("before") or {}).get("scores"),
        "heldout_after": (probe.get("after") or {}).get("scores"),
        "compile": compile_figures(probe.get("compile") or {}, events),
        "gpu": probe.get("gpu"),
        "versions": probe.get("versions"),
    }
    if run_all and runtime:
        row["outside_train_share"] = round(1 - runtime / run_all, 3)
    return row


def run_one(name: str, a, work: Path, out_dir: Path) -> dict:
    base = name[: -len(WARM)] if name.endswith(WARM) else name
    stem, params = CONFIGURATIONS[base]
    rundir = work / name
    cache = work / base / "cache"
    if name.endswith(WARM):
        if not cache.is_dir():
            return {"name": name, "failed": f"{cache} does not exist: run {base} first with the same --work"}
        shutil.rmtree(rundir, ignore_errors=True)
    else:
        shutil.rmtree(rundir, ignore_errors=True)
    rundir.mkdir(parents=True)
    for sub in ("inductor", "triton", "unsloth_compiled_cache"):
        (cache / sub).mkdir(parents=True, exist_ok=True)
    probe_out, source, executed = rundir / "probe.json", rundir / f"{stem}.ipynb", rundir / f"{stem}.out.ipynb"
    notebook_copy(stem, probe_out, source)
    env = {
        **os.environ,
        **CHILD_ENV,
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "UNSLOTH_COMPILE_LOCATION": str(cache / "unsloth_compiled_cache"),
        "HF_DATASETS_CACHE": str(rundir / "datasets_cache"),
    }
    if a.torch_logs:
        env["TORCH_LOGS"] = a.torch_logs
    common = ["model_name", a.model, "dataset", str(Path(a.dataset).resolve()), "max_steps", str(a.max_steps)]
    common += ["report_to", "none", "output_dir", str(rundir / "outputs")]
    pairs = common + params + a.param
    argv = [sys.executable, "-m", "papermill", str(source), str(executed), "--cwd", str(rundir), "--log-output"]
    for k, v in zip(pairs[::2], pairs[1::2]):
        argv += ["-p", k, v]
    log = rundir / "papermill.log"
    print(f"\n===== {name}: {stem} {' '.join(params + a.param)} =====", flush=True)
    start = time.time()
    with open(log, "wb") as f:
        rc = subprocess.run(argv, cwd=rundir, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=a.timeout).returncode
    wall = time.time() - start
    data = log.read_bytes()
    (out_dir / f"{name}.log").write_bytes(data[-LOG_TAIL_BYTES:])
    row: dict = {"name": name, "notebook": stem, "params": params + a.param, "fresh": not name.endswith(WARM)}
    if executed.exists():
        cells, run_all = cell_times(executed)
    else:
        cells, run_all = [], None
    probe = json.loads(probe_out.read_text(encoding="utf-8")) if probe_out.exists() else {}
    row.update(summarize(name, probe, cells, run_all) if probe else {})
    row.update(rc=rc, process_s=round(wall, 1), cells=cells)
    if rc != 0:
        row["failed"] = "\n".join(data.decode(errors="replace").splitlines()[-25:])
        print(row["failed"])
    return row


def row_line(r: dict) -> str:
    if r.get("failed") and not r.get("run_all_s"):
        return f"{r['name']}: FAILED"
    g = r.get("generation", {})
    return (
        f"{r['name']}: run_all {r.get('run_all_s')} s | load {r.get('load_s')} | checks before "
        f"{r.get('checks_before_s')} | step1 {r.get('step1_s')} | steady {r.get('steady_tokens_per_s')} tok/s | "
        f"train() {r.get('train_s')} s {r.get('whole_train_tokens_per_s')} tok/s | after "
        f"{r.get('checks_and_side_by_side_after_s')} | save/export {r.get('save_export_s')} reload {r.get('reload_s')} "
        f"| stream {r.get('stream_s')} ({g.get('stream', {}).get('modes')}) | compiles "
        f"{r.get('compile', {}).get('compiles')} ({r.get('compile', {}).get('compile_s')} s, step1 "
        f"{r.get('compile', {}).get('compile_s_in_step1')} s) | outside train {r.get('outside_train_share')}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder (benchmarks/build_tinyllama_shaped.py)")
    ap.add_argument("--dataset", required=True, help="the rows (JSONL), e.g. the 5,000 Alpaca-cleaned rows")
    ap.add_argument("--out-dir", default=str(REPO / "runs" / "notebook_runs"), help="notebook_runs.json + logs")
    ap.add_argument("--work", default="/tmp/notebook_runs", help="run folders and compile caches")
    ap.add_argument("--only", help=f"comma-separated, from {list(CONFIGURATIONS)} (+ '{WARM}' to reuse a cache)")
    ap.add_argument("--max-steps", type=int, default=60, help="the notebooks' default, 60")
    ap.add_argument("--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="one more papermill parameter for every run (repeatable)")  # fmt: skip
    ap.add_argument("--torch-logs", help="TORCH_LOGS for the runs, e.g. recompiles,graph_breaks")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per notebook")
    a = ap.parse_args()
    a.param = [x for pair in a.param for x in pair]
    names = [n.strip() for n in (a.only or ",".join(CONFIGURATIONS)).split(",") if n.strip()]
    unknown = [n for n in names if n.removesuffix(WARM) not in CONFIGURATIONS]
    if unknown:
        ap.error(f"--only: unknown {unknown}")
    out_dir, work = Path(a.out_dir), Path(a.work)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "notebook_runs.json"
    record = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"runs": {}}
    record.update(date=datetime.date.today().isoformat(), max_steps=a.max_steps, model=a.model, dataset=a.dataset)
    for name in names:
        try:
            row = run_one(name, a, work, out_dir)
        except subprocess.TimeoutExpired:
            row = {"name": name, "failed": f"timed out after {a.timeout} s"}
        row["torch_logs"] = a.torch_logs
        record["runs"][name] = row
        path.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
        print(row_line(row), flush=True)
    print(f"\nwrote {path}")
    for row in record["runs"].values():
        print(row_line(row))


if __name__ == "__main__":
    main()

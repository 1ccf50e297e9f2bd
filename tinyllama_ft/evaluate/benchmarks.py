"""Benchmark scores before and after fine-tuning on EleutherAI's lm-evaluation-harness (``lm-eval``): one PEFT model,
its adapter switched off (base) then on (tuned), on lm-eval's tasks by name, the shipped offline tasks
(``benchmark_tasks``) or a ``.jsonl`` / ``.csv`` of question / answer rows (exact match). Tasks that generate are
prompted in the adapter's format (Alpaca's template, its chat template or a text adapter's raw text, as ``generate``
prompts it) and stop on its stop tokens; log-likelihood tasks (multiple choice) keep lm-eval's own prompt, as published figures do.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..config.coercion import ConfigError
from ..config.locations import HubUnreachableError
from .benchmark_tasks import SHIPPED_TASKS, TASKS_DIR

#: The file the results are written to, in the run folder beside ``run_summary.json``.
RESULTS_FILE = "benchmarks.json"
#: Suffixes of a question / answer file given as a task (``own_task``).
OWN_SUFFIXES = (".jsonl", ".json", ".csv")
#: The shipped template an own file's generated task includes (exact match, greedy, lm-eval's metric).
OWN_TEMPLATE = TASKS_DIR / "_own_exact_match_template_yaml"
#: What to do when a task's data cannot be had here: said in every such refusal.
OFFLINE_HINT = (
    f"run it where the Hugging Face Hub answers (Colab), or offline use the shipped tasks "
    f"({', '.join(SHIPPED_TASKS)}) or a .jsonl of question/answer rows"
)


@dataclass(frozen=True)
class BenchmarkRow:
    """One metric of one task (or group): the base's and the tuned model's score.

    Attributes:
        task: lm-eval's task or group name. metric: the metric, its filter in brackets when not ``none``
            (``exact_match (strict-match)``).
        base, tuned: the scores (a fraction for accuracy and exact match), None when one side lacks it.
        delta: ``tuned - base``. stderr, base_stderr: lm-eval's standard error of the tuned and the base score
            (None where lm-eval gives none). samples: the questions scored (after ``limit``; a group's: its tasks').
    """

    task: str
    metric: str
    base: float | None
    tuned: float | None
    delta: float | None
    stderr: float | None
    base_stderr: float | None = None
    samples: int | None = None


def _number(value, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


@dataclass
class Benchmarks:
    """``evaluate_benchmarks``' result: ``rows`` (``BenchmarkRow``), ``settings`` (tasks, limit, num_fewshot,
    batch_size, the generation prompt format, lm-eval's version, seconds) and lm-eval's own ``results`` for the base
    and the tuned model (its ``results``, ``groups``, ``n-samples``, ``configs``, ``versions`` dicts)."""

    rows: list[BenchmarkRow]
    settings: dict[str, Any]
    results: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "settings": self.settings, "lm_eval": self.results}

    def table(self) -> str:
        """The rows as a Markdown table (scores with 4 decimals, the delta signed, ``-`` where missing)."""
        lines = ["| task | metric | n | base | tuned | delta | stderr |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in self.rows:
            cells = [_number(r.base), _number(r.tuned), _number(r.delta, "+.4f"), _number(r.stderr)]
            lines.append(f"| {r.task} | {r.metric} | {_number(r.samples, 'd')} | {' | '.join(cells)} |")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def own_task(path: str | os.PathLike, folder: str | os.PathLike) -> str:
    """Register a file of question / answer rows as an exact-match generation task: check its rows, then write the
    task's YAML (``own_<stem>.yaml``, including ``OWN_TEMPLATE``) into ``folder``, lm-eval's ``include_path``.

    Args:
        path: a ``.jsonl``, ``.json`` (a list of objects) or ``.csv`` file whose rows have a non-empty ``question``
            and ``answer`` (text or a number).
        folder: where the YAML goes (an existing folder).

    Returns:
        The task's name, ``own_<file stem>`` (letters, digits and ``_``).

    Raises:
        locations.PathArgumentError: (a ConfigError) no such file. ConfigError: a row that is not an object or lacks a
            question or answer (naming the file, row and field), or no rows.
    """
    from ..data.row_files import UnreadableRow, read_rows

    path = os.path.abspath(os.fspath(path))
    rows = read_rows(path, flag="--tasks")
    for index, row in enumerate(rows):  # numbered from 0, as the training rows' loaders number them
        if isinstance(row, UnreadableRow):
            raise ConfigError(f"{path}: row {index}: {row.field} {row.reason} (row index is 0-based)")
        if not isinstance(row, dict):
            raise ConfigError(
                f"{path}: row {index}: expected an object with question and answer (row index is 0-based)"
            )
        for name in ("question", "answer"):
            value = row.get(name)
            if value is None or isinstance(value, bool) or not str(value).strip():
                why = "is missing or empty (each row needs question, answer; row index is 0-based)"
                raise ConfigError(f"{path}: row {index}: {name} {why}")
    if not rows:
        raise ConfigError(f"{path}: no rows (each row needs question and answer)")
    name = "own_" + re.sub(r"\W+", "_", Path(path).stem).strip("_").lower()
    builder = "csv" if path.endswith(".csv") else "json"
    text = (
        f"task: {name}\ninclude: {json.dumps(str(OWN_TEMPLATE))}\ndataset_path: {builder}\n"
        f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(path)}\n"
    )
    Path(folder, f"{name}.yaml").write_text(text, encoding="utf-8")
    return name


def generation_format(tokenizer, *, data_format=None, record=None, template=None):
    """How generation tasks prompt and stop: the adapter's format, read as ``generate`` reads it.

    Args:
        tokenizer: the tokenizer (its chat template, a chat run's).
        data_format: the run's format object (``formats.data_format(cfg)``, the notebook's ``fmt``): its name, its
            ``template`` and ``stop_token_ids``, as ``generation.generate`` uses them. Or None, and:
        record: an adapter's record (``run_record.read_record``), read as ``tinyllama-ft generate`` reads it
            (``formats.recorded_data_format``); None or ``{}``: Alpaca with ``DEFAULTS.template``.
        template: a ``template`` the caller gave (the command line's ``--template``), checked against the record.

    Returns:
        ``(chat_template, stop_token_ids, fmt)``: the Jinja chat template lm-eval renders each prompt with (an Alpaca
        run's: ``alpaca_chat_template.jinja_chat_template(template)``, exactly ``format_prompt``; a chat run's: its
        tokenizer's; a text run's: ``TextFormat.exported_chat_template``, the text as it is), the ids generation stops
        on, and the format (``fmt.form == "conversation"``: a chat template's, few-shot examples as turns).

    Raises:
        ConfigError: ``template`` contradicts the record, or is given for a chat or text adapter
            (``recorded_data_format``).
    """
    from ..data.alpaca_chat_template import jinja_chat_template
    from ..data.formats import recorded_data_format
    from ..models.chat_templates import adds_bos

    fmt = data_format or recorded_data_format(record or {}, template=template, where="evaluate_benchmarks")
    if fmt.name == "text":
        template = fmt.exported_chat_template(tokenizer)
    elif fmt.form == "conversation":
        template = tokenizer.chat_template
    else:
        template = jinja_chat_template(fmt.template, bos=adds_bos(tokenizer))
    return template, list(fmt.stop_token_ids(tokenizer)), fmt


def _manager(include_paths: Sequence[str], names: Sequence[str]):
    """lm-eval's ``TaskManager`` over the shipped tasks and ``include_paths``, and lm-eval's own tasks only when a name
    needs them (indexing its few thousand YAML files takes seconds)."""
    from lm_eval.tasks import TaskManager

    paths = [str(TASKS_DIR), *map(str, include_paths)]
    ours = TaskManager(include_path=paths, include_defaults=False)
    return ours if all(n in ours.all_tasks for n in names) else TaskManager(include_path=paths)


def _load(manager, name: str):
    """The ``Task`` or ``Group`` lm-eval builds for ``name`` (its data read or downloaded now), or one-line refusals."""
    if name not in manager.all_tasks:
        raise ConfigError(
            f"--tasks: {name!r} is not an lm-eval task, group or tag, a shipped task ({', '.join(SHIPPED_TASKS)}) or a "
            f"file of question/answer rows ({', '.join(OWN_SUFFIXES)}); `lm-eval ls tasks` lists lm-eval's"
        )
    try:
        return manager.load([name])
    except Exception as err:  # noqa: BLE001 - datasets' and the Hub's errors: one line naming the task
        detail = " ".join(str(err).split())[:200] or type(err).__name__
        raise HubUnreachableError(f"task {name!r}: its data could not be fetched ({detail}): {OFFLINE_HINT}") from err


def _rows(base: dict, tuned: dict) -> list[BenchmarkRow]:
    """lm-eval's ``results`` of the base and the tuned run, side by side, metric by metric, in lm-eval's order."""

    def number(value):  # lm-eval writes "N/A" where it has none
        return value if isinstance(value, (int, float)) else None

    rows = []
    for task, values in tuned["results"].items():
        base_values = base["results"].get(task, {})
        for key, value in values.items():
            metric, _, filt = key.partition(",")
            if metric in ("alias", "sample_len") or metric.endswith("_stderr") or number(value) is None:
                continue
            b, stderr = number(base_values.get(key)), f"{metric}_stderr,{filt}"
            rows.append(
                BenchmarkRow(
                    task=task,
                    metric=metric if filt in ("", "none") else f"{metric} ({filt})",
                    base=b,
                    tuned=float(value),
                    delta=None if b is None else float(value) - b,
                    stderr=number(values.get(stderr)),
                    base_stderr=number(base_values.get(stderr)),
                    samples=values.get("sample_len"),
                )
            )
    return rows


@contextmanager
def _quiet_lm_eval():
    """lm-eval's per-task INFO and WARNING lines (one per task for a 57-subject group) off inside the block."""
    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def evaluate_benchmarks(
    model,
    tokenizer,
    tasks: Sequence[str] | str,
    *,
    data_format=None,
    record: dict | None = None,
    template: str | None = None,
    limit: float | None = None,
    num_fewshot: int | None = None,
    batch_size: int | str = 1,
    output_dir: str | None = None,
    include_path: Sequence[str] = (),
    log_samples: bool = False,
) -> Benchmarks:
    """Score a PEFT model on lm-eval tasks with its adapter off (base) and on (tuned), one model in memory.

    Args:
        model: a PEFT model (``lora.add_lora`` after training, or ``adapters.load_adapter(..., merged=False)``); its
            train/eval mode is restored afterwards.
        tokenizer: its tokenizer (a chat run's chat template set).
        tasks: names, or one comma-separated string: lm-eval's tasks, groups and tags (``mmlu``, ``gsm8k``,
            ``hellaswag``, ``arc_easy``: their data from the Hub), the shipped ones (``benchmark_tasks.SHIPPED_TASKS``)
            and files of question / answer rows (``own_task``).
        data_format, record, template: the adapter's prompt format for generation tasks (``generation_format``).
        limit: questions per task (lm-eval's ``--limit``: a count, or a fraction below 1); None: all.
        num_fewshot: examples in the prompt (lm-eval's ``--num_fewshot``); None: each task's default (MMLU's is 0).
        batch_size: requests per forward pass (lm-eval's ``--batch_size``: a number or ``"auto"``).
        output_dir: where ``benchmarks.json`` is written (the run folder, beside ``run_summary.json``); None: nowhere.
        include_path: more folders of lm-eval task YAML files.
        log_samples: keep each question's prompt and answer (lm-eval's ``samples``, in ``results`` and the JSON).

    Returns:
        A ``Benchmarks``: one row per task (and group) and metric, base vs tuned; also logged to the active W&B run,
        if any (``wandb.run``: a table ``benchmarks`` and one summary value per row).

    Raises:
        TypeError: ``model`` has no ``disable_adapter`` (not a PEFT model, or merged).
        ConfigError: no tasks; a name that is no task, group, tag or question file; a bad row in a question file;
            ``template`` contradicting the record.
        locations.HubUnreachableError: (a ConnectionError) a task whose data cannot be fetched, naming it and what to
            do; checked for every task before any is scored.
    """
    if not hasattr(model, "disable_adapter"):
        raise TypeError(f"{type(model).__name__} has no disable_adapter(): pass the PEFT model before any merge")
    names = [t.strip() for t in ([tasks] if isinstance(tasks, str) else tasks) for t in t.split(",") if t.strip()]
    if not names:
        raise ConfigError("--tasks: no task given (e.g. tinyllama_ft_mmlu, tinyllama_ft_arithmetic, mmlu, gsm8k)")
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
    except ImportError as err:
        raise ImportError(
            f"benchmarks need EleutherAI's lm-evaluation-harness ({err}): pip install 'lm-eval==0.4.13' "
            f"(or this package's [eval] extra)"
        ) from err

    from .scoring import eval_mode

    chat_template, stop_ids, fmt = generation_format(
        tokenizer, data_format=data_format, record=record, template=template
    )
    chat = fmt.form == "conversation"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tinyllama-ft-tasks-") as own, _quiet_lm_eval():
        names = [own_task(n, own) if n.lower().endswith(OWN_SUFFIXES) else n for n in names]
        manager = _manager([*include_path, own], names)
        loaded = {name: _load(manager, name) for name in names}  # every refusal before anything is scored
        stops = [tokenizer.decode([i], skip_special_tokens=False) for i in stop_ids if i != tokenizer.eos_token_id]
        generating = dict(apply_chat_template=True, fewshot_as_multiturn=chat)  # Alpaca's template takes one turn
        batches = {False: ([], {}), True: ([], generating)}  # what simple_evaluate is given: log-likelihood, generation
        for name in names:
            generate = [t for t in loaded[name]["tasks"].values() if t.OUTPUT_TYPE == "generate_until"]
            for task in generate if stops else ():
                until = list(task.config.generation_kwargs.get("until") or [])
                task.set_config(key="generation_kwargs", value={"until": until + stops}, update=True)
            groups = loaded[name]["groups"]  # a name's Group whole, else its Task(s) (a tag's several)
            batches[bool(generate)][0].extend(list(groups.values())[:1] if groups else loaded[name]["tasks"].values())
        saved_template = tokenizer.chat_template
        results = {}
        try:
            tokenizer.chat_template = chat_template
            with eval_mode(model):
                lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
                for side in ("base", "tuned"):
                    results[side] = {}
                    with model.disable_adapter() if side == "base" else nullcontext():
                        for top, options in batches.values():
                            if not top:
                                continue
                            got = lm_eval.simple_evaluate(
                                model=lm,
                                tasks=top,
                                task_manager=manager,
                                limit=limit,
                                num_fewshot=num_fewshot,
                                log_samples=log_samples,
                                **options,
                            )
                            _merge(results[side], got)
        finally:
            tokenizer.chat_template = saved_template
    settings = {
        "tasks": names,
        "limit": limit,
        "num_fewshot": num_fewshot,
        "batch_size": batch_size,
        "generation_format": "chat template" if chat else fmt.name,  # "alpaca" or "text"
        "stop_token_ids": list(stop_ids),
        "lm_eval_version": getattr(lm_eval, "__version__", None),
        "seconds": round(time.perf_counter() - started, 1),
    }
    out = Benchmarks(rows=_rows(results["base"], results["tuned"]), settings=settings, results=results)
    if output_dir:
        from ..machine.paths import write_json_atomically

        os.makedirs(output_dir, exist_ok=True)
        write_json_atomically(os.path.join(output_dir, RESULTS_FILE), out.as_dict(), default=str)
    log_to_wandb(out)
    return out


def _merge(into: dict, got: dict | None) -> None:
    """Add one ``simple_evaluate`` result's per-task dicts to ``into``."""
    for key in ("results", "groups", "n-samples", "configs", "versions", "higher_is_better", "samples"):
        into.setdefault(key, {}).update((got or {}).get(key, {}))


def log_to_wandb(benchmarks: Benchmarks) -> bool:
    """Log ``benchmarks`` to the active W&B run (``wandb.run``, started by ``tracking.start_tracking``): a table
    ``benchmarks`` and a summary value ``benchmarks/<task>/<metric>/{base,tuned}`` per row. Returns whether a run
    took them (False without wandb or an active run: nothing is started here)."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb else None
    if run is None:
        return False
    columns = ["task", "metric", "samples", "base", "tuned", "delta", "stderr"]
    run.log(
        {"benchmarks": wandb.Table(columns=columns, data=[[getattr(r, c) for c in columns] for r in benchmarks.rows])}
    )
    for r in benchmarks.rows:
        run.summary.update(
            {f"benchmarks/{r.task}/{r.metric}/base": r.base, f"benchmarks/{r.task}/{r.metric}/tuned": r.tuned}
        )
    return True


def benchmarks_after_training(model, tokenizer, cfg, *, data_format) -> Benchmarks | None:
    """The notebook's benchmark cell (and ``pipeline.run_training``'s): ``evaluate_benchmarks`` on
    ``cfg.benchmark_tasks`` with the run's format, ``cfg.benchmark_limit``, ``per_device_eval_batch_size`` and
    ``output_dir``, its table printed; nothing (None) when ``benchmark_tasks`` is empty (the default).

    Args:
        model, tokenizer: the trained PEFT model and its tokenizer. cfg: the run's ``FinetuneConfig``.
        data_format: the run's format object (``formats.data_format(cfg)``).

    Raises:
        As ``evaluate_benchmarks``.
    """
    if not cfg.benchmark_tasks:
        return None
    benchmarks = evaluate_benchmarks(
        model,
        tokenizer,
        list(cfg.benchmark_tasks),
        data_format=data_format,
        limit=cfg.benchmark_limit,
        batch_size=cfg.per_device_eval_batch_size,
        output_dir=cfg.output_dir,
    )
    print(f"benchmarks, adapter off (base) and on (tuned), in {benchmarks.settings['seconds']:.0f} s:")
    print(benchmarks.table())
    return benchmarks

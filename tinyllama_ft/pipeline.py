"""The whole run as one function: what ``tinyllama-ft train`` executes.

``run_training`` calls the same helpers in the same order as the notebooks' cells; what differs between data
formats and methods (SFT, DPO, ORPO, KTO, GRPO) is the object ``formats.data_format(cfg)`` returns (tests/test_cli.py
compares their losses). Under ``accelerate launch`` every process trains, and only the main one prepares the
output folder, logs, saves and writes the summary (tests/test_ddp.py).
"""

from __future__ import annotations

import os
from typing import Any

from .config.finetune import FinetuneConfig


def run_training(cfg: FinetuneConfig, *, hardware=None) -> dict[str, Any]:
    """Fine-tune, save the adapter, reload it, answer ``cfg.prompts`` and write the run summary, for every
    ``dataset_format`` and ``method``.

    What differs between Alpaca rows, conversations, preference rows and GRPO prompts is the format object
    (``formats.data_format(cfg)``) and the trainer (``sft_trainer.build_trainer``); every step runs for all, in the
    notebooks' order.

    Args:
        cfg: the run's configuration (``sources.config_from_recipe`` for the command line).
        hardware: injected machine facts; default ``hardware.detect_hardware()``.

    Returns:
        The run summary, as written to ``<output_dir>/run_summary.json`` (a conversation run adds ``"chat"``:
        ``formats.ConversationFormat.summary_fields``; a preference run ``"preference"``: the method, the reference,
        held-out preference accuracy, margins and log-probabilities before and after; a GRPO run ``"grpo"``: held-out
        accuracy, format compliance, each reward's mean and completion length before and after, each logged step's
        reward means); in a non-main process of a multi-process launch,
        ``{"process_index", "global_step", "train_loss"}`` (it writes nothing).

    Raises:
        Whatever the helpers raise (``prepare_output_dir`` refusing an earlier run or a locked folder, a
        data error naming the row, an out-of-memory message naming the knobs, a missing quantizer for an
        export format before training), unchanged. The output folder's run lock is released however the run
        ends. A non-main process of a launch raises ``distributed.MainProcessError`` when the main process
        failed to install or prepare the folder.
    """
    # up to the plan, as the notebooks' first cells: nothing that imports transformers, TRL or PEFT (install may
    # replace them; an Unsloth plan imports unsloth before them: plan_run)
    from .config.secrets import export_secrets
    from .data.formats import check_sources, data_format
    from .export.adapter_export import check_export_tools, describe_exports, export_adapter
    from .machine.distributed import is_main_process, main_process_first, same_on_all_processes
    from .machine.hardware import cap_gpu_memory, detect_hardware
    from .machine.install import install
    from .machine.lock import release_run_lock
    from .train.plan import plan_run

    fmt = data_format(cfg)
    print("secrets:", export_secrets())
    hardware = hardware or detect_hardware()
    print(hardware)
    with main_process_first("install"):  # one pip at a time
        install(with_wandb=cfg.report_to == "wandb", hardware=hardware)
    plan = plan_run(cfg, hardware)
    print(plan.summary())

    from accelerate.utils import release_memory

    from .data.instructions import split_train_eval
    from .evaluate.benchmarks import benchmarks_after_training
    from .evaluate.held_out import held_out_check, heldout_summary
    from .evaluate.side_by_side import answers_table, compare_answers
    from .infer.generation import as_samples, stream
    from .models.adapters import load_adapter, save_adapter
    from .models.loading import load_model
    from .models.lora import add_lora, trainable_parameters
    from .models.run_record import adapter_record
    from .train.loop import train_and_evaluate
    from .train.output_dir import ensure_drive, prepare_output_dir
    from .train.plotting import loss_curve
    from .train.trainers import build_trainer, training_plan
    from .train.summary import build_run_summary, write_run_summary
    from .train.tracking import finish_tracking, start_tracking

    check_export_tools(cfg.export_formats)  # a quantizer missing for gguf_q4_k_m stops before training, not after
    split = (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing)
    same_on_all_processes(
        split,
        what="the plan's batch x accumulation and checkpointing (each process sizes them "
        "to its GPU's free memory: gpu_memory_cap_gib plans all for the same)",
    )
    ensure_drive(cfg.output_dir, mount_drive=cfg.mount_drive, colab=hardware.colab)
    check_sources(cfg)  # a missing path or an unreachable Hub id: one line, before output_dir is touched
    with main_process_first("loading the dataset"):  # a Hub dataset is downloaded into the cache once
        rows, data_report = fmt.load(cfg)
    with main_process_first("preparing output_dir") as main:  # the lock, the check, the clearing: main only
        if main:
            prepared = prepare_output_dir(cfg, data_fingerprint=fmt.fingerprint(rows))
            print(f"output_dir {cfg.output_dir!r}: {prepared}")
    try:
        cap_gpu_memory(cfg.gpu_memory_cap_gib, hardware)
        model, tokenizer = load_model(
            cfg.model_name,
            max_seq_length=cfg.max_seq_length,
            dtype=plan.dtype,
            load_in_4bit=plan.load_in_4bit,
            backend=plan.backend,
            attn_implementation=plan.attn_implementation,
            trust_remote_code=cfg.trust_remote_code,
            hardware=hardware,
        )
        target_modules = fmt.prepare(model, tokenizer, cfg)  # a chat template, stop ids, pad token: conversations
        check_export_tools(cfg.export_formats, whole_modules=fmt.trains_embeddings)  # a template's new tokens
        model = add_lora(
            model,
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            lora_bias=cfg.lora_bias,
            target_modules=target_modules,
            use_rslora=cfg.use_rslora,
            gradient_checkpointing=plan.gradient_checkpointing,
            seed=cfg.seed,
            backend=plan.backend,
            train_embeddings=fmt.trains_embeddings,
            adapter_name_or_path=cfg.adapter_name_or_path,  # a preference run may continue a saved adapter
        )
        trainable = trainable_parameters(model)
        print(f"trainable parameters: {trainable[0]:,} of {trainable[1]:,}")
        rows = fmt.tokenize(rows, tokenizer, cfg, data_report)
        train_dataset, eval_dataset = split_train_eval(
            rows,
            test_size=cfg.test_size,
            seed=cfg.seed,
            min_test_rows=fmt.min_test_rows,
            first=fmt.held_out_first,
            eval_split=cfg.eval_split,
        )
        print(
            f"train rows: {len(train_dataset)}, eval rows: {len(eval_dataset) if eval_dataset else 0}"
            + (f" (the {cfg.eval_split} split)" if cfg.eval_split and eval_dataset else "")
        )
        print(fmt.example(tokenizer, train_dataset[0]))
        tracking = start_tracking(
            report_to=cfg.report_to if main else "none",
            wandb_project=cfg.wandb_project,
            wandb_run_name=cfg.wandb_run_name,
            output_dir=cfg.output_dir,
            config=cfg.to_dict(),
        )  # one line: how the run logs
        trainer = build_trainer(
            model=model, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset, cfg=cfg, plan=plan
        )
        work = training_plan(trainer)
        print(f"planned: {work['planned_steps']} optimizer steps, about {work['planned_tokens']:,} tokens")
        print(fmt.check_first_batch(trainer))
        held_out = fmt.held_out_rows(eval_dataset)
        checks = {"data_format": fmt, "max_seq_length": cfg.max_seq_length}
        if main:  # the held-out checks and answers are the main process's (the other processes return after training)
            before = held_out_check(model, tokenizer, held_out, **checks)
            if before is not None:  # None: no held-out rows (held_out_check said so)
                print(f"before: {before}")
        results = train_and_evaluate(trainer, resume=cfg.resume)
        if not is_main_process():
            return {
                "process_index": trainer.args.process_index,
                "global_step": results["global_step"],
                "train_loss": results["train_loss"],
            }
        after = held_out_check(model, tokenizer, held_out, **checks)
        if after is not None:
            print(f"after:  {after}")
        side_by_side = compare_answers(model, tokenizer, held_out[:4], data_format=fmt)
        if side_by_side:  # [] without held-out rows (compare_answers said so)
            print(answers_table(side_by_side))
        benchmarks_after_training(model, tokenizer, cfg, data_format=fmt)  # benchmark_tasks: [] runs none
        finish_tracking(tracking)
        adapter_dir = save_adapter(
            model, tokenizer, cfg.resolved_adapter_dir, record=adapter_record(cfg, plan, data_format=fmt)
        )
        print(f"adapter saved to {adapter_dir}")
        exports = export_adapter(
            adapter_dir=adapter_dir,
            formats=cfg.export_formats,
            output_dir=cfg.output_dir,
            hardware=hardware,
            trust_remote_code=cfg.trust_remote_code,
        )  # the prompt format as recorded: Alpaca's template, or the chat adapter's own
        print(describe_exports(exports))
        trainer, model = release_memory(trainer, model)
        model, tokenizer = load_adapter(
            adapter_dir,
            backend=plan.backend,
            hardware=hardware,  # the rest as recorded
            trust_remote_code=cfg.trust_remote_code,
            merged=cfg.reload_merged,
        )
        streamed = stream(model, tokenizer, cfg.prompts, max_new_tokens=cfg.max_new_tokens, data_format=fmt)
        summary = build_run_summary(
            cfg=cfg,
            plan=plan,
            hardware=hardware,
            results=results,
            work=work,
            data_report=data_report,
            trainable=trainable,
            adapter_dir=adapter_dir,
            samples=as_samples(cfg.prompts, streamed),
            heldout=heldout_summary(before, after, side_by_side),
            **fmt.summary_fields(),
        )
        print("run summary:", write_run_summary(os.path.join(cfg.output_dir, "run_summary.json"), **summary))
        loss_curve(results["log_history"], os.path.join(cfg.output_dir, "loss_curve.png"))
    finally:
        release_run_lock(cfg.output_dir)
    return summary

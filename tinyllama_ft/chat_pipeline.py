"""The chat run as one function: what ``tinyllama-ft train`` executes for conversations (``dataset_format`` not
``"alpaca"``; ``pipeline.run_training`` hands over to it).

``run_chat_training`` calls the same helpers, with the same arguments, in the same order as the cells of
``notebooks/finetune_chat.ipynb`` (one call per cell there), as ``pipeline.run_training`` does for the first
notebook: conversations (or Alpaca rows as one-turn conversations) rendered with the model's chat template,
loss on the assistant turns only, then save, reload and answer through the template.
"""

from __future__ import annotations

import os
from typing import Any

from .config.finetune import FinetuneConfig


def run_chat_training(cfg: FinetuneConfig, *, hardware=None) -> dict[str, Any]:
    """Fine-tune on conversations, save the adapter, reload it, answer ``cfg.prompts`` and write the run summary.

    Args:
        cfg: the run's configuration; ``dataset_format`` is a conversation layout (``"auto"``, ``"messages"``,
            ``"sharegpt"``), ``chat_template`` / ``assistant_only_loss`` / ``extra_datasets`` apply.
        hardware: injected machine facts; default ``hardware.detect_hardware()``.

    Returns:
        The run summary, as written to ``<output_dir>/run_summary.json``: ``build_run_summary``'s fields plus
        ``"chat"`` (family, end-of-turn token, stop ids, pad token, tokenized-row counts, the collated-batch
        check of ``chat_masks.assistant_supervision``).

    Raises:
        Whatever the helpers raise, unchanged (a bad row in strict mode, a template whose end-of-turn token the
        model does not stop on, every row left without a supervised token). The run lock is released however
        the run ends.
        ValueError: under a multi-process launch (``accelerate launch``): the chat run has no main-process-only
            rules yet (``pipeline.run_training`` has them), so every process would write the folder.
    """
    from .machine.distributed import world_size

    if world_size() > 1:
        raise ValueError(
            f"dataset_format={cfg.dataset_format!r}: chat training runs in one process only, not "
            f"under accelerate launch ({world_size()} processes); run tinyllama-ft train directly"
        )
    from accelerate.utils import release_memory

    from .config.secrets import export_secrets
    from .data.chat_masks import assistant_supervision, describe_supervision, show_supervision, tokenize_conversations
    from .data.conversations import load_conversation_sources
    from .data.fingerprint import data_fingerprint
    from .data.instructions import split_train_eval
    from .export.adapter_export import check_export_tools, describe_exports, export_adapter
    from .infer.chat_generation import chat_generate, chat_stream
    from .infer.generation import as_samples, format_answers
    from .machine.hardware import cap_gpu_memory, detect_hardware
    from .machine.install import install
    from .machine.lock import release_run_lock
    from .models.adapters import load_adapter, save_adapter
    from .models.families import prepare_family
    from .models.loading import load_model
    from .models.lora import add_lora, trainable_parameters
    from .models.run_record import adapter_record
    from .train.loop import train_and_evaluate
    from .train.output_dir import ensure_drive, prepare_output_dir
    from .train.plan import plan_run
    from .train.plotting import loss_curve
    from .train.sft_trainer import build_trainer, training_plan
    from .train.summary import build_run_summary, write_run_summary
    from .train.tracking import finish_tracking, start_tracking

    print("secrets:", export_secrets())
    hardware = hardware or detect_hardware()
    print(hardware)
    install(with_wandb=cfg.report_to == "wandb", hardware=hardware)
    plan = plan_run(cfg, hardware)
    print(plan.summary())
    ensure_drive(cfg.output_dir, mount_drive=cfg.mount_drive, colab=hardware.colab)
    rows, data_report = load_conversation_sources(
        [cfg.dataset, *cfg.extra_datasets],
        split=cfg.dataset_split,
        config=cfg.dataset_config,
        dataset_format=cfg.dataset_format,
        strict=cfg.strict,
    )
    fingerprint = data_fingerprint(rows, fields=("messages",))
    print(f"output_dir {cfg.output_dir!r}: {prepare_output_dir(cfg, data_fingerprint=fingerprint)}")
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
        family = prepare_family(model, tokenizer, chat_template=cfg.chat_template, max_seq_length=cfg.max_seq_length)
        print(family)
        check_export_tools(cfg.export_formats, whole_modules=bool(family.added_token_ids))  # before training
        model = add_lora(
            model,
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            lora_bias=cfg.lora_bias,
            target_modules=family.target_modules,
            use_rslora=cfg.use_rslora,
            gradient_checkpointing=plan.gradient_checkpointing,
            seed=cfg.seed,
            backend=plan.backend,
            train_embeddings=bool(family.added_token_ids),
        )  # a named template's new tokens
        trainable = trainable_parameters(model)
        print(f"trainable parameters: {trainable[0]:,} of {trainable[1]:,}")
        tokenized, token_report = tokenize_conversations(
            rows,
            tokenizer,
            max_seq_length=cfg.max_seq_length,
            long_rows=cfg.long_rows,
            assistant_only_loss=cfg.assistant_only_loss,
            strict=cfg.strict,
        )
        train_dataset, eval_dataset = split_train_eval(tokenized, test_size=cfg.test_size, seed=cfg.seed)
        print(f"train conversations: {len(train_dataset)}, held out: {len(eval_dataset) if eval_dataset else 0}")
        print(show_supervision(tokenizer, train_dataset[0]["input_ids"], train_dataset[0]["assistant_masks"]))
        tracking = start_tracking(
            report_to=cfg.report_to,
            wandb_project=cfg.wandb_project,
            wandb_run_name=cfg.wandb_run_name,
            output_dir=cfg.output_dir,
            config=cfg.to_dict(),
        )
        print(tracking)
        trainer = build_trainer(
            model=model, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset, cfg=cfg, plan=plan
        )
        work = training_plan(trainer)
        print(f"planned: {work['planned_steps']} optimizer steps, about {work['planned_tokens']:,} tokens")
        check = assistant_supervision(trainer, family.stop_token_ids[0])
        print(describe_supervision(check, end_of_turn=family.end_of_turn))
        results = train_and_evaluate(trainer, resume=cfg.resume)
        finish_tracking(tracking)
        adapter_dir = save_adapter(
            model, tokenizer, cfg.resolved_adapter_dir, record=adapter_record(cfg, plan, family=family)
        )
        print(f"adapter saved to {adapter_dir}")
        exports = export_adapter(
            adapter_dir=adapter_dir,
            formats=cfg.export_formats,
            output_dir=cfg.output_dir,
            hardware=hardware,
            trust_remote_code=cfg.trust_remote_code,
        )  # its own chat template
        print(describe_exports(exports))
        trainer, model = release_memory(trainer, model)
        model, tokenizer = load_adapter(
            adapter_dir,
            backend=plan.backend,
            hardware=hardware,  # the rest as recorded
            trust_remote_code=cfg.trust_remote_code,
            merged=cfg.reload_merged,
        )
        answers = chat_generate(
            model, tokenizer, list(cfg.prompts), max_new_tokens=cfg.max_new_tokens, stop_token_ids=family.stop_token_ids
        )
        print(format_answers(cfg.prompts, answers))
        streamed = chat_stream(
            model, tokenizer, list(cfg.prompts), max_new_tokens=cfg.max_new_tokens, stop_token_ids=family.stop_token_ids
        )
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
        )
        summary["chat"] = chat_summary(family, token_report=token_report, supervision=check)
        print(write_run_summary(os.path.join(cfg.output_dir, "run_summary.json"), **summary))
        loss_curve(results["log_history"], os.path.join(cfg.output_dir, "loss_curve.png"))
    finally:
        release_run_lock(cfg.output_dir)
    return summary


def chat_summary(family, *, token_report, supervision: dict[str, int]) -> dict[str, Any]:
    """The chat part of ``run_summary.json``.

    Args:
        family: ``families.prepare_family`` output.
        token_report: the ``data.DataReport`` of ``chat_masks.tokenize_conversations``.
        supervision: ``chat_masks.assistant_supervision`` counts.

    Returns:
        ``{"family", "end_of_turn", "stop_token_ids", "pad_token", "target_modules", "rows_tokenized",
        "rows_kept", "rows_dropped" (per kind), "supervision"}``.
    """
    return {
        "family": family.family,
        "end_of_turn": family.end_of_turn,
        "stop_token_ids": family.stop_token_ids,
        "pad_token": family.pad_token,
        "target_modules": list(family.target_modules),
        "rows_tokenized": token_report.total,
        "rows_kept": token_report.kept,
        "rows_dropped": token_report.by_reason,
        "supervision": supervision,
    }

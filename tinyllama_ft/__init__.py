"""tinyllama-ft: LoRA / QLoRA fine-tuning of small open LLMs on instruction data, one helper per notebook cell.

Importing the package imports neither torch nor transformers (the install cell runs first; ``unsloth`` must be
imported before ``transformers``); the names below load from their modules on first use. The subpackages are
layers, lowest first, a module importing only from its own layer and those below (tests/test_package.py):
``machine``, ``config``, ``models``, ``data``, ``infer``, ``evaluate``, ``train``, ``export``, then ``pipeline``
and ``cli``.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "FinetuneConfig": "config.finetune",
    "DEFAULTS": "config.finetune",
    "config_from_notebook": "config.sources",
    "config_from_recipe": "config.sources",
    "Hardware": "machine.hardware",
    "detect_hardware": "machine.hardware",
    "cap_gpu_memory": "machine.hardware",
    "install": "machine.install",
    "plan_install": "machine.install",
    "resolve_dtype": "models.precision",
    "RunPlan": "train.plan",
    "plan_run": "train.plan",
    "load_model": "models.loading",
    "add_lora": "models.lora",
    "trainable_parameters": "models.lora",
    "format_prompt": "data.alpaca_prompts",
    "make_formatting_func": "data.alpaca_prompts",
    "load_instruction_data": "data.instructions",
    "split_train_eval": "data.instructions",
    "length_report": "data.lengths",
    "apply_long_rows": "data.lengths",
    "tokenize_dataset": "data.tokenization",
    "ensure_drive": "train.output_dir",
    "prepare_output_dir": "train.output_dir",
    "release_run_lock": "machine.lock",
    "data_fingerprint": "data.fingerprint",
    "last_checkpoint": "train.checkpoints",
    "expand_path": "machine.paths",
    "start_tracking": "train.tracking",
    "finish_tracking": "train.tracking",
    "export_secrets": "config.secrets",
    "build_trainer": "train.sft_trainer",
    "training_plan": "train.sft_trainer",
    "eos_supervision": "data.eos_check",
    "eos_first_batch": "data.eos_check",
    "train_and_evaluate": "train.loop",
    "save_adapter": "models.adapters",
    "load_adapter": "models.adapters",
    "generate": "infer.generation",
    "stream": "infer.generation",
    "build_run_summary": "train.summary",
    "write_run_summary": "train.summary",
    "loss_curve": "train.plotting",
    "run_training": "pipeline",
    "load_conversations": "data.conversations",
    "load_conversation_sources": "data.conversations",
    "prepare_family": "models.families",
    "set_chat_template": "models.chat_templates",
    "tokenize_conversations": "data.chat_masks",
    "assistant_supervision": "data.chat_masks",
    "chat_generate": "infer.chat_generation",
    "chat_stream": "infer.chat_generation",
    "data_format": "data.formats",
    "load_preference_data": "data.preferences",
    "tokenize_preferences": "data.preference_tokens",
    "build_preference_trainer": "train.preference_trainer",
    "preference_scores": "evaluate.preference_checks",
    "arithmetic_problems": "data.arithmetic",
    "load_prompt_rows": "data.grpo_prompts",
    "resolve_rewards": "train.rewards",
    "build_grpo_trainer": "train.grpo_trainer",
    "grpo_scores": "evaluate.grpo_checks",
    "generate_answers": "infer.core",
    "stream_answers": "infer.core",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'tinyllama_ft' has no attribute {name!r}")

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

#: module -> the names it exports, loaded on first use.
_MODULES = {
    "config.finetune": "FinetuneConfig DEFAULTS",
    "config.sources": "config_from_notebook config_from_recipe",
    "machine.hardware": "Hardware detect_hardware cap_gpu_memory",
    "machine.install": "install plan_install",
    "models.precision": "resolve_dtype",
    "train.plan": "RunPlan plan_run",
    "models.loading": "load_model",
    "models.lora": "add_lora trainable_parameters",
    "data.alpaca_prompts": "format_prompt make_formatting_func",
    "data.instructions": "load_instruction_data split_train_eval",
    "data.lengths": "length_report apply_long_rows",
    "data.tokenization": "tokenize_dataset",
    "train.output_dir": "ensure_drive prepare_output_dir",
    "machine.lock": "release_run_lock",
    "data.fingerprint": "data_fingerprint",
    "train.checkpoints": "last_checkpoint",
    "machine.paths": "expand_path",
    "train.tracking": "start_tracking finish_tracking",
    "config.secrets": "export_secrets",
    "train.trainers": "build_trainer training_plan",
    "data.eos_check": "eos_supervision eos_first_batch",
    "train.loop": "train_and_evaluate",
    "models.adapters": "save_adapter load_adapter",
    "infer.generation": "generate stream",
    "train.summary": "build_run_summary write_run_summary",
    "train.plotting": "loss_curve",
    "pipeline": "run_training",
    "data.conversations": "load_conversations load_conversation_sources",
    "models.families": "prepare_family",
    "models.chat_templates": "set_chat_template",
    "data.chat_masks": "tokenize_conversations assistant_supervision",
    "infer.chat_generation": "chat_generate chat_stream",
    "data.formats": "data_format",
    "data.preferences": "load_preference_data",
    "data.preference_tokens": "tokenize_preferences",
    "train.preference_trainer": "build_preference_trainer",
    "evaluate.preference_checks": "preference_scores",
    "data.arithmetic": "arithmetic_problems",
    "data.grpo_prompts": "load_prompt_rows",
    "train.rewards": "resolve_rewards",
    "train.grpo_trainer": "build_grpo_trainer",
    "evaluate.grpo_checks": "grpo_scores",
    "infer.core": "generate_answers stream_answers",
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names.split()}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'tinyllama_ft' has no attribute {name!r}")

"""tinyllama-ft: LoRA / QLoRA fine-tuning of small open LLMs on instruction data, one helper per notebook cell.

Importing the package is cheap and imports neither torch nor transformers, so the install cell can run
first and ``unsloth`` can be imported before ``transformers`` (it patches it). Each helper lives in one
module; the names below are loaded from there on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "FinetuneConfig": "config",
    "DEFAULTS": "config",
    "config_from_notebook": "params",
    "config_from_recipe": "params",
    "Hardware": "hardware",
    "detect_hardware": "hardware",
    "cap_gpu_memory": "hardware",
    "install": "install",
    "plan_install": "install",
    "resolve_dtype": "precision",
    "RunPlan": "plan",
    "plan_run": "plan",
    "load_model": "modeling",
    "add_lora": "lora",
    "trainable_parameters": "lora",
    "format_prompt": "prompts",
    "make_formatting_func": "prompts",
    "load_instruction_data": "data",
    "split_train_eval": "data",
    "length_report": "lengths",
    "apply_long_rows": "lengths",
    "tokenize_dataset": "tokenization",
    "ensure_drive": "runs",
    "prepare_output_dir": "runs",
    "release_run_lock": "lock",
    "data_fingerprint": "fingerprint",
    "last_checkpoint": "checkpoints",
    "expand_path": "paths",
    "start_tracking": "tracking",
    "finish_tracking": "tracking",
    "export_secrets": "credentials",
    "build_trainer": "trainer",
    "training_plan": "trainer",
    "eos_supervision": "eos",
    "eos_first_batch": "eos",
    "train_and_evaluate": "training",
    "save_adapter": "adapters",
    "load_adapter": "adapters",
    "generate": "generation",
    "stream": "generation",
    "build_run_summary": "summary",
    "write_run_summary": "summary",
    "loss_curve": "plotting",
    "run_training": "pipeline",
    "load_conversations": "conversations",
    "load_conversation_sources": "conversations",
    "prepare_family": "families",
    "set_chat_template": "chat_templates",
    "tokenize_conversations": "chat_masks",
    "assistant_supervision": "chat_masks",
    "chat_generate": "chat_generation",
    "chat_stream": "chat_generation",
    "run_chat_training": "chat_pipeline",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'tinyllama_ft' has no attribute {name!r}")

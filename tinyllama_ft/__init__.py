"""tinyllama-ft: LoRA / QLoRA fine-tuning of small open LLMs on instruction data, one helper per notebook cell.

Importing the package is cheap and imports neither torch nor transformers, so the install cell can run
first and ``unsloth`` can be imported before ``transformers`` (it patches it). Each helper lives in one
module; the names below are loaded from there on first use.

The subpackages are layers, lowest first; a module imports from its own layer and those below, never
from one above (tests/test_package.py checks it with scripts/import_graph.py):

    machine   hardware, processes of a launch, notebook kernel, install, paths, lock, temporaries, preflight
    config    FinetuneConfig, coercion and ConfigError, recipes and notebook parameters, secrets
    models    loading, LoRA, adapters and their record, demo model, GGUF sources, families, chat templates
    data      row files, Alpaca rows and conversations, prompts, tokenization, long rows, EOS check, and
              ``formats`` (one object per dataset format: what differs between Alpaca rows and conversations)
    infer     the generation core (``core``: batching, stop tokens, decoder choice, streaming), Alpaca and chat
              prompts on it, the try-out box (``fast/``: the CUDA-graph and compiled decoders)
    evaluate  held-out checks, base vs. tuned answers
    train     plan, trainer, loop, checkpoints, output folder, tracking, progress, summary
    export    merged, GGUF, Ollama, Hub
    (top)     ``pipeline`` (the run, for every dataset format), ``cli``
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
    "generate_answers": "infer.core",
    "stream_answers": "infer.core",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'tinyllama_ft' has no attribute {name!r}")

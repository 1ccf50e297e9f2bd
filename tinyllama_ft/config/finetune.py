"""One configuration object for a fine-tuning run: every default of the package is written here, once.

``FinetuneConfig`` is one flat dataclass: its field names are the notebook's parameters, the command
line's flags (``tinyllama-ft train --lora_r 8``) and the recipes' YAML keys (``tinyllama_ft/recipes``).
Fields are grouped by section comments (model, LoRA, data, training, logging, generation); each carries
``metadata={"section": ..., "identity": ...}``: ``identity=True`` marks the fields that change what is
computed, which ``output_dir.run_identity`` records for resuming. Each field's docstring gives its unit and the
source of its default: "the article" (``shared/ARTICLE.md``, "Fine-tuning a Tiny-Llama model with
Unsloth"), "Unsloth's notebooks", "TRL's default" or "this package".

Helpers take their defaults from ``DEFAULTS = FinetuneConfig()`` (``add_lora(model)`` is the article's
LoRA), never from a re-typed number.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from ..machine.paths import expand_path
from .coercion import ConfigError, coerce_value, unknown_keys_error
from .packing import LONG_ROWS, resolve_packing_strategy

#: The seven projection modules of a Llama decoder layer that the article's LoRA cell targets.
LLAMA_TARGET_MODULES: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)

BACKENDS = ("auto", "unsloth", "transformers")
DTYPES = (None, "bfloat16", "float16", "float32")
TEMPLATES = ("alpaca", "alpaca_no_input")
REPORT_TO = ("wandb", "none")
PACKING_STRATEGIES = ("bfd", "bfd_split", "wrapped")
RECIPES = ("fast", "article")
#: Export formats (``adapter_export.export_adapter``): a merged 16-bit model, GGUF files for llama.cpp / Ollama, a GGUF LoRA.
EXPORT_FORMATS = ("merged_16bit", "gguf_f16", "gguf_bf16", "gguf_q8_0", "gguf_q4_k_m", "gguf_lora")
#: ``dataset_format`` values: "alpaca" is the article's prompt path; the others are conversations (chat notebook).
DATASET_FORMATS = ("alpaca", "auto", "messages", "sharegpt")
#: Named ``chat_template`` values (``chat_templates.NAMED_TEMPLATES``), besides "auto" and a Jinja string.
NAMED_CHAT_TEMPLATES = ("chatml", "zephyr", "llama-3")
SECTIONS = ("model", "lora", "data", "training", "logging", "generation")
#: Fields holding a local path (or a Hub id): ``~`` and ``$VARS`` are expanded (``paths.expand_path``).
PATH_FIELDS = ("model_name", "dataset", "output_dir", "adapter_dir")


def _field(default, section: str, *, identity: bool, comma_separated: bool = False):
    return field(
        default=default, metadata={"section": section, "identity": identity, "comma_separated": comma_separated}
    )


@dataclass
class FinetuneConfig:
    """Every knob of a run; the defaults are the article's recipe unless a field says otherwise.

    The path fields (``PATH_FIELDS``) are stored with ``~`` and ``$VARS`` expanded, so ``run_config.json``
    and every helper see the folder a shell would.

    Raises:
        ConfigError (a ValueError): from ``__post_init__`` when a value has the wrong type (after the
            string coercions of ``coercion.coerce_value``) or is out of range; the message names the field.
    """

    # --- model (article cell 2) ---
    model_name: str = _field("unsloth/tinyllama-bnb-4bit", "model", identity=True)
    """Hub id or local folder of the base model; the article's 4-bit TinyLlama-1.1B."""
    max_seq_length: int = _field(4096, "model", identity=True)
    """Tokens per training sequence (packed window); the article's 4096, above TinyLlama's 2048 positions:
    linear RoPE scaling, as Unsloth applies it."""
    dtype: str | None = _field(None, "model", identity=True)
    """Compute dtype: None = bf16 on compute capability >= 8.0, fp16 below, fp32 on a CPU (with bf16 autocast
    where the CPU computes bf16 natively, TRL's default); or "bfloat16" / "float16" / "float32"; the article's None."""
    load_in_4bit: bool = _field(True, "model", identity=True)
    """4-bit NF4 base weights on CUDA (QLoRA); ignored, with one message, on a CPU; the article's True."""
    trust_remote_code: bool = _field(False, "model", identity=True)
    """Run Python code shipped in the model's repository; off unless asked (this package)."""
    recipe: str = _field("fast", "model", identity=False)
    """"fast": the article's math executed faster (kernels, micro-batch sized to GPU memory, checkpointing only
    when needed; ``plan.plan_run``); "article": the article's cell values literally (this package)."""
    backend: str = _field("auto", "model", identity=False)
    """"auto", "unsloth" or "transformers"; auto: the plan's pick (Unsloth on a T4, transformers on a bf16
    GPU with the fast recipe and on a CPU) (this package)."""
    attn_implementation: str | None = _field(None, "model", identity=False)
    """transformers' attention kernel ("sdpa", "flex_attention"); None: the plan's pick (this package)."""
    use_liger_kernel: bool = _field(False, "model", identity=False)
    """Liger's fused kernels; the fast recipe turns them on on a bf16 GPU when installed (this package)."""
    gpu_memory_cap_gib: float = _field(0.0, "model", identity=False)
    """Cap on this process's CUDA memory in GiB; 0 = no cap, 15 imitates a T4 (this package)."""

    # --- LoRA (article cell 3) ---
    lora_r: int = _field(32, "lora", identity=True)
    """Adapter rank; the article's 32."""
    lora_alpha: int = _field(32, "lora", identity=True)
    """Scaling numerator: the update is scaled by lora_alpha / lora_r; the article's 32."""
    lora_dropout: float = _field(0.0, "lora", identity=True)
    """Dropout probability on the adapter input; the article's 0."""
    lora_bias: str = _field("none", "lora", identity=True)
    """Bias training: "none", "all" or "lora_only"; the article's "none"."""
    target_modules: tuple[str, ...] = _field(LLAMA_TARGET_MODULES, "lora", identity=True, comma_separated=True)
    """Module names to adapt (a list, or one comma-separated string); the article's seven Llama projections."""
    use_rslora: bool = _field(False, "lora", identity=True)
    """Rank-stabilised scaling lora_alpha / sqrt(lora_r); the article's False."""
    gradient_checkpointing: bool = _field(True, "lora", identity=False)
    """Recompute activations in the backward pass (less memory, slower); the article's True, the fast
    recipe turns it off when memory allows."""

    # --- data (article cell 4) ---
    dataset: str = _field("yahma/alpaca-cleaned", "data", identity=True)
    """Hub dataset id, or a local .json / .jsonl / .csv / .parquet file; the article's Alpaca-cleaned."""
    dataset_split: str = _field("train", "data", identity=True)
    """Split of a Hub dataset; the article's "train"."""
    dataset_config: str | None = _field(None, "data", identity=True)
    """Configuration name of a Hub dataset; None for the default (this package)."""
    instruction_column: str = _field("instruction", "data", identity=True)
    """Column holding the instruction; Alpaca's "instruction"."""
    input_column: str = _field("input", "data", identity=True)
    """Column holding the optional context; Alpaca's "input"."""
    output_column: str = _field("output", "data", identity=True)
    """Column holding the response; Alpaca's "output"."""
    template: str = _field("alpaca", "data", identity=True)
    """Prompt template: "alpaca" (the article's, Input block always) or "alpaca_no_input" (original Alpaca's
    no-input variant for empty inputs)."""
    test_size: float = _field(0.004, "data", identity=True)
    """Fraction of rows held out for eval_loss; the article's 0.004."""
    long_rows: str = _field("drop", "data", identity=True)
    """Rows longer than max_seq_length tokens (prompt + response + EOS), counted before training: "drop" them,
    "truncate" (the trainer cuts them, EOS lost) or "split" them over windows (bfd_split); a row whose prompt
    alone fills the window is always dropped (this package)."""
    strict: bool = _field(False, "data", identity=False)
    """Raise on the first bad row instead of dropping and counting bad rows (this package)."""
    dataset_num_proc: int | None = _field(2, "data", identity=False)
    """Processes TRL tokenizes with; the article's 2, None = in this process."""
    dataset_format: str = _field("alpaca", "data", identity=True)
    """Layout of the rows: "alpaca" (instruction/input/output with the Alpaca prompt: the article's notebook), or
    conversations for the chat notebook: "messages" (OpenAI-style role/content turns), "sharegpt"
    (a conversations column of from/value turns), "auto" (each source's layout read from its first row; Alpaca rows become
    one-turn conversations) (this package)."""
    extra_datasets: tuple[str, ...] = _field((), "data", identity=True, comma_separated=True)
    """Conversations only: more sources (Hub ids or local files) appended to dataset, each read with
    dataset_format (this package)."""
    chat_template: str = _field("auto", "data", identity=True)
    """Conversations only: "auto" (the tokenizer's own; a base model without one gets its family's: Zephyr for
    Llama-2/TinyLlama, Llama-3's, ChatML for Qwen/SmolLM2), "chatml", "zephyr", "llama-3", or a Jinja string;
    EOS and stop tokens follow it (this package)."""
    assistant_only_loss: bool = _field(True, "data", identity=True)
    """Conversations only: loss on every assistant turn and its end-of-turn token, label -100 on system/user
    turns and the template's markup; False: every token (this package; TRL's assistant_only_loss, from our own masks)."""

    # --- training (article cells 6-7) ---
    learning_rate: float = _field(2e-5, "training", identity=True)
    """Peak learning rate; the article's 2e-5."""
    lr_scheduler_type: str = _field("linear", "training", identity=True)
    """Learning-rate schedule after warmup; the article's "linear"."""
    warmup_ratio: float = _field(0.1, "training", identity=True)
    """Fraction of the steps spent warming up; the article's 0.1."""
    weight_decay: float = _field(0.1, "training", identity=True)
    """AdamW weight decay; the article's 0.1."""
    optim: str | None = _field(None, "training", identity=True)
    """Optimizer; None: the article's "adamw_8bit" on CUDA, "adamw_torch" on a CPU (bitsandbytes needs CUDA)."""
    per_device_train_batch_size: int = _field(2, "training", identity=False)
    """Sequences per micro-batch; the article's 2 (the fast recipe re-splits the effective batch). Under
    accelerate launch with N processes, this x gradient_accumulation_steps is the global batch: each process
    takes 1/N of it."""
    gradient_accumulation_steps: int = _field(4, "training", identity=False)
    """Micro-batches per optimizer step; the article's 4: effective batch 2 x 4 = 8 sequences."""
    per_device_eval_batch_size: int = _field(2, "training", identity=False)
    """Sequences per evaluation batch; the article's 2."""
    max_steps: int = _field(60, "training", identity=False)
    """Optimizer steps; -1 runs num_train_epochs (the article's full epoch); 60 as Unsloth's notebooks."""
    num_train_epochs: float = _field(1.0, "training", identity=False)
    """Epochs when max_steps is -1; the article's 1."""
    packing: bool = _field(True, "training", identity=True)
    """Pack whole rows into max_seq_length windows without padding, each with its own position_ids; the
    article's True."""
    packing_strategy: str = _field("bfd", "training", identity=True)
    """TRL's packing: "bfd" (best-fit decreasing; TRL's default), "bfd_split" (long rows split) or "wrapped"
    (rows cut at window edges)."""
    completion_only_loss: bool = _field(True, "training", identity=True)
    """Loss on the response tokens and the EOS after them only (TRL's name; what TRL's prompt/completion
    format, Axolotl and LLaMA-Factory default to). False: on the whole text, prompt included (the article's).
    Measured on SmolLM2-135M-Instruct, 20 LoRA steps of 4 x 256 tokens at lr 2e-4 on the demo rows
    (benchmarks/loss_choice.py, 60 held-out rows, 20 short-answer instructions, 128 new tokens): the whole-text
    loss lowered the mean EOS probability at the end of held-out responses 0.559 -> 0.418 and the answers that
    stop 19/20 -> 12/20; the response-only loss raised them to 0.668 and 20/20, with the lower held-out response
    loss (1.890 -> 1.805, vs 1.849)."""
    eval_steps: int = _field(20, "training", identity=False)
    """Evaluate every N optimizer steps (this package)."""
    save_steps: int = _field(20, "training", identity=False)
    """Checkpoint every N optimizer steps (this package)."""
    save_total_limit: int = _field(2, "training", identity=False)
    """Checkpoints kept; older ones are deleted; the article's 2."""
    seed: int = _field(3407, "training", identity=True)
    """Seed for the LoRA init, the split and the trainer; the article's 3407."""

    # --- logging and output (article cells 5 and 8) ---
    report_to: str = _field("wandb", "logging", identity=False)
    """"wandb" (the article's) or "none"."""
    wandb_project: str = _field("tiny-llama", "logging", identity=False)
    """W&B project; the article's "tiny-llama"."""
    wandb_run_name: str = _field("tiny-llama-unsloth-sft", "logging", identity=False)
    """W&B run name; the article's "tiny-llama-unsloth-sft"."""
    logging_steps: int = _field(1, "logging", identity=False)
    """Log the loss every N optimizer steps; the article's 1."""
    output_dir: str = _field("outputs", "logging", identity=False)
    """Folder for checkpoints, run_config.json, run_summary.json, loss_curve.png, W&B files; the article's "outputs"."""
    adapter_dir: str = _field("", "logging", identity=False)
    """Where the adapter is saved; "" = <output_dir>/lora_model (the article's folder name)."""
    resume: bool = _field(False, "logging", identity=False)
    """Continue from the last complete checkpoint in output_dir; the identity fields must match (this package)."""
    overwrite_output_dir: bool = _field(False, "logging", identity=False)
    """Delete an earlier run first: its checkpoint-* folders, run_summary.json, loss_curve.png, export/ (every exported
    format), the adapter folder (adapter_dir, inside output_dir or not), offline W&B runs and run_config.json in
    output_dir (this package)."""
    mount_drive: bool = _field(False, "logging", identity=False)
    """Mount Google Drive at /content/drive on Colab (automatic when output_dir is under it) (this package)."""
    export_formats: tuple[str, ...] = _field((), "logging", identity=False, comma_separated=True)
    """Formats exported after the adapter is saved, each to <output_dir>/export/<format>/: merged_16bit,
    gguf_f16, gguf_bf16, gguf_q8_0, gguf_q4_k_m (needs llama.cpp's quantizer), gguf_lora; empty = none (this package)."""

    # --- generation (article cells 9-10) ---
    prompts: tuple[str, ...] = _field(("What is the capital of France?",), "generation", identity=False)
    """Instructions answered after reloading the adapter (a list, or one string); the article's question."""
    max_new_tokens: int = _field(64, "generation", identity=False)
    """Most tokens generated per answer; the article's 64."""
    reload_merged: bool = _field(True, "generation", identity=False)
    """Reload the base in 16 bits with the adapter merged in (fast streaming), or False for the article's
    4-bit base with the adapter on top (this package)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            setattr(
                self,
                f.name,
                coerce_value(f.name, getattr(self, f.name), f.type, comma_separated=f.metadata["comma_separated"]),
            )
        if self.dtype == "auto":
            self.dtype = None
        for name in PATH_FIELDS:  # "~/runs/x", "$DATA/a.jsonl" as a shell would read them; a Hub id has no ~ or $
            setattr(self, name, expand_path(getattr(self, name)))
        checks = {
            "backend": self.backend in BACKENDS,
            "recipe": self.recipe in RECIPES,
            "dtype": self.dtype in DTYPES,
            "template": self.template in TEMPLATES,
            "report_to": self.report_to in REPORT_TO,
            "packing_strategy": self.packing_strategy in PACKING_STRATEGIES,
            "long_rows": self.long_rows in LONG_ROWS,
            "dataset_format": self.dataset_format in DATASET_FORMATS,
            "chat_template": self.chat_template in ("auto", *NAMED_CHAT_TEMPLATES) or "{%" in self.chat_template,
            "lora_bias": self.lora_bias in ("none", "all", "lora_only"),
            "max_seq_length": self.max_seq_length > 0,
            "lora_r": self.lora_r > 0,
            "lora_alpha": self.lora_alpha > 0,
            "lora_dropout": 0.0 <= self.lora_dropout < 1.0,
            "target_modules": len(self.target_modules) > 0,
            "prompts": len(self.prompts) > 0,
            "test_size": 0.0 <= self.test_size < 1.0,
            "learning_rate": self.learning_rate > 0,
            "per_device_train_batch_size": self.per_device_train_batch_size > 0,
            "per_device_eval_batch_size": self.per_device_eval_batch_size > 0,
            "gradient_accumulation_steps": self.gradient_accumulation_steps > 0,
            "max_steps": self.max_steps == -1 or self.max_steps > 0,
            "num_train_epochs": self.num_train_epochs > 0,
            "warmup_ratio": 0.0 <= self.warmup_ratio < 1.0,
            "eval_steps": self.eval_steps > 0,
            "save_steps": self.save_steps > 0,
            "save_total_limit": self.save_total_limit > 0,
            "logging_steps": self.logging_steps > 0,
            "gpu_memory_cap_gib": self.gpu_memory_cap_gib >= 0,
            "max_new_tokens": self.max_new_tokens > 0,
            "output_dir": bool(self.output_dir),
        }
        non_finite = [
            f.name
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), float) and not math.isfinite(getattr(self, f.name))
        ]
        if non_finite:
            name = non_finite[0]
            raise ConfigError(
                f"FinetuneConfig.{name}={getattr(self, name)!r} is not allowed: a finite number "
                f"({_ALLOWED.get(name, 'not inf or nan')})"
            )
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            name = bad[0]
            raise ConfigError(f"FinetuneConfig.{name}={getattr(self, name)!r} is not allowed: {_ALLOWED[name]}")
        wrong_formats = [f for f in self.export_formats if f not in EXPORT_FORMATS]
        if wrong_formats:
            raise ConfigError(
                f"FinetuneConfig.export_formats: {wrong_formats[0]!r} is not a format; allowed: {list(EXPORT_FORMATS)}"
            )
        self.packing_strategy = resolve_packing_strategy(
            self.long_rows, self.packing, self.packing_strategy, "FinetuneConfig."
        )
        self._check_combinations()

    def _check_combinations(self) -> None:
        """The rules between fields, checked here so a contradiction stops before anything loads.

        Raises:
            ConfigError: naming both fields and what to change.
        """
        chat = self.dataset_format != "alpaca"
        if self.adapter_dir:
            out, adapter = os.path.abspath(self.output_dir), os.path.abspath(self.adapter_dir)
            inside = os.path.relpath(adapter, out).split(os.sep)
            if os.path.commonpath([out, adapter]) == adapter:  # the same folder, or one holding output_dir
                raise ConfigError(
                    f"FinetuneConfig.adapter_dir={self.adapter_dir!r} is output_dir={self.output_dir!r} or holds it: "
                    f"saving the adapter replaces that folder whole (checkpoints, run_config.json and all); use a "
                    f"folder of its own, e.g. adapter_dir='' (<output_dir>/lora_model)"
                )
            if inside[0] != ".." and inside[0].startswith("checkpoint-"):
                raise ConfigError(
                    f"FinetuneConfig.adapter_dir={self.adapter_dir!r} is inside a checkpoint of output_dir, which the "
                    f"trainer deletes as it rotates checkpoints (save_total_limit): use another folder"
                )
        if self.extra_datasets and not chat:
            raise ConfigError(
                f"FinetuneConfig.extra_datasets={list(self.extra_datasets)!r} is read for conversations "
                f"only, and dataset_format='alpaca': set dataset_format ('auto', 'messages' or "
                f"'sharegpt'), or merge the files into dataset"
            )
        if chat and self.long_rows == "split":
            raise ConfigError(
                f"FinetuneConfig.long_rows='split' does not apply to conversations "
                f"(dataset_format={self.dataset_format!r}): a conversation split over windows loses its "
                f"turns' context; use long_rows='drop' or 'truncate'"
            )
        if chat and self.packing and self.packing_strategy == "wrapped":
            raise ConfigError(
                f"FinetuneConfig.packing_strategy='wrapped' cuts conversations at window edges "
                f"(dataset_format={self.dataset_format!r}), so their assistant turns cannot be checked or "
                f"masked whole; use packing_strategy='bfd'"
            )
        if self.resume and self.overwrite_output_dir:
            raise ConfigError(
                "FinetuneConfig.resume=True and overwrite_output_dir=True contradict each other: set one "
                "of them to False"
            )

    @property
    def effective_batch_size(self) -> int:
        """Sequences per optimizer step: per-device batch x gradient accumulation (one device)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def resolved_adapter_dir(self) -> str:
        """``adapter_dir``, or ``<output_dir>/lora_model`` when it is empty."""
        return self.adapter_dir or os.path.join(self.output_dir, "lora_model")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "FinetuneConfig.from_mapping") -> "FinetuneConfig":
        """Build from parameter name -> value (a recipe, command-line flags, the notebook's parameters).

        Args:
            values: field name -> value; strings are coerced as ``coercion.coerce_value`` says.
            where: what the mapping is (a file, "papermill parameters"), for messages.

        Returns:
            The configuration.

        Raises:
            ValueError: a key looks like a secret (``secrets.refuse_secret_names``; the value is never
                shown); ConfigError (a ValueError): a key is not a field (the message names it and the
                closest field), or as ``__post_init__``.
        """
        from .secrets import refuse_secret_names

        refuse_secret_names(values, where)
        unknown = [k for k in values if k not in FIELD_NAMES]
        if unknown:
            raise unknown_keys_error(unknown, FIELD_NAMES, where)
        return cls(**values)


#: Every field name, in declaration order (= the parameters cell's order).
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FinetuneConfig))
#: The package's defaults: helpers write ``lora_r: int = DEFAULTS.lora_r``, never the number.
DEFAULTS = FinetuneConfig()


def identity_fields() -> tuple[str, ...]:
    """The fields marked ``identity=True``: they change what is computed, so a resume must match them."""
    return tuple(f.name for f in dataclasses.fields(FinetuneConfig) if f.metadata["identity"])


@lru_cache(maxsize=1)
def field_docs() -> dict[str, str]:
    """Each field's docstring (the string literal under it in this file), whitespace folded to one line.

    Read from the source with ``ast`` (Python keeps no attribute docstrings at run time); the command
    line's ``--help`` and docs/parameters.md's table are built from it.
    """
    tree = ast.parse(inspect.getsource(FinetuneConfig))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


_ALLOWED = {
    "backend": f"one of {BACKENDS}",
    "recipe": f"one of {RECIPES}",
    "dtype": f"one of {DTYPES}",
    "template": f"one of {TEMPLATES}",
    "report_to": f"one of {REPORT_TO}",
    "packing_strategy": f"one of {PACKING_STRATEGIES}",
    "long_rows": f"one of {LONG_ROWS}",
    "dataset_format": f"one of {DATASET_FORMATS}",
    "chat_template": f"'auto', one of {NAMED_CHAT_TEMPLATES}, or a Jinja template string (holding '{{%')",
    "lora_bias": "one of ('none', 'all', 'lora_only')",
    "max_seq_length": "a positive number of tokens",
    "lora_r": "a positive rank",
    "lora_alpha": "positive",
    "lora_dropout": "in [0, 1)",
    "target_modules": "at least one module name",
    "prompts": "at least one prompt",
    "test_size": "a fraction in [0, 1)",
    "learning_rate": "positive",
    "per_device_train_batch_size": "a positive number of sequences",
    "per_device_eval_batch_size": "a positive number of sequences",
    "gradient_accumulation_steps": "a positive number of micro-batches",
    "max_steps": "-1 (full epochs) or a positive number of optimizer steps",
    "num_train_epochs": "positive",
    "warmup_ratio": "a fraction in [0, 1)",
    "eval_steps": "a positive number of steps",
    "save_steps": "a positive number of steps",
    "save_total_limit": "a positive number of checkpoints",
    "logging_steps": "a positive number of steps",
    "gpu_memory_cap_gib": "0 (no cap) or a positive number of GiB",
    "max_new_tokens": "a positive number of tokens",
    "output_dir": "a folder path",
}

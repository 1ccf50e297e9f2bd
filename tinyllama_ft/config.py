"""One configuration object for a fine-tuning run.

The notebook's ``parameters`` cell holds one variable per field below; ``FinetuneConfig.from_mapping``
turns them into this dataclass, and every helper takes its values from it. Defaults are the article's
recipe (``shared/ARTICLE.md``: "Fine-tuning a Tiny-Llama model with Unsloth", cells 2-10) unless a
field's docstring says otherwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from .lengths import LONG_ROWS, resolve_packing_strategy

#: The seven projection modules of a Llama decoder layer that the article's LoRA cell targets.
LLAMA_TARGET_MODULES: tuple[str, ...] = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)

BACKENDS = ("auto", "unsloth", "transformers")
DTYPES = (None, "auto", "bfloat16", "float16", "float32")
TEMPLATES = ("alpaca", "alpaca_no_input")
REPORT_TO = ("wandb", "none")
PACKING_STRATEGIES = ("bfd", "bfd_split", "wrapped")
RECIPES = ("fast", "article")


@dataclass
class FinetuneConfig:
    """Every knob of a run, with the article's values as defaults.

    Raises:
        ValueError: from ``__post_init__`` when a field is out of range; the message names the field.
    """

    # --- model (article cell 2) ---
    model_name: str = "unsloth/tinyllama-bnb-4bit"
    """Hub id or local folder of the base model (or of a saved adapter, when reloading)."""
    max_seq_length: int = 4096
    """Tokens per training sequence (packed window). Above the model's trained positions
    (TinyLlama: 2048) linear RoPE scaling is applied, as Unsloth does."""
    backend: str = "auto"
    """"auto" (Unsloth when CUDA and unsloth are present, else transformers), "unsloth" or "transformers"."""
    dtype: str | None = None
    """None/"auto": bf16 on compute capability >= 8.0, fp16 below, fp32 weights on a CPU (with bf16 autocast
    for the matmuls where the CPU computes bf16 natively, TRL's default); or a torch dtype name ("float32"
    on a CPU: no autocast)."""
    load_in_4bit: bool = True
    """4-bit (NF4) base weights on CUDA (QLoRA). Ignored, with one message, on a CPU."""
    gpu_memory_cap_gib: float = 0.0
    """Cap on this process's CUDA memory in GiB (0 = no cap); 15 imitates a T4."""
    recipe: str = "fast"
    """"fast": the article's math (effective batch, schedule, optimizer, LoRA, 4-bit base) executed faster:
    attention kernel, fused kernels, micro-batch sized to GPU memory, checkpointing only when needed
    (``speed.plan_speed``). "article": the article's cell values literally (Unsloth, 2 x 4, checkpointing)."""
    attn_implementation: str | None = None
    """transformers' attention kernel ("sdpa", "flex_attention", ...); None: "sdpa", or the fast recipe's pick."""
    use_liger_kernel: bool = False
    """Liger's fused kernels in the trainer (the fast recipe turns them on on a bf16 GPU when installed)."""
    trust_remote_code: bool = False
    """Run Python code shipped with the model's repository (``auto_map``) when loading it; off unless asked."""

    # --- LoRA (article cell 3) ---
    lora_r: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_bias: str = "none"
    target_modules: tuple[str, ...] = LLAMA_TARGET_MODULES
    use_rslora: bool = False
    gradient_checkpointing: bool = True
    """Recompute activations in the backward pass (the article's ``use_gradient_checkpointing=True``)."""

    # --- data (article cell 4) ---
    dataset: str = "yahma/alpaca-cleaned"
    """Hub dataset id, or a local .json / .jsonl / .csv / .parquet file."""
    dataset_split: str = "train"
    dataset_config: str | None = None
    instruction_column: str = "instruction"
    input_column: str = "input"
    output_column: str = "output"
    template: str = "alpaca"
    """"alpaca" (the article's: one template, Input block always) or "alpaca_no_input"
    (original Alpaca: the no-input template for rows whose input is empty)."""
    test_size: float = 0.004
    """Fraction of rows held out for ``eval_loss`` (the article's 0.004)."""
    strict: bool = False
    """Raise on the first bad row instead of dropping and counting bad rows."""
    dataset_num_proc: int | None = 2

    # --- tracking (article cell 5) ---
    report_to: str = "wandb"
    """"wandb" or "none"."""
    wandb_project: str = "tiny-llama"
    wandb_run_name: str = "tiny-llama-unsloth-sft"

    # --- training (article cells 6-7) ---
    learning_rate: float = 2e-5
    per_device_train_batch_size: int = 2
    per_device_eval_batch_size: int = 2
    gradient_accumulation_steps: int = 4
    max_steps: int = 60
    """Optimizer steps; -1 runs ``num_train_epochs`` (the article's full epoch). 60 as Unsloth's notebooks."""
    num_train_epochs: float = 1.0
    warmup_ratio: float = 0.1
    weight_decay: float = 0.1
    lr_scheduler_type: str = "linear"
    optim: str | None = None
    """None: "adamw_8bit" on CUDA (the article's), "adamw_torch" on a CPU (bitsandbytes needs CUDA)."""
    packing: bool = True
    packing_strategy: str = "bfd"
    """TRL's packing strategy: "bfd" (best-fit decreasing; a row longer than ``max_seq_length`` is
    truncated), "bfd_split" (such a row is split over several windows) or "wrapped" (rows cut at
    window edges)."""
    long_rows: str = "drop"
    """What to do, before training, with a row whose training text (prompt + response + EOS, BOS included)
    is longer than ``max_seq_length`` tokens; such rows are counted and reported either way
    (``lengths.length_report``). "drop" (default): remove them, so nothing is trained on a silently cut row.
    "truncate": keep them for TRL to cut: "bfd" packing and no packing keep the first ``max_seq_length``
    tokens (the rest and the EOS are lost), "wrapped" cuts them at window edges. "split" (packing only):
    keep them whole, split over several windows by TRL's "bfd_split" (``packing_strategy`` "bfd" becomes
    "bfd_split"; "wrapped" is refused). A row whose prompt alone reaches ``max_seq_length`` tokens (no
    response token would be trained on) is dropped under every policy."""
    eval_steps: int = 20
    save_steps: int = 20
    logging_steps: int = 1
    save_total_limit: int = 2
    seed: int = 3407
    """Seed for LoRA init (the article's ``random_state``), the split and the trainer."""
    output_dir: str = "outputs"
    adapter_dir: str = ""
    """Where the adapter is saved; "" means ``<output_dir>/lora_model`` (the article's folder name)."""
    resume: bool = False
    """Continue from the last checkpoint in ``output_dir``."""
    overwrite_output_dir: bool = False
    """Start over in an ``output_dir`` that holds checkpoints or a finished run: its ``checkpoint-*``
    folders, run summary, loss curve and adapter are deleted first (``runs.prepare_output_dir``)."""
    mount_drive: bool = False
    """Mount Google Drive at ``/content/drive`` on Colab (an ``output_dir`` under it mounts it anyway);
    outside Colab a one-line notice, nothing else (``runs.ensure_drive``)."""

    # --- inference (article cells 9-10) ---
    prompts: tuple[str, ...] = ("What is the capital of France?",)
    max_new_tokens: int = 64
    reload_merged: bool = True
    """The reload cell's model: the base in 16 bits with the adapter merged in (``load_adapter(merged=True)``:
    the same weights, and ``stream`` decodes ~15x faster on a GPU with a compiled static-cache step), or
    False for the article's 4-bit base with the adapter on top."""

    def __post_init__(self) -> None:
        # papermill -p and Colab forms hand over strings: "q_proj,v_proj", one prompt, "None".
        if isinstance(self.target_modules, str):
            self.target_modules = [m.strip() for m in self.target_modules.split(",") if m.strip()]
        if isinstance(self.prompts, str):
            self.prompts = [self.prompts]
        self.target_modules = tuple(self.target_modules)
        self.prompts = tuple(self.prompts)
        if self.dtype in ("auto", "None", "none", ""):
            self.dtype = None
        if self.dataset_config in ("None", "none", ""):
            self.dataset_config = None
        if self.attn_implementation in ("None", "none", ""):
            self.attn_implementation = None
        checks = {
            "backend": self.backend in BACKENDS,
            "recipe": self.recipe in RECIPES,
            "dtype": self.dtype in DTYPES,
            "template": self.template in TEMPLATES,
            "report_to": self.report_to in REPORT_TO,
            "packing_strategy": self.packing_strategy in PACKING_STRATEGIES,
            "long_rows": self.long_rows in LONG_ROWS,
            "max_seq_length": self.max_seq_length > 0,
            "lora_r": self.lora_r > 0,
            "lora_alpha": self.lora_alpha > 0,
            "lora_dropout": 0.0 <= self.lora_dropout < 1.0,
            "target_modules": len(self.target_modules) > 0,
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
            "logging_steps": self.logging_steps > 0,
            "gpu_memory_cap_gib": self.gpu_memory_cap_gib >= 0,
            "max_new_tokens": self.max_new_tokens > 0,
            "output_dir": bool(self.output_dir),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            name = bad[0]
            raise ValueError(f"FinetuneConfig.{name}={getattr(self, name)!r} is not allowed: {_ALLOWED[name]}")
        self.packing_strategy = resolve_packing_strategy(self.long_rows, self.packing, self.packing_strategy,
                                                         "FinetuneConfig.")

    @property
    def effective_batch_size(self) -> int:
        """Sequences per optimizer step: per-device batch x gradient accumulation (one device)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def resolved_adapter_dir(self) -> str:
        """``adapter_dir``, or ``<output_dir>/lora_model`` when it is empty."""
        import os

        return self.adapter_dir or os.path.join(self.output_dir, "lora_model")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "FinetuneConfig":
        """Build from a mapping holding (at least) the field names, e.g. the notebook's ``globals()``.

        Keys that are not fields are ignored, so a notebook namespace can be passed whole; a key that
        names a secret (``WANDB_API_KEY``, ``hf_token``, ``token``, ``api_key``, ...) is refused: secrets
        come from the environment or Colab's secrets, never parameters.

        Args:
            values: parameter name -> value.

        Returns:
            The configuration.

        Raises:
            ValueError: a key looks like a secret (``credentials.refuse_secret_names``; the value is never
                shown), or as ``__post_init__``.
        """
        from .credentials import refuse_secret_names

        refuse_secret_names(values, "FinetuneConfig.from_mapping")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


_ALLOWED = {
    "backend": f"one of {BACKENDS}",
    "recipe": f"one of {RECIPES}",
    "dtype": f"one of {DTYPES}",
    "template": f"one of {TEMPLATES}",
    "report_to": f"one of {REPORT_TO}",
    "packing_strategy": f"one of {PACKING_STRATEGIES}",
    "long_rows": f"one of {LONG_ROWS}",
    "max_seq_length": "a positive number of tokens",
    "lora_r": "a positive rank",
    "lora_alpha": "positive",
    "lora_dropout": "in [0, 1)",
    "target_modules": "at least one module name",
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
    "logging_steps": "a positive number of steps",
    "gpu_memory_cap_gib": "0 (no cap) or a positive number of GiB",
    "max_new_tokens": "a positive number of tokens",
    "output_dir": "a folder path",
}

"""One configuration object for a fine-tuning run: every default of the package is written here, once.

``FinetuneConfig`` inherits ten section dataclasses (``SECTIONS``), so each field is one flat name for the
notebook's parameters, the command line's flags and the recipes' keys. A field's ``metadata["identity"]`` marks
what changes the computation (``output_dir.run_identity``); its docstring gives the unit and the source of the
default, which ``--help`` shows. A choice field's ``Literal[...]`` is the one declaration of its values. Helpers
take their defaults from ``DEFAULTS = FinetuneConfig()``.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import os
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, List, Literal, Mapping, Sequence, Union

from ..machine.paths import expand_path
from .coercion import ConfigError, FieldError, source_spelling, without_none
from .methods import LOSS_TYPES, METHOD_FIELDS, METHODS
from .packing import LongRows, resolve_packing_strategy
from .secrets import check_keys

#: The seven projection modules of a Llama decoder layer that the article's LoRA cell targets.
LLAMA_TARGET_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# The choice fields' values, each declared once (``typing.get_args`` reads them).
Backend = Literal["auto", "unsloth", "transformers"]
Recipe = Literal["fast", "article"]
#: ``dtype``'s names; the field is ``Dtype | None`` (None: picked from the hardware).
Dtype = Literal["bfloat16", "float16", "float32"]
LoraBias = Literal["none", "all", "lora_only"]
Template = Literal["alpaca", "alpaca_no_input"]
#: The conversation layouts of ``dataset_format`` (the chat notebook's).
ConversationFormat = Literal["auto", "messages", "sharegpt"]
#: ``dataset_format``: "alpaca" is the article's prompt path, "text" raw documents (continued pretraining); the
#: others are conversations.
DatasetFormat = Literal["alpaca", "text", ConversationFormat]
#: Named ``chat_template`` values (``chat_templates.NAMED_TEMPLATES``).
NamedChatTemplate = Literal["chatml", "zephyr", "llama-3"]
#: ``chat_template``'s names; the field is ``ChatTemplateName | str``: a Jinja template string is allowed too.
ChatTemplateName = Literal["auto", NamedChatTemplate]
PackingStrategy = Literal["bfd", "bfd_split", "wrapped"]
ReportTo = Literal["wandb", "none"]
#: ``eval_split``'s names: which held-out part of a three-way split the checks read.
EvalSplit = Literal["validation", "test"]
#: ``method``: supervised fine-tuning, a preference method on pairs (DPO, ORPO, SimPO) or labelled completions (KTO),
#: or reinforcement learning from reward functions (GRPO): ``methods.METHODS``' names.
Method = Literal[tuple(METHODS)]
#: How GRPO scales each completion's advantage (``GRPOConfig.scale_rewards``, the same in TRL 1.15 and 1.16).
ScaleRewards = Literal["group", "batch", "none"]
#: GRPO's importance ratios per token or per completion (``GRPOConfig.importance_sampling_level``, TRL 1.15 and 1.16;
#: TRL's config takes any string and fails at the first step: test_trls_grpo_config_takes_any_loss_type_or_level).
ImportanceSamplingLevel = Literal["token", "sequence"]
#: How GRPO samples its completions (``train.grpo_rollout``).
RolloutDecoder = Literal["auto", "fused", "generate"]
#: ``loss_type``'s items: a DPO loss, or the KTO or GRPO loss (one): each method's ``Method.loss_types``.
LossType = Literal[LOSS_TYPES]
#: Export formats (``adapter_export.export_adapter``): a merged 16-bit model, GGUF files for llama.cpp / Ollama, a GGUF LoRA.
ExportFormat = Literal["merged_16bit", "gguf_f16", "gguf_bf16", "gguf_q8_0", "gguf_q4_k_m", "gguf_lora"]

BACKENDS: tuple[str, ...] = typing.get_args(Backend)
EXPORT_FORMATS: tuple[str, ...] = typing.get_args(ExportFormat)
DATASET_FORMATS: tuple[str, ...] = typing.get_args(DatasetFormat)
#: Fields holding a local path (or a Hub id): ``~`` and ``$VARS`` are expanded (``paths.expand_path``).
PATH_FIELDS = ("model_name", "dataset", "output_dir", "adapter_dir", "adapter_name_or_path")

#: A range check beyond a field's type: (predicate on the parsed value, what is allowed, for the message).
Allowed = tuple[Callable[[Any], bool], str]


def _positive(what: str = "positive") -> Allowed:
    return (lambda v: v > 0), what


def _not_empty(what: str) -> Allowed:
    return (lambda v: len(v) > 0), what


_FRACTION: Allowed = ((lambda v: 0.0 <= v < 1.0), "a fraction in [0, 1)")
_CHAT_TEMPLATE: Allowed = (
    lambda v: v in typing.get_args(ChatTemplateName) or "{%" in v,
    f"one of {typing.get_args(ChatTemplateName)}, or a Jinja template string (holding '{{%')",
)


def _field(default, *, identity: bool, commas: bool = True, allowed: Allowed | None = None):
    """A field: ``identity``: it changes what is computed (``identity_fields``); ``commas``: a tuple field given one
    string splits it at commas (False: ``prompts``, whose text holds commas); ``allowed``: a range check beyond the
    type (a ``Literal`` checks itself; a float, or a tuple's float items, must be finite)."""
    return field(default=default, metadata={"identity": identity, "commas": commas, "allowed": allowed})


@dataclass
class ModelSection:
    """Model (article cell 2).

    The base model, its precision, and how the run executes (recipe, backend, kernels, a memory cap).
    """

    model_name: str = _field("unsloth/tinyllama-bnb-4bit", identity=True)
    """Hub id or local folder of the base model; the article's 4-bit TinyLlama-1.1B."""
    max_seq_length: int = _field(4096, identity=True, allowed=_positive("a positive number of tokens"))
    """Tokens per training sequence (packed window); the article's 4096, above TinyLlama's 2048 positions:
    linear RoPE scaling, as Unsloth applies it."""
    dtype: Dtype | None = _field(None, identity=True)
    """Compute dtype: None = bf16 on compute capability >= 8.0, fp16 below, fp32 on a CPU (with bf16 autocast
    where the CPU computes bf16 natively, TRL's default); or "bfloat16" / "float16" / "float32"; the article's None."""
    load_in_4bit: bool = _field(True, identity=True)
    """4-bit NF4 base weights on CUDA (QLoRA); ignored, with one message, on a CPU; the article's True."""
    trust_remote_code: bool = _field(False, identity=True)
    """Run Python code shipped in the model's repository; off unless asked (this package)."""
    recipe: Recipe = _field("fast", identity=False)
    """"fast": the article's math executed faster (kernels, micro-batch sized to GPU memory, checkpointing only
    when needed; ``plan.plan_run``); "article": the article's cell values literally (this package)."""
    backend: Backend = _field("auto", identity=False)
    """"auto", "unsloth" or "transformers"; auto: the plan's pick (Unsloth on a T4, transformers on a bf16
    GPU with the fast recipe, for the preference methods and on a CPU) (this package)."""
    attn_implementation: str | None = _field(None, identity=False)
    """transformers' attention kernel ("sdpa", "flex_attention"); None: the plan's pick (this package)."""
    use_liger_kernel: bool = _field(False, identity=False)
    """Liger's fused kernels; the fast recipe turns them on on a bf16 GPU when installed (this package)."""
    gpu_memory_cap_gib: float = _field(
        0.0, identity=False, allowed=((lambda v: v >= 0), "0 (no cap) or a positive number of GiB")
    )
    """Cap on this process's CUDA memory in GiB; 0 = no cap, 15 imitates a T4 (this package)."""


@dataclass
class LoraSection:
    """LoRA (article cell 3).

    The adapter's rank and scaling, the modules it adapts, gradient checkpointing.
    """

    lora_r: int = _field(32, identity=True, allowed=_positive("a positive rank"))
    """Adapter rank; the article's 32."""
    lora_alpha: int = _field(32, identity=True, allowed=_positive())
    """Scaling numerator: the update is scaled by lora_alpha / lora_r; the article's 32."""
    lora_dropout: float = _field(0.0, identity=True, allowed=_FRACTION)
    """Dropout probability on the adapter input; the article's 0."""
    lora_bias: LoraBias = _field("none", identity=True)
    """Bias training: "none", "all" or "lora_only"; the article's "none"."""
    target_modules: tuple[str, ...] = _field(
        LLAMA_TARGET_MODULES, identity=True, allowed=_not_empty("at least one module name")
    )
    """Module names to adapt (a list, or one comma-separated string); the article's seven Llama projections;
    "embed_tokens" and "lm_head" among them train in full (PEFT's modules_to_save; docs/text.md)."""
    use_rslora: bool = _field(False, identity=True)
    """Rank-stabilised scaling lora_alpha / sqrt(lora_r); the article's False."""
    gradient_checkpointing: bool = _field(True, identity=False)
    """Recompute activations in the backward pass (less memory, slower); the article's True, the fast
    recipe turns it off when memory allows."""


@dataclass
class DataSection:
    """Data (article cell 4).

    The rows' source and columns, the Alpaca prompt template, the held-out split, the rows longer than a window.
    """

    dataset: str = _field("yahma/alpaca-cleaned", identity=True)
    """Hub dataset id, or a local .json / .jsonl / .csv / .parquet file; the article's Alpaca-cleaned."""
    dataset_split: str = _field("train", identity=True)
    """Split of a Hub dataset; the article's "train"."""
    dataset_config: str | None = _field(None, identity=True)
    """Configuration name of a Hub dataset; None for the default (this package)."""
    forgetting_dataset: str | None = _field(None, identity=False)
    """dataset_format "text" only: Alpaca rows (a file or Hub id) whose held-out part (test_size, eval_split and
    seed, as dataset's) is scored before and after training, the response loss beside the domain's perplexity:
    what the domain cost the instructions; None: no such check (this package; docs/text.md)."""
    instruction_column: str = _field("instruction", identity=True)
    """Column holding the instruction; Alpaca's "instruction"."""
    input_column: str = _field("input", identity=True)
    """Column holding the optional context; Alpaca's "input"."""
    output_column: str = _field("output", identity=True)
    """Column holding the response; Alpaca's "output"."""
    template: Template = _field("alpaca", identity=True)
    """Prompt template: "alpaca" (the article's, Input block always) or "alpaca_no_input" (original Alpaca's
    no-input variant for empty inputs)."""
    test_size: float = _field(0.004, identity=True, allowed=_FRACTION)
    """Fraction of rows held out for eval_loss; the article's 0.004."""
    eval_split: EvalSplit | None = _field(None, identity=True)
    """None: one held-out part (test_size of the rows; the article's); "validation" / "test": the rows split three
    ways, validation (the rows None holds out), test (as many again, from the rest) and train (the rest, the same
    for both), and eval_loss and the held-out checks read the part named: tune on "validation", report "test"
    (this package)."""
    long_rows: LongRows = _field("drop", identity=True)
    """Rows longer than max_seq_length tokens (prompt + response + EOS), counted before training: "drop" them,
    "truncate" (the trainer cuts them, EOS lost) or "split" them over windows (bfd_split); a row whose prompt
    alone fills the window is always dropped; dataset_format "text" always splits a long document (this package)."""
    strict: bool = _field(False, identity=False)
    """Raise on the first bad row instead of dropping and counting bad rows (this package)."""
    dataset_num_proc: int | None = _field(2, identity=False)
    """Processes TRL tokenizes with; the article's 2, None = in this process."""


@dataclass
class ChatSection:
    """Chat (the chat notebook).

    Conversations instead of Alpaca rows: dataset_format picks the layout; the other fields of this section are read
    only by a conversation run (dataset_format not "alpaca"), and the Alpaca notebook leaves them out.
    """

    dataset_format: DatasetFormat = _field("alpaca", identity=True)
    """Layout of the rows: "alpaca" (instruction/input/output with the Alpaca prompt: the article's notebook), "text"
    (raw documents for continued pretraining: .txt/.md files, one document each, or a "text" column; docs/text.md), or
    conversations for the chat notebook: "messages" (OpenAI-style role/content turns), "sharegpt"
    (a conversations column of from/value turns), "auto" (each source's layout read from its first row; Alpaca rows become
    one-turn conversations) (this package)."""
    extra_datasets: tuple[str, ...] = _field((), identity=True)
    """Conversations only: more sources (Hub ids or local files) appended to dataset, each read with
    dataset_format (this package)."""
    chat_template: ChatTemplateName | str = _field("auto", identity=True, allowed=_CHAT_TEMPLATE)
    """Conversations only: "auto" (the tokenizer's own; a base model without one gets its family's: Zephyr for
    Llama-2/TinyLlama, Llama-3's, ChatML for Qwen/SmolLM2), "chatml", "zephyr", "llama-3", or a Jinja string;
    EOS and stop tokens follow it (this package)."""
    assistant_only_loss: bool = _field(True, identity=True)
    """Conversations only: loss on every assistant turn and its end-of-turn token, label -100 on system/user
    turns and the template's markup; False: every token (this package; TRL's assistant_only_loss, from our own masks)."""


@dataclass
class TrainingSection:
    """Training (article cells 6-7).

    Optimizer and schedule, batch and steps, packing, the loss, checkpoints, the seed.
    """

    learning_rate: float = _field(2e-5, identity=True, allowed=_positive())
    """Peak learning rate; the article's 2e-5."""
    embedding_learning_rate: float | None = _field(None, identity=True, allowed=_positive())
    """Peak learning rate of the modules trained in full (embed_tokens / lm_head in target_modules, or a chat
    template's added tokens); None: learning_rate (Unsloth's notebooks' name; they use 2 to 10 times less)."""
    lr_scheduler_type: str = _field("linear", identity=True)
    """Learning-rate schedule after warmup; the article's "linear"."""
    warmup_ratio: float = _field(0.1, identity=True, allowed=_FRACTION)
    """Fraction of the steps spent warming up; the article's 0.1."""
    weight_decay: float = _field(0.1, identity=True)
    """AdamW weight decay; the article's 0.1."""
    optim: str | None = _field(None, identity=True)
    """Optimizer; None: the article's "adamw_8bit" on CUDA, "adamw_torch" on a CPU (bitsandbytes needs CUDA)."""
    per_device_train_batch_size: int = _field(2, identity=False, allowed=_positive("a positive number of sequences"))
    """Sequences per micro-batch; the article's 2 (the fast recipe re-splits the effective batch). Under
    accelerate launch with N processes, this x gradient_accumulation_steps is the global batch: each process
    takes 1/N of it."""
    gradient_accumulation_steps: int = _field(
        4, identity=False, allowed=_positive("a positive number of micro-batches")
    )
    """Micro-batches per optimizer step; the article's 4: effective batch 2 x 4 = 8 sequences."""
    per_device_eval_batch_size: int = _field(2, identity=False, allowed=_positive("a positive number of sequences"))
    """Sequences per evaluation batch; the article's 2."""
    max_steps: int = _field(
        60,
        identity=False,
        allowed=((lambda v: v == -1 or v > 0), "-1 (full epochs) or a positive number of optimizer steps"),
    )
    """Optimizer steps; -1 runs num_train_epochs (the article's full epoch); 60 as Unsloth's notebooks."""
    num_train_epochs: float = _field(1.0, identity=False, allowed=_positive())
    """Epochs when max_steps is -1; the article's 1."""
    packing: bool = _field(True, identity=True)
    """Pack whole rows into max_seq_length windows without padding, each with its own position_ids; the
    article's True."""
    packing_strategy: PackingStrategy = _field("bfd", identity=True)
    """TRL's packing: "bfd" (best-fit decreasing; TRL's default), "bfd_split" (long rows split) or "wrapped"
    (rows cut at window edges)."""
    completion_only_loss: bool = _field(True, identity=True)
    """Loss on the response tokens and the EOS after them only (TRL's name and default for prompt/completion rows);
    False: on the whole text, prompt included (the article's). Why: README's loss-choice table
    (benchmarks/loss_choice.py)."""
    eval_steps: int = _field(20, identity=False, allowed=_positive("a positive number of steps"))
    """Evaluate every N optimizer steps (this package)."""
    save_steps: int = _field(20, identity=False, allowed=_positive("a positive number of steps"))
    """Checkpoint every N optimizer steps (this package)."""
    save_total_limit: int = _field(2, identity=False, allowed=_positive("a positive number of checkpoints"))
    """Checkpoints kept; older ones are deleted; the article's 2."""
    seed: int = _field(3407, identity=True)
    """Seed for the LoRA init, the split and the trainer; the article's 3407."""


@dataclass
class PreferenceSection:
    """Preference (DPO, ORPO, KTO, SimPO).

    The training method, and for a preference method the strength of its preference term and its loss.
    """

    method: Method = _field("sft", identity=True)
    """"sft" (supervised fine-tuning on instructions or conversations: the article's), or a preference method on
    prompt/chosen/rejected pairs: "dpo" (TRL's DPOTrainer), "orpo" (TRL's experimental ORPOTrainer, no reference),
    "simpo" (TRL's experimental CPOTrainer with loss_type "simpo": length-normalized, no reference), "kto" (TRL's
    KTOTrainer, on prompt/completion/label rows or pairs unpaired); pairs are text with the Alpaca prompt
    (dataset_format "alpaca") or conversations ("messages"), "auto" reads which from the rows; or "grpo" (TRL's
    GRPOTrainer: completions sampled from prompts, scored by reward_funcs) (this package)."""
    beta: float | None = _field(
        None, identity=True, allowed=((lambda v: v is None or v >= 0), "None (the method's default) or a number >= 0")
    )
    """Preference methods: the preference term's strength (DPO/KTO: how far from the reference; ORPO: the
    odds-ratio term's weight; SimPO: the scale of the length-normalized log-probabilities), > 0; GRPO: the KL term's
    weight, 0 = no reference model; None = the method's default (TRL's default 0.1; GRPO's 0.0; SimPO's 2.0, its
    paper's: this package)."""
    loss_type: tuple[LossType, ...] = _field((), identity=True)
    """DPO: losses summed with loss_weights ("sigmoid", "ipo", "hinge", "robust", "apo_zero", ...); KTO: one of
    "kto", "apo_zero_unpaired"; GRPO: one of "dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo";
    empty = TRL's default ("sigmoid" for DPO, "kto" for KTO, "dapo" for GRPO)."""
    loss_weights: tuple[float, ...] = _field((), identity=True)
    """DPO: one weight per loss_type item; empty = 1 for each (TRL's default)."""
    simpo_gamma: float = _field(0.5, identity=True)
    """SimPO: the target reward margin gamma between chosen and rejected responses; TRL's default 0.5 (CPOConfig)."""
    cpo_alpha: float = _field(0.0, identity=True, allowed=((lambda v: v >= 0), "a number >= 0"))
    """SimPO: the weight of an NLL term on the chosen response (CPO's); 0 = SimPO alone, as TRL's docs set it for
    SimPO (this package; TRL's default 1.0 is CPO's)."""
    adapter_name_or_path: str = _field("", identity=True)
    """Preference methods: a saved adapter to keep training (an SFT run's adapter_dir, or any PEFT LoRA folder on
    model_name), prompted with the template and stop tokens it recorded; the reference is a frozen copy of it;
    "" = a fresh adapter, whose reference is the base with the adapter disabled (this package; LLaMA-Factory's name)."""


@dataclass
class GrpoSection:
    """GRPO (method "grpo").

    The completions sampled per prompt, their length and temperature, the reward functions, the prompt rows' columns.
    """

    num_generations: int = _field(4, identity=True, allowed=((lambda v: v >= 2), "2 or more completions"))
    """Completions sampled per prompt (the group whose rewards are compared: GRPO needs 2+); the effective batch
    (per_device_train_batch_size x gradient_accumulation_steps, in completions) must be a multiple of it; TRL's
    default 8, 4 here: rollouts cost most of a step on a T4, and 4 per group leaves the default batch of 8 two prompts
    (this package)."""
    max_completion_length: int = _field(256, identity=True, allowed=_positive("a positive number of tokens"))
    """Most tokens sampled per completion; TRL's default 512, 256 here: a GSM8K-style worked answer fits, and a T4's
    rollouts take half the time (this package)."""
    temperature: float = _field(1.0, identity=True, allowed=_positive())
    """Sampling temperature of the completions; TRL's default 1.0 (lower: less varied groups, less to learn from)."""
    reward_funcs: tuple[str, ...] = _field(
        ("correct_number", "answer_format"), identity=True, allowed=_not_empty("at least one reward function")
    )
    """Reward functions, summed per completion: built-ins "correct_number" (1 when the number after the last ####,
    else the last number, equals the answer), "answer_format" (1 when the last line is "#### <number>"),
    "soft_overlong_punishment" (DAPO's penalty near max_completion_length), or "module:function" / "file.py:function"
    of your own, or the name of a function the GRPO notebook's rewards cell defines (train.rewards says what it
    receives); checked before the model loads (this package)."""
    reward_weights: tuple[float, ...] = _field((), identity=True)
    """One weight per reward_funcs item in the summed reward; empty = 1 for each (TRL's default). A format reward
    weighted below correctness keeps a small model from learning the layout alone (docs/grpo.md)."""
    scale_rewards: ScaleRewards = _field("group", identity=True)
    """Advantages divided by the reward's spread within each group ("group", TRL's default), within the batch
    ("batch"), or not at all ("none": Dr. GRPO's unscaled advantages)."""
    mask_truncated_completions: bool = _field(False, identity=True)
    """Leave completions cut at max_completion_length out of the loss (DAPO's); TRL's default False. A cut
    completion cannot end in the answer layout: masked, a long worked answer is not punished for it."""
    importance_sampling_level: ImportanceSamplingLevel = _field("token", identity=True)
    """GRPO's importance ratio per token ("token", TRL's default) or one per completion, its tokens' mean log-ratio
    ("sequence": GSPO, with loss_type "grpo" as TRL advises); docs/grpo.md says which to pick when."""
    rollout_decoder: RolloutDecoder = _field("auto", identity=True)
    """How completions are sampled: "fused" (the package's CUDA-graph decoder with the step's adapter merged in:
    train.grpo_rollout), "generate" (TRL's transformers generate), "auto" (fused on a CUDA GPU for a Llama,
    transformers' or Unsloth's, 16-bit or 4-bit base, with temperature / top_k / top_p sampling, where the plan finds
    memory for its merged copy; else generate); why: benchmarks/README.md (this package)."""
    prompt_column: str = _field("question", identity=True)
    """GRPO: the column holding each prompt (a string, or a list of chat messages ending with a user turn); GSM8K's
    and the arithmetic demo's "question" (this package)."""
    answer_column: str = _field("answer", identity=True)
    """GRPO: the column holding each reference answer (a number, or text whose number after "####" or last number is
    the answer, as GSM8K's "answer"); rewards receive it as answer (this package)."""


@dataclass
class LoggingSection:
    """Logging and output (article cells 5 and 8).

    W&B, the run's folder and the adapter's, resuming or starting over, Google Drive.
    """

    report_to: ReportTo = _field("wandb", identity=False)
    """"wandb" (the article's) or "none"."""
    wandb_project: str = _field("tiny-llama", identity=False)
    """W&B project; the article's "tiny-llama"."""
    wandb_run_name: str = _field("tiny-llama-unsloth-sft", identity=False)
    """W&B run name; the article's "tiny-llama-unsloth-sft"."""
    logging_steps: int = _field(1, identity=False, allowed=_positive("a positive number of steps"))
    """Log the loss every N optimizer steps; the article's 1."""
    output_dir: str = _field("outputs", identity=False, allowed=((lambda v: bool(v)), "a folder path"))
    """Folder for checkpoints, run_config.json, run_summary.json, loss_curve.png, W&B files; the article's "outputs"."""
    adapter_dir: str = _field("", identity=False)
    """Where the adapter is saved; "" = <output_dir>/lora_model (the article's folder name)."""
    resume: bool = _field(False, identity=False)
    """Continue from the last complete checkpoint in output_dir; the identity fields must match (this package)."""
    overwrite_output_dir: bool = _field(False, identity=False)
    """Delete an earlier run first: its checkpoint-* folders, run_summary.json, loss_curve.png, export/ (every exported
    format), the adapter folder (adapter_dir, inside output_dir or not), offline W&B runs and run_config.json in
    output_dir (this package)."""
    mount_drive: bool = _field(False, identity=False)
    """Mount Google Drive at /content/drive on Colab (automatic when output_dir is under it) (this package)."""
    benchmark_tasks: tuple[str, ...] = _field((), identity=False)
    """lm-evaluation-harness tasks scored with the adapter off and on after the held-out checks (docs/evaluation.md):
    lm-eval's names (mmlu, gsm8k, hellaswag: data from the Hub), the shipped tinyllama_ft_mmlu and
    tinyllama_ft_arithmetic, or a .jsonl of question/answer rows; to <output_dir>/benchmarks.json and W&B; empty =
    none (this package)."""
    benchmark_limit: int | None = _field(None, identity=False)
    """Questions per benchmark task (lm-eval's --limit); None = all (this package)."""


@dataclass
class ExportSection:
    """Export.

    The formats written after the adapter is saved (``adapter_export.export_adapter``).
    """

    export_formats: tuple[ExportFormat, ...] = _field((), identity=False)
    """Formats exported after the adapter is saved, each to <output_dir>/export/<format>/: merged_16bit,
    gguf_f16, gguf_bf16, gguf_q8_0, gguf_q4_k_m (needs llama.cpp's quantizer), gguf_lora; empty = none (this package)."""


@dataclass
class GenerationSection:
    """Generation (article cells 9-10).

    The answers after the adapter is reloaded.
    """

    prompts: tuple[str, ...] = _field(
        ("What is the capital of France?",), identity=False, commas=False, allowed=_not_empty("at least one prompt")
    )
    """Instructions answered after reloading the adapter (a list, or one string); the article's question."""
    max_new_tokens: int = _field(64, identity=False, allowed=_positive("a positive number of tokens"))
    """Most tokens generated per answer; the article's 64."""
    reload_merged: bool = _field(True, identity=False)
    """Reload the base in 16 bits with the adapter merged in (fast streaming), or False for the article's
    4-bit base with the adapter on top (this package)."""


@dataclass
class FinetuneConfig(
    GenerationSection,
    ExportSection,
    LoggingSection,
    GrpoSection,
    PreferenceSection,
    TrainingSection,
    ChatSection,
    DataSection,
    LoraSection,
    ModelSection,
):
    """Every knob of a run, one flat object; the defaults are the article's recipe unless a field says otherwise.

    It inherits the ten ``SECTIONS`` dataclasses, so each field is a plain attribute (``cfg.lora_r``). The bases
    are given last section first: a dataclass puts the fields of its last base first, so ``FIELD_NAMES`` keeps the
    sections' order (model first), which is the parameters cell's and docs/parameters.md's.

    The path fields (``PATH_FIELDS``) are stored with ``~`` and ``$VARS`` expanded, so ``run_config.json``
    and every helper see the folder a shell would.

    Raises:
        ConfigError (a ValueError): from ``__post_init__`` when jsonargparse refuses a value for its field's type
            (``parse_values``; a ``Literal``'s choices included), or a value is out of range; the message names the
            field and what is allowed.
    """

    def __post_init__(self) -> None:
        if self.dtype == "auto":
            self.dtype = None
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        # one parse of the values given (a default is its field's type: tests/test_cli.py, default.yaml parses)
        for name, value in parse_values({k: v for k, v in given.items() if v is not _FIELDS[k].default}).items():
            setattr(self, name, value)
        for name in PATH_FIELDS:  # "~/runs/x", "$DATA/a.jsonl" as a shell would read them; a Hub id has no ~ or $
            setattr(self, name, expand_path(getattr(self, name)))
        self._check_method()
        self.packing_strategy = resolve_packing_strategy(
            self.long_rows, self.packing, self.packing_strategy, "FinetuneConfig."
        )
        self._check_combinations()

    def _check_method(self) -> None:
        """The fields against ``method``'s record (``methods.METHODS``; before the packing check: a pair run does not
        pack). TRL's own checks (GRPO's whole groups, DPO's weights) run on its config at plan time."""
        m, defaults = METHODS[self.method], {f.name: f.default for f in dataclasses.fields(self)}
        self.beta = m.beta if self.beta is None else self.beta
        if self.beta <= 0 < m.beta:
            raise ConfigError(
                f"FinetuneConfig.beta={self.beta!r} is not allowed for method={self.method!r}: positive (the preference "
                "term's strength)"
            )
        for name in METHOD_FIELDS:
            value = getattr(self, name)
            if name not in m.reads and value != defaults[name]:
                readers = [k for k, other in METHODS.items() if name in other.reads]
                raise ConfigError(
                    f"FinetuneConfig.{name}={list(value) if isinstance(value, tuple) else value!r} is read by method "
                    f"{readers} only, and "
                    f"method={self.method!r}: set method, or leave {name} at its default"
                )
        wrong = [t for t in self.loss_type if t not in m.loss_types]
        if wrong or (len(self.loss_type) > 1 and not m.many_losses):
            raise ConfigError(
                f"FinetuneConfig.loss_type={list(self.loss_type)!r} is not allowed for method={self.method!r}: "
                f"{'each' if m.many_losses else 'at most'} one of {list(m.loss_types)}"
            )
        if self.long_rows not in m.long_rows:
            raise ConfigError(
                f"FinetuneConfig.long_rows={self.long_rows!r} does not apply to method={self.method!r}: a pair's "
                f"prompt and responses (GRPO: a prompt) belong in one window; use one of {list(m.long_rows)}"
            )
        if self.dataset_format not in m.dataset_formats or (
            self.extra_datasets and "sharegpt" not in m.dataset_formats
        ):
            raise ConfigError(
                f"FinetuneConfig.dataset_format={self.dataset_format!r}, extra_datasets={list(self.extra_datasets)!r}: "
                f"method={self.method!r} reads its {m.trains_on} from dataset alone (no extra_datasets), in a "
                f"dataset_format among {list(m.dataset_formats)}"
            )
        if self.per_device_train_batch_size < m.min_micro_batch(self):
            raise ConfigError(
                f"FinetuneConfig.per_device_train_batch_size={self.per_device_train_batch_size} is too small for "
                f"method={self.method!r}: its KL term pairs each prompt with another row's completion in the same "
                f"micro-batch; use {m.min_micro_batch(self)} or more"
            )
        if "prompt_column" in m.reads and self.prompt_column == self.answer_column:
            raise ConfigError(
                f"FinetuneConfig.prompt_column and answer_column are both {self.prompt_column!r}: the reference answer "
                "would be the question itself; set answer_column to the column that holds the answers"
            )
        if self.reward_weights and len(self.reward_weights) != len(self.reward_funcs):
            raise ConfigError(
                f"FinetuneConfig.reward_weights={list(self.reward_weights)!r} has {len(self.reward_weights)} weight(s) "
                f"for {len(self.reward_funcs)} reward_funcs {list(self.reward_funcs)!r}: give one per reward, or none "
                "(1 for each)"
            )
        if "max_completion_length" in m.reads and self.max_completion_length >= self.max_seq_length:
            raise ConfigError(
                f"FinetuneConfig.max_completion_length={self.max_completion_length} leaves no room for a prompt in "
                f"max_seq_length={self.max_seq_length} tokens: lower it, or raise max_seq_length"
            )

    def _check_combinations(self) -> None:
        """The rules between fields, checked here so a contradiction stops before anything loads."""
        chat = self.dataset_format not in ("alpaca", "text")
        if self.dataset_format == "text":  # documents are split into windows, never cut or attending to each other
            # (another method than sft was refused by _check_method: its record's dataset_formats lack "text")
            if self.long_rows == "truncate" or not self.packing or self.packing_strategy == "wrapped":
                raise ConfigError(
                    f"FinetuneConfig.dataset_format='text' (raw documents) trains with packing=True and "
                    f"packing_strategy 'bfd' or 'bfd_split' (a document longer than max_seq_length is split into "
                    f"windows, never cut; none attends to another), and packing={self.packing!r}, "
                    f"packing_strategy={self.packing_strategy!r}, long_rows={self.long_rows!r}: set those (long_rows "
                    f"'drop' or 'split': both split a long document)"
                )
            self.packing_strategy = "bfd_split"
        elif self.forgetting_dataset:
            raise ConfigError(
                f"FinetuneConfig.forgetting_dataset={self.forgetting_dataset!r} is read by dataset_format='text' "
                f"only, and dataset_format={self.dataset_format!r}: leave it empty"
            )
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
        if self.adapter_name_or_path:
            out, start = os.path.abspath(self.output_dir), os.path.abspath(self.adapter_name_or_path)
            if os.path.commonpath([out, start]) in (out, start):  # inside output_dir, or holding it
                raise ConfigError(
                    f"FinetuneConfig.adapter_name_or_path={self.adapter_name_or_path!r} is inside "
                    f"output_dir={self.output_dir!r} (or holds it), where this run writes its checkpoints and saves "
                    f"its adapter (overwrite_output_dir would delete it first): give this run another output_dir"
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
            values: field name -> value, read in one parse (``parse_values``).
            where: what the mapping is (a file, "papermill parameters"), for messages.

        Returns:
            The configuration.

        Raises:
            ValueError: a key looks like a secret (``secrets.check_keys``; the value is never
                shown); ConfigError (a ValueError): a key is not a field (the message names it and the
                closest field), or as ``__post_init__``.
        """
        check_keys(values, FIELD_NAMES, where)
        return cls(**values)


#: The sections, in the order of their fields (``FinetuneConfig``'s bases reversed): name ("model", "lora", ...) ->
#: dataclass (``dataclasses.fields(section)``: its fields).
SECTIONS: dict[str, type] = {c.__name__.removesuffix("Section").lower(): c for c in reversed(FinetuneConfig.__bases__)}
#: Every field name, in declaration order (= the parameters cell's order).
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FinetuneConfig))
#: Each field's type, resolved from its annotation (``Literal``s included): what jsonargparse types values and the
#: command line's flags with.
FIELD_TYPES: dict[str, Any] = typing.get_type_hints(FinetuneConfig)
_FIELDS = {f.name: f for f in dataclasses.fields(FinetuneConfig)}


def _literal(annotation: Any) -> Any:
    """The ``Literal[...]`` in an annotation (itself, in a union with None or str, or a tuple's items), or None."""
    if typing.get_origin(annotation) is Literal:
        return annotation
    return next(filter(None, map(_literal, typing.get_args(annotation))), None)


def choices(name: str) -> tuple[Any, ...]:
    """The values a choice field lists, read from the ``Literal`` in its annotation (its one declaration).

    Args:
        name: a field name (``FIELD_NAMES``).

    Returns:
        The ``Literal``'s values, with None first for an optional field (``dtype``: ``(None, "bfloat16", ...)``);
        for a tuple of choices (``export_formats``) the values each item takes; for ``chat_template``
        (``ChatTemplateName | str``) its names, besides which a Jinja template string is allowed. ``()`` for a
        field that is not a choice.

    Raises:
        KeyError: ``name`` is not a field.
    """
    return _choices(FIELD_TYPES[name])


def _choices(annotation: Any) -> tuple[Any, ...]:
    literal = _literal(annotation)
    return () if literal is None else ((None,) if without_none(annotation)[1] else ()) + typing.get_args(literal)


def parse_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Field values typed by jsonargparse in one parse of the mapping (the flags' parser: ``add_field_arguments``),
    after the source spellings it reads otherwise (``coercion.source_spelling``), then each checked against its range.

    Args:
        values: field name -> what a recipe, a flag, the notebook or a caller gave.

    Returns:
        field name -> the value in the field's type (a tuple for a tuple field).

    Raises:
        FieldError: (a ConfigError) jsonargparse refuses a value, None for a field that is not optional (it reads None
            as "not given"), a value out of its field's range or not finite; the message names the field, the value
            and what the field takes (a choice field's values, a tuple's wrong item).
    """
    from argparse import ArgumentError

    spelled = {
        k: source_spelling(v, FIELD_TYPES[k], comma_separated=_FIELDS[k].metadata["commas"]) for k, v in values.items()
    }
    try:  # copied: jsonargparse rewrites a list in place
        parsed = _field_parser().parse_object(copy.deepcopy(spelled), defaults=False).as_dict() if values else {}
    except ArgumentError:  # its message reads "Parser key ...: Expected a <class 'int'>": ours names the field
        raise next(filter(None, (_type_refusal(k, v) for k, v in spelled.items()))) from None
    for name, value in parsed.items():
        annotation, allowed = FIELD_TYPES[name], _FIELDS[name].metadata["allowed"]
        if value is None and not without_none(annotation)[1]:
            raise FieldError(name, value, f": {_expected(annotation)}")
        if typing.get_origin(annotation) is tuple:
            parsed[name] = value = tuple(value)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, float) and not math.isfinite(item):
                why = f": a finite number ({allowed[1] if allowed else 'not inf or nan'})"
                raise FieldError(name, item, why, item=isinstance(value, tuple))
        if allowed and not allowed[0](value):
            raise FieldError(name, value, f": {allowed[1]}")
    return parsed


def _expected(annotation: Any) -> str:
    """What a field (or a tuple's item) of type ``annotation`` takes, for a refusal: its ``Literal``'s values, or its
    type in words."""
    base, optional = without_none(annotation)
    if _choices(annotation):
        return f"one of {_choices(annotation)}"
    return f"expected {_EXPECTED.get(base) or inspect.formatannotation(base)}{' or None' if optional else ''}"


_EXPECTED = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}


def _type_refusal(name: str, value: Any) -> FieldError | None:
    """The refusal of one field's value that jsonargparse does not take (a tuple's first wrong item), or None."""
    from argparse import ArgumentError

    def refused(obj: Any) -> bool:
        try:
            _field_parser().parse_object({name: copy.deepcopy(obj)}, defaults=False)
        except ArgumentError:
            return True
        return False

    if not refused(value):
        return None
    base = without_none(FIELD_TYPES[name])[0]
    if typing.get_origin(base) is tuple and isinstance(value, list):
        item = next(item for item in value if refused([item]))
        return FieldError(name, item, f": {_expected(typing.get_args(base)[0])}", item=True)
    return FieldError(name, value, f": {_expected(FIELD_TYPES[name])}")


@lru_cache(maxsize=1)
def _field_parser():
    """A jsonargparse parser of every field (``add_field_arguments``), which ``parse_values`` reads values with."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    add_field_arguments(parser)
    return parser


#: The package's defaults: helpers write ``lora_r: int = DEFAULTS.lora_r``, never the number.
DEFAULTS = FinetuneConfig()


def identity_fields() -> tuple[str, ...]:
    """The fields marked ``identity=True``: they change what is computed, so a resume must match them."""
    return tuple(f.name for f in dataclasses.fields(FinetuneConfig) if f.metadata["identity"])


@lru_cache(maxsize=1)
def field_docs() -> dict[str, str]:
    """Each field's docstring (the string literal under it in its section), whitespace folded to one line.

    Read with ``docstring_parser.parse_from_object`` on each section dataclass, as jsonargparse reads them for
    ``--help`` (Python keeps no attribute docstrings at run time); docs/parameters.md's table and the flags the
    command line adds by hand (tuple fields, the recorded fields of ``generate`` and ``export``) use it.

    Returns:
        field name -> its docstring on one line, for every field.

    Raises:
        ImportError: ``docstring_parser`` is missing (it comes with the dependency ``jsonargparse[signatures]``).
    """
    import docstring_parser

    docs = {}
    for section in SECTIONS.values():
        for param in docstring_parser.parse_from_object(section).params:
            docs[param.arg_name] = " ".join((param.description or "").split())
    return docs


def add_field_arguments(parser, names: Sequence[str] = FIELD_NAMES) -> None:
    """The configuration fields ``names`` as ``--NAME`` flags, in one argument group per section (``SECTIONS``),
    titled by its docstring.

    jsonargparse adds them from the section dataclasses (``add_class_arguments``: type, ``Literal`` choices, help and
    default from the field); a tuple field (after its section's others) is typed as a list of its items or one
    string, so ``--export_formats merged_16bit,gguf_q8_0`` reaches ``FinetuneConfig``, which splits it and checks the
    items (``parse_values``).

    Args:
        parser: a jsonargparse ``ArgumentParser``.
        names: field names, in any order (default: every field); they are added in the sections' order, and a name
            that is not a field is not added.
    """
    import docstring_parser

    for section in SECTIONS.values():
        own = [f.name for f in dataclasses.fields(section)]
        if not set(own) & set(names):
            continue
        doc = docstring_parser.parse(section.__doc__)
        group = parser.add_argument_group(doc.short_description.rstrip("."), description=doc.long_description)
        tuples = [name for name in own if name in names and typing.get_origin(FIELD_TYPES[name]) is tuple]
        group.add_class_arguments(section, as_group=False, skip=set(own) - set(names) | set(tuples), instantiate=False)
        for name in tuples:  # a list of its items (str, or export_formats' Literal), or one string (comma-separated)
            item = typing.get_args(FIELD_TYPES[name])[0]
            group.add_argument(
                f"--{name}", type=Union[List[item], str], default=list(getattr(DEFAULTS, name)), help=field_docs()[name]
            )

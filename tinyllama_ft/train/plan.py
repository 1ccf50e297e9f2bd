"""What to train vs. how it runs: the execution plan, computed once from the configuration and the machine.

``plan_run(cfg, hardware)`` decides the backend, dtype, attention kernel, fused kernels, micro-batch split,
gradient checkpointing, optimizer and 4-bit loading into a frozen ``RunPlan``; ``cfg`` is never rewritten.
``recipe="article"`` runs the article's values literally; ``"fast"`` keeps the same math (effective batch,
schedule, optimizer, LoRA) and changes only its execution (docs/speed.md). Under DDP each process takes 1/N
of the effective batch (``split_over_processes``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..config.coercion import ConfigError
from ..config.finetune import FinetuneConfig
from ..config.methods import METHODS
from ..machine.hardware import Hardware, is_importable
from ..models.loading import choose_backend, import_unsloth_first, rope_scaling_factor
from ..models.precision import adapter_dtype, resolve_dtype
from .memory_estimate import (
    HEADROOM,
    estimate_peak_gib,
    fused_rollout_gib,
    merged_copy_gib,
    gpu_budget_gib,
    model_dims,
    read_model_config,
    splits,
)


#: Why a preference run (pairs or rows padded to the longest of each micro-batch, a new length at nearly every step)
#: skips the compiling paths; the figures: benchmarks/README.md, 2026-12-06 (third session), H100, 30 DPO steps.
PADDED_BF16 = (
    "method={method!r}: SDPA, not flex attention: each micro-batch is padded to its longest sequence and flex "
    "attention compiles again for new lengths (first step 19.7 -> 3.1 s, whole train() 1,343 -> 2,649 tokens/s at 30 "
    "steps; flex's faster steady steps pay its compiles back after about 150 steps: set "
    "attn_implementation='flex_attention' for long runs)"
)
PADDED_FP16 = (
    "method={method!r} on a {dtype} GPU: transformers + PEFT with SDPA, not Unsloth: Unsloth's compiled decoder "
    "blocks took 43 s of DPO's first step on the T4 stand-in (here 3.6 s, nothing compiled; whole train() 2,479 "
    "tokens/s at 30 steps) and its patched DPO trainer did not build with TRL 1.15 (TRL's ran); its faster steady "
    "steps pay that back after about 180 steps: set backend='unsloth' for long runs"
)


@dataclass(frozen=True)
class RunPlan:
    """How a run executes on this machine; computed once by ``plan_run``, read by the helpers.

    Attributes:
        recipe: ``"fast"`` or ``"article"``.
        device: ``"cuda"`` or ``"cpu"``.
        backend: ``"unsloth"`` or ``"transformers"``.
        dtype: compute dtype name (``"bfloat16"``, ``"float16"``, ``"float32"``).
        load_in_4bit: the base weights really are 4-bit (asked for, and CUDA present).
        cpu_autocast_bf16: fp32 weights on a CPU that computes bf16 natively, dtype left automatic:
            the matmuls run under bf16 autocast (TRL's default).
        attn_implementation: transformers' attention kernel, or None for the backend's own.
        use_liger_kernel: Liger's fused kernels through the trainer.
        per_device_train_batch_size, gradient_accumulation_steps: one process's split of the effective batch.
        gradient_checkpointing: recompute activations in the backward pass.
        optim: the trainer's optimizer name.
        rope_scaling_factor: linear RoPE factor the load applies (None: the model's positions suffice,
            or its config was unreadable).
        estimated_peak_gib, budget_gib: estimated peak CUDA memory and the memory planned for, in GiB
            (None on a CPU or without the model config).
        reasons: one line per decision.
        world_size: processes training together (``accelerate launch --num_processes``); 1 alone.
        reference: what a preference method compares the model with (``methods.Method.reference_of``); None for SFT.
        rewards: GRPO's reward functions, by the names TRL logs them under (``rewards.resolve_rewards``: each one
            checked when the plan is made, before any model loads); () for the other methods.
        rollout_gib: GRPO on a CUDA GPU: GiB the fused rollouts add (``fused_rollout_gib``); None otherwise.
        rollouts_fit: False when that memory beside training's estimate passes the budget: ``rollout_decoder="auto"``
            then samples with TRL's ``generate`` (``grpo_rollout.why_not_fused`` reads it).
        rollouts_keep_base: the fused rollouts keep a 4-bit base dequantized for the run (its GiB in ``rollout_gib``)
            rather than dequantizing it again each step: False where that copy would pass the budget.
        adapter_dtype: the dtype the trainable weights keep (``precision.adapter_dtype``; the trainer builders
            cast them back after TRL's trainer is built); None: as the libraries leave them.
    """

    recipe: str
    device: str
    backend: str
    dtype: str
    load_in_4bit: bool
    cpu_autocast_bf16: bool
    attn_implementation: str | None
    use_liger_kernel: bool
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    optim: str
    rope_scaling_factor: float | None = None
    estimated_peak_gib: float | None = None
    budget_gib: float | None = None
    reasons: tuple[str, ...] = ()
    world_size: int = 1
    reference: str | None = None
    rewards: tuple[str, ...] = ()
    rollout_gib: float | None = None
    rollouts_fit: bool = True
    rollouts_keep_base: bool = True
    adapter_dtype: str | None = None

    @property
    def effective_batch_size(self) -> int:
        """Sequences per optimizer step, all processes together (the configuration's, whatever the split)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps * self.world_size

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (recorded in ``run_summary.json`` under ``"execution"``)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    def summary(self) -> str:
        """A few lines for the notebook: the choices, then why."""
        head = (
            f"recipe {self.recipe!r} on {self.device}: backend {self.backend}, {self.dtype}"
            f"{' (bf16 autocast)' if self.cpu_autocast_bf16 else ''}, 4-bit {self.load_in_4bit}, attention "
            f"{self.attn_implementation or 'backend default'}, liger {self.use_liger_kernel}, batch "
            f"{self.per_device_train_batch_size} x accumulation {self.gradient_accumulation_steps}, gradient "
            f"checkpointing {self.gradient_checkpointing}, optimizer {self.optim}"
            f"{f', x {self.world_size} processes' if self.world_size > 1 else ''}"
        )
        if self.estimated_peak_gib is not None:
            head += f", estimated peak {self.estimated_peak_gib:.1f} of {self.budget_gib:.1f} GiB"
        return "\n".join([head, *(f"  {r}" for r in self.reasons)])


def whole_module_count(target_modules, dims: dict) -> int:
    """The vocabulary x hidden matrices ``target_modules`` trains in full (``lora.WHOLE_MODULES`` named in it), one
    when the model ties them (``dims["tied"]``)."""
    from ..models.lora import WHOLE_MODULES

    named = sum(t in target_modules for t in WHOLE_MODULES)
    return min(named, 1) if dims.get("tied") else named


def grpo_rewards(cfg: FinetuneConfig) -> tuple[str, ...]:
    """GRPO's reward functions by the names TRL logs them under, each resolved and checked
    (``rewards.resolve_rewards``), so a bad one stops the run before any model loads; () for the other methods. Raises
    rewards.RewardError: (a ConfigError) as ``resolve_rewards``, naming ``reward_funcs[i]``."""
    if "reward_funcs" not in METHODS[cfg.method].reads:
        return ()
    from .rewards import resolve_rewards, reward_name

    funcs = resolve_rewards(cfg.reward_funcs, max_completion_length=cfg.max_completion_length)
    return tuple(reward_name(f) for f in funcs)


def check_trainer_names(cfg: FinetuneConfig, hardware: Hardware) -> None:
    """Refuse, before any model loads, an unknown ``attn_implementation`` (read from the installed transformers) and a
    bitsandbytes optimizer (``adamw_8bit``, ``paged_*``) without CUDA; unknown ``lr_scheduler_type`` and ``optim``
    names are refused by TRL's config (``methods.Method.check_trl_config``). Raises coercion.ConfigError: names the
    field, the value and the choices."""
    if cfg.optim is not None and not hardware.cuda and any(k in cfg.optim for k in ("8bit", "paged", "bnb")):
        raise ConfigError(
            f"FinetuneConfig.optim={cfg.optim!r} is a bitsandbytes optimizer, which needs a CUDA "
            f"GPU: use optim=None ('adamw_torch' on a CPU)"
        )
    if cfg.attn_implementation is not None and "/" not in cfg.attn_implementation:  # "org/kernel": a Hub kernel
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        kernels = ["eager", *ALL_ATTENTION_FUNCTIONS.keys()]
        if cfg.attn_implementation not in kernels:
            raise ConfigError(
                f"FinetuneConfig.attn_implementation={cfg.attn_implementation!r} is not an attention "
                f"kernel of the installed transformers: one of {kernels}"
            )


def plan_run(
    cfg: FinetuneConfig,
    hardware: Hardware,
    model_config=None,
    *,
    budget_gib: float | None = None,
    importable=is_importable,
    world_size: int | None = None,
) -> RunPlan:
    """Decide how ``cfg`` runs on ``hardware``; the configuration itself is not changed.

    Args:
        cfg: the run's configuration; ``per_device_train_batch_size * gradient_accumulation_steps`` is the
            effective batch every plan keeps.
        hardware: the machine (``hardware.detect_hardware()``).
        model_config: the base model's config (transformers object or dict); None = read ``config.json``
            from ``cfg.model_name`` (on failure the fast recipe keeps the configured split, checkpointed).
        budget_gib: GPU memory to plan for, in GiB; None = free memory on this process's device, within
            ``cfg.gpu_memory_cap_gib`` when set.
        importable: ``hardware.is_importable``-like probe (tests inject which optional packages exist).
        world_size: processes training together; None = ``distributed.world_size()`` (``WORLD_SIZE``, set
            by ``accelerate launch`` / ``torchrun``; 1 in a plain process).

    Returns:
        The frozen ``RunPlan`` (its split is one process's share of the effective batch).

    Raises:
        coercion.ConfigError: as ``methods.Method.check_trl_config`` (what TRL's config of the method refuses: an
            unknown scheduler or optimizer among them) and ``check_trainer_names`` (an unknown attention kernel, a
            bitsandbytes optimizer without CUDA).
        ValueError / ImportError: as ``precision.resolve_dtype`` and ``loading.choose_backend`` (e.g.
            ``dtype="bfloat16"`` on a T4, ``backend="unsloth"`` on a CPU); ``split_over_processes`` (the
            effective batch does not divide over the processes); ``backend="unsloth"`` with several
            processes (Unsloth trains on one GPU).
    """
    plan = _decide(cfg, hardware, model_config, budget_gib=budget_gib, importable=importable, world_size=world_size)
    import_unsloth_first(plan.backend)  # before TRL's config imports transformers, TRL and PEFT, which Unsloth patches
    METHODS[cfg.method].check_trl_config(cfg)  # on the whole run's split, not on one process's share
    return plan


def _decide(cfg, hardware, model_config, *, budget_gib, importable, world_size) -> RunPlan:
    """``plan_run``'s decision, before TRL's config check (a DDP run decides one process's share with it)."""
    from ..machine.distributed import world_size as launched_world_size

    world = launched_world_size() if world_size is None else world_size
    if world > 1:
        share = split_over_processes(cfg, world)
        if cfg.backend == "auto":  # Unsloth trains on one GPU: DDP runs on transformers + PEFT
            share = dataclasses.replace(share, backend="transformers")
        plan = _decide(share, hardware, model_config, budget_gib=budget_gib, importable=importable, world_size=1)
        if plan.backend == "unsloth":
            raise ValueError(
                f"backend='unsloth' trains on one GPU only, not {world} processes: set "
                f"backend='transformers' (or 'auto') for accelerate launch"
            )
        line = (
            f"{world} processes (DDP): each takes batch {plan.per_device_train_batch_size} x accumulation "
            f"{plan.gradient_accumulation_steps} of the configured {cfg.per_device_train_batch_size} x "
            f"{cfg.gradient_accumulation_steps}; loss averaged over the tokens of all processes"
        )
        return dataclasses.replace(plan, world_size=world, reasons=(*plan.reasons, line))
    check_trainer_names(cfg, hardware)
    method = METHODS[cfg.method]
    dtype = resolve_dtype(cfg.dtype, hardware)
    backend = choose_backend(cfg.backend, hardware, importable("unsloth"))
    cuda = hardware.cuda
    reasons: list[str] = []
    if cfg.adapter_name_or_path and backend == "unsloth":
        if cfg.backend == "unsloth":
            raise ConfigError(
                f"FinetuneConfig.backend='unsloth' with adapter_name_or_path={cfg.adapter_name_or_path!r}: a saved "
                f"adapter is continued on the transformers backend (PEFT); set backend='transformers' or 'auto'"
            )
        backend = "transformers"
        reasons.append("continuing a saved adapter: transformers + PEFT (Unsloth's loader starts fresh adapters)")
    if cfg.load_in_4bit and not cuda:
        reasons.append("load_in_4bit=True needs a CUDA GPU (bitsandbytes): full-precision weights here")
    common = dict(
        device="cuda" if cuda else "cpu",
        dtype=dtype,
        load_in_4bit=cfg.load_in_4bit and cuda,
        cpu_autocast_bf16=not cuda and hardware.cpu_bf16 and cfg.dtype is None and dtype == "float32",
        optim=cfg.optim or ("adamw_8bit" if cuda else "adamw_torch"),
        reference=method.reference_of(cfg),
        rewards=grpo_rewards(cfg),
    )
    split = (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps)
    dims, rope, unreadable = None, None, None
    try:
        dims = model_dims(model_config if model_config is not None else read_model_config(cfg.model_name))
        rope = rope_scaling_factor(cfg.max_seq_length, dims["positions"])
    except Exception as e:  # unreadable config: the plan says so and keeps what was configured
        unreadable = type(e).__name__
    if common["reference"]:
        reasons.append(f"method={cfg.method!r}: reference {common['reference']} (no second copy of the base)")
    if common["rewards"]:
        reasons.append(
            f"method={cfg.method!r}: {split[0] * split[1]} completions per step = "
            f"{split[0] * split[1] // cfg.num_generations} prompts x num_generations {cfg.num_generations}, each at "
            f"most {cfg.max_completion_length} tokens; rewards {', '.join(common['rewards'])} (each checked)"
        )
    if not method.liger and cfg.use_liger_kernel:
        reasons.append(
            f"method={cfg.method!r}: use_liger_kernel off (TRL computes the log-probabilities with its own LM head)"
        )

    def plan(**chosen) -> RunPlan:
        given = dict(per_device_train_batch_size=split[0], gradient_accumulation_steps=split[1], recipe="fast")
        kept = adapter_dtype(dtype, chosen["backend"])
        if kept and dtype == "float16" and common["load_in_4bit"]:
            reasons.append(
                "float16 on a 4-bit base: the adapter trains in float32 (TRL casts it to bfloat16, whose gradients "
                "fp16's GradScaler cannot unscale)"
            )
        return RunPlan(
            **{
                **given,
                "rope_scaling_factor": rope,
                **chosen,
                **common,
                "adapter_dtype": kept,
                "reasons": tuple(reasons),
            }
        )

    if cfg.recipe == "article":
        reasons.append("the article's cell values, as configured")
        return plan(
            recipe="article",
            backend=backend,
            attn_implementation=cfg.attn_implementation,
            use_liger_kernel=cfg.use_liger_kernel and method.liger,
            gradient_checkpointing=cfg.gradient_checkpointing,
        )
    if not cuda:
        reasons.append("CPU: SDPA (packed rows masked from each other), no checkpointing (it only costs time)")
        return plan(
            backend="transformers",
            attn_implementation=cfg.attn_implementation or "sdpa",
            use_liger_kernel=False,
            gradient_checkpointing=False,
        )
    bf16 = dtype == "bfloat16" and hardware.bf16_capable
    # a preference micro-batch is padded to its longest sequence, a new length at nearly every step: flex attention
    # (bf16) and Unsloth's compiled decoder blocks (fp16) compile again or first, which short runs never pay back
    padded = method.summary == "preference"
    if cfg.backend == "auto":
        if bf16 and padded:
            backend = "transformers"
            reasons.append(PADDED_BF16.format(method=cfg.method))
        elif bf16:
            backend = "transformers"
            reasons.append(
                "bf16 GPU: transformers + PEFT with flex attention and fused kernels (3x Unsloth's "
                "tokens/s at the same batch on the H200); packed batches padded to batch x max_seq_length "
                "tokens, so flex attention compiles once"
            )
        elif padded and not cfg.adapter_name_or_path:
            backend = "transformers"
            reasons.append(PADDED_FP16.format(method=cfg.method, dtype=dtype))
        elif not cfg.adapter_name_or_path:  # else said above
            reasons.append(
                f"{dtype} GPU: Unsloth (its kernels target the T4 generation)"
                if backend == "unsloth"
                else f"{dtype} GPU: transformers (unsloth is not installed)"
            )
    attn, liger = cfg.attn_implementation, False
    if backend == "transformers":
        attn = attn or ("flex_attention" if bf16 and not padded else "sdpa")
        liger = bf16 and importable("liger_kernel") and method.liger
        if bf16 and not liger and method.liger:
            reasons.append("liger-kernel not installed: the loss materialises the logits (pip install liger-kernel)")
    execution = dict(backend=backend, attn_implementation=attn, use_liger_kernel=liger)
    if dims is None:
        reasons.append(
            f"model config unreadable ({unreadable}): keeping batch {split[0]} x {split[1]} with gradient checkpointing"
        )
        return plan(gradient_checkpointing=True, **execution)
    effective = split[0] * split[1]
    budget = budget_gib if budget_gib is not None else gpu_budget_gib(cfg.gpu_memory_cap_gib)
    sizes = dict(
        max_seq_length=cfg.max_seq_length,
        backend=backend,
        load_in_4bit=common["load_in_4bit"],
        fused_loss=liger or backend == "unsloth" or method.fused_head,
        lora_r=cfg.lora_r,
        whole_modules=whole_module_count(cfg.target_modules, dims),
    )
    # a pair is two sequences (chosen and rejected; KTO: a completion and its KL completion), and KTO's KL term
    # needs two completions in a micro-batch
    per_item, least = method.sequences(cfg), method.min_micro_batch(cfg)
    sizes_of = [m for m in splits(effective) if m >= least] or [least]
    if method.summary is not None:
        reasons.append(
            f"method={cfg.method!r}: {per_item} sequence(s) of max_seq_length per row ({method.trains_on}) in the "
            f"estimate, no packing" + (f", micro-batch of {least} or more (its KL term)" if least > 1 else "")
        )
    candidates = [(m, False) for m in sizes_of[:2]] + [(m, True) for m in sizes_of] + [(m, False) for m in sizes_of[2:]]
    for micro, gc in candidates:
        peak = estimate_peak_gib(dims, micro_batch=micro * per_item, gradient_checkpointing=gc, **sizes)
        if peak <= HEADROOM * budget:
            break
    else:
        micro, gc = sizes_of[-1], True
        peak = estimate_peak_gib(dims, micro_batch=micro * per_item, gradient_checkpointing=gc, **sizes)
        reasons.append(
            f"even batch {micro} with checkpointing may not fit: lower max_seq_length if it runs out of memory"
        )
    reasons.append(
        f"batch {micro} x accumulation {effective // micro} = the configured {split[0]} x {split[1]}; "
        f"checkpointing {'on' if gc else 'off'} (estimated {peak:.1f} GiB of {budget:.1f} GiB)"
    )
    rollouts = {}
    if common["rewards"] and cfg.rollout_decoder != "generate":
        rollouts = fused_rollout_memory(cfg, dims, effective, peak, budget, backend, common["load_in_4bit"], dtype)
        reasons.append(rollouts.pop("reason"))
    if backend == "transformers":
        reasons.append(
            f"held-out checks and side-by-side answers: the CUDA-graph decoder, 16 prompts per batch, on a merged "
            f"16-bit copy of the projections ({merged_copy_gib(dims):.1f} GiB, made for each check and freed after it)"
        )
    return plan(
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=effective // micro,
        gradient_checkpointing=gc,
        estimated_peak_gib=round(peak, 2),
        budget_gib=round(budget, 2),
        **execution,
        **rollouts,
    )


def fused_rollout_memory(cfg, dims, completions, peak, budget, backend, four_bit, dtype) -> dict[str, Any]:
    """``{"rollout_gib", "rollouts_fit", "rollouts_keep_base", "reason"}``: whether the fused rollouts' memory
    (``fused_rollout_gib``) fits beside training's estimated ``peak`` within ``budget`` GiB (the budget itself, not the
    planner's headroom: the estimate counts every sequence at ``max_seq_length``, far above a GRPO step's prompt +
    completion), first with a 4-bit base kept dequantized, else without it (dequantized again each step), and the
    plan's line saying which rollouts run and why."""
    parts = fused_rollout_gib(cfg, dims, completions, dtype, four_bit)
    extra = sum(parts.values())
    keep = peak + extra <= budget
    if not keep:
        extra -= parts["base"]
    fit = peak + extra <= budget
    cache = f"a cache for {completions} completions ({parts['cache'] + parts['logits']:.1f} GiB)"
    if not four_bit:
        merge = "the adapter merged again in place before each step's rollouts"
    elif keep:
        merge = (
            f"the 4-bit base dequantized once and kept beside it ({parts['base']:.1f} GiB), the adapter added to it "
            "before each step's rollouts"
        )
    else:
        merge = (
            f"the 4-bit base dequantized into it again before each step's rollouts: keeping it dequantized "
            f"({parts['base']:.1f} GiB, faster) would pass the budget"
        )
    what = f"a merged 16-bit copy of the projections ({parts['copy']:.1f} GiB, {merge}) and {cache}"
    if fit:
        on = "Unsloth's model, read as weights" if backend == "unsloth" else "the model"
        reason = (
            f"rollouts: the fused CUDA-graph decoder on {on} (rollout_decoder={cfg.rollout_decoder!r}): {what}, "
            f"{peak + extra:.1f} of {budget:.1f} GiB with training's estimate; "
            "its rollouts against generate's: benchmarks/README.md"
        )
    else:
        reason = (
            f"rollouts: generate: the fused decoder's {what} with training's estimated {peak:.1f} GiB would pass the "
            f"{budget:.1f} GiB budget (rollout_decoder='fused' forces it)"
        )
    return {"rollout_gib": round(extra, 2), "rollouts_fit": fit, "rollouts_keep_base": keep, "reason": reason}


def split_over_processes(cfg: FinetuneConfig, world_size: int) -> FinetuneConfig:
    """``cfg`` with one process's share of the effective batch, for planning: the configured micro-batch where it
    divides the share, else the largest that does, so every optimizer step holds the single-process run's rows. Raises
    ValueError: the effective batch does not divide over ``world_size`` processes (names the fields)."""
    effective = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    if effective % world_size:
        raise ValueError(
            f"per_device_train_batch_size={cfg.per_device_train_batch_size} x gradient_accumulation_steps="
            f"{cfg.gradient_accumulation_steps} = {effective} sequences per optimizer step do not divide over "
            f"{world_size} processes: make their product a multiple of {world_size} (or launch "
            f"{math.gcd(effective, world_size)} process(es))"
        )
    share = effective // world_size
    micro = math.gcd(cfg.per_device_train_batch_size, share)
    return dataclasses.replace(cfg, per_device_train_batch_size=micro, gradient_accumulation_steps=share // micro)

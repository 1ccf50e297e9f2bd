"""GRPO's rollouts on the package's fused decoder (``infer.fast``), as TRL's ``rollout_func``.

Each call samples one completion per prompt with the current step's weights (the adapter merged into the decoder's
copy in place), temperature, top_k and top_p as ``GRPOConfig`` sets them, from torch's seeded generator. Why ours:
benchmarks/README.md ("GRPO rollouts on the H200") has it against TRL's and Unsloth's rollouts;
tests/test_grpo_rollout.py shows its greedy rollouts equal ``generate``'s after three optimizer steps, and on a
bitsandbytes 4-bit base. Unsloth's model is read the same way (its patched GRPOTrainer keeps TRL's ``rollout_func``).
"""

from __future__ import annotations

from transformers import TrainerCallback

from ..infer.core import forget
from ..infer.fast.graph_decoder import Sampling, fused_decoder_for
from ..infer.fast.llama_ops import fused_weights, why_not_readable


def why_not_fused(rollout_decoder: str, model, args, plan=None) -> str | None:
    """None when the run samples with ``fused_rollout``, else why it uses TRL's ``generate``.

    Args:
        rollout_decoder: ``FinetuneConfig.rollout_decoder``: "generate", "fused", or "auto" (fused on a CUDA
            device where the plan's memory estimate allows; benchmarks/README.md has the CPU figures).
        model: the PEFT model; the fused decoder reads a Llama's weights (``why_not_readable``: transformers' or
            Unsloth's, 16-bit or a bitsandbytes 4-bit base).
        args: the ``GRPOConfig``: the fused decoder applies temperature, top_k and top_p, not ``min_p``,
            ``repetition_penalty``, ``generation_kwargs`` or vLLM.
        plan: the run's ``RunPlan``; with ``rollouts_fit`` False (the merged copy and cache would pass the memory
            budget) "auto" keeps ``generate`` and "fused" goes ahead. None: no memory check.

    Raises:
        ValueError: ``rollout_decoder="fused"`` where the model or a generation setting rules it out, naming which.
    """
    if rollout_decoder == "generate":
        return "rollout_decoder='generate'"
    why = why_not_readable(model)
    for name, plain in (("min_p", None), ("repetition_penalty", 1.0), ("generation_kwargs", None), ("use_vllm", False)):
        if why is None and getattr(args, name, plain) not in (plain, {}):
            why = f"{name}={getattr(args, name)!r} (the fused decoder applies temperature, top_k and top_p)"
    if why is not None and rollout_decoder == "fused":
        raise ValueError(f"rollout_decoder='fused' cannot sample this run: {why}; use 'auto' or 'generate'")
    if why is None and rollout_decoder == "auto" and model.device.type != "cuda":
        why = "no CUDA device"
    if why is None and rollout_decoder == "auto" and plan is not None and not plan.rollouts_fit:
        why = (
            f"the merged copy and cache ({plan.rollout_gib} GiB) beside training's estimated "
            f"{plan.estimated_peak_gib} GiB would pass the {plan.budget_gib} GiB budget"
        )
    return why


#: Prompts are left-padded to a multiple of this many tokens: the prefill's Triton kernels (Liger's RoPE) are compiled
#: per divisibility of the length by 16, so a step whose longest prompt changes that would compile them again.
PROMPT_BLOCK = 16


def fused_rollout(prompts: list, trainer, keep_base: bool = True) -> dict:
    """TRL's ``rollout_func``: one sampled completion per prompt on the fused decoder.

    Args:
        prompts: the step's prompts on this process, each repeated ``num_generations`` times (TRL's sampler): text,
            or messages that the tokenizer's chat template renders with the assistant's header.
        trainer: the ``GRPOTrainer``: its model (a PEFT Llama), tokenizer, ``args`` (temperature, top_k, top_p),
            ``max_completion_length`` and ``eos_token_ids``.
        keep_base: keep a 4-bit base's dequantized 16-bit copy for the run, so each step only adds the adapter to it
            (``llama_ops.fused_weights``); the plan passes ``RunPlan.rollouts_keep_base`` (False where that copy would
            pass the memory budget: the base is dequantized again each step).

    Returns:
        ``{"prompt_ids": [[int]], "completion_ids": [[int]], "logprobs": None}``: prompts tokenized as TRL tokenizes
        them (``grpo_prompts.prompt_token_ids``); each completion ends at its first stop token (kept, as TRL keeps
        it) or after ``max_completion_length`` tokens. No sampling log-probabilities: TRL recomputes them.
    """
    import torch

    from ..data.grpo_prompts import prompt_token_ids

    model, tokenizer, args = trainer.model, trainer.processing_class, trainer.args
    prompt_ids = [prompt_token_ids(tokenizer, p) for p in prompts]
    n = -(-max(map(len, prompt_ids)) // PROMPT_BLOCK) * PROMPT_BLOCK
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (n - len(ids)) + ids for ids in prompt_ids], device=model.device)
    mask = torch.tensor([[0] * (n - len(ids)) + [1] * len(ids) for ids in prompt_ids], device=model.device)
    fused_weights(model, refresh=True, keep_base=keep_base)  # this step's adapter, where the captured graph reads
    sampling = Sampling(args.temperature, args.top_k or 0, 1.0 if args.top_p is None else args.top_p)
    decoder = fused_decoder_for(model, len(prompts), n + trainer.max_completion_length, sampling=sampling)
    completions = decoder.decode(
        input_ids, mask, trainer.max_completion_length, trainer.eos_token_ids, every=32, keep_stop=True
    )
    return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}


class ForgetFusedCopies(TrainerCallback):
    """Drops the rollouts' merged weights and decoder when training ends: checks that answer afterwards merge the
    final adapter afresh, and the memory is free."""

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if model is not None:
            forget(model)

"""GRPO's rollouts on the fused decoder (``train.grpo_rollout``): its sampling is transformers' (temperature, top_k,
top_p; seeded), and with the trainer's rollouts on it, its greedy rollouts after each of three optimizer steps equal
``generate`` on the PEFT model token for token (float32, CPU: the decoder without its CUDA graph)."""

from types import SimpleNamespace

import pytest

from test_grpo import TRL_READS_DEPRECATED, _prompts, _tiny_grpo


def _hf_probabilities(logits, temperature, top_k, top_p):
    """transformers' own warpers, in generate's order, then softmax: the distribution sampling must draw from."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = logits.float()
    for warper in (TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k), TopPLogitsWarper(top_p)):
        scores = warper(None, scores)
    return scores.softmax(-1)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 12, 1.0), (1.3, 0, 0.8), (0.5, 20, 0.9)])
def test_sampling_draws_from_transformers_distribution_and_is_seeded(temperature, top_k, top_p):
    import torch

    from tinyllama_ft.infer.fast.graph_decoder import Sampling, pick_tokens

    torch.manual_seed(0)
    logits = torch.randn(3, 40) * 2
    sampling = Sampling(temperature, top_k, top_p)
    expected = _hf_probabilities(logits, temperature, top_k or 40, top_p)
    draws = 20_000
    repeated = logits.repeat_interleave(draws, 0)
    torch.manual_seed(1)
    tokens = pick_tokens(repeated, sampling).view(3, draws)
    torch.manual_seed(1)
    assert torch.equal(pick_tokens(repeated, sampling).view(3, draws), tokens)  # seeded: the same draws
    for row in range(3):
        seen = torch.bincount(tokens[row], minlength=40).float() / draws
        assert set(tokens[row].tolist()) <= set(expected[row].nonzero().flatten().tolist())  # inside the kept set
        assert (seen - expected[row]).abs().max() < 0.015, (row, (seen - expected[row]).abs().max())
    assert torch.equal(pick_tokens(logits, Sampling(0.8, 1, 1.0)), logits.argmax(-1, keepdim=True))  # top_k 1: greedy


def _generate_greedy(model, tokenizer, prompt_ids, max_new_tokens, eos_ids):
    """``generate`` on the PEFT model, greedy, left-padded, each completion cut after its first EOS (kept), as TRL's
    own rollouts are."""
    import torch

    n = max(map(len, prompt_ids))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (n - len(p)) + p for p in prompt_ids])
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in prompt_ids])
    out = model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos_ids
    )[:, n:].tolist()
    cut = []
    for row in out:
        end = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
        cut.append(row[:end])
    return cut


def _fused_trainer(tmp_path, reward):
    """A GRPO trainer of a tiny LoRA Llama whose rollouts run on the fused decoder (forced: a CPU), 3 steps at a
    learning rate that moves the adapter, completions of at most 16 tokens."""
    return _tiny_grpo(
        tmp_path,
        rollout_decoder="fused",
        max_steps=3,
        learning_rate=5e-2,
        max_completion_length=16,
        rewards=[reward],
    )


def _variety(completions, completion_ids, **kwargs):
    """Rewards that differ within a group, so the adapter moves."""
    return [sum(ids) % 5 / 4 for ids in completion_ids]


@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_fused_rollouts_sample_with_each_steps_adapter_and_equal_generate_greedily(tmp_path):
    import torch
    from chat_fixtures import cpu_trl_cannot_train
    from transformers import TrainerCallback

    from tinyllama_ft.train import grpo_rollout

    trainer, model = _fused_trainer(tmp_path, _variety)
    assert trainer.rollout_func.func is grpo_rollout.fused_rollout
    assert trainer.rollout_func.keywords == {"keep_base": True}  # the plan's choice (a 16-bit base: read in place)
    assert trainer.args.temperature == 1.0 and trainer.args.top_k == 0
    with pytest.raises(ValueError, match="rollout_decoder='fused' cannot sample this run: repetition_penalty=1.1"):
        grpo_rollout.why_not_fused("fused", model, SimpleNamespace(repetition_penalty=1.1))
    assert grpo_rollout.why_not_fused("auto", model, trainer.args) == "no CUDA device"  # auto: CUDA only
    if cpu_trl_cannot_train():
        return
    prompts = list(trainer.train_dataset["prompt"][:3])
    calls, checks = [], []
    inner = trainer.rollout_func

    def counted(prompts, trainer):
        out = inner(prompts, trainer)
        calls.append((len(prompts), [len(c) for c in out["completion_ids"]]))
        return out

    trainer.rollout_func = counted

    class GreedyCheck(TrainerCallback):
        """After each optimizer step: the rollout function, greedy (top_k 1), against generate."""

        def on_step_end(self, args, state, control, **kwargs):
            trainer.args.top_k = 1
            try:
                fused = inner(prompts, trainer)
            finally:
                trainer.args.top_k = 0
            plain = _generate_greedy(model, trainer.processing_class, fused["prompt_ids"], 16, trainer.eos_token_ids)
            checks.append((state.global_step, fused["completion_ids"], plain))

    trainer.add_callback(GreedyCheck())
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert [c[0] for c in calls] == [4, 4, 4] and all(1 <= n <= 16 for c in calls for n in c[1])
    assert [c[0] for c in checks] == [1, 2, 3]
    for step, fused, plain in checks:
        assert fused == plain, step  # token for token, with each step's adapter
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if n in before)
    from tinyllama_ft.infer.fast.llama_ops import FUSED_WEIGHTS

    assert model not in FUSED_WEIGHTS  # the rollouts' merged copy is dropped when training ends


@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_answers_after_an_interrupted_fused_run_use_the_adapter_as_it_stopped(tmp_path):
    """Ctrl-C (a notebook's stop button) or an error ends training without ``on_train_end``: the rollouts' merged copy
    of the weights stays, one optimizer step behind the adapter. The graph decoder (what the held-out checks and chat
    use on a CUDA GPU) must answer with the adapter as training left it, equal to ``generate``, not that copy."""
    from chat_fixtures import cpu_trl_cannot_train
    from transformers import TrainerCallback

    from tinyllama_ft.evaluate.grpo_checks import grpo_scores
    from tinyllama_ft.infer.fast.llama_ops import FUSED_WEIGHTS

    if cpu_trl_cannot_train():
        pytest.skip("TRL 1.15 trains with a Triton kernel a CPU torch lacks")
    trainer, model = _fused_trainer(tmp_path, _variety)

    class Interrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise KeyboardInterrupt

    trainer.add_callback(Interrupt())
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    rows = list(_prompts(12))[:4]
    graph = grpo_scores(model, trainer.processing_class, rows, max_new_tokens=12, batch_size=4, decode="graph")
    plain = grpo_scores(model, trainer.processing_class, rows, max_new_tokens=12, batch_size=4, decode="plain")
    assert graph.answers == plain.answers
    assert model not in FUSED_WEIGHTS  # and the copy is freed


def _quantize_projections(model):
    """The projections of a transformers Llama replaced by bitsandbytes NF4 ``Linear4bit`` layers (quantized on the
    CPU), as ``load_in_4bit`` loads them on a GPU; the embeddings, norms and LM head stay 16/32-bit."""
    import bitsandbytes as bnb
    import torch

    from tinyllama_ft.infer.fast.llama_ops import PROJECTIONS

    for name, module in list(model.named_modules()):
        if not name.endswith(PROJECTIONS):
            continue
        parent, _, child = name.rpartition(".")
        layer = bnb.nn.Linear4bit(
            module.in_features, module.out_features, bias=False, compute_dtype=torch.float32, quant_type="nf4"
        )
        layer.weight = bnb.nn.Params4bit(module.weight.data, requires_grad=False, quant_type="nf4")
        setattr(model.get_submodule(parent), child, layer.to("cpu"))  # .to quantizes
    model.is_loaded_in_4bit = True  # as transformers marks a 4-bit load; peft then wraps with its lora.Linear4bit
    return model


def test_fused_rollouts_on_a_4bit_base_merge_each_steps_adapter_and_equal_generate():
    """The T4 plan's model: a bitsandbytes 4-bit base with LoRA adapters (the Unsloth and transformers backends load
    the same layers). The rollouts' 16-bit copy is the base dequantized plus the adapter's delta, re-merged in place
    when the adapter moves, and its greedy rollouts equal ``generate`` on the 4-bit PEFT model token for token."""
    bnb = pytest.importorskip("bitsandbytes")
    import torch
    from chat_fixtures import smollm2_tokenizer, tiny_model
    from peft.utils.integrations import dequantize_module_weight

    from tinyllama_ft.infer.fast.llama_ops import FUSED_WEIGHTS, projection_weight, why_not_fusable
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.train.grpo_rollout import fused_rollout, why_not_fused

    tokenizer = smollm2_tokenizer()
    base = _quantize_projections(tiny_model("llama", tokenizer))
    model = add_lora(base, gradient_checkpointing=False, lora_r=4, lora_alpha=8)
    q_proj = model.get_base_model().model.layers[0].self_attn.q_proj
    assert isinstance(q_proj.get_base_layer(), bnb.nn.Linear4bit) and type(q_proj).__name__ == "Linear4bit"
    assert why_not_fusable(model) is None and why_not_fused("fused", model, SimpleNamespace()) is None

    _perturb_adapters(model, 1)
    deq = dequantize_module_weight(q_proj.get_base_layer()).float()
    delta = (q_proj.lora_B["default"].weight @ q_proj.lora_A["default"].weight) * q_proj.scaling["default"]
    merged = projection_weight(q_proj, torch.float32)
    assert torch.linalg.norm(merged - (deq + delta)) <= 1e-6 * torch.linalg.norm(deq + delta)
    assert torch.linalg.norm(delta) > 0.1 * torch.linalg.norm(deq)  # the adapter moves the weight measurably

    rows = list(_prompts(6)["prompt"])
    args = SimpleNamespace(temperature=1.0, top_k=1, top_p=1.0)  # top_k 1: greedy draws
    trainer = SimpleNamespace(
        model=model, processing_class=tokenizer, args=args, max_completion_length=12, eos_token_ids=[-1]
    )
    # train mode, as TRL samples (and lora_dropout 0): in eval mode on a CPU with AVX512-BF16, bitsandbytes repacks a
    # 4-bit weight for its CPU kernel (bf16 arithmetic), which dequantize_module_weight does not read back; a GPU
    # never repacks (bitsandbytes.nn.Linear4bit.forward)
    first = fused_rollout(rows, trainer)
    copies = [t for layer in FUSED_WEIGHTS[model]["layers"] for t in layer]
    assert first["completion_ids"] == _generate_greedy(model, tokenizer, first["prompt_ids"], 12, [-1])
    _perturb_adapters(model, 2)
    second = fused_rollout(rows, trainer)
    assert all(a is b for a, b in zip(copies, (t for layer in FUSED_WEIGHTS[model]["layers"] for t in layer)))
    assert second["completion_ids"] == _generate_greedy(model, tokenizer, second["prompt_ids"], 12, [-1])
    assert second["completion_ids"] != first["completion_ids"]  # the new adapter, not the first step's copy


def _perturb_adapters(model, seed):
    """An optimizer step's worth of change in every adapter (both factors), seeded."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn_like(p) * 0.3)


def _computed_weight(module):
    """A projection's weight as the PEFT model computes with it, in float32 from its parts: the base dequantized plus
    each active adapter's ``scaling * B @ A``."""
    from peft.utils.integrations import dequantize_module_weight

    weight = dequantize_module_weight(module.get_base_layer()).detach().float()
    for name in module.active_adapters:
        b, a = module.lora_B[name].weight.detach().float(), module.lora_A[name].weight.detach().float()
        weight = weight + module.scaling[name] * (b @ a)
    return weight


@pytest.mark.parametrize(
    "base,keep_base",
    [("4bit", True), ("4bit", False), ("float32", False), ("bfloat16", True)],
)
def test_a_refresh_writes_each_adapter_projection_into_the_same_tensors_as_the_model_computes_it(base, keep_base):
    """``fused_weights(refresh=True)`` (each GRPO step's rollouts) writes base + ``scaling * B @ A`` into the tensors
    a captured graph reads: after each change of the adapters every fused projection equals the model's own weight
    (within the copy dtype's rounding); with ``keep_base`` a 4-bit base is dequantized once and kept, without it
    again at each refresh; a 16-bit base is never copied (the model's own tensor is read in place)."""
    if base == "4bit":
        pytest.importorskip("bitsandbytes")
    import torch
    from chat_fixtures import smollm2_tokenizer, tiny_model

    from tinyllama_ft.infer.core import forget
    from tinyllama_ft.infer.fast.llama_ops import FUSED_WEIGHTS, fused_weights
    from tinyllama_ft.models.lora import add_lora

    model = tiny_model("llama", smollm2_tokenizer())
    if base == "4bit":
        model = _quantize_projections(model)
    else:
        model = model.to(getattr(torch, base))
    model = add_lora(model, gradient_checkpointing=False, lora_r=4, lora_alpha=8)
    tolerance = {"bfloat16": 2**-8, "float32": 1e-6, "4bit": 1e-6}[base]  # one rounding to the copy's dtype
    layers = model.get_base_model().model.layers
    projections = [
        (i, name, getattr(getattr(layer, where), name))
        for i, layer in enumerate(layers)
        for where, names in (
            ("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")),
            ("mlp", ("gate_proj", "up_proj", "down_proj")),
        )
        for name in names
    ]

    def fused_rows(weights, i, name):
        """The rows of the fused tensor that hold projection ``name`` of layer ``i``."""
        _, qkv, o, _, gu, down = weights["layers"][i]
        attn = layers[i].self_attn
        q, k = attn.q_proj.out_features, attn.k_proj.out_features
        gate = layers[i].mlp.gate_proj.out_features
        return {
            "q_proj": qkv[:q],
            "k_proj": qkv[q : q + k],
            "v_proj": qkv[q + k :],
            "o_proj": o,
            "gate_proj": gu[:gate],
            "up_proj": gu[gate:],
            "down_proj": down,
        }[name]

    def check(weights):
        for i, name, module in projections:
            got, expected = fused_rows(weights, i, name).float(), _computed_weight(module)
            assert torch.linalg.norm(got - expected) <= tolerance * torch.linalg.norm(expected), (i, name)

    _perturb_adapters(model, 1)
    first = fused_weights(model, refresh=True, keep_base=keep_base)
    tensors = [t for layer in first["layers"] for t in layer]
    assert len(first["parts"]) == len(projections)  # every projection carries an adapter
    for part in first["parts"]:
        own = part["module"].get_base_layer().weight
        if base == "4bit":
            assert (part["base"] is not None) == keep_base  # kept dequantized, or dequantized at each refresh
        else:
            assert part["base"].data_ptr() == own.data_ptr()  # the model's own tensor: no copy
    check(first)
    for seed in (2, 3):  # the adapter moves between rollouts
        _perturb_adapters(model, seed)
        again = fused_weights(model, refresh=True, keep_base=keep_base)
        assert again is first and all(a is b for a, b in zip(tensors, (t for layer in again["layers"] for t in layer)))
        check(again)
    if base == "4bit" and not keep_base:  # a later keep_base refresh keeps the base from then on
        fused_weights(model, refresh=True, keep_base=True)
        assert all(part["base"] is not None for part in first["parts"])
        check(first)
    forget(model)
    assert model not in FUSED_WEIGHTS


def test_rollout_prompts_are_padded_to_a_block_so_the_prefill_keeps_one_length_class(monkeypatch):
    """Each call's prompts are left-padded to a multiple of ``PROMPT_BLOCK`` tokens (the prefill's Triton RoPE kernel
    compiles per divisibility of its length by 16: a changing longest prompt compiled it again in 3 of 7 GPU steps),
    and the padding changes no completion: greedy rollouts equal ``generate`` on the unpadded batch."""
    import torch
    from chat_fixtures import smollm2_tokenizer, tiny_model

    from tinyllama_ft.infer.fast.graph_decoder import FusedLlamaDecoder
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.train import grpo_rollout

    tokenizer = smollm2_tokenizer()
    model = add_lora(tiny_model("llama", tokenizer), gradient_checkpointing=False, lora_r=4, lora_alpha=8)
    _perturb_adapters(model, 1)
    widths, decode = [], FusedLlamaDecoder.decode

    def recorded(self, input_ids, *args, **kwargs):
        widths.append(input_ids.shape[1])
        return decode(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(FusedLlamaDecoder, "decode", recorded)
    args = SimpleNamespace(temperature=1.0, top_k=1, top_p=1.0)  # top_k 1: greedy draws
    trainer = SimpleNamespace(
        model=model, processing_class=tokenizer, args=args, max_completion_length=10, eos_token_ids=[-1]
    )
    rows = list(_prompts(8)["prompt"])
    for batch in (rows[:4], rows[4:]):
        out = grpo_rollout.fused_rollout(batch, trainer)
        longest = max(map(len, out["prompt_ids"]))
        assert widths[-1] % grpo_rollout.PROMPT_BLOCK == 0 and 0 <= widths[-1] - longest < grpo_rollout.PROMPT_BLOCK
        with torch.no_grad():
            assert out["completion_ids"] == _generate_greedy(model, tokenizer, out["prompt_ids"], 10, [-1])


def test_unsloth_models_roll_out_on_the_fused_decoder_but_answer_with_unsloths_own_path():
    """Unsloth's patched GRPOTrainer keeps TRL's ``rollout_func`` and the decoder reads only the weights and the
    model's RoPE module, so the rollouts take an Unsloth model; answers (``infer.core``) keep Unsloth's own path."""
    from chat_fixtures import smollm2_tokenizer, tiny_model

    from tinyllama_ft.infer.fast.llama_ops import why_not_fusable, why_not_readable
    from tinyllama_ft.models import loading
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.train.grpo_rollout import why_not_fused

    model = add_lora(tiny_model("llama", smollm2_tokenizer()), gradient_checkpointing=False, lora_r=4, lora_alpha=8)
    loading._LOADED_BY[model.get_base_model()] = "unsloth"  # as load_model(backend="unsloth") records it
    assert why_not_fusable(model).startswith("an Unsloth model") and why_not_readable(model) is None
    assert why_not_fused("fused", model, SimpleNamespace()) is None
    assert why_not_fused("auto", model, SimpleNamespace()) == "no CUDA device"

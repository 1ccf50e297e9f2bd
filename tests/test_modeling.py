"""Model loading: backend choice, dtype, 4-bit on CPU, RoPE scaling, pad token."""

import warnings

import pytest

from tinyllama_ft.machine.hardware import Hardware
from tinyllama_ft.models.loading import apply_rope_scaling, choose_backend, load_model, rope_scaling_factor


def test_auto_picks_unsloth_only_with_cuda_and_unsloth(cpu, t4, a100):
    assert choose_backend("auto", a100, unsloth_available=True) == "unsloth"
    assert choose_backend("auto", t4, unsloth_available=True) == "unsloth"
    assert choose_backend("auto", t4, unsloth_available=False) == "transformers"
    assert choose_backend("auto", cpu, unsloth_available=True) == "transformers"
    old_gpu = Hardware(cuda=True, capability=(6, 0), gpu_name="Tesla P100")
    assert choose_backend("auto", old_gpu, unsloth_available=True) == "transformers"


def test_explicit_unsloth_is_checked(cpu, t4):
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        choose_backend("unsloth", cpu, unsloth_available=True)
    with pytest.raises(ImportError, match="install"):
        choose_backend("unsloth", t4, unsloth_available=False)
    with pytest.raises(ValueError, match="backend='vllm'"):
        choose_backend("vllm", t4, unsloth_available=True)


def test_rope_factor_matches_unsloths_linear_rule(tinyllama_dir):
    from transformers import AutoConfig

    assert rope_scaling_factor(2048, 2048) is None
    assert rope_scaling_factor(4096, 2048) == 2.0
    config = AutoConfig.from_pretrained(str(tinyllama_dir))
    theta = config.rope_parameters["rope_theta"]
    assert apply_rope_scaling(config, 4096) == 2.0
    assert config.rope_parameters == {"rope_type": "linear", "factor": 2.0, "rope_theta": theta}


def test_cpu_load_says_once_that_4bit_is_impossible_and_loads_fp32(stories_dir, cpu):
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, tokenizer = load_model(
            str(stories_dir), max_seq_length=512, dtype=None, load_in_4bit=True, backend="auto", hardware=cpu
        )
    said = [str(w.message) for w in caught if "4bit" in str(w.message) or "4-bit" in str(w.message)]
    assert len(said) == 1 and "CPU" in said[0]
    assert model.dtype == torch.float32
    assert getattr(model, "hf_quantizer", None) is None  # full precision: no 4-bit without CUDA
    assert (model.config.rope_parameters or {}).get("rope_type", "default") != "linear"  # 512 positions: no scaling
    assert tokenizer.pad_token == tokenizer.unk_token != tokenizer.eos_token
    assert model.config.pad_token_id == tokenizer.pad_token_id


def test_rope_scaling_past_trained_positions_changes_the_rotary_frequencies(stories_dir, cpu):
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaled, _ = load_model(
            str(stories_dir), max_seq_length=1024, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
        )
    assert scaled.config.rope_parameters["rope_type"] == "linear" and scaled.config.rope_parameters["factor"] == 2.0
    assert sum("RoPE scaling x2" in str(w.message) for w in caught) == 1
    plain, _ = load_model(
        str(stories_dir), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    inv_scaled = scaled.model.rotary_emb.inv_freq
    inv_plain = plain.model.rotary_emb.inv_freq
    torch.testing.assert_close(inv_scaled * 1.0, inv_plain / 2.0)

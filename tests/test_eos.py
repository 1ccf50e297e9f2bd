"""Every training sample carries exactly one supervised EOS, on the collated batches the trainer really sees:
packed ("bfd", padding-free) and unpacked (padded), pad == EOS, a tokenizer that adds its own EOS, a collator
that masks pad ids. Real stories260K model and tokenizer, real Alpaca rows, real TRL trainers."""

import pytest

from helpers import alpaca_rows, sft_trainer, stories_lora, text_dataset
from tinyllama_ft.machine.hardware import Hardware
from tinyllama_ft.data.lengths import apply_long_rows, length_report
from tinyllama_ft.data.eos_check import eos_supervision

WINDOW = 512  # tokens (stories260K's context)


@pytest.fixture(scope="module")
def rows(alpaca_jsonl):
    return alpaca_rows(alpaca_jsonl, 120)


def fitting(tokenizer, rows, n=40):
    """``n`` real rows that fit the window whole (the drop policy), as the notebook prepares them."""
    ds = text_dataset(rows, tokenizer)
    kept, _ = apply_long_rows(ds, length_report(ds, tokenizer, max_seq_length=WINDOW, packing=True), policy="drop")
    assert len(kept) >= n
    return kept.select(range(n))


def trainer_for(stories_dir, rows, tmp_path, prepare_tokenizer=None, text_only=False, **fields):
    model, tokenizer = stories_lora(stories_dir, Hardware())
    if prepare_tokenizer:
        prepare_tokenizer(tokenizer)
    ds = fitting(tokenizer, rows)
    if text_only:  # only the rendered text: TRL tokenizes it (special-token text parsed)
        ds = ds.select_columns(["text"])
    fields.setdefault("per_device_train_batch_size", 4)
    fields.setdefault("per_device_eval_batch_size", 4)
    return sft_trainer(
        model,
        tokenizer,
        ds.select(range(32)),
        tmp_path,
        eval_dataset=ds.select(range(32, 40)),
        max_seq_length=WINDOW,
        **fields,
    )


def all_ok(n):
    return {
        "samples": n,
        "samples_ok": n,
        "samples_without_eos": 0,
        "samples_with_several_eos": 0,
        "eos_not_last": 0,
        "eos_tokens": n,
        "eos_supervised": n,
        "eos_masked": 0,
    }


def test_packed_bfd_every_row_one_supervised_eos_train_and_eval(stories_dir, rows, tmp_path):
    trainer = trainer_for(stories_dir, rows, tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))
    assert "attention_mask" not in batch and batch["input_ids"].shape[0] == 1  # padding-free packed batch
    assert eos_supervision(trainer, batches=None) == all_ok(32)  # one epoch: every row once
    assert eos_supervision(trainer, batches=None, split="eval") == all_ok(8)


def test_unpacked_padded_batches_count_rows_and_skip_padding(stories_dir, rows, tmp_path):
    trainer = trainer_for(stories_dir, rows, tmp_path, packing=False)
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 4 and bool((batch["attention_mask"] == 0).any())  # rows, padded
    assert eos_supervision(trainer) == all_ok(4)
    assert eos_supervision(trainer, batches=None) == all_ok(32)
    assert eos_supervision(trainer, batches=None, split="eval") == all_ok(8)


def test_pad_equal_to_eos_keeps_eos_supervised_and_pads_are_not_counted(stories_dir, rows, tmp_path):
    from tinyllama_ft.models.loading import ensure_pad_token

    def pad_is_eos(tokenizer):
        tokenizer.pad_token = tokenizer.eos_token

    trainer = trainer_for(stories_dir, rows, tmp_path, pad_is_eos, packing=False)
    tokenizer = trainer.processing_class
    eos = tokenizer.eos_token_id
    assert tokenizer.pad_token_id == eos
    batch = next(iter(trainer.get_train_dataloader()))
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    pads_like_eos = int(((ids == eos) & (mask == 0)).sum())
    assert pads_like_eos > 0 and int((ids == eos).sum()) == 4 + pads_like_eos  # a naive EOS count is wrong here
    assert bool((labels[(ids == eos) & (mask == 1)] == eos).all())  # TRL's labels keep the real EOS
    assert eos_supervision(trainer, batches=None) == all_ok(32)
    ensure_pad_token(tokenizer)  # what load_model does: the pad token is never EOS
    assert tokenizer.pad_token == "<unk>" and tokenizer.pad_token_id != eos


def test_a_collator_that_masks_pad_ids_is_reported_as_masked_eos(stories_dir, rows, tmp_path):
    from transformers import DataCollatorForLanguageModeling

    def pad_is_eos(tokenizer):
        tokenizer.pad_token = tokenizer.eos_token

    trainer = trainer_for(stories_dir, rows, tmp_path, pad_is_eos, packing=False)
    # transformers' own LM collator builds labels from input_ids and sets every pad id (== EOS) to -100
    trainer.train_dataset = trainer.train_dataset.remove_columns("labels")
    trainer.data_collator = DataCollatorForLanguageModeling(trainer.processing_class, mlm=False)
    counts = eos_supervision(trainer, batches=None)
    assert counts["samples"] == 32 and counts["eos_tokens"] == 32
    assert counts["eos_masked"] == 32 and counts["eos_supervised"] == 0 and counts["samples_ok"] == 0


@pytest.mark.parametrize("packing", [True, False])
def test_a_tokenizer_adding_its_own_eos_is_caught_as_doubled(stories_dir, rows, tmp_path, packing):
    def add_eos(tokenizer):
        tokenizer.add_eos_token = True  # the Llama tokenizer then appends EOS to text already ending in "</s>"

    # rows we tokenize: the template's EOS id replaces the one the tokenizer adds
    assert eos_supervision(
        trainer_for(stories_dir, rows, tmp_path / "ours", add_eos, packing=packing), batches=None
    ) == all_ok(32)
    trainer = trainer_for(stories_dir, rows, tmp_path, add_eos, text_only=True, packing=packing)
    counts = eos_supervision(trainer, batches=None)
    assert counts["samples"] == 32
    assert counts["samples_with_several_eos"] == 32 and counts["samples_ok"] == 0 and counts["eos_tokens"] == 64


def test_rows_truncated_by_bfd_show_as_samples_without_eos(stories_dir, rows, tmp_path):
    model, tokenizer = stories_lora(stories_dir, Hardware())
    ds = text_dataset(rows[:40], tokenizer)
    report = length_report(ds, tokenizer, max_seq_length=256, packing=True, packing_strategy="bfd")
    kept, report = apply_long_rows(ds, report, policy="truncate")
    trainer = sft_trainer(model, tokenizer, kept, tmp_path, max_seq_length=256, long_rows="truncate")
    counts = eos_supervision(trainer, batches=None)
    assert counts["samples"] == len(kept) and len(report.kept_long) > 5
    assert counts["samples_without_eos"] == len(report.kept_long)  # the report predicted each one
    assert counts["samples_ok"] == len(kept) - len(report.kept_long)


def test_wrapped_packing_has_no_samples_to_check(stories_dir, rows, tmp_path):
    trainer = trainer_for(stories_dir, rows, tmp_path, packing_strategy="wrapped")
    with pytest.raises(ValueError, match="packing_strategy='wrapped'"):
        eos_supervision(trainer)
    with pytest.raises(ValueError, match="split='test'"):
        eos_supervision(trainer_for(stories_dir, rows, tmp_path), split="test")


def test_padding_free_batches_padded_to_a_multiple_do_not_count_the_padding_as_samples(stories_dir, rows, tmp_path):
    trainer = trainer_for(stories_dir, rows, tmp_path)
    trainer.data_collator.pad_to_multiple_of = 1000  # TRL's own padding-free collator, padded at the end
    batch = next(iter(trainer.get_train_dataloader()))
    eos_id = trainer.processing_class.eos_token_id
    resets, eos = int((batch["position_ids"] == 0).sum()), int((batch["input_ids"] == eos_id).sum())
    assert batch["input_ids"].shape[1] % 1000 == 0 and resets > eos  # each pad position sits at position_ids 0
    assert eos_supervision(trainer, batches=None) == all_ok(32)


def test_an_eos_string_inside_the_text_is_caught(stories_dir, rows, tmp_path):
    import datasets

    model, tokenizer = stories_lora(stories_dir, Hardware())
    row = dict(rows[1])
    half = len(row["output"]) // 2
    row["output"] = row["output"][:half] + "</s>" + row["output"][half:]  # data holding the EOS text mid-answer
    ds = text_dataset([row, *rows[2:6]], tokenizer)
    full = tokenizer(ds[0]["text"])["input_ids"]
    assert full.count(tokenizer.eos_token_id) == 2
    # Alpaca rows are tokenized by us: the "</s>" text stays text, one EOS per sample (the article's loss on the
    # whole text keeps rows[5], whose prompt alone fills the window; the response-only loss would drop it)
    ours = eos_supervision(
        sft_trainer(model, tokenizer, ds, tmp_path / "ours", max_seq_length=WINDOW, completion_only_loss=False), None
    )
    assert ours["samples"] == 5 and ours["samples_with_several_eos"] == 0 and ours["eos_not_last"] == 0
    # a dataset of only rendered text goes through TRL's tokenization: the doubled EOS is caught
    counts = eos_supervision(
        sft_trainer(model, tokenizer, ds.select_columns(["text"]), tmp_path / "whole", max_seq_length=WINDOW), None
    )
    assert counts["samples"] == 5 and counts["samples_with_several_eos"] == 1 and counts["eos_not_last"] == 0
    assert counts["eos_tokens"] == ours["eos_tokens"] + 1  # the rows rows[2:6] cut by "bfd" lose theirs in both
    # cut after the inner EOS: the sample holds an EOS that is not its last token
    cut = full.index(tokenizer.eos_token_id) + 3
    one = datasets.Dataset.from_dict({"text": [ds[0]["text"]]})
    kept, _ = apply_long_rows(one, length_report(one, tokenizer, max_seq_length=cut, packing=True), policy="truncate")
    counts = eos_supervision(
        sft_trainer(model, tokenizer, kept, tmp_path / "cut", max_seq_length=cut, long_rows="truncate"), None
    )
    assert counts["samples"] == 1 and counts["eos_not_last"] == 1 and counts["samples_ok"] == 0

"""Preference data and trainers (issue 30): the method fields, TRL's standard row forms checked as instruction rows
are, the package's tokenization (special-token text kept as text, one end id per response, masks on responses only)
on the batches TRL's DPO, KTO and ORPO trainers collate, and the reference each uses. Construction only: the
trainers' losses and steps are tests/test_preference_training.py's (this file also runs on the GPU machine's library
set, TRL 1.15, .ci/run)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from preference_fixtures import CHAT_PAIRS, TEXT_PAIRS, preference_trainer, smollm2_pairs, stories_pairs

from tinyllama_ft.config.coercion import ConfigError
from tinyllama_ft.config.finetune import DEFAULTS, FinetuneConfig
from tinyllama_ft.data.preference_tokens import response_span, tokenize_preferences, unpair
from tinyllama_ft.data.preferences import check_preference_rows, load_preference_data


def test_method_and_its_fields_are_checked_against_each_other():
    assert (DEFAULTS.method, DEFAULTS.beta, DEFAULTS.loss_type, DEFAULTS.loss_weights) == ("sft", 0.1, (), ())
    cfg = FinetuneConfig(method="dpo", loss_type="sigmoid,sft", loss_weights="1,0.5")  # flags and papermill: commas
    assert (cfg.loss_type, cfg.loss_weights) == (("sigmoid", "sft"), (1.0, 0.5))
    assert FinetuneConfig(method="kto", loss_type=["apo_zero_unpaired"], per_device_train_batch_size=1).loss_type
    assert (FinetuneConfig(method="simpo").beta, FinetuneConfig(method="simpo", beta=0.5).beta) == (2.0, 0.5)
    refused = {
        "loss_type=\\['ipo'\\] is read by method \\['dpo', 'kto', 'grpo'\\] only": dict(loss_type="ipo"),
        "beta=0.0 is not allowed for method='dpo': positive": dict(method="dpo", beta=0),
        "beta=0.0 is not allowed for method='simpo': positive": dict(method="simpo", beta=0),
        "not allowed for method='kto': at most one of \\['kto', 'apo_zero_unpaired'\\]": dict(
            method="kto", loss_type="sigmoid"
        ),
        "loss_type=\\['ipo'\\] is read by method .* and method='orpo'": dict(method="orpo", loss_type="ipo"),
        "simpo_gamma=1.0 is read by method \\['simpo'\\] only, and method='dpo'": dict(method="dpo", simpo_gamma=1),
        "loss_weights=\\[1.0\\] is read by method \\['dpo'\\] only": dict(method="kto", loss_weights=[1.0]),
        "long_rows='split' does not apply to method='dpo'": dict(method="dpo", long_rows="split"),
        "too small for method='kto'": dict(method="kto", per_device_train_batch_size=1),
        "method='orpo' reads its pairs from dataset alone": dict(method="orpo", dataset_format="sharegpt"),
        "loss_weights: 'x' is not allowed: expected a number": dict(method="dpo", loss_weights="x"),
        "loss_type: 'dpo' is not allowed": dict(method="dpo", loss_type="dpo"),
        "method='ppo' is not allowed": dict(method="ppo"),
    }
    for message, fields in refused.items():
        with pytest.raises(ConfigError, match=message):
            FinetuneConfig(**fields)
    # what TRL's DPOConfig refuses, refused at plan time, before any model loads
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.plan import plan_run

    with pytest.raises(
        ConfigError, match="DPOConfig refuses .*loss_weights=\\(1.0, 2.0\\).*same length as `loss_type`"
    ):
        plan_run(FinetuneConfig(method="dpo", loss_type="sigmoid,ipo,hinge", loss_weights=[1.0, 2.0]), Hardware(), {})


def test_text_pairs_bad_rows_are_dropped_and_counted_and_strict_names_row_and_field():
    rows = [
        TEXT_PAIRS[0],
        {"prompt": "p", "chosen": "a"},  # no rejected
        {"prompt": "p", "chosen": "same", "rejected": "same"},
        {"prompt": "  ", "chosen": "a", "rejected": "b"},
        {"prompt": "p", "chosen": 3, "rejected": "b"},
        TEXT_PAIRS[0],  # a duplicate
        ["not", "an", "object"],
        {"prompt": "p", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"},  # another form
        {"prompt": "p", "input": None, "chosen": "a", "rejected": "b"},
    ]
    clean, report, layout, form = check_preference_rows(rows, source="pairs.jsonl")
    assert (layout, form, report.total, report.kept) == ("paired", "text", 9, 2)
    assert report.by_reason == {
        "missing": 1,
        "identical pair": 1,
        "empty": 1,
        "wrong type": 2,
        "duplicate": 1,
        "not an object": 1,
    }
    assert clean[1] == {"prompt": "p", "input": "", "chosen": "a", "rejected": "b"}
    assert clean[0]["chosen"] == TEXT_PAIRS[0]["chosen"]  # text kept as read, </s> and all
    with pytest.raises(ValueError, match=r"pairs.jsonl: row 1: field 'rejected' is missing .*strict=True"):
        check_preference_rows(rows, strict=True, source="pairs.jsonl")


def test_conversational_pairs_implicit_and_explicit_prompts_and_unpaired_rows():
    clean, report, layout, form = check_preference_rows(CHAT_PAIRS)
    assert (layout, form, report.dropped) == ("paired", "conversation", 0)
    implicit, explicit = clean[0], clean[4]
    assert implicit["prompt"] == CHAT_PAIRS[0]["chosen"][:1] and implicit["rejected"] == CHAT_PAIRS[0]["rejected"][1:]
    assert explicit == {k: CHAT_PAIRS[4][k] for k in ("prompt", "chosen", "rejected")}
    bad = [
        {
            "chosen": CHAT_PAIRS[0]["chosen"],
            "rejected": [{"role": "user", "content": "other"}, *CHAT_PAIRS[0]["rejected"][1:]],
        },
        {
            "prompt": [{"role": "user", "content": "q"}],
            "chosen": [{"role": "user", "content": "a"}],
            "rejected": [{"role": "assistant", "content": "b"}],
        },
        {
            "prompt": [{"role": "assistant", "content": "q"}],
            "chosen": [{"role": "assistant", "content": "a"}],
            "rejected": [{"role": "assistant", "content": "b"}],
        },
        {
            "prompt": [{"role": "robot", "content": "q"}],
            "chosen": [{"role": "assistant", "content": "a"}],
            "rejected": [{"role": "assistant", "content": "b"}],
        },
    ]
    _, report, _, _ = check_preference_rows(CHAT_PAIRS[:1] + bad)
    assert report.by_reason == {"prompt mismatch": 1, "not one assistant turn": 1, "out of order": 1, "unknown role": 1}
    assert [b.field for b in report.bad] == ["rejected", "chosen", "prompt[0]", "prompt[0].role"]
    unpaired = [
        {"prompt": "q", "completion": "good", "label": True},
        {"prompt": "q", "completion": "bad", "label": False},
        {"prompt": "q", "completion": "x", "label": "yes"},
        {"prompt": "q", "completion": "y"},
        {"prompt": "q", "completion": "from a CSV file", "label": "FALSE"},
    ]
    clean, report, layout, form = check_preference_rows(unpaired)
    assert (layout, form, [r["label"] for r in clean]) == ("unpaired", "text", [True, False, False])
    assert report.by_reason == {"wrong type": 1, "missing": 1} and report.bad[0].field == "label"


def test_every_local_file_format_reads_the_same_pairs(tmp_path):
    import datasets

    rows = [{k: r[k] for k in ("prompt", "input", "chosen", "rejected")} for r in TEXT_PAIRS[:4]]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "p.json").write_text(json.dumps(rows), encoding="utf-8")
    datasets.Dataset.from_list(rows).to_csv(str(tmp_path / "p.csv"), index=False)
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "p.parquet"))
    for name in ("p.jsonl", "p.json", "p.csv", "p.parquet"):
        ds, report, layout, form = load_preference_data(str(tmp_path / name))
        assert (layout, form, report.kept) == ("paired", "text", 4), name
        assert ds.to_list() == rows, name


def test_long_rows_are_dropped_or_truncated_and_a_prompt_without_room_always_dropped(stories_tokenizer):
    import datasets

    def tokenized(max_seq_length, long_rows):
        clean, *_ = check_preference_rows(TEXT_PAIRS[:2])
        ds = datasets.Dataset.from_list(clean)
        return tokenize_preferences(
            ds, stories_tokenizer, form="text", max_seq_length=max_seq_length, long_rows=long_rows
        )

    full, _ = tokenized(1024, "drop")
    prompts = [len(r["prompt_ids"]) for r in full]
    lengths = [p + max(len(r["chosen_ids"]), len(r["rejected_ids"])) for p, r in zip(prompts, full)]
    assert lengths[0] < lengths[1]  # row 1 has an input
    kept, report = tokenized(lengths[1] - 1, "drop")
    assert report.by_reason == {"too long": 1} and report.bad[0].index == 1 and kept[0] == full[0]
    window = max(prompts) + 3
    cut, report = tokenized(window, "truncate")
    assert report.dropped == 0
    for row, whole, prompt in zip(cut, full, prompts):  # each response cut to the room its prompt leaves, EOS gone
        assert row["chosen_ids"] == whole["chosen_ids"][: window - prompt] != whole["chosen_ids"]
        assert row["rejected_ids"] == whole["rejected_ids"][: window - prompt]
    prompt = min(prompts)
    with pytest.raises(ValueError, match="every row dropped"):
        tokenized(prompt, "truncate")  # both prompts fill the window: no room for a response
    with pytest.raises(ValueError, match=r"row 0: field 'prompt' is \d+ tokens: no room"):
        tokenize_preferences(
            datasets.Dataset.from_list(check_preference_rows(TEXT_PAIRS[:1])[0]),
            stories_tokenizer,
            form="text",
            max_seq_length=prompt,
            long_rows="truncate",
            strict=True,
        )
    with pytest.raises(ValueError, match="long_rows='split' is not one of"):
        tokenized(1024, "split")


def _sequences(batch, ids_key="input_ids", mask_key="attention_mask", completion_key="completion_mask"):
    """Each collated row without its padding: ``(ids, completion mask)`` as lists."""
    for ids, attention, completion in zip(batch[ids_key], batch[mask_key], batch[completion_key]):
        n = int(attention.sum())
        assert attention[:n].all()  # right padding
        yield ids[:n].tolist(), completion[:n].tolist()


def _check_sequence(tokenizer, ids, mask, end_id, *, prompt_text, response_text):
    """The response (mask 1) is one run at the end holding the response's text and one end id, last; the prompt
    (mask 0) holds the prompt's text; special-token text in either decodes back as text."""
    start, end = response_span(mask)
    assert end == len(ids) and sum(mask) == end - start  # one run, at the end: never a prompt token
    response = ids[start:end]
    assert response.count(end_id) == 1 and response[-1] == end_id
    assert response_text in tokenizer.decode(response[:-1])
    assert prompt_text in tokenizer.decode(ids[:start])


def test_dpo_batches_keep_end_token_text_as_text_and_mask_only_the_responses(stories_dir, cpu, tmp_path):
    model, tokenizer, pairs = stories_pairs(stories_dir, cpu)
    trainer = preference_trainer("dpo", model, tokenizer, pairs, tmp_path)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    sequences = list(_sequences(batch))
    assert len(sequences) == 8  # 4 chosen, then their 4 rejected
    eos = tokenizer.eos_token_id
    for j, (ids, mask) in enumerate(sequences):
        row = TEXT_PAIRS[j % 4]
        response = row["chosen"] if j < 4 else row["rejected"]
        assert ids.count(eos) == 1  # the one appended: "</s>" typed in prompt and responses stays text
        _check_sequence(tokenizer, ids, mask, eos, prompt_text=row["prompt"], response_text=response)
    first = next(iter(trainer.get_train_dataloader()))  # the trainer's own loader: the same columns
    assert set(first) == {"input_ids", "attention_mask", "completion_mask"}


def test_chat_pairs_keep_im_end_text_as_text_and_mask_only_the_final_assistant_turn(tmp_path):
    model, tokenizer, pairs = smollm2_pairs()
    trainer = preference_trainer("dpo", model, tokenizer, pairs, tmp_path)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(CHAT_PAIRS))])
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    n = len(CHAT_PAIRS)
    for j, (ids, mask) in enumerate(_sequences(batch)):
        row = CHAT_PAIRS[j % n]
        turns = row.get("prompt", row["chosen"][:-1]) + (row["chosen"] if j < n else row["rejected"])[-1:]
        # the template's own <|im_end|> closes each turn (a default system turn first); the typed ones stay text
        assert ids.count(im_end) == len(turns) + 1
        _check_sequence(
            tokenizer, ids, mask, im_end, prompt_text=turns[-2]["content"], response_text=turns[-1]["content"]
        )


def test_kto_unpairs_pairs_and_collates_completions_with_kl_completions(stories_dir, cpu, tmp_path):
    model, tokenizer, pairs = stories_pairs(stories_dir, cpu)
    unpaired = unpair(pairs)
    assert (
        unpaired["label"][:4] == [True, False, True, False]
        and unpaired[1]["completion_ids"] == pairs[0]["rejected_ids"]
    )
    trainer = preference_trainer("kto", model, tokenizer, pairs, tmp_path)  # pairs unpaired by the builder
    assert len(trainer.train_dataset) == 2 * len(pairs)
    rows = [trainer.train_dataset[i] for i in range(4)]
    batch = trainer.data_collator(rows)
    eos = tokenizer.eos_token_id
    for j, (ids, mask) in enumerate(_sequences(batch)):
        row = TEXT_PAIRS[j // 2]
        _check_sequence(
            tokenizer,
            ids,
            mask,
            eos,
            prompt_text=row["prompt"],
            response_text=row["chosen"] if j % 2 == 0 else row["rejected"],
        )
    kl = list(_sequences(batch, "KL_input_ids", "KL_attention_mask", "KL_completion_mask"))
    # within each micro-batch of 2, a prompt is paired with the other row's completion (TRL's rotation)
    assert kl[0][0][-len(rows[1]["completion_ids"]) :] == rows[1]["completion_ids"]
    assert kl[1][0][-len(rows[0]["completion_ids"]) :] == rows[0]["completion_ids"]
    assert batch["label"].tolist() == [True, False, True, False]
    with pytest.raises(ValueError, match="batch size must be > 1"):  # TRL's KTOTrainer refuses it
        from tinyllama_ft.machine.hardware import Hardware
        from tinyllama_ft.train.plan import plan_run
        from tinyllama_ft.train.preference_trainer import build_preference_trainer

        cfg = FinetuneConfig(method="kto", report_to="none", output_dir=str(tmp_path), dataset_num_proc=None)
        plan = plan_run(cfg, Hardware())
        build_preference_trainer(
            model=model,
            tokenizer=tokenizer,
            train_dataset=pairs,
            cfg=cfg,
            plan=dataclasses.replace(plan, per_device_train_batch_size=1),
        )


def test_orpo_batches_label_the_responses_only(stories_dir, cpu, tmp_path):
    model, tokenizer, pairs = stories_pairs(stories_dir, cpu)
    trainer = preference_trainer("orpo", model, tokenizer, pairs, tmp_path)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    eos = tokenizer.eos_token_id
    for kind in ("chosen", "rejected"):
        for j, (ids, labels) in enumerate(zip(batch[f"{kind}_input_ids"], batch[f"{kind}_labels"])):
            n = int(batch[f"{kind}_attention_mask"][j].sum())
            ids, mask = ids[:n].tolist(), (labels[:n] != -100).long().tolist()
            assert ids.count(eos) == 1
            _check_sequence(
                tokenizer, ids, mask, eos, prompt_text=TEXT_PAIRS[j]["prompt"], response_text=TEXT_PAIRS[j][kind]
            )
            assert labels[:n][labels[:n] != -100].tolist() == ids[response_span(mask)[0] :]


def test_the_reference_is_the_disabled_base_or_the_starting_adapters_frozen_copy(stories_dir, cpu, tmp_path):
    from helpers import reference_kind

    model, tokenizer, pairs = stories_pairs(stories_dir, cpu)
    fresh = preference_trainer("dpo", model, tokenizer, pairs, tmp_path / "a")
    assert reference_kind(fresh) == "base with adapters disabled" and list(model.peft_config) == ["default"]
    model, tokenizer, pairs = stories_pairs(stories_dir, cpu)
    continued = preference_trainer("kto", model, tokenizer, pairs, tmp_path / "b", from_adapter=True)
    assert reference_kind(continued) == "frozen copy of the starting adapter ('ref')"
    assert not any(p.requires_grad for n, p in model.named_parameters() if ".ref." in n)
    assert reference_kind(preference_trainer("orpo", model, tokenizer, pairs, tmp_path / "c")) == "none (ORPO)"
    with pytest.raises(ValueError, match="not a PEFT model"):
        preference_trainer("dpo", model.get_base_model(), tokenizer, pairs, tmp_path / "d")


def test_the_plan_counts_two_sequences_per_pair_keeps_ktos_micro_batch_and_turns_liger_off(tinyllama_dir, a100):
    from tinyllama_ft.train.memory_estimate import estimate_peak_gib, model_dims
    from tinyllama_ft.train.plan import plan_run

    config = json.loads((tinyllama_dir / "config.json").read_text(encoding="utf-8"))
    fields = dict(per_device_train_batch_size=8, gradient_accumulation_steps=1, max_seq_length=1024)
    sft = plan_run(FinetuneConfig(**fields), a100, config, budget_gib=39, importable=lambda name: True)
    dpo = plan_run(FinetuneConfig(method="dpo", **fields), a100, config, budget_gib=39, importable=lambda name: True)
    assert sft.use_liger_kernel and not dpo.use_liger_kernel
    assert any("method='dpo': 2 sequence(s) of max_seq_length per row (pairs)" in r for r in dpo.reasons)
    sizes = dict(max_seq_length=1024, backend="transformers", load_in_4bit=True, lora_r=32, fused_loss=True)
    dims = model_dims(config)
    assert dpo.estimated_peak_gib == round(
        estimate_peak_gib(
            dims,
            micro_batch=2 * dpo.per_device_train_batch_size,
            gradient_checkpointing=dpo.gradient_checkpointing,
            **sizes,
        ),
        2,
    )
    # a budget only batch 1 fits: KTO's KL term keeps 2 (checkpointed), its loss without the KL term may take 1
    tight = estimate_peak_gib(dims, micro_batch=2, gradient_checkpointing=True, **sizes) / 0.9 * 1.01
    kto = plan_run(FinetuneConfig(method="kto", **fields), a100, config, budget_gib=tight, importable=lambda n: True)
    assert (kto.per_device_train_batch_size, kto.gradient_checkpointing) == (2, True)
    unpaired = FinetuneConfig(method="kto", loss_type="apo_zero_unpaired", **fields)
    assert (
        plan_run(unpaired, a100, config, budget_gib=tight / 3, importable=lambda n: True).per_device_train_batch_size
        == 1
    )


def test_preference_checks_score_each_response_after_its_prompt_and_count_ties_wrong(stories_dir, cpu):
    import torch

    from tinyllama_ft.evaluate.preference_checks import preference_scores

    model, tokenizer, pairs = stories_pairs(stories_dir, cpu)
    with torch.no_grad():  # a non-zero adapter, so scoring runs the adapted model
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    rows = [pairs[i] for i in range(3)]
    rows.append({**rows[0], "rejected_ids": rows[0]["chosen_ids"]})  # a tie: counted wrong

    def logp(prompt, response):  # one row alone, no padding: the plain forward pass
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[len(prompt) - 1 :].sum().item()

    chosen = [logp(r["prompt_ids"], r["chosen_ids"]) for r in rows]
    rejected = [logp(r["prompt_ids"], r["rejected_ids"]) for r in rows]
    scores = preference_scores(model, tokenizer, rows, batch_size=3)
    assert scores.pairs == 4 and scores.skipped == []
    assert scores.accuracy == sum(c > r for c, r in zip(chosen[:3], rejected[:3])) / 4  # the tie is not a win
    # batched and padded vs one row alone: other float32 sums of 50-180 nats (1e-8 to 4e-8 relative seen), so 1e-5 of
    # each figure; the floors for a margin near 0, a difference of such sums
    assert scores.chosen_logp == pytest.approx(sum(chosen) / 4, rel=1e-5)
    assert scores.rejected_logp == pytest.approx(sum(rejected) / 4, rel=1e-5)
    assert scores.margin == pytest.approx(sum(c - r for c, r in zip(chosen, rejected)) / 4, rel=1e-5, abs=1e-4)
    per_token = [c / len(r["chosen_ids"]) - j / len(r["rejected_ids"]) for c, j, r in zip(chosen, rejected, rows)]
    assert scores.margin_per_token == pytest.approx(sum(per_token) / 4, rel=1e-5, abs=1e-5)
    assert "preference accuracy" in str(scores) and scores.as_dict()["pairs"] == 4


def test_unpaired_rows_text_and_conversations_train_kto_as_they_are(stories_dir, cpu, tmp_path):
    import datasets

    from chat_fixtures import smollm2_tokenizer
    from tinyllama_ft.data.preferences import preference_features

    text = [{"prompt": r["prompt"], "completion": r["chosen"], "label": i % 3 != 0} for i, r in enumerate(TEXT_PAIRS)]
    clean, report, layout, form = check_preference_rows(text)
    assert (layout, form, report.dropped) == ("unpaired", "text", 0)
    model, tokenizer, _ = stories_pairs(stories_dir, cpu)
    rows, _ = tokenize_preferences(
        datasets.Dataset.from_list(clean, features=preference_features(layout, form)), tokenizer, form=form
    )
    assert rows.column_names == ["prompt_ids", "completion_ids", "label"] and rows["label"] == [
        r["label"] for r in text
    ]
    trainer = preference_trainer("kto", model, tokenizer, rows, tmp_path)
    assert len(trainer.train_dataset) == len(text)  # unpaired rows are taken as they are
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    for j, (ids, mask) in enumerate(_sequences(batch)):
        _check_sequence(
            tokenizer,
            ids,
            mask,
            tokenizer.eos_token_id,
            prompt_text=text[j]["prompt"],
            response_text=text[j]["completion"],
        )
    turns = [
        {
            "prompt": [{"role": "user", "content": f"Say <|im_end|> {i}"}],
            "completion": [{"role": "assistant", "content": f"<|im_end|> {i}"}],
            "label": bool(i % 2),
        }
        for i in range(3)
    ]
    clean, report, layout, form = check_preference_rows(turns)
    assert (layout, form, report.dropped) == ("unpaired", "conversation", 0)
    chat_tokenizer = smollm2_tokenizer()
    rows, _ = tokenize_preferences(
        datasets.Dataset.from_list(clean, features=preference_features(layout, form)), chat_tokenizer, form=form
    )
    im_end = chat_tokenizer.convert_tokens_to_ids("<|im_end|>")
    for row, turn in zip(rows, turns):
        ids = row["prompt_ids"] + row["completion_ids"]
        mask = [0] * len(row["prompt_ids"]) + [1] * len(row["completion_ids"])
        assert ids.count(im_end) == 3  # system, user, assistant turns: the typed ones stay text
        _check_sequence(
            chat_tokenizer,
            ids,
            mask,
            im_end,
            prompt_text=turn["prompt"][0]["content"],
            response_text=turn["completion"][0]["content"],
        )


def test_the_docs_row_forms_read_as_they_say(tmp_path):
    """docs/preference.md's text and conversational pairs load with every row kept, in the form the page says."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "preference.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```jsonl\n(.*?)```", page, re.S)
    assert len(blocks) == 2
    for block, form in zip(blocks, ("text", "conversation")):
        path = tmp_path / f"{form}.jsonl"
        path.write_text(block, encoding="utf-8")
        ds, report, layout, found = load_preference_data(str(path), strict=True)
        assert (layout, found, report.total, len(ds)) == ("paired", form, 2, 2)

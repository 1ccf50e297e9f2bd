"""The model cards a run saves (issue 40 item 7): TRL's in ``output_dir`` and PEFT's beside the adapter name the base's
Hub id (the demo model's behind its converted GGUF; a local folder's recorded id; none invented for a local model),
the data set (a Hub id, a file name, GRPO's generated problems) and the method. One short run of each method on
stories260K trains a step, saves a checkpoint (TRL writes its card) and the adapter (PEFT writes its), and both cards
are read back; newest TRL only for the methods whose loss TRL 1.15 computes on a GPU alone."""

from __future__ import annotations

import json
import shutil

import pytest
from chat_fixtures import cpu_trl_cannot_train, smollm2_dir
from test_grpo_run import _arithmetic_run
from test_preference_run import _stories_run, _through_the_cells

from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.models.demo_model import SMOLLM2_HUB_ID, smollm2_gguf_path
from tinyllama_ft.models.model_card import card_facts, hub_base_model, settle_card

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
#: stories260K's Hub repository (tests/fixtures/stories260k/NOTICE: release karpathy/tinyllamas).
STORIES_HUB_ID = "karpathy/tinyllamas"


def _card(path):
    from huggingface_hub import ModelCard

    return ModelCard.load(path)


def _hub_cache_copy(stories_dir, root) -> str:
    """stories260K laid out as huggingface_hub's cache holds a download of ``STORIES_HUB_ID``."""
    folder = root / "hub" / f"models--{STORIES_HUB_ID.replace('/', '--')}" / "snapshots" / "0123abcd"
    shutil.copytree(stories_dir, folder)
    return str(folder)


def _named_copy(stories_dir, root) -> str:
    """stories260K whose config.json records its Hub id as ``_name_or_path`` (as transformers 4 saved it)."""
    folder = root / "named"
    shutil.copytree(stories_dir, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, "_name_or_path": STORIES_HUB_ID}), encoding="utf-8")
    return str(folder)


def test_the_base_is_named_by_its_hub_id_and_a_local_model_by_none(stories_dir, tmp_path):
    assert (
        hub_base_model(SMOLLM2_HUB_ID) == SMOLLM2_HUB_ID and hub_base_model("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    )
    assert hub_base_model(smollm2_gguf_path()) == SMOLLM2_HUB_ID  # the offline demo model's GGUF file
    assert hub_base_model(smollm2_dir()) == SMOLLM2_HUB_ID  # the folder it is converted into (its marker)
    assert hub_base_model(_hub_cache_copy(stories_dir, tmp_path)) == STORIES_HUB_ID
    assert hub_base_model(_named_copy(stories_dir, tmp_path)) == STORIES_HUB_ID
    assert hub_base_model(stories_dir) is None and hub_base_model(tmp_path / "nowhere") is None
    facts = card_facts(FinetuneConfig(model_name=str(stories_dir), dataset="~/my rows.csv").to_dict())
    assert (facts.base_model, facts.base_label, facts.hub_datasets, facts.method) == (None, "hf", [], "sft")
    assert "a local model (`hf`, not on the Hugging Face Hub)" in facts.sentence
    assert "the local file `my rows.csv`" in facts.sentence and str(tmp_path) not in facts.sentence
    grpo = card_facts(FinetuneConfig(method="grpo", dataset="arithmetic", model_name=SMOLLM2_HUB_ID).to_dict())
    assert grpo.hub_datasets == [] and "arithmetic word problems tinyllama-ft generates" in grpo.sentence


def test_a_hub_base_and_data_set_settle_trls_card(tmp_path):
    """TRL's card as its trainer writes it for a base loaded from a local folder (``base_model`` None), settled."""
    from trl.trainer.utils import generate_model_card

    card = generate_model_card(
        base_model=None,
        model_name="out",
        hub_model_id=None,
        dataset_name=None,
        tags=["trl", "sft"],
        wandb_url=None,
        trackio_url=None,
        trainer_name="SFT",
    )
    card.save(tmp_path / "README.md")
    assert "[None](https://huggingface.co/None)" in card.text  # what issue 40 saw
    values = FinetuneConfig(model_name=SMOLLM2_HUB_ID, dataset="yahma/alpaca-cleaned").to_dict()
    settle_card(tmp_path / "README.md", card_facts(values))
    settled = _card(tmp_path / "README.md")
    assert settled.data.base_model == SMOLLM2_HUB_ID and settled.data.datasets == ["yahma/alpaca-cleaned"]
    assert {"trl", "sft", "tinyllama-ft", "lora"} <= set(
        settled.data.tags
    ) and "huggingface.co/None" not in settled.text
    assert (
        f"fine-tuned version of [{SMOLLM2_HUB_ID}](https://huggingface.co/{SMOLLM2_HUB_ID}), trained as a LoRA "
        "adapter with SFT (`method: sft`) on the [yahma/alpaca-cleaned](https://huggingface.co/datasets/"
        "yahma/alpaca-cleaned) dataset" in settled.text
    )


def _sft_rows(tmp_path, alpaca_jsonl) -> str:
    from helpers import alpaca_rows

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in alpaca_rows(alpaca_jsonl, 16)), encoding="utf-8")
    return str(path)


#: method -> how its run gives the base: stories260K itself, a copy in the Hub cache's layout, a copy naming its id.
RUNS = {"sft": "local", "dpo": "hub cache", "orpo": "named", "kto": "local", "grpo": "local"}


@pytest.mark.parametrize("method", list(RUNS))
def test_each_methods_trainer_and_adapter_cards_name_the_base_the_data_and_the_method(
    method, stories_dir, tmp_path, cpu, alpaca_jsonl
):
    from tinyllama_ft.models.adapters import save_adapter
    from tinyllama_ft.models.run_record import adapter_record

    if method != "sft" and cpu_trl_cannot_train():
        pytest.skip("TRL < 1.16 trains preference and GRPO methods only on a GPU (fused Triton loss)")
    base = {"local": str(stories_dir), "hub cache": _hub_cache_copy(stories_dir, tmp_path)}.get(RUNS[method])
    base = base or _named_copy(stories_dir, tmp_path)
    steps = dict(max_steps=1, save_steps=1, model_name=base)
    if method == "grpo":
        cfg, data = _arithmetic_run(stories_dir, tmp_path, **steps), None
    elif method == "sft":
        cfg = _stories_run(stories_dir, tmp_path, method="sft", dataset=_sft_rows(tmp_path, alpaca_jsonl), **steps)
        data = "rows.jsonl"
    else:
        cfg = _stories_run(stories_dir, tmp_path, method=method, **steps)
        data = "pairs.jsonl"
    fmt, plan, model, tokenizer, trainer, _ = _through_the_cells(cfg, hardware=cpu)
    trainer.train()
    adapter = save_adapter(
        model, tokenizer, str(tmp_path / "lora_model"), record=adapter_record(cfg, plan, data_format=fmt)
    )
    hub_id = None if RUNS[method] == "local" else STORIES_HUB_ID
    named = f"[{hub_id}](https://huggingface.co/{hub_id})" if hub_id else "a local model (`hf`, not on the Hugging"
    source = f"the local file `{data}`" if data else "the arithmetic word problems tinyllama-ft generates"
    trainer_card = tmp_path / "out" / "README.md"
    for path in (trainer_card, f"{adapter}/README.md"):
        card = _card(path)
        assert card.data.base_model == hub_id and not card.data.datasets, path
        assert method in card.data.tags and "tinyllama-ft" in card.data.tags, path
        derived = [t for t in card.data.tags if t.startswith("base_model:")]  # PEFT's, from the loaded folder
        assert derived == ([f"base_model:adapter:{hub_id}"] if hub_id and path != trainer_card else []), path
        text = card.text
        assert f"fine-tuned version of {named}" in text and f"with {method.upper()} (`method: {method}`)" in text
        assert source in text and "huggingface.co/None" not in text and str(tmp_path) not in text, path
    card = _card(f"{adapter}/README.md")  # huggingface_hub's default card, PEFT's, filled in
    assert card.data.library_name == "peft" and "# Model Card for lora_model" in card.text

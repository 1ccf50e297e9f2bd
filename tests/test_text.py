"""Non-English text and emoji survive every step unchanged: files -> rows -> prompt -> real tokenizer -> text."""

import ast
import csv
import json
import unicodedata
from pathlib import Path

import datasets
import pytest

from tinyllama_ft.data.instructions import check_rows, load_instruction_data, read_rows
from tinyllama_ft.data.alpaca_prompts import format_prompt, make_formatting_func, training_text

WOMAN_TECHNOLOGIST = "\U0001f469\U0001f3fd\u200d\U0001f4bb"  # 👩🏽‍💻: woman + medium skin tone + ZWJ + laptop
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 👨‍👩‍👧‍👦: four people joined by ZWJ
RAINBOW_FLAG = "\U0001f3f3\ufe0f\u200d\U0001f308"  # 🏳️‍🌈: flag + variation selector + ZWJ + rainbow

#: (instruction, input, output) per script.
SAMPLES = {
    "bengali": ("বাংলায় অনুবাদ করুন।", "Good morning, friend!", "সুপ্রভাত, বন্ধু! কেমন আছো?"),
    "hindi": ("हिंदी में अनुवाद करें।", "Hello, world", "नमस्ते, दुनिया! आप कैसे हैं?"),
    "chinese": ("把这句话翻译成中文。", "Good morning", "早上好！今天天气很好。"),
    "japanese": (
        "日本語に翻訳してください。",
        "Thank you very much",
        "どうもありがとうございます。カタカナ、ひらがな、漢字。",
    ),
    "korean": ("한국어로 번역하세요.", "Have a nice day", "좋은 하루 되세요! 감사합니다."),
    "arabic": ("ترجم إلى العربية.", "Peace be upon you", "السلام عليكم ورحمة الله وبركاته"),
    "emoji": (
        f"Describe these emoji: {WOMAN_TECHNOLOGIST} {FAMILY}",
        f"\U0001f44d\U0001f3ff {RAINBOW_FLAG} 🇧🇩 1️⃣",
        f"A woman technologist {WOMAN_TECHNOLOGIST}, a family {FAMILY}, a dark thumbs up \U0001f44d\U0001f3ff, "
        f"a rainbow flag {RAINBOW_FLAG}, the flag of Bangladesh 🇧🇩 and a keycap 1️⃣.",
    ),
    "mixed": (
        "Greet in every script: বাংলা, हिन्दी, 中文, 日本語, 한국어, العربية.",
        "RTL مرحبا inside LTR text, 日本語とEnglish, 123 ١٢٣ ১২৩ १२३",
        f"Hello! হ্যালো! नमस्ते! 你好! こんにちは! 안녕하세요! مرحبا! 👋🏽 {WOMAN_TECHNOLOGIST}",
    ),
    # no normalization or stripping anywhere: decomposed é (e + U+0301) and Hangul jamo stay decomposed,
    # edge and invisible spaces stay
    "unnormalized": (
        " Cafe\u0301 is not Café in bytes; \u1112\u1161\u11ab is 한 in jamo. ",
        "  zero\u200bwidth, no\u00a0break, ideographic\u3000space, cafe\u0301\t",
        "\tleading and trailing spaces, a tab\tand a line\u2028separator stay, re\u0301sume\u0301.  ",
    ),
}
ROWS = [{"instruction": i, "input": x, "output": o} for i, x, o in SAMPLES.values()]


def test_samples_hold_what_they_claim():
    assert "\u200d" in WOMAN_TECHNOLOGIST and "\U0001f3fd" in WOMAN_TECHNOLOGIST  # ZWJ and skin tone
    for text in SAMPLES["unnormalized"]:  # so a normalizing or stripping step would change every field
        assert unicodedata.normalize("NFC", text) != text and text.strip() != text


@pytest.mark.parametrize("template", ["alpaca", "alpaca_no_input"])
@pytest.mark.parametrize("script", list(SAMPLES))
def test_training_text_survives_the_real_tokenizer(tinyllama_tokenizer, script, template):
    tok = tinyllama_tokenizer
    instruction, input, output = SAMPLES[script]
    for text in (
        training_text(instruction, input, output, tok.eos_token, template),
        format_prompt(instruction, input, template=template),  # generation prompt
        format_prompt(instruction, template=template),
    ):
        ids = tok(text)["input_ids"]
        # byte fallback: a character outside the vocabulary becomes UTF-8 byte pieces, never <unk>
        assert tok.unk_token_id not in ids
        # the tokenizer adds BOS (add_bos_token=True), which is not part of the text: strip only that.
        # No space to strip: SentencePiece's "▁" dummy prefix on the first word is removed by decode itself.
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
        assert ids.count(tok.eos_token_id) == text.endswith(tok.eos_token)  # the EOS text became one EOS id
        assert tok.decode(ids[1:]) == text  # exactly, EOS included (decoded as its text "</s>")


def write(path: Path, fmt: str, rows: list[dict]) -> str:
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "json":
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    elif fmt == "csv":
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    return str(path)


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_file_round_trip_keeps_every_string(tmp_path, fmt):
    rows = ROWS + [{"instruction": "CRLF and quotes", "input": 'a "quoted", comma\r\nnext line', "output": "{x} {0}"}]
    path = write(tmp_path / f"d.{fmt}", fmt, rows)
    if fmt != "parquet":  # the file holds the characters themselves (UTF-8), not \u escapes
        assert WOMAN_TECHNOLOGIST.encode("utf-8") in Path(path).read_bytes()
    assert read_rows(path) == rows
    ds, report = load_instruction_data(path)
    assert (report.kept, report.dropped) == (len(rows), 0)
    assert ds.to_list() == rows


def test_end_to_end_file_to_tokens_and_back(tmp_path, tinyllama_tokenizer):
    tok = tinyllama_tokenizer
    ds, _ = load_instruction_data(write(tmp_path / "d.jsonl", "jsonl", ROWS))
    texts = ds.map(make_formatting_func(tok.eos_token), batched=True)["text"]
    for row, text in zip(ROWS, texts):
        expected = (
            "Below is an instruction that describes a task, paired with an input that provides further "
            "context. Write a response that appropriately completes the request.\n\n"
            f"### Instruction:\n{row['instruction']}\n\n### Input:\n{row['input']}\n\n"
            f"### Response:\n{row['output']}</s>"
        )
        assert text == expected
        assert tok.decode(tok(text)["input_ids"][1:]) == expected  # [1:]: the BOS the tokenizer adds


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_utf8_byte_order_mark_is_dropped(tmp_path, fmt):
    path = tmp_path / f"d.{fmt}"
    write(path, fmt, ROWS)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as Excel / Notepad save "UTF-8"
    ds, _ = load_instruction_data(str(path))
    assert ds.to_list() == ROWS


def test_check_rows_keeps_text_exactly():
    nfc = {k: unicodedata.normalize("NFC", v) for k, v in ROWS[-1].items()}
    rows = ROWS + [nfc]  # same text after NFC: a different row (not a duplicate) as long as nothing normalizes
    clean, report = check_rows(rows)
    assert clean == rows and report.dropped == 0
    assert all(nfc[k] != ROWS[-1][k] for k in nfc)  # the two rows really differ, in every field


def _opens_without_encoding(source: str) -> list[int]:
    """Line numbers of text-mode ``open()`` / ``io.open()`` / ``.read_text()`` / ``.write_text()`` calls
    without ``encoding=`` (other ``x.open(...)``, e.g. urllib's ``opener.open(url)``, are not files)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        is_io_open = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "io"
        if isinstance(f, ast.Name) or is_io_open:
            name = f.id if isinstance(f, ast.Name) else f.attr
        else:
            name = getattr(f, "attr", None) if getattr(f, "attr", None) in ("read_text", "write_text") else None
        if name not in ("open", "read_text", "write_text") or any(k.arg == "encoding" for k in node.keywords):
            continue
        mode = (
            node.args[1]
            if name == "open" and len(node.args) > 1
            else next((k.value for k in node.keywords if k.arg == "mode"), None)
        )
        if isinstance(mode, ast.Constant) and "b" in str(mode.value):
            continue  # bytes: no text encoding involved
        lines.append(node.lineno)
    return lines


def test_opens_without_encoding_are_found():
    source = (
        "open(p)\nopen(p, 'rb')\nopen(p, 'w', encoding='utf-8')\np.read_text()\nio.open(p, mode='w')\nopener.open(u)"
    )
    assert _opens_without_encoding(source) == [1, 4, 5]


def test_package_opens_text_files_with_an_explicit_encoding():
    package = Path(__file__).resolve().parents[1] / "tinyllama_ft"
    found = {
        p.name: lines
        for p in sorted(package.glob("*.py"))
        if (lines := _opens_without_encoding(p.read_text(encoding="utf-8")))
    }
    assert found == {}, f"text-mode open() without encoding= (file: line numbers): {found}"

"""Streaming decode on one GPU: this package, plain transformers, transformers' static cache and the article's reload (Unsloth).

Runs each configuration of generate_one.py in a fresh Python process with empty Triton and inductor
caches (so ``warmup_s`` includes every compilation the first answer pays, as on a new Colab runtime), prints a side-by-side table with the ratio to plain transformers and
tokens/s per batch size, and writes ``benchmarks/results/<YYYY-MM-DD>-generate.json``. Greedy, 256 new
tokens, the notebook's Alpaca prompt (batch 1, streamed), then left-padded batches of ``--batches``
different prompts; an adapter with non-zero LoRA weights on the TinyLlama-shaped model.

    python3 benchmarks/build_adapter.py --model /tmp/tinyllama-shaped --out /tmp/gen-adapter
    python3 benchmarks/generate_throughput.py --adapter /tmp/gen-adapter [--only package,plain] [--new 256]
"""

import argparse
import tempfile
from pathlib import Path

from runner import chosen_names, run_configuration, write_results

HERE = Path(__file__).resolve().parent
#: Modes of generate_one.py, in the order they run; "plain" is what the others are compared with.
CONFIGURATIONS = ("package", "plain", "unsloth", "unsloth_graphs", "hf_static", "package_cublas")
DEFAULT = ("package", "plain", "unsloth", "unsloth_graphs", "hf_static")
BASELINE = "plain"
PACKAGES = ("torch", "transformers", "peft", "unsloth", "bitsandbytes", "liger-kernel", "triton")


def table(rows: list[dict]) -> str:
    """Markdown: name | decode tokens/s | warm-up s | first answer s | ratio to plain | tokens/s per batch size."""
    sizes = sorted({int(b) for r in rows for b in r.get("batches", {})})
    lines = [
        "| name | decode tokens/s | warm-up s | first answer s | ratio to plain | "
        + "".join(f"batch {b} tokens/s | " for b in sizes),
        "| --- | ---: | ---: | ---: | ---: |" + " ---: |" * len(sizes),
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['name']} | failed | | | |" + " |" * len(sizes))
            continue
        ratio = "-" if r.get("ratio_to_plain") is None else f"{r['ratio_to_plain']:.2f}"
        per_batch = "".join(
            f" {r['batches'][str(b)]['tokens_per_s']:,.0f} |" if str(b) in r.get("batches", {}) else " |" for b in sizes
        )
        lines.append(
            f"| {r['name']} | {r['decode_tokens_per_s']:,.1f} | {r['warmup_s']:.1f} | "
            f"{r['first_call_s']:.1f} | {ratio} |" + per_batch
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", default="/tmp/gen-adapter", help="adapter folder (benchmarks/build_adapter.py)")
    ap.add_argument("--new", type=int, default=256, help="new tokens per answer")
    ap.add_argument("--repeats", type=int, default=3, help="warm answers timed after the first")
    ap.add_argument("--batches", default="4,16", help="left-padded batch sizes timed after batch 1")
    ap.add_argument(
        "--only", help=f"comma-separated modes among {', '.join(CONFIGURATIONS)} (default: {', '.join(DEFAULT)})"
    )
    a = ap.parse_args()
    names = chosen_names(ap, a.only, CONFIGURATIONS, DEFAULT)
    if not (Path(a.adapter) / "adapter_config.json").is_file():
        ap.error(f"no adapter at {a.adapter}: build it with benchmarks/build_adapter.py")

    workdir = Path(tempfile.gettempdir()) / "tinyllama-ft-bench"
    workdir.mkdir(exist_ok=True)
    rows = []
    for name in names:
        argv = [
            "--adapter",
            str(Path(a.adapter).resolve()),
            "--mode",
            name,
            "--new",
            str(a.new),
            "--repeats",
            str(a.repeats),
            "--batches",
            a.batches,
        ]
        # an empty compile cache for each, as on a new Colab runtime (Triton's, inductor's)
        caches = Path(tempfile.mkdtemp(prefix=f"cache-{name}-", dir=workdir))
        fresh = {"TRITON_CACHE_DIR": str(caches / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor")}
        rows.append(run_configuration(name, "generate_one.py", argv, str(workdir), extra_env=fresh))
    base = next((r for r in rows if r["name"] == BASELINE and "failed" not in r), None)
    for r in rows:
        ok = base is not None and "failed" not in r
        r["ratio_to_plain"] = round(r["decode_tokens_per_s"] / base["decode_tokens_per_s"], 2) if ok else None
        r["first_answer_vs_plain_s"] = round(r["first_call_s"] - base["first_call_s"], 2) if ok else None
    print(
        f"\nbatch 1, greedy, {a.new} new tokens; decode tokens/s = new tokens / a warm answer's wall time "
        f"(median of {a.repeats}); warm-up = first answer - warm answer (compilation, graph capture)\n"
    )
    print(table(rows))
    for r in rows:
        if "failed" in r:
            print(f"\n{r['name']} failed, {r['failed']}")
    write_results("generate", PACKAGES, new_tokens=a.new, repeats=a.repeats, batches=a.batches, configurations=rows)


if __name__ == "__main__":
    main()

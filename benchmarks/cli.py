"""The command line every benchmark configuration takes (imports nothing heavy: Unsloth must load first)."""

import argparse

#: The T4 stand-in: a T4's 15 GiB and its fp16 (no bf16 units), on whatever GPU runs the benchmark.
T4_MEMORY_GIB = 15


def parse_args(doc: str, *, package: bool = False) -> argparse.Namespace:
    """``--model`` (HF folder), ``--data`` (Alpaca .jsonl), ``--steps`` (15), ``--seq`` (4096 tokens),
    ``--t4`` (fp16 and CUDA memory capped at 15 GiB: the T4 stand-in); with ``package`` (the package's scripts)
    ``--whole-text-loss`` too."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder (Hugging Face format)")
    ap.add_argument("--data", required=True, help="Alpaca rows, .jsonl")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--t4", action="store_true", help=f"T4 stand-in: fp16, CUDA memory capped at {T4_MEMORY_GIB} GiB")
    if package:
        ap.add_argument(
            "--whole-text-loss",
            action="store_true",
            help="completion_only_loss=False: the article's loss on every token (the package's default counts the "
            "response + EOS only), so the first loss is the recipe's quantity",
        )
    return ap.parse_args()


def cap_like_a_t4() -> None:
    """Cap this process's CUDA memory at ``T4_MEMORY_GIB`` (``torch.cuda.set_per_process_memory_fraction``)."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(T4_MEMORY_GIB * 2**30 / total, 0)

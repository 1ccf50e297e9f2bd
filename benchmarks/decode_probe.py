"""Where the fused decoder's time goes, what each lever gives, and whether its tokens agree (GPU only).

1. ``gemv``: the 22 layers' projections alone, as CUDA graphs over 22 distinct layers' weights of
   TinyLlama's shapes (random bf16; no weight read twice, so L2 does not flatter): seven separate
   matrices per layer vs q|k|v and gate|up fused (cuBLAS), and the Triton matrix-vector kernel
   (``triton_gemv.py``) per matrix kind over a sweep of block shapes; achieved bandwidth = weight bytes /
   time; the Triton kernel's error against float64. The best block shapes go to ``gemv_configs.json``.
2. ``variants``: the merged model (``load_adapter(merged=True)``) decoding 256 tokens at batch 1 with the
   fused decoder: CUDA graph + Liger + cuBLAS, + the Triton projections (the default since 2026-12-01),
   graph + torch operations, no graph; construction and capture time, warm tokens/s.
3. ``agreement``: bf16, teacher-forced, 4 prompts x 256 positions. The reference is transformers' own
   ``generate`` (greedy, step by step): its choice at every step and its raw logits there. Each decoder
   variant, fed the same tokens one step at a time, gives its own next-token argmax; the share equal to
   ``generate``'s is the agreement. Beside it: transformers' full forward over prompt + answer against its
   own step-by-step choices (how far bf16 transformers agrees with itself), and float32 (the merged model
   upcast) as ground truth; then the same agreements only where the reference's top-2 logit margin is not
   tiny (absolute margins and margins in bf16 units of the top logit), with the share of positions
   kept. The same on stories260K (a real trained model) in bf16.
4. ``profile``: torch.profiler over 20 steps of the decoder without the graph (the same kernels): GPU time
   per step by kernel kind.
5. ``fp32``: stories260K in float32 on the GPU, graph decoder vs ``generate``: identical greedy tokens.

    python3 benchmarks/decode_probe.py --adapter /tmp/gen-adapter --stories .device-data/stories260k/hf --out $OUT
"""

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--adapter", default="/tmp/gen-adapter")
ap.add_argument("--stories", required=True)
ap.add_argument("--out", default=".")
ap.add_argument("--new", type=int, default=256)
ap.add_argument("--configs-out", default="/tmp/gemv_configs.json", help="best Triton block shapes per (N, K)")
ap.add_argument("--parts", default="gemv,variants,agreement,profile,fp32")
a = ap.parse_args()
parts = set(a.parts.split(","))
result = {}
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the probe is for the GPU; its helpers also run on a CPU


def save():
    Path(a.out, "decode_probe.json").write_text(json.dumps(result, indent=2), encoding="utf-8")


def graph_time(fn, replays=50):
    """Median ms of one replay of ``fn`` captured as a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


# 1. the projections alone
if "gemv" in parts:
    from tinyllama_ft.infer.fast.triton_gemv import gemv

    hid, inter, kv, layers, vocab = 2048, 5632, 256, 22, 32000
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(hid, device=dev, dtype=bf)
    xi = torch.randn(inter, device=dev, dtype=bf)
    sep = [
        [
            torch.randn(o, i, device=dev, dtype=bf) * 0.02
            for o, i in ((hid, hid), (kv, hid), (kv, hid), (hid, hid), (inter, hid), (inter, hid), (hid, inter))
        ]
        for _ in range(layers)
    ]
    fused = [[torch.cat(w[:3]), w[3], torch.cat(w[4:6]), w[6]] for w in sep]
    heads = [torch.randn(vocab, hid, device=dev, dtype=bf) * 0.02 for _ in range(3)]
    nbytes = sum(t.numel() * 2 for w in sep for t in w)

    def run_sep():
        for q, k, v, o, g, u, d in sep:
            x @ q.T, x @ k.T, x @ v.T, x @ o.T, x @ g.T, x @ u.T, xi @ d.T

    def run_fused():
        for qkv, o, gu, d in fused:
            x @ qkv.T, x @ o.T, x @ gu.T, xi @ d.T

    t_sep, t_fused = graph_time(run_sep), graph_time(run_fused)
    kinds = {
        "qkv": ([w[0] for w in fused], x),
        "o": ([w[1] for w in fused], x),
        "gate_up": ([w[2] for w in fused], x),
        "down": ([w[3] for w in fused], xi),
        "lm_head": (heads, x),
    }
    per_kind, sweep, best = {}, {}, {}
    configs = [(bn, bk, nw) for bn in (4, 8, 16) for bk in (256, 512, 1024) for nw in (4, 8)]
    for name, (ws, inp) in kinds.items():
        nb = ws[0].numel() * 2
        ms = graph_time(lambda: [inp @ w.T for w in ws]) / len(ws)
        entry = dict(cublas_us=round(ms * 1000, 2), cublas_tb_per_s=round(nb / ms / 1e9, 2))
        ref = ws[0].double() @ inp.double()
        trials = {}
        for cfg in configs:
            try:
                out = torch.empty(ws[0].shape[0], device=dev, dtype=bf)
                t = graph_time(lambda: [gemv(inp, w, out=out, config=cfg) for w in ws]) / len(ws)
                trials[str(cfg)] = round(t * 1000, 2)
            except Exception as e:  # noqa: BLE001  a block shape Triton refuses: recorded
                trials[str(cfg)] = f"{type(e).__name__}"
        timed_ok = {k: v for k, v in trials.items() if isinstance(v, float)}
        pick = min(timed_ok, key=timed_ok.get)
        cfg = tuple(json.loads(pick.replace("(", "[").replace(")", "]")))
        y = gemv(inp, ws[0], config=cfg)
        entry.update(
            triton_best=pick,
            triton_us=timed_ok[pick],
            triton_tb_per_s=round(nb / timed_ok[pick] / 1e6, 2),
            triton_rel_err=float((y.double() - ref).norm() / ref.norm()),
            cublas_rel_err=float(((inp @ ws[0].T).double() - ref).norm() / ref.norm()),
        )
        per_kind[name], sweep[name] = entry, trials
        best[f"{ws[0].shape[0]},{ws[0].shape[1]}"] = list(cfg)
        print(name, entry, flush=True)

    def run_triton():
        for qkv, o, gu, d in fused:
            for w, inp in ((qkv, x), (o, x), (gu, x), (d, xi)):
                gemv(inp, w, config=tuple(best[f"{w.shape[0]},{w.shape[1]}"]))

    t_triton = graph_time(run_triton)
    result["gemv"] = dict(
        layers_bytes_gb=round(nbytes / 1e9, 3),
        separate_ms=round(t_sep, 4),
        fused_ms=round(t_fused, 4),
        triton_fused_ms=round(t_triton, 4),
        separate_tb_per_s=round(nbytes / t_sep / 1e9, 2),
        fused_tb_per_s=round(nbytes / t_fused / 1e9, 2),
        triton_tb_per_s=round(nbytes / t_triton / 1e9, 2),
        per_kind=per_kind,
        triton_configs=best,
        triton_sweep_us=sweep,
    )
    Path(a.configs_out).write_text(json.dumps(best), encoding="utf-8")
    print(
        "gemv",
        json.dumps({k: v for k, v in result["gemv"].items() if k not in ("per_kind", "triton_sweep_us")}),
        flush=True,
    )
    del sep, fused, heads, kinds
    save()

# 2. decoder variants on the merged model
from tinyllama_ft.models.adapters import load_adapter  # noqa: E402
from tinyllama_ft.infer.fast.graph_decoder import FusedLlamaDecoder  # noqa: E402
from tinyllama_ft.data.alpaca_prompts import format_prompt  # noqa: E402

if Path(a.configs_out).is_file():
    from gemv_configs import use_configs

    use_configs(a.configs_out)
model, tok = load_adapter(a.adapter, max_seq_length=4096, merged=True)
prompts = [
    "Give three tips for staying healthy.",
    "What is the capital of France?",
    "Explain photosynthesis.",
    "Write a short poem about the sea.",
]
ids = tok([format_prompt(prompts[0])], return_tensors="pt").input_ids.to(DEV)


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


VARIANTS = {
    "graph_liger": dict(graph=True, kernels="liger", matmul="cublas"),
    "graph_liger_triton": dict(graph=True, kernels="liger", matmul="triton"),  # the default since 2026-12-01
    "graph_torch": dict(graph=True, kernels="torch", matmul="cublas"),
    "eager_liger": dict(graph=False, kernels="liger", matmul="cublas"),
}
decoders = {}
if "variants" in parts or "agreement" in parts:
    variants = {}
    for name, kw in VARIANTS.items():
        try:
            dec, t_build = timed(lambda: FusedLlamaDecoder(model, 512, 1, **kw))
            out, t_first = timed(lambda: dec.decode(ids, None, a.new, None))
            warm = [timed(lambda: dec.decode(ids, None, a.new, None))[1] for _ in range(3 if kw["graph"] else 1)]
            variants[name] = dict(
                build_s=round(t_build, 3),
                first_s=round(t_first, 3),
                tokens_per_s=round(a.new / statistics.median(warm), 1),
                first_ids=out[0][:8],
                attention_ms=dec.attention_ms,
                backend=str(dec.backend),
            )
            if kw["graph"]:
                decoders[name] = dec
            else:
                del dec
        except Exception as e:  # noqa: BLE001
            variants[name] = f"{type(e).__name__}: {str(e)[:400]}"
        print(name, variants[name], flush=True)
    result["variants"] = variants
    save()


def teacher_forced(dec, pid, ref):
    """The decoder's next-token argmax at each answer position, fed ``ref`` one token at a time."""
    dec.decode(pid, None, 1, None)
    preds = [dec.answer[0, 0].item()]
    with torch.no_grad():
        for k in range(len(ref) - 1):
            dec.token.fill_(int(ref[k]))
            dec.graph.replay() if dec.graph is not None else dec._step()
            preds.append(dec.answer[0, k + 1].item())
    return torch.tensor(preds)


def bf16_units(top):
    """The spacing of bf16 numbers at each top logit's magnitude (8 significant bits)."""
    return torch.exp2(torch.floor(torch.log2(top.abs().clamp(min=1e-30))) - 7)


def agreement_study(model, tok, prompts, new, decs, fp32_model=None):
    """Teacher-forced argmax agreement with ``generate`` (see the module docstring), overall and by margin."""
    rows = {name: [] for name in decs}
    ref_all, raw_all, margin_all, unit_all, full_all, fp32_all, fp32_margin_all, top_all, free = tuple(
        [] for _ in range(8)
    ) + ({},)
    for p in prompts:
        pid = tok([format_prompt(p)], return_tensors="pt").input_ids.to(DEV)
        n = pid.shape[1]
        with torch.no_grad():
            out = model.generate(
                pid,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tok.pad_token_id,
            )
            ref = out.sequences[0, n:].cpu()
            logits = torch.stack(out.logits)[:, 0].float().cpu()  # generate's raw logits at each step
            full = torch.cat([pid[0], ref.to(DEV)])[None]
            full_pred = model(full).logits[0, n - 1 : n - 1 + new].argmax(-1).cpu()
            if fp32_model is not None:
                lg32 = fp32_model(full).logits[0, n - 1 : n - 1 + new].float().cpu()
                fp32_all.append(lg32.argmax(-1))
                top2 = lg32.topk(2, -1).values
                fp32_margin_all.append(top2[:, 0] - top2[:, 1])
        top2 = logits.topk(2, -1).values
        ref_all.append(ref), raw_all.append(logits.argmax(-1)), full_all.append(full_pred)
        margin_all.append(top2[:, 0] - top2[:, 1]), unit_all.append(bf16_units(top2[:, 0])), top_all.append(top2[:, 0])
        for name, dec in decs.items():
            rows[name].append(teacher_forced(dec, pid, ref))
            fast = dec.decode(pid, None, new, None)[0]
            free.setdefault(name, []).append(
                next((i for i, (u, v) in enumerate(zip(fast, ref.tolist())) if u != v), new)
            )
    ref, margin, unit, full = (torch.cat(t) for t in (ref_all, margin_all, unit_all, full_all))
    preds = {name: torch.cat(r) for name, r in rows.items()}
    fp32 = torch.cat(fp32_all) if fp32_all else None
    fp32_margin = torch.cat(fp32_margin_all) if fp32_margin_all else None

    def share(mask, a_, b_):
        return round(float((a_[mask] == b_[mask]).float().mean()), 4) if int(mask.sum()) else None

    def table(keep):
        row = dict(
            positions=int(keep.sum()),
            share_of_positions=round(float(keep.float().mean()), 4),
            hf_full_forward_vs_generate=share(keep, full, ref),
        )
        for name, pr in preds.items():
            row[f"{name}_vs_generate"] = share(keep, pr, ref)
            if fp32 is not None:
                row[f"{name}_vs_fp32"] = share(keep, pr, fp32)
        if fp32 is not None:
            row["generate_bf16_vs_fp32"] = share(keep, ref, fp32)
        return row

    every = torch.ones_like(ref, dtype=torch.bool)
    study = dict(
        all=table(every),
        raw_argmax_equals_generate_choice=round(float((torch.cat(raw_all) == ref).float().mean()), 4),
        reference_margin=dict(
            median=round(float(margin.median()), 5),
            median_abs_top_logit=round(float(torch.cat(top_all).abs().median()), 4),
        ),
        by_margin={},
        by_margin_in_bf16_units={},
        by_fp32_margin={},
        free_running_identical_prefix=free,
    )
    study["reference_margin"]["median_bf16_unit"] = round(float(unit.median()), 5)
    for t in (0.01, 0.03, 0.1, 0.3):
        study["by_margin"][f">={t}"] = table(margin >= t)
    for u in (1, 2, 4, 8):
        study["by_margin_in_bf16_units"][f">={u}"] = table(margin >= u * unit)
    if fp32_margin is not None:
        for t in (0.01, 0.03, 0.1, 0.3):
            study["by_fp32_margin"][f">={t}"] = table(fp32_margin >= t)
    return study


# 3. agreement, bf16, teacher-forced
if "agreement" in parts:
    model32 = None
    try:
        model32 = copy.deepcopy(model).float()
    except Exception as e:  # noqa: BLE001
        result["fp32_reference"] = f"{type(e).__name__}: {e}"
    graph_decs = {k: v for k, v in decoders.items()}
    result["agreement"] = agreement_study(model, tok, prompts, a.new, graph_decs, model32)
    print("agreement", json.dumps(result["agreement"]["all"]), flush=True)
    print("agreement by margin", json.dumps(result["agreement"]["by_margin"]), flush=True)
    del model32
    save()
    try:  # a real trained model in bf16: stories260K
        from transformers import AutoModelForCausalLM, AutoTokenizer

        small = AutoModelForCausalLM.from_pretrained(a.stories, dtype=torch.bfloat16).to(DEV).eval()
        small32 = AutoModelForCausalLM.from_pretrained(a.stories, dtype=torch.float32).to(DEV).eval()
        stok = AutoTokenizer.from_pretrained(a.stories)
        stok.pad_token = stok.pad_token or stok.unk_token
        sdecs = {
            "graph_liger": FusedLlamaDecoder(small, 512, 1, graph=True, kernels="liger", matmul="cublas"),
            "graph_liger_triton": FusedLlamaDecoder(small, 512, 1, graph=True, kernels="liger", matmul="triton"),
            "graph_torch": FusedLlamaDecoder(small, 512, 1, graph=True, kernels="torch", matmul="cublas"),
        }
        result["agreement_stories260k_bf16"] = agreement_study(
            small,
            stok,
            ["Once upon a time, there was a cat", "Tom went to the park", "Lily had a red ball", "The sun was shining"],
            200,
            sdecs,
            small32,
        )
        print("stories260K bf16 agreement", json.dumps(result["agreement_stories260k_bf16"]["all"]), flush=True)
        del small, small32, sdecs
    except Exception as e:  # noqa: BLE001
        result["agreement_stories260k_bf16"] = f"{type(e).__name__}: {str(e)[:400]}"
        print("stories260K bf16 agreement failed:", result["agreement_stories260k_bf16"], flush=True)
    save()

# 4. profile of the same kernels without the graph
if "profile" in parts:
    try:
        from torch.profiler import ProfilerActivity, profile

        eager = FusedLlamaDecoder(model, 512, 1, graph=False, kernels="liger", matmul="cublas")
        eager.decode(ids, None, 8, None)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            eager.decode(ids, None, 21, None)
            torch.cuda.synchronize()
        kinds = {}
        for e in prof.key_averages():
            if getattr(e, "self_device_time_total", 0) <= 0:  # host-side events: no kernel time
                continue
            name = e.key.lower()
            kind = (
                "gemm"
                if any(s in name for s in ("gemm", "gemv", "cutlass", "sm90", "xmma", "splitk", "nvjet"))
                else "attention"
                if any(s in name for s in ("attention", "fmha", "flash", "cudnn", "sdpa"))
                else "liger/triton"
                if any(s in name for s in ("_kernel", "triton"))
                else "other pointwise"
            )
            d = kinds.setdefault(kind, dict(us_per_step=0.0, kernels_per_step=0))
            d["us_per_step"] += e.self_device_time_total / 20
            d["kernels_per_step"] += e.count / 20
        result["profile"] = {
            k: dict(us_per_step=round(v["us_per_step"], 1), kernels_per_step=round(v["kernels_per_step"], 1))
            for k, v in kinds.items()
        }
        result["profile_top"] = [
            (e.key[:80], round(e.self_device_time_total / 20, 1), e.count)
            for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:14]
        ]
        if "graph_liger" in decoders:
            dec = decoders["graph_liger"]
            dec.decode(ids, None, 2, None)
            times = []
            for _ in range(50):
                s, e_ = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                dec._prime()
                s.record()
                dec.graph.replay()
                e_.record()
                e_.synchronize()
                times.append(s.elapsed_time(e_))
            result["graph_step_ms"] = round(statistics.median(times), 4)
        del eager
    except Exception as e:  # noqa: BLE001
        result["profile"] = f"{type(e).__name__}: {e}"
    print(
        "profile",
        json.dumps(result.get("profile")),
        "graph step ms",
        result.get("graph_step_ms"),
        json.dumps(result.get("profile_top")),
        flush=True,
    )
    save()

# 5. stories260K fp32
if "fp32" in parts:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    small = AutoModelForCausalLM.from_pretrained(a.stories, dtype=torch.float32).to(DEV).eval()
    stok = AutoTokenizer.from_pretrained(a.stories)
    same = {}
    for matmul in ("cublas", "triton"):
        same[matmul] = []
        for p in ["Once upon a time, there was a cat", "Tom went to the park"]:
            pid = stok([p], return_tensors="pt").input_ids.to(DEV)
            with torch.no_grad():
                ref = small.generate(
                    pid, max_new_tokens=200, min_new_tokens=200, do_sample=False, pad_token_id=stok.eos_token_id
                )[0, pid.shape[1] :].tolist()
            fast = FusedLlamaDecoder(small, 512, 1, matmul=matmul).decode(pid, None, 200, None)[0]
            same[matmul].append(fast == ref)
    result["fp32_stories_identical"] = same
    print("fp32 stories identical:", same, flush=True)
    save()
print("probe done", flush=True)

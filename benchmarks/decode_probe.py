"""Where the fused decoder's time goes, what each lever gives, and whether its tokens agree (GPU only).

1. ``gemv``: the 22 layers' projections alone, as a CUDA graph of matmuls on random bf16 weights of
   TinyLlama's shapes: seven separate matrices per layer vs q|k|v and gate|up fused (the fusion lever),
   and the weights' bytes over that time (achieved bandwidth).
2. ``variants``: the merged model (``load_adapter(merged=True)``) decoding 256 tokens at batch 1 with the
   fused decoder: CUDA graph + Liger kernels (the default), graph + torch operations, no graph + Liger;
   construction and capture time, warm tokens/s.
3. ``agreement``: bf16, teacher-forced: transformers' forward over prompt + the greedy answer of plain
   ``generate`` gives the next-token argmax at every answer position; the fused decoder, fed the same
   tokens one step at a time, gives its own; the share that agree. Also how far free-running greedy
   answers stay identical.
4. ``profile``: torch.profiler over 20 steps of the decoder without the graph (the same kernels): GPU time
   per step by kernel kind.
5. ``fp32``: stories260K in float32 on the GPU, graph decoder vs ``generate``: identical greedy tokens.

    python3 benchmarks/decode_probe.py --adapter /tmp/gen-adapter --stories .device-data/stories260k/hf --out $OUT
"""

import argparse
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
a = ap.parse_args()
result = {}


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
hid, inter, kv, layers, vocab = 2048, 5632, 256, 22, 32000
dev, bf = "cuda", torch.bfloat16
x = torch.randn(1, hid, device=dev, dtype=bf)
xi = torch.randn(1, inter, device=dev, dtype=bf)
sep = [[torch.randn(o, i, device=dev, dtype=bf) * 0.02 for o, i in
        ((hid, hid), (kv, hid), (kv, hid), (hid, hid), (inter, hid), (inter, hid), (hid, inter))] for _ in range(layers)]
fused = [[torch.cat(w[:3]), w[3], torch.cat(w[4:6]), w[6]] for w in sep]
head = torch.randn(vocab, hid, device=dev, dtype=bf) * 0.02
nbytes = sum(t.numel() * 2 for w in sep for t in w)


def run_sep():
    for q, k, v, o, g, u, d in sep:
        q_, k_, v_ = x @ q.T, x @ k.T, x @ v.T
        o_ = x @ o.T
        g_, u_ = x @ g.T, x @ u.T
        d_ = xi @ d.T


def run_fused():
    for qkv, o, gu, d in fused:
        y = x @ qkv.T
        o_ = x @ o.T
        z = x @ gu.T
        d_ = xi @ d.T


t_sep, t_fused = graph_time(run_sep), graph_time(run_fused)
t_head = graph_time(lambda: x @ head.T)
single = {}
for name, w, inp in [("qkv", fused[0][0], x), ("o", fused[0][1], x), ("gate_up", fused[0][2], x), ("down", fused[0][3], xi),
                     ("k", sep[0][1], x), ("lm_head", head, x)]:
    ms = graph_time(lambda: [inp @ w.T for _ in range(20)]) / 20
    single[name] = dict(us=round(ms * 1000, 2), tb_per_s=round(w.numel() * 2 / ms / 1e9, 2))
result["gemv"] = dict(layers_bytes_gb=round(nbytes / 1e9, 3), separate_ms=round(t_sep, 4), fused_ms=round(t_fused, 4),
                      separate_tb_per_s=round(nbytes / t_sep / 1e9, 2), fused_tb_per_s=round(nbytes / t_fused / 1e9, 2),
                      lm_head_ms=round(t_head, 4), per_matrix=single)
print("gemv", json.dumps(result["gemv"]), flush=True)
del sep, fused, head
save()

# 2. decoder variants on the merged model
from tinyllama_ft.adapters import load_adapter  # noqa: E402
from tinyllama_ft.graph_decoding import FusedLlamaDecoder  # noqa: E402
from tinyllama_ft.prompts import format_prompt  # noqa: E402

model, tok = load_adapter(a.adapter, max_seq_length=4096, merged=True)
prompts = ["Give three tips for staying healthy.", "What is the capital of France?", "Explain photosynthesis.",
           "Write a short poem about the sea."]
ids = tok([format_prompt(prompts[0])], return_tensors="pt").input_ids.cuda()


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


variants = {}
for name, kw in [("graph_liger", dict(graph=True, kernels="liger")), ("graph_torch", dict(graph=True, kernels="torch")),
                 ("eager_liger", dict(graph=False, kernels="liger"))]:
    try:
        dec, t_build = timed(lambda: FusedLlamaDecoder(model, 512, 1, **kw))
        out, t_first = timed(lambda: dec.decode(ids, None, a.new, None))
        warm = [timed(lambda: dec.decode(ids, None, a.new, None))[1] for _ in range(3 if kw["graph"] else 1)]
        variants[name] = dict(build_s=round(t_build, 3), first_s=round(t_first, 3),
                              tokens_per_s=round(a.new / statistics.median(warm), 1), first_ids=out[0][:8],
                              attention_ms=dec.attention_ms, backend=str(dec.backend))
        if name == "graph_liger":
            default_dec = dec
        else:
            del dec
    except Exception as e:  # noqa: BLE001
        variants[name] = f"{type(e).__name__}: {str(e)[:400]}"
    print(name, variants[name], flush=True)
result["variants"] = variants
save()

# 3. agreement, bf16, teacher-forced
dec = default_dec if "default_dec" in globals() else FusedLlamaDecoder(model, 512, 1, graph=True, kernels="torch")
agree = total = hf_self = fused_vs_fp32 = hf_vs_fp32 = 0
free_same = []
model32 = None
try:
    import copy

    model32 = copy.deepcopy(model).float()
except Exception as e:  # noqa: BLE001
    result["fp32_reference"] = f"{type(e).__name__}: {e}"
for p in prompts:
    pid = tok([format_prompt(p)], return_tensors="pt").input_ids.cuda()
    n = pid.shape[1]
    with torch.no_grad():
        ref = model.generate(pid, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False,
                             pad_token_id=tok.pad_token_id)[0, n:]
        full = torch.cat([pid[0], ref])[None]
        hf_pred = model(full).logits[0, n - 1:n - 1 + a.new].argmax(-1)
        fp32_pred = model32(full).logits[0, n - 1:n - 1 + a.new].argmax(-1) if model32 is not None else hf_pred
    hf_self += int((hf_pred == ref).sum())  # transformers' full forward vs its own step-by-step greedy choices
    hf_vs_fp32 += int((hf_pred == fp32_pred).sum())
    fast = dec.decode(pid, None, a.new, None)[0]
    free_same.append(next((i for i, (u, v) in enumerate(zip(fast, ref.tolist())) if u != v), a.new))
    # teacher forcing through the decoder's own step: prefill, then feed the reference tokens
    dec.decode(pid, None, 1, None)
    preds = [dec.answer[0, 0].item()]
    with torch.no_grad():
        for k in range(a.new - 1):
            dec.token.fill_(ref[k].item())
            dec.graph.replay() if dec.graph is not None else dec._step()
            preds.append(dec.answer[0, k + 1].item())
    agree += sum(int(u == v) for u, v in zip(preds, hf_pred.tolist()))
    fused_vs_fp32 += sum(int(u == v) for u, v in zip(preds, fp32_pred.tolist()))
    total += a.new
result["agreement"] = dict(teacher_forced_argmax_agreement=round(agree / total, 4), positions=total,
                           hf_full_forward_vs_its_own_greedy_steps=round(hf_self / total, 4),
                           fused_bf16_vs_hf_fp32=round(fused_vs_fp32 / total, 4),
                           hf_bf16_vs_hf_fp32=round(hf_vs_fp32 / total, 4),
                           free_running_identical_prefix=free_same)
del model32
print("agreement", result["agreement"], flush=True)
save()

# 4. profile of the same kernels without the graph
try:
    from torch.profiler import ProfilerActivity, profile

    eager = FusedLlamaDecoder(model, 512, 1, graph=False, kernels=dec.kernels)
    eager.decode(ids, None, 8, None)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        eager.decode(ids, None, 21, None)
        torch.cuda.synchronize()
    kinds = {}
    for e in prof.key_averages():
        if getattr(e, "self_device_time_total", 0) <= 0:  # host-side events: no kernel time
            continue
        name = e.key.lower()
        kind = ("gemm" if any(s in name for s in ("gemm", "gemv", "cutlass", "sm90", "xmma", "splitk")) else
                "attention" if any(s in name for s in ("attention", "fmha", "flash", "cudnn")) else
                "liger/triton" if any(s in name for s in ("_kernel", "triton")) else "other pointwise")
        d = kinds.setdefault(kind, dict(us_per_step=0.0, kernels_per_step=0))
        d["us_per_step"] += e.self_device_time_total / 20
        d["kernels_per_step"] += e.count / 20
    result["profile"] = {k: dict(us_per_step=round(v["us_per_step"], 1), kernels_per_step=round(v["kernels_per_step"], 1))
                         for k, v in kinds.items()}
    result["profile_top"] = [(e.key[:80], round(e.self_device_time_total / 20, 1), e.count)
                             for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:12]]
    del eager
except Exception as e:  # noqa: BLE001
    result["profile"] = f"{type(e).__name__}: {e}"
print("profile", json.dumps(result.get("profile")), json.dumps(result.get("profile_top")), flush=True)
save()

# 5. stories260K fp32
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

small = AutoModelForCausalLM.from_pretrained(a.stories, dtype=torch.float32).cuda().eval()
stok = AutoTokenizer.from_pretrained(a.stories)
same = []
for p in ["Once upon a time, there was a cat", "Tom went to the park"]:
    pid = stok([p], return_tensors="pt").input_ids.cuda()
    with torch.no_grad():
        ref = small.generate(pid, max_new_tokens=200, min_new_tokens=200, do_sample=False,
                             pad_token_id=stok.eos_token_id)[0, pid.shape[1]:].tolist()
    fast = FusedLlamaDecoder(small, 512, 1).decode(pid, None, 200, None)[0]
    same.append(fast == ref)
result["fp32_stories_identical"] = same
print("fp32 stories identical:", same, flush=True)
save()

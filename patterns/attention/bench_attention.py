#!/usr/bin/env python3
"""Checker and benchmark for FACT's attention kernel libraries (kernel C ABI v2, ctypes).

For each case: fresh random inputs in the layout a model has them (fused QKV views or separate
[B, T, H, D] tensors), the output poisoned with NaN, every matching kernel library called through
its C entry, rel_err = ||out - ref|| / ||ref|| against float64 torch on the GPU, a repeat run that
must match bit for bit (a moving result is a race), then timings with CUDA events (L2 flushed
before each run, median of many) against F.scaled_dot_product_attention with the cuDNN and the
flash backends, same process, same inputs. TFLOP/s count 4*B*H*Sq*Sk*D, halved for causal.
float32 cases (the 3xTF32 `strict` and the TF32 kernels of fmha_f32_sm90.cuh) are checked at their
precision's bound and timed against what a float32 model runs: the attention written out in
PyTorch (matmul, masked_fill with a tril buffer, softmax, matmul; TF32 off, PyTorch's default) and
F.scaled_dot_product_attention's memory-efficient backend (cuDNN and flash take no float32). A
kernel is compared only with baselines of its precision (BASELINE_PRECISION): the 3xTF32 kernels
with those two, the TF32 kernels with the written-out attention run with TF32 allowed.

Usage: bench_attention.py --libs DIR [--json OUT.json] [--cases a,b] [--iters N]
"""
import argparse
import ctypes
import datetime
import glob
import json
import math
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ABI_VERSION = 2
DEVICE = os.environ.get("FACT_ATTN_DEVICE", "cuda")
MASK_NONE, MASK_TOP_LEFT, MASK_BOTTOM_RIGHT = 0, 1, 2


def fnv1a(name: str) -> int:
    h = 2166136261
    for ch in name.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


class Header(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("kind", ctypes.c_uint32),
                ("size", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


def _operand(prefix):
    return [(prefix, ctypes.c_void_p), (prefix + "_batch_stride", ctypes.c_int64),
            (prefix + "_seq_stride", ctypes.c_int64), (prefix + "_head_stride", ctypes.c_int64)]


class AttentionArgs(ctypes.Structure):  # mirrors patterns/attention/attention_abi.h
    _fields_ = ([("header", Header)] +
                [(n, ctypes.c_int32) for n in ("batch", "heads", "kv_heads", "seq_q", "seq_k",
                                               "head_dim", "v_head_dim", "causal", "dtype",
                                               "window")] +
                _operand("q") + _operand("k") + _operand("v") + _operand("o") +
                [("lse", ctypes.c_void_p), ("lse_batch_stride", ctypes.c_int64),
                 ("lse_head_stride", ctypes.c_int64), ("scale", ctypes.c_float),
                 ("sm_count", ctypes.c_int32),
                 ("key_mask", ctypes.c_void_p), ("key_mask_batch_stride", ctypes.c_int64),
                 ("key_mask_seq_stride", ctypes.c_int64), ("key_mask_keep", ctypes.c_int32),
                 ("key_mask_reserved", ctypes.c_int32)])


assert ctypes.sizeof(AttentionArgs) == 248, ctypes.sizeof(AttentionArgs)
assert AttentionArgs.q.offset == 56 and AttentionArgs.lse.offset == 184 and AttentionArgs.scale.offset == 208
FACT_DTYPE = {"f32": 1, "fp16": 2, "bf16": 3}  # FactDType (include/fact/runtime/fact_abi.h)
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(AttentionArgs), ctypes.c_void_p,
                         ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p)


class Library:
    def __init__(self, path):
        self.path = path
        self.dll = ctypes.CDLL(path)
        self.dll.fact_kernel_info.restype = ctypes.c_char_p
        self.info = json.loads(self.dll.fact_kernel_info().decode())
        self.spec = self.info["spec"]
        assert self.info["kind"] == "attention" and self.info["abi_version"] == ABI_VERSION
        assert self.spec["args_size"] == ctypes.sizeof(AttentionArgs)
        fn = getattr(self.dll, self.info["entry"])
        self.fn = ENTRY(ctypes.cast(fn, ctypes.c_void_p).value)
        self.name = self.info["name"]

    def matches(self, case):
        # A kernel's info says whether it takes sliding windows (every causal kernel does).
        return (self.spec["dtype"] == case["dtype"] and self.spec["head_dim"] == case["d"]
                and self.spec["causal"] == (case["mask"] != MASK_NONE)
                and bool(self.spec.get("key_mask", False)) == bool(case.get("key_mask", False))
                and (case.get("window", 0) == 0 or self.spec.get("windows", True)))

    def workspace(self, args):
        size = ctypes.c_size_t(0)
        status = self.fn(ctypes.byref(args), None, ctypes.byref(size), None)
        assert status == 0, f"size query failed: {status}"
        return size.value

    def __call__(self, args, workspace_ptr):
        return self.fn(ctypes.byref(args), workspace_ptr, None,
                       ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}
# rel_err bound of a kernel by the products it computes (its info's "products"): float32-accurate
# for 3xTF32 (the strict contract), one TF32 rounding per operand, bf16/fp16 inputs.
TOLERANCE = {"3xtf32": 1e-5, "tf32": 5e-3, "native": 2e-2}
PRECISION = {"3xtf32": "strict float32 (3xTF32 products, float32 softmax)",
             "tf32": "tf32 (TF32 products, float32 accumulation and softmax)"}
# The products of the float32 baselines: a speedup is a ratio within one precision, never one
# that a precision change buys.
BASELINE_PRECISION = {"torch_written_f32": "3xtf32", "sdpa_efficient": "3xtf32", "torch_written_tf32": "tf32"}

# name, B, Sq, Sk, H, Hkv, d, mask, dtype, layout, timed
CASES = [
    dict(name="mingpt_b128_t512_h8_d96_causal", B=128, Sq=512, Sk=512, H=8, Hkv=8, d=96,
         mask=MASK_TOP_LEFT, dtype="bf16", layout="qkv_fused", goal=True),
    dict(name="llama_b4_t2048_h32_kv8_d128_causal", B=4, Sq=2048, Sk=2048, H=32, Hkv=8, d=128,
         mask=MASK_TOP_LEFT, dtype="bf16", layout="bshd", goal=True),
    dict(name="b16_t2048_h16_d64_causal", B=16, Sq=2048, Sk=2048, H=16, Hkv=16, d=64,
         mask=MASK_TOP_LEFT, dtype="bf16", layout="bshd"),
    dict(name="b4_t2048_h32_d128_noncausal", B=4, Sq=2048, Sk=2048, H=32, Hkv=32, d=128,
         mask=MASK_NONE, dtype="bf16", layout="bshd"),
    dict(name="tail_b8_t1000_h16_d128_causal", B=8, Sq=1000, Sk=1000, H=16, Hkv=16, d=128,
         mask=MASK_TOP_LEFT, dtype="bf16", layout="qkv_fused"),
    dict(name="tail_b8_t1000_h16_d128_noncausal", B=8, Sq=1000, Sk=1000, H=16, Hkv=16, d=128,
         mask=MASK_NONE, dtype="bf16", layout="bshd"),
    dict(name="gqa_b2_t4096_h16_kv2_d128_noncausal", B=2, Sq=4096, Sk=4096, H=16, Hkv=2, d=128,
         mask=MASK_NONE, dtype="bf16", layout="bshd"),
    dict(name="llama_fp16_b4_t2048_h32_kv8_d128_causal", B=4, Sq=2048, Sk=2048, H=32, Hkv=8, d=128,
         mask=MASK_TOP_LEFT, dtype="fp16", layout="bshd"),
    dict(name="d80_b8_t1024_h16_causal", B=8, Sq=1024, Sk=1024, H=16, Hkv=16, d=80,
         mask=MASK_TOP_LEFT, dtype="bf16", layout="qkv_fused"),
    # Short non-causal sequences at head dim 64: ViT-B/16 (197 tokens) and BERT-base (512) with
    # and without its padding mask (a boolean key mask: batch entry b hides up to a quarter of
    # its keys; SDPA gets it as a [B, 1, 1, S] boolean attn_mask).
    dict(name="vit_b64_t197_h12_d64", B=64, Sq=197, Sk=197, H=12, Hkv=12, d=64,
         mask=MASK_NONE, dtype="bf16", layout="qkv_fused"),
    dict(name="bert_b32_t512_h12_d64", B=32, Sq=512, Sk=512, H=12, Hkv=12, d=64,
         mask=MASK_NONE, dtype="bf16", layout="qkv_fused"),
    dict(name="bert_key_mask_b32_t512_h12_d64", B=32, Sq=512, Sk=512, H=12, Hkv=12, d=64,
         mask=MASK_NONE, key_mask=True, dtype="bf16", layout="qkv_fused"),
    dict(name="mingpt_tail_b64_t333_h8_d96_causal", B=64, Sq=333, Sk=333, H=8, Hkv=8, d=96,
         mask=MASK_TOP_LEFT, dtype="bf16", layout="qkv_fused"),
    # Correctness only (torch's SDPA has no bottom-right causal): sq != sk, both alignments.
    dict(name="bottom_right_b2_sq300_sk1000_h8_d128", B=2, Sq=300, Sk=1000, H=8, Hkv=8, d=128,
         mask=MASK_BOTTOM_RIGHT, dtype="bf16", layout="bshd", timed=False),
    dict(name="bottom_right_empty_rows_b2_sq1000_sk300_h8_d128", B=2, Sq=1000, Sk=300, H=8, Hkv=8, d=128,
         mask=MASK_BOTTOM_RIGHT, dtype="bf16", layout="bshd", timed=False),
    dict(name="top_left_b2_sq1000_sk300_h8_kv2_d128", B=2, Sq=1000, Sk=300, H=8, Hkv=2, d=128,
         mask=MASK_TOP_LEFT, dtype="bf16", layout="bshd", timed=False),
    # Causal sliding windows (Phi-3's 2047 at its T 2048, Mistral-style narrow ones), correctness
    # only: torch's SDPA has no window, and its masked (non-flash) backends are no fair baseline.
    dict(name="window2047_b4_t2048_h32_d96_phi3", B=4, Sq=2048, Sk=2048, H=32, Hkv=32, d=96,
         mask=MASK_TOP_LEFT, window=2047, dtype="bf16", layout="qkv_fused", timed=False),
    dict(name="window256_b2_t1000_h8_kv2_d128", B=2, Sq=1000, Sk=1000, H=8, Hkv=2, d=128,
         mask=MASK_TOP_LEFT, window=256, dtype="bf16", layout="bshd", timed=False),
    dict(name="window100_b2_t777_h8_d64", B=2, Sq=777, Sk=777, H=8, Hkv=8, d=64,
         mask=MASK_TOP_LEFT, window=100, dtype="bf16", layout="bshd", timed=False),
    dict(name="window300_bottom_right_b2_sq300_sk1000_h8_d128", B=2, Sq=300, Sk=1000, H=8, Hkv=8, d=128,
         mask=MASK_BOTTOM_RIGHT, window=300, dtype="bf16", layout="bshd", timed=False),
    # float32: the minGPT block's attention at full size, Llama's shape, d64; tails, GQA, both
    # alignments and windows for correctness.
    dict(name="f32_mingpt_b128_t512_h8_d96_causal", B=128, Sq=512, Sk=512, H=8, Hkv=8, d=96,
         mask=MASK_TOP_LEFT, dtype="f32", layout="qkv_fused", goal=True),
    dict(name="f32_llama_b4_t2048_h32_kv8_d128_causal", B=4, Sq=2048, Sk=2048, H=32, Hkv=8, d=128,
         mask=MASK_TOP_LEFT, dtype="f32", layout="bshd"),
    dict(name="f32_b16_t1024_h16_d64_causal", B=16, Sq=1024, Sk=1024, H=16, Hkv=16, d=64,
         mask=MASK_TOP_LEFT, dtype="f32", layout="bshd"),
    dict(name="f32_b4_t1024_h16_d128_noncausal", B=4, Sq=1024, Sk=1024, H=16, Hkv=16, d=128,
         mask=MASK_NONE, dtype="f32", layout="bshd"),
    dict(name="f32_mingpt_tail_b16_t333_h8_d96_causal", B=16, Sq=333, Sk=333, H=8, Hkv=8, d=96,
         mask=MASK_TOP_LEFT, dtype="f32", layout="qkv_fused", timed=False),
    dict(name="f32_d80_b4_t777_h8_causal", B=4, Sq=777, Sk=777, H=8, Hkv=8, d=80,
         mask=MASK_TOP_LEFT, dtype="f32", layout="qkv_fused", timed=False),
    dict(name="f32_bottom_right_empty_rows_b2_sq1000_sk300_h8_kv2_d128", B=2, Sq=1000, Sk=300, H=8, Hkv=2,
         d=128, mask=MASK_BOTTOM_RIGHT, dtype="f32", layout="bshd", timed=False),
    dict(name="f32_top_left_b2_sq300_sk1000_h8_d96", B=2, Sq=300, Sk=1000, H=8, Hkv=8, d=96,
         mask=MASK_TOP_LEFT, dtype="f32", layout="bshd", timed=False),
    dict(name="f32_window100_b2_t777_h8_d64", B=2, Sq=777, Sk=777, H=8, Hkv=8, d=64,
         mask=MASK_TOP_LEFT, window=100, dtype="f32", layout="bshd", timed=False),
    dict(name="f32_window300_bottom_right_b2_sq300_sk1000_h8_d128", B=2, Sq=300, Sk=1000, H=8, Hkv=8,
         d=128, mask=MASK_BOTTOM_RIGHT, window=300, dtype="f32", layout="bshd", timed=False),
    dict(name="f32_tail_b3_t1000_h4_d128_noncausal", B=3, Sq=1000, Sk=1000, H=4, Hkv=4, d=128,
         mask=MASK_NONE, dtype="f32", layout="bshd", timed=False),
]


def make_inputs(case, gen):
    """Q, K, V as [B, S, H, D] views in the case's layout, and a fresh O [B, Sq, H, D]."""
    dt = DTYPES[case["dtype"]]
    B, Sq, Sk, H, Hkv, d = (case[k] for k in ("B", "Sq", "Sk", "H", "Hkv", "d"))
    if case["layout"] == "qkv_fused":
        assert Sq == Sk and H == Hkv
        qkv = torch.randn(B, Sq, 3, H, d, device=DEVICE, dtype=dt, generator=gen)  # QKV GEMM output
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q = torch.randn(B, Sq, H, d, device=DEVICE, dtype=dt, generator=gen)
        k = torch.randn(B, Sk, Hkv, d, device=DEVICE, dtype=dt, generator=gen)
        v = torch.randn(B, Sk, Hkv, d, device=DEVICE, dtype=dt, generator=gen)
    o = torch.empty(B, Sq, H, d, device=DEVICE, dtype=dt)
    return q, k, v, o


def padding_mask(case):
    """The key mask of a case with "key_mask": [B, Sk] bool, True = visible; batch entry b hides
    its last (Sk // 4) * (3 - b % 4) // 3 keys (none for every fourth entry)."""
    B, Sk = case["B"], case["Sk"]
    j = torch.arange(Sk, device=DEVICE)[None, :]
    hidden = torch.tensor([(Sk // 4) * (3 - b % 4) // 3 for b in range(B)], device=DEVICE)[:, None]
    return j < Sk - hidden


def reference(q, k, v, mask, scale, window=0, key_mask=None):
    """float64 attention on the GPU, batch by batch; [B, S, H, D] in and out. `window` > 0: a
    causal sliding window (query i sees keys i + off - window < j <= i + off). `key_mask`: [B, Sk]
    bool, the keys each batch entry sees."""
    B, Sq, H, d = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    out = torch.empty(B, Sq, H, d, device=DEVICE, dtype=torch.float64)
    lse = torch.empty(B, H, Sq, device=DEVICE, dtype=torch.float64)
    i = torch.arange(Sq, device=DEVICE)[:, None]
    j = torch.arange(Sk, device=DEVICE)[None, :]
    visible = None
    if mask == MASK_TOP_LEFT:
        visible = j <= i
    elif mask == MASK_BOTTOM_RIGHT:
        visible = j <= i + (Sk - Sq)
    if window > 0:
        off = Sk - Sq if mask == MASK_BOTTOM_RIGHT else 0
        visible = visible & (j > i + off - window)
    for b in range(B):
        qb = q[b].permute(1, 0, 2).double()
        kb = k[b].permute(1, 0, 2).double().repeat_interleave(g, dim=0)
        vb = v[b].permute(1, 0, 2).double().repeat_interleave(g, dim=0)
        s = (qb @ kb.transpose(-1, -2)) * scale
        if visible is not None:
            s = s.masked_fill(~visible, -math.inf)
        if key_mask is not None:
            s = s.masked_fill(~key_mask[b][None, None, :], -math.inf)
        m = s.amax(-1, keepdim=True)
        empty = torch.isinf(m)  # rows that see no key: O = 0, LSE = -inf
        m = torch.where(empty, torch.zeros_like(m), m)
        p = torch.exp(s - m)
        denom = p.sum(-1, keepdim=True)
        ob = (p @ vb) / torch.where(denom == 0, torch.ones_like(denom), denom)
        out[b] = ob.permute(1, 0, 2)
        lse[b] = torch.where(denom[..., 0] == 0, torch.full_like(m[..., 0], -math.inf),
                             m[..., 0] + torch.log(denom[..., 0]))
        del s, p
    return out, lse


def rel_err(x, ref):
    x = x.double()
    if not torch.isfinite(x).all():
        return float("nan")
    return ((x - ref).norm() / ref.norm()).item()


def make_args(case, q, k, v, o, lse, scale, key_mask=None):
    a = AttentionArgs()
    a.header.abi_version = ABI_VERSION
    a.header.kind = fnv1a("attention")
    a.header.size = ctypes.sizeof(AttentionArgs)
    a.batch, a.heads, a.kv_heads = case["B"], case["H"], case["Hkv"]
    a.seq_q, a.seq_k, a.head_dim, a.v_head_dim = case["Sq"], case["Sk"], case["d"], case["d"]
    a.causal = case["mask"]
    a.window = case.get("window", 0)
    a.dtype = FACT_DTYPE[case["dtype"]]
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        assert t.stride(3) == 1
        setattr(a, name, t.data_ptr())
        setattr(a, name + "_batch_stride", t.stride(0))
        setattr(a, name + "_seq_stride", t.stride(1))
        setattr(a, name + "_head_stride", t.stride(2))
    if lse is not None:
        a.lse = lse.data_ptr()
        a.lse_batch_stride, a.lse_head_stride = lse.stride(0), lse.stride(1)
    a.scale = scale
    a.sm_count = 0
    if key_mask is not None:
        a.key_mask = key_mask.data_ptr()
        a.key_mask_batch_stride, a.key_mask_seq_stride = key_mask.stride(0), key_mask.stride(1)
        a.key_mask_keep = 1
    return a


class Timer:
    def __init__(self, iters, warmup):
        self.iters, self.warmup = iters, warmup
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE)

    def __call__(self, fn):
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for s, e in zip(starts, ends):
            self.flush.zero_()  # L2 flushed; the host enqueues the call while this runs
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        return statistics.median(ms), min(ms), max(ms)


def flops(case):
    """4*B*H*Sq*Sk*d, halved for causal; with a sliding window the visible pairs counted."""
    f = 4.0 * case["B"] * case["H"] * case["Sq"] * case["Sk"] * case["d"]
    window = case.get("window", 0)
    if window > 0:
        off = case["Sk"] - case["Sq"] if case["mask"] == MASK_BOTTOM_RIGHT else 0
        pairs = sum(max(0, min(case["Sk"], i + off + 1) - max(0, i + off - window + 1)) for i in range(case["Sq"]))
        return 4.0 * case["B"] * case["H"] * pairs * case["d"]
    return f / 2 if case["mask"] != MASK_NONE else f


def sdpa_baseline(case, q, k, v, scale, backend, ref, timer, key_mask=None):
    """F.scaled_dot_product_attention with one backend forced, timed on two input layouts (the
    [B, H, S, D] views of the model's tensors, and contiguous [B, H, S, D] copies made before
    timing); the faster is the baseline. GQA through enable_gqa, else K/V expanded before timing."""
    causal = case["mask"] == MASK_TOP_LEFT
    attn_mask = key_mask[:, None, None, :] if key_mask is not None else None
    gqa = case["H"] != case["Hkv"]
    g = case["H"] // case["Hkv"]
    views = [t.transpose(1, 2) for t in (q, k, v)]
    layouts = {"views": views, "contiguous": [t.contiguous() for t in views]}
    tried = {}
    for layout, (qh, kh, vh) in layouts.items():
        calls = [("enable_gqa" if gqa else "direct",
                  lambda qh=qh, kh=kh, vh=vh: F.scaled_dot_product_attention(
                      qh, kh, vh, attn_mask=attn_mask, is_causal=causal, scale=scale, enable_gqa=gqa))]
        if gqa:
            ke, ve = kh.repeat_interleave(g, dim=1), vh.repeat_interleave(g, dim=1)
            calls.append(("kv_expanded", lambda qh=qh, ke=ke, ve=ve: F.scaled_dot_product_attention(
                qh, ke, ve, attn_mask=attn_mask, is_causal=causal, scale=scale)))
        for how, fn in calls:
            try:
                with sdpa_kernel([backend]):
                    out = fn()
                    torch.cuda.synchronize()
                    err = rel_err(out.transpose(1, 2), ref)
                    del out
                    ms, lo, hi = timer(fn)
                tried[f"{layout}/{how}"] = {"ms": ms, "min_ms": lo, "max_ms": hi, "rel_err": err}
                break
            except Exception as exc:  # noqa: BLE001
                tried[f"{layout}/{how}"] = {"error": str(exc).splitlines()[0][:200] if str(exc) else repr(exc)}
    ok = {k_: r for k_, r in tried.items() if "ms" in r}
    if not ok:
        return {"error": "backend refused every layout", "tried": tried}
    best_key = min(ok, key=lambda k_: ok[k_]["ms"])
    res = dict(ok[best_key])
    res.update(tflops=flops(case) / res["ms"] / 1e9, layout=best_key, tried=tried)
    return res


def written_baseline(case, q, k, v, scale, ref, timer, tf32=False):
    """The attention as a float32 model writes it (minGPT): q @ k^T * scale, masked_fill of a tril
    buffer longer than the sequence, softmax, @ v, on [B, H, S, D] views; GQA by repeat_interleave.
    PyTorch's default (no TF32), or with TF32 allowed for its matmuls (`tf32`)."""
    assert not torch.backends.cuda.matmul.allow_tf32
    g = case["H"] // case["Hkv"]
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    if g > 1:
        kh, vh = kh.repeat_interleave(g, dim=1), vh.repeat_interleave(g, dim=1)
    longest = max(case["Sq"], case["Sk"]) + 64
    bias = torch.tril(torch.ones(longest, longest, device=DEVICE)).view(1, 1, longest, longest)
    Sq, Sk = case["Sq"], case["Sk"]
    causal = case["mask"] == MASK_TOP_LEFT

    def written():
        att = (qh @ kh.transpose(-2, -1)) * scale
        if causal:
            att = att.masked_fill(bias[:, :, :Sq, :Sk] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return att @ vh

    def fn():
        if not tf32:
            return written()
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return written()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False

    out = fn()
    torch.cuda.synchronize()
    err = rel_err(out.transpose(1, 2), ref)
    del out
    ms, lo, hi = timer(fn)
    return {"ms": ms, "min_ms": lo, "max_ms": hi, "rel_err": err, "tflops": flops(case) / ms / 1e9}


def abi_checks(lib):
    """The calling convention: size query, wrong header, wrong dims, null pointers."""
    case = dict(B=1, Sq=64, Sk=64, H=2, Hkv=2, d=lib.spec["head_dim"],
                mask=MASK_TOP_LEFT if lib.spec["causal"] else MASK_NONE, dtype=lib.spec["dtype"],
                layout="bshd")
    q, k, v, o = make_inputs(case, torch.Generator(device=DEVICE).manual_seed(1))
    good = make_args(case, q, k, v, o, None, 0.125)
    ws = torch.zeros(max(lib.workspace(good), 16), dtype=torch.uint8, device=DEVICE)
    results = {}

    def status(mutate):
        a = make_args(case, q, k, v, o, None, 0.125)
        mutate(a)
        return lib(a, ws.data_ptr())

    results["ok"] = status(lambda a: None) == 0
    results["wrong_version"] = status(lambda a: setattr(a.header, "abi_version", 1)) == 1
    results["wrong_kind"] = status(lambda a: setattr(a.header, "kind", fnv1a("gemm"))) == 1
    results["wrong_size"] = status(lambda a: setattr(a.header, "size", 200)) == 1
    results["wrong_dtype"] = status(lambda a: setattr(a, "dtype", FACT_DTYPE["fp16" if lib.spec["dtype"] != "fp16" else "bf16"])) == 1
    results["null_q"] = status(lambda a: setattr(a, "q", None)) == 1
    results["bad_group"] = status(lambda a: setattr(a, "kv_heads", 3)) == 1
    results["head_dim_refused"] = status(lambda a: setattr(a, "head_dim", lib.spec["head_dim"] + 8)) == 2
    results["mask_refused"] = status(lambda a: setattr(a, "causal", MASK_NONE if lib.spec["causal"] else MASK_TOP_LEFT)) == 2
    results["negative_window"] = status(lambda a: setattr(a, "window", -1)) == 1
    results["misaligned_refused"] = status(lambda a: setattr(a, "q_seq_stride", a.q_seq_stride + 1)) == 2
    size = ctypes.c_size_t(123)
    a = make_args(case, q, k, v, o, None, 0.125)
    a.q = None  # a size query may carry null pointers
    results["size_query"] = lib.fn(ctypes.byref(a), None, ctypes.byref(size), None) == 0 and size.value == lib.spec["workspace_bytes"]
    torch.cuda.synchronize()
    return results


def run_case(case, libs, timer, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    q, k, v, o = make_inputs(case, gen)
    scale = 1.0 / math.sqrt(case["d"])
    key_mask = padding_mask(case) if case.get("key_mask") else None
    ref, ref_lse = reference(q, k, v, case["mask"], scale, case.get("window", 0), key_mask)
    lse = torch.empty(case["B"], case["H"], case["Sq"], device=DEVICE, dtype=torch.float32)
    native = f"native {case['dtype']} (float32 accumulate and softmax)"
    result = {"name": case["name"], "precision": native if case["dtype"] != "f32" else "float32",
              "shape": {k_: case[k_] for k_ in ("B", "Sq", "Sk", "H", "Hkv", "d")},
              "mask": ["none", "causal_top_left", "causal_bottom_right"][case["mask"]],
              "window": case.get("window", 0), "key_mask": bool(case.get("key_mask", False)),
              "layout": case["layout"], "flop": flops(case), "variants": []}
    for lib in libs:
        if not lib.matches(case):
            continue
        products = lib.spec.get("products", "native")
        var = {"kernel": lib.name, "spec": lib.spec, "precision": PRECISION.get(products, native)}
        args = make_args(case, q, k, v, o, lse, scale, key_mask)
        ws = torch.zeros(max(lib.workspace(args), 16), dtype=torch.uint8, device=DEVICE)
        o.fill_(float("nan"))
        lse.fill_(float("nan"))
        status = lib(args, ws.data_ptr())
        torch.cuda.synchronize()
        if status != 0:
            var["error"] = f"status {status}"
            result["variants"].append(var)
            continue
        var["rel_err"] = rel_err(o, ref)
        var["unwritten"] = int(torch.isnan(o).sum().item())
        var["lse_max_abs_err"] = (lse.double() - ref_lse).abs().nan_to_num(0.0, posinf=1e30, neginf=1e30).max().item() \
            if torch.equal(torch.isinf(lse), torch.isinf(ref_lse)) else float("inf")
        first = o.clone()
        o.fill_(float("nan"))
        lib(args, ws.data_ptr())
        torch.cuda.synchronize()
        var["deterministic"] = bool(torch.equal(first.view(torch.int16), o.view(torch.int16)))
        tol = TOLERANCE[products]
        var["tolerance"] = tol
        var["pass"] = bool(var["rel_err"] < tol and var["unwritten"] == 0 and var["deterministic"]
                           and var["lse_max_abs_err"] < 1e-2)
        if case.get("timed", True):
            ms, lo, hi = timer(lambda: lib(args, ws.data_ptr()))
            var.update(ms=ms, min_ms=lo, max_ms=hi, tflops=flops(case) / ms / 1e9)
        result["variants"].append(var)
        del first
    ok = [v_ for v_ in result["variants"] if v_.get("pass")]
    result["pass"] = bool(ok) and all(v_.get("pass") for v_ in result["variants"])
    if case.get("timed", True) and ok:
        best = min(ok, key=lambda v_: v_["ms"])
        result.update(fact_ms=best["ms"], rel_err=best["rel_err"], tflops=best["tflops"], config=best["kernel"])
        result["baselines"] = {}
        if case["dtype"] == "f32":
            # Per precision: the fastest kernel of each kind of products, against the same baselines.
            for products in sorted({v_["spec"].get("products") for v_ in ok}):
                mine = [v_ for v_ in ok if v_["spec"].get("products") == products]
                fastest = min(mine, key=lambda v_: v_["ms"])
                result.setdefault("fact_by_products", {})[products] = {
                    "ms": fastest["ms"], "kernel": fastest["kernel"], "rel_err": fastest["rel_err"],
                    "tflops": fastest["tflops"]}
            strict = result.get("fact_by_products", {}).get("3xtf32")
            if strict is not None:  # the headline is the strict kernel (the float32 contract)
                result.update(fact_ms=strict["ms"], rel_err=strict["rel_err"], tflops=strict["tflops"],
                              config=strict["kernel"])
            if case["mask"] != MASK_BOTTOM_RIGHT:
                result["baselines"]["torch_written_f32"] = written_baseline(case, q, k, v, scale, ref, timer)
                if "tf32" in result["fact_by_products"]:
                    result["baselines"]["torch_written_tf32"] = written_baseline(case, q, k, v, scale, ref, timer,
                                                                                 tf32=True)
                result["baselines"]["sdpa_efficient"] = sdpa_baseline(case, q, k, v, scale,
                                                                      SDPBackend.EFFICIENT_ATTENTION, ref, timer)
        else:
            backends = [("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)]
            if key_mask is not None:  # flash takes no mask: the memory-efficient backend does
                backends = [backends[0], ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)]
            for key, backend in backends:
                if case["mask"] == MASK_BOTTOM_RIGHT:
                    continue
                result["baselines"][key] = sdpa_baseline(case, q, k, v, scale, backend, ref, timer, key_mask)
        result["speedup"] = {k_: b["ms"] / result["fact_ms"] for k_, b in result["baselines"].items() if "ms" in b}
        if case["dtype"] == "f32":  # the headline (strict) and each kernel: same-precision baselines only
            result["speedup"] = {k_: r for k_, r in result["speedup"].items() if BASELINE_PRECISION[k_] == "3xtf32"}
        for products, mine in result.get("fact_by_products", {}).items():
            mine["speedup"] = {k_: b["ms"] / mine["ms"] for k_, b in result["baselines"].items()
                               if "ms" in b and BASELINE_PRECISION.get(k_) == products}
    elif ok:
        best = ok[0]
        result.update(rel_err=best["rel_err"], config=best["kernel"])
    del q, k, v, o, ref
    torch.cuda.empty_cache()
    return result


def versions():
    v = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    try:
        v["driver"] = subprocess.check_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                              text=True).strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        v["driver"] = "unknown"
    try:
        v["nvcc"] = subprocess.check_output(["nvcc", "--version"], text=True).strip().splitlines()[-2]
    except Exception:  # noqa: BLE001
        v["nvcc"] = "unknown"
    v["cutlass"] = os.environ.get("FACT_CUTLASS_VERSION", "unknown")
    v["fact"] = os.environ.get("FACT_GIT_SHA", "unknown")
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libs", required=True)
    ap.add_argument("--json")
    ap.add_argument("--cases", default="")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--profile", action="store_true",
                    help="one launch of each matching kernel per case, nothing else (for ncu)")
    ap.add_argument("--profile-sdpa", choices=["cudnn", "flash"], default=None,
                    help="with --profile: also one launch of SDPA with this backend per case "
                         "(contiguous [B, H, S, D] inputs), to profile the baseline beside FACT")
    args = ap.parse_args()

    libs = []
    for path in sorted(glob.glob(os.path.join(args.libs, "*.so"))):
        try:
            libs.append(Library(path))
        except Exception as exc:  # noqa: BLE001
            print(f"skip {path}: {exc}", flush=True)
    print(f"{len(libs)} kernel libraries", flush=True)
    timer = Timer(args.iters, args.warmup)
    wanted = [c for c in CASES if not args.cases or c["name"] in args.cases.split(",")]
    if args.profile:
        for i, case in enumerate(wanted):
            gen = torch.Generator(device=DEVICE).manual_seed(args.seed + i)
            q, k, v, o = make_inputs(case, gen)
            for lib in libs:
                if lib.matches(case):
                    a = make_args(case, q, k, v, o, None, 1.0 / math.sqrt(case["d"]))
                    ws = torch.zeros(max(lib.workspace(a), 16), dtype=torch.uint8, device=DEVICE)
                    print(case["name"], lib.name, "status", lib(a, ws.data_ptr()), flush=True)
                    torch.cuda.synchronize()
            if args.profile_sdpa and case["dtype"] != "f32":
                backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[args.profile_sdpa]
                qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(qh, kh, vh, is_causal=case["mask"] == MASK_TOP_LEFT,
                                                   enable_gqa=case["H"] != case["Hkv"])
                torch.cuda.synchronize()
                print(case["name"], "sdpa", args.profile_sdpa, flush=True)
        return 0
    report = {"suite": "attention", "date": datetime.date.today().isoformat(),
              "device": torch.cuda.get_device_name(), "versions": versions(),
              "method": f"CUDA events, L2 flushed (256 MiB memset) before each run, median of {args.iters} "
                        f"after {args.warmup} warm-up; TFLOP/s = 4*B*H*Sq*Sk*d (/2 causal) / time",
              "abi_checks": {}, "cases": []}
    for lib in libs:
        try:
            report["abi_checks"][lib.name] = abi_checks(lib)
        except Exception as exc:  # noqa: BLE001
            report["abi_checks"][lib.name] = {"error": str(exc)}
    print(json.dumps(report["abi_checks"]), flush=True)
    for i, case in enumerate(wanted):
        try:
            res = run_case(case, libs, timer, args.seed + i)
        except Exception as exc:  # noqa: BLE001
            res = {"name": case["name"], "error": repr(exc)[:400], "pass": False}
        report["cases"].append(res)
        print(json.dumps(res), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)

    # Short table last.
    print(f"\n{report['device']}  torch {torch.__version__}")
    print(f"{'case':44s} {'fact ms':>8s} {'TF/s':>6s} {'cudnn':>8s} {'flash':>8s} {'x cudnn':>7s} {'x flash':>7s} {'rel_err':>8s} pass")
    for r in report["cases"]:
        b = r.get("baselines", {})
        cud = b.get("sdpa_cudnn", {}).get("ms")
        fla = b.get("sdpa_flash", {}).get("ms")
        sp = r.get("speedup", {})
        fmt = lambda x, f: (f % x) if isinstance(x, (int, float)) else "-"  # noqa: E731
        print(f"{r['name'][:44]:44s} {fmt(r.get('fact_ms'), '%8.4f'):>8s} {fmt(r.get('tflops'), '%6.0f'):>6s} "
              f"{fmt(cud, '%8.4f'):>8s} {fmt(fla, '%8.4f'):>8s} {fmt(sp.get('sdpa_cudnn'), '%7.3f'):>7s} "
              f"{fmt(sp.get('sdpa_flash'), '%7.3f'):>7s} {fmt(r.get('rel_err'), '%8.1e'):>8s} {r.get('pass')}")
    f32 = [r for r in report["cases"] if r.get("fact_by_products")]
    if f32:
        # Each kernel against the baselines of its precision: 3xTF32 against the float32 written-out
        # attention and SDPA's efficient kernel, TF32 against the written-out one with TF32 allowed.
        print(f"\n{'float32 case':44s} {'products':>8s} {'fact ms':>8s} {'TF/s':>6s} {'written':>8s} {'sdpa eff':>8s} "
              f"{'x writ.':>7s} {'x eff':>7s} {'rel_err':>8s}")
        for r in f32:
            b = r.get("baselines", {})
            for products, mine in r["fact_by_products"].items():
                sp = mine.get("speedup", {})
                written = "torch_written_tf32" if products == "tf32" else "torch_written_f32"
                print(f"{r['name'][:44]:44s} {products:>8s} {fmt(mine['ms'], '%8.4f'):>8s} {fmt(mine['tflops'], '%6.0f'):>6s} "
                      f"{fmt(b.get(written, {}).get('ms'), '%8.4f'):>8s} "
                      f"{fmt(b.get('sdpa_efficient', {}).get('ms') if products != 'tf32' else None, '%8.4f'):>8s} "
                      f"{fmt(sp.get(written), '%7.3f'):>7s} {fmt(sp.get('sdpa_efficient'), '%7.3f'):>7s} "
                      f"{fmt(mine['rel_err'], '%8.1e'):>8s}")
    return 0 if all(r.get("pass") for r in report["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())

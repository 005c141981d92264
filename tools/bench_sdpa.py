#!/usr/bin/env python3
"""PyTorch's numbers next to tests/bench_cuda_loss_attn (run on the GPU machine).

    python3 tools/bench_sdpa.py [--reps N] [--only attn] [--dtype fp32|bf16|fp16]

fp32 with TF32 off (PyTorch's default for matmuls; set explicitly), CUDA:
  - scaled_dot_product_attention forward + backward, B=8, 16 query heads,
    T=512, d=64, causal: with 16 KV heads, and GQA with 8 KV heads
    (enable_gqa=True where this PyTorch has it; else K, V repeated);
  - cross-entropy forward + backward 4096 x 128256 (torch eager
    F.cross_entropy, mean), GB/s on 2 BT V fp32 elements (Liger's measure);
  - F.linear + cross_entropy forward + backward 8192 x 4096 x 32000 and its
    peak extra memory;
  - where the liger_kernel package imports (pip install liger-kernel
    --no-deps: it needs only torch and triton), Liger Kernel's
    cross-entropy, RMSNorm 16384 x 4096 and SwiGLU 16384 x 11008 forward +
    backward, fp32 (the cross-entropy in bf16 too), on the same card in the
    same run, in the bytes that tests/bench_cuda_* count (cross-entropy 2 BT
    V, RMSNorm 5 M N, SwiGLU 8 M N elements).
Medians of --reps runs after warm-up, timed with CUDA events; --only attn
stops after the attention rows, --only liger prints Liger Kernel's rows alone.
--dtype bf16 / fp16 makes the attention rows' Q, K, V and dO that type
(PyTorch's flash SDPA: bench_cuda_loss_attn's bf16 rows); the other rows
stay fp32.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def liger(reps, dev):
    """Liger Kernel's fused ops at bench_cuda_*'s shapes (skipped without it)."""
    try:
        from liger_kernel.transformers import LigerCrossEntropyLoss, LigerRMSNorm
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except Exception as e:  # not installed, or a triton it cannot use
        print(f"| Liger Kernel | not available: {type(e).__name__}: {e} |")
        return
    n, V = 4096, 128256
    t = torch.randint(0, V, (n,), device=dev)
    lce = LigerCrossEntropyLoss()
    for dt, what, size in ((torch.float32, "", 4), (torch.bfloat16, " bf16", 2)):
        x = torch.randn(n, V, device=dev, dtype=dt, requires_grad=True)

        def ce():
            torch.autograd.grad(lce(x, t), x)

        tce = timed(ce, reps)
        print(f"| Liger cross_entropy{what} fwd+bwd | {n}x{V} | {tce:.3f} ms | "
              f"{2 * n * V * size / (tce * 1e-3) / 1e9:.0f} GB/s |")
        del x
    M, N = 16384, 4096
    xn = torch.randn(M, N, device=dev, requires_grad=True)
    rms = LigerRMSNorm(N).to(dev)
    dy = torch.randn(M, N, device=dev)

    def rmsnorm():
        y = rms(xn)
        torch.autograd.grad(y, (xn, rms.weight), dy)

    tr = timed(rmsnorm, reps)
    print(f"| Liger RMSNorm fwd+bwd | {M}x{N} | {tr:.3f} ms | "
          f"{5 * M * N * 4 / (tr * 1e-3) / 1e9:.0f} GB/s |")
    del xn, dy
    M, N = 16384, 11008
    a = torch.randn(M, N, device=dev, requires_grad=True)
    b = torch.randn(M, N, device=dev, requires_grad=True)
    dy = torch.randn(M, N, device=dev)

    def swiglu():
        y = LigerSiLUMulFunction.apply(a, b)
        torch.autograd.grad(y, (a, b), dy)

    ts = timed(swiglu, reps)
    print(f"| Liger SwiGLU fwd+bwd | {M}x{N} | {ts:.3f} ms | "
          f"{8 * M * N * 4 / (ts * 1e-3) / 1e9:.0f} GB/s |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", choices=["attn", "liger"], default=None)
    ap.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="the attention rows' type (default fp32)")
    args = ap.parse_args()
    adt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    print(f"bench_sdpa on {torch.cuda.get_device_name()} (torch {torch.__version__}), "
          f"attention {args.dtype}, the rest fp32")

    if args.only == "liger":
        liger(args.reps, dev)
        return
    B, H, T, D = 8, 16, 512, 64
    for hk in (16, 8):
        q = torch.randn(B, H, T, D, device=dev, dtype=adt, requires_grad=True)
        k = torch.randn(B, hk, T, D, device=dev, dtype=adt, requires_grad=True)
        v = torch.randn(B, hk, T, D, device=dev, dtype=adt, requires_grad=True)
        do = torch.randn(B, H, T, D, device=dev, dtype=adt)

        def attn():
            if hk == H:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            try:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:
                r = H // hk
                return F.scaled_dot_product_attention(
                    q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1), is_causal=True)

        def fwd():
            with torch.no_grad():
                attn()

        def fwd_bwd():
            o = attn()
            torch.autograd.grad(o, (q, k, v), do)

        tf, tfb = timed(fwd, args.reps), timed(fwd_bwd, args.reps)
        tag = "" if args.dtype == "fp32" else " " + args.dtype  # fp32's rows as before
        print(f"| SDPA fwd{tag}, causal, {H}/{hk} heads | {B}x{H}x{T}x{D} | {tf:.3f} ms |")
        print(f"| SDPA fwd+bwd{tag}, causal, {H}/{hk} heads | {B}x{H}x{T}x{D} | {tfb:.3f} ms |")
    if args.only == "attn":
        return

    n, V = 4096, 128256
    x = torch.randn(n, V, device=dev, requires_grad=True)
    t = torch.randint(0, V, (n,), device=dev)

    def ce():
        loss = F.cross_entropy(x, t)
        torch.autograd.grad(loss, x)

    tce = timed(ce, args.reps)
    print(f"| torch eager cross_entropy fwd+bwd | {n}x{V} | {tce:.3f} ms | "
          f"{2 * n * V * 4 / (tce * 1e-3) / 1e9:.0f} GB/s |")
    del x
    liger(args.reps, dev)

    n, K, V = 8192, 4096, 32000
    h = torch.randn(n, K, device=dev, requires_grad=True)
    w = (torch.randn(V, K, device=dev) * 0.02).requires_grad_()
    t = torch.randint(0, V, (n,), device=dev)

    def lce():
        loss = F.cross_entropy(F.linear(h, w), t)
        torch.autograd.grad(loss, (h, w))

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    tl = timed(lce, max(3, args.reps // 4))
    peak = torch.cuda.max_memory_allocated() - base
    print(f"| torch eager linear + cross_entropy fwd+bwd | {n}x{K}x{V} | {tl:.3f} ms | "
          f"peak extra {peak / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main()

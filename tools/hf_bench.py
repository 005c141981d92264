#!/usr/bin/env python3
"""Train a Hugging Face Llama export with graphfuse, side by side with PyTorch.

    python3 tools/hf_bench.py [--preset 160m|vocab32k] [--batch B] [--seq T]
                              [--steps N] [--backend cpu|opencl|cuda[,...]] [--device NAME]
                              [--modes unfused,fused,fused-no-lce,fused-no-attn]
                              [--graphfuse PATH] [--precision fp32|tf32|bf16|fp16]
                              [--torch-compile]

Builds `LlamaForCausalLM` from a config with random weights (no hub download),
exports it with labels through the legacy exporter (opset 17, dynamic batch and
sequence), writes one batch in the ONNX test layout, then runs
`graphfuse train --profile` once per mode and PyTorch eager fp32 on the same
weights and batch, with the same optimizer (AdamW, lr 1e-4, weight decay 0.01).
Prints, per backend and mode: each step's loss and time, the median step time
and tokens/s over the steps after the first two (warm-up; all steps when there
are fewer than four), the planned activation peak (and the device's peak
allocation where graphfuse reports one), and the largest relative loss
difference against PyTorch, whose peak allocated memory (CUDA) and forward-only
time are printed too.  `--backend cuda,opencl` compares backends in one run.

`--precision` (default fp32) is graphfuse's `train --precision` (docs/precision.md)
and PyTorch's matching recipe: fp32 without TF32; tf32 with TF32 GEMMs; bf16 / fp16
under `torch.autocast` with SDPA attention and `AdamW(fused=True)` on a GPU (fp16
with `torch.amp.GradScaler`), the recipe issue 15 measures against.
`--torch-compile` times `torch.compile(model)` too (same precision).

Presets:
  160m      hidden 1024, 8 layers, 16/8 heads, intermediate 2816, vocab 32000
            (the model of the issues), batch 8 x 512 unless given
  vocab32k  hidden 256, 2 layers, 4/2 heads, intermediate 704, vocab 32000,
            batch 4 x 512: the LM-head loss's memory with and without
            LinearCrossEntropy (modes fused,fused-no-lce)

Needs torch, transformers, onnx (the GPU machine and a developer's machine
have them); the test suite never runs this.  Every model parameter is kept
apart in the export (keep_initializers_as_inputs=False, but every norm weight
is perturbed away from ones so that no two initializers hold equal values):
PyTorch and graphfuse then train the same parameter set without --untie.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import transformers
import onnx
from onnx import numpy_helper

PRESETS = {
    "160m": dict(hidden=1024, layers=8, heads=16, kv=8, inter=2816, vocab=32000,
                 batch=8, seq=512),
    "vocab32k": dict(hidden=256, layers=2, heads=4, kv=2, inter=704, vocab=32000,
                     batch=4, seq=512),
}
LR, WD = 1e-4, 0.01


def build(p, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=p["vocab"], hidden_size=p["hidden"], intermediate_size=p["inter"],
        num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
        num_key_value_heads=p["kv"], max_position_embeddings=max(2048, p["seq"]),
        use_cache=False, attention_dropout=0.0)
    m = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, q in m.named_parameters():
            if name.endswith("norm.weight"):  # distinct values: nothing to merge
                q.add_(torch.randn_like(q) * 0.01)
    return m


class WithLabels(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, labels):
        o = self.m(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        return o.loss, o.logits


def batch(p, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, p["vocab"], (p["batch"], p["seq"]), generator=g)
    mask = torch.ones_like(ids)
    labels = ids.clone()
    labels[0, : p["seq"] // 8] = -100  # an unlabelled prefix, as a prompt would be
    return ids, mask, labels


def export(m, p, folder):
    ids, mask, labels = batch(p)
    path = os.path.join(folder, "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(WithLabels(m), (ids, mask, labels), path, dynamo=False,
                          opset_version=17, input_names=["input_ids", "attention_mask", "labels"],
                          output_names=["loss", "logits"],
                          dynamic_axes={k: {0: "batch", 1: "seq"}
                                        for k in ["input_ids", "attention_mask", "labels"]})
    data = os.path.join(folder, "data", "test_data_set_0")
    os.makedirs(data)
    for i, (n, t) in enumerate([("input_ids", ids), ("attention_mask", mask), ("labels", labels)]):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), n).SerializeToString())
    return path, os.path.dirname(data)


LOW = {"bf16": torch.bfloat16, "fp16": torch.float16}


def torch_recipe(precision, dev, compiled=False):
    """How PyTorch runs at this precision, in words."""
    what = "torch.compile" if compiled else "eager"
    if precision in LOW:
        fused = ", fused AdamW" if dev != "cpu" else ""
        scaler = ", GradScaler" if precision == "fp16" else ""
        return f"pytorch {what} {precision} autocast + SDPA{fused}{scaler}"
    return f"pytorch {what} {precision}"


def torch_losses(m, p, steps, dev, precision="fp32", compiled=False):
    ids, mask, labels = (t.to(dev) for t in batch(p))
    m = m.to(dev).train()
    low = LOW.get(precision)
    if low is not None:  # autocast's recipe: SDPA (flash) attention, fused AdamW
        if hasattr(m, "set_attn_implementation"):
            m.set_attn_implementation("sdpa")
        else:
            m.config._attn_implementation = "sdpa"
    opt = torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD,
                            fused=(low is not None and dev != "cpu"))
    scaler = torch.amp.GradScaler(dev) if precision == "fp16" else None
    fn = torch.compile(m) if compiled else m

    def forward():
        with torch.autocast(dev, dtype=low, enabled=low is not None):
            return fn(input_ids=ids, attention_mask=mask, labels=labels).loss

    if dev != "cpu":
        torch.cuda.reset_peak_memory_stats()
    out, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = forward()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if dev != "cpu":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        out.append(loss.item())
    peak = torch.cuda.max_memory_allocated() if dev != "cpu" else None
    fwd = []
    with torch.no_grad():  # forward only, on the trained weights
        for _ in range(5):
            t0 = time.perf_counter()
            forward()
            if dev != "cpu":
                torch.cuda.synchronize()
            fwd.append((time.perf_counter() - t0) * 1e3)
    return out, times, peak, fwd


def steady(ms):
    """Median of the steps after the first two (warm-up), or of all."""
    tail = ms[2:] if len(ms) >= 4 else ms
    return float(np.median(tail)) if tail else float("nan")


MODES = {
    "unfused": ["--no-fuse"],
    "fused": ["--fuse"],
    "fused-no-lce": ["--fuse", "--disable", "linear_cross_entropy"],
    "fused-no-attn": ["--fuse", "--disable", "attention"],
}


def run_graphfuse(gf, model, data, steps, mode, extra):
    cmd = [gf, "train", model, "--data", data, "--steps", str(steps), "--optimizer", "adamw",
           "--lr", str(LR), "--weight-decay", str(WD), "--profile"] + MODES[mode] + extra
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {r.stderr.strip()[-400:]}"
    losses = [float(x) for x in re.findall(r"^step\s+\d+/\d+\s+loss\s+(\S+)", r.stdout, re.M)]
    ms = [float(x) for x in re.findall(r"lr\s+\S+\s+([\d.]+) ms", r.stdout)]
    peak = re.search(r"peak activations (\d+) bytes \(planned block\), workspace (\d+)", r.stdout)
    dev_peak = re.search(r"device memory: peak (\d+) bytes", r.stdout)
    lce = "LinearCrossEntropy" in r.stdout
    backend = re.search(r"^backend: (.*)$", r.stdout, re.M)
    fallback = re.findall(r"^note: \d+ nodes? ran on the CPU.*$", r.stdout, re.M)
    return dict(losses=losses, ms=ms, wall=wall, lce=lce,
                peak=(int(peak.group(1)), int(peak.group(2))) if peak else None,
                backend=backend.group(1) if backend else "?", fallback=fallback,
                dev_peak=int(dev_peak.group(1)) if dev_peak else None,
                stdout=r.stdout), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=PRESETS, default="160m")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--backend", default="cpu", help="one or several, comma-separated")
    ap.add_argument("--device")
    ap.add_argument("--modes", default="unfused,fused")
    ap.add_argument("--graphfuse", default="build/graphfuse")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch run")
    ap.add_argument("--torch-device", default="cpu", help="cpu or cuda (PyTorch's run)")
    ap.add_argument("--keep", help="folder to keep the export in")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--torch-compile", action="store_true",
                    help="time torch.compile(model) too")
    a = ap.parse_args()
    p = dict(PRESETS[a.preset])
    p["batch"] = a.batch or p["batch"]
    p["seq"] = a.seq or p["seq"]
    torch.set_num_threads(os.cpu_count() or 1)
    folder = a.keep or tempfile.mkdtemp(prefix="gf_hf_bench_")
    os.makedirs(folder, exist_ok=True)
    m = build(p)
    n_params = sum(q.numel() for q in m.parameters())
    print(f"model: LlamaForCausalLM {n_params / 1e6:.1f}M parameters, hidden {p['hidden']}, "
          f"{p['layers']} layers, {p['heads']}/{p['kv']} heads, vocab {p['vocab']}; "
          f"batch {p['batch']} x {p['seq']}; AdamW lr {LR} wd {WD}; {a.steps} steps; "
          f"precision {a.precision}")
    t0 = time.perf_counter()
    model, data = export(m, p, folder)
    print(f"export: {model} ({os.path.getsize(model) / 2**20:.0f} MiB) in "
          f"{time.perf_counter() - t0:.0f} s")
    ref = None
    tokens = p["batch"] * p["seq"]
    if not a.no_torch:
        dev = a.torch_device
        if dev != "cpu":  # fp32 as graphfuse computes it; TF32 GEMMs for tf32
            torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
            torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
        where = torch.cuda.get_device_name() if dev != "cpu" else \
            f"cpu, {torch.get_num_threads()} threads"
        for compiled in [False, True] if a.torch_compile else [False]:
            losses, tms, tpeak, tfwd = torch_losses(build(p), p, a.steps, dev, a.precision,
                                                    compiled)
            ref = ref or losses
            med, what = steady(tms), torch_recipe(a.precision, dev, compiled)
            print(f"{what} ({where}): losses "
                  + " ".join(f"{x:.6f}" for x in losses) + "; ms "
                  + " ".join(f"{x:.0f}" for x in tms))
            print(f"{what}: {med:.1f} ms/step, {tokens / med * 1e3:,.0f} tokens/s"
                  + (f", peak allocated {tpeak / 2**30:.2f} GiB" if tpeak else "")
                  + f", forward only {float(np.median(tfwd)):.1f} ms")
    print(f"{'backend':<8} {'mode':<14} {'losses':<40} {'ms/step':<20} {'median':>7} "
          f"{'tokens/s':>9} {'act+ws MB':>9} {'dev GiB':>7} {'LCE':>4} {'max rel vs torch':>16}")
    for backend in a.backend.split(","):
        extra = ["--backend", backend] + (["--device", a.device] if a.device else []) + \
            (["--precision", a.precision] if a.precision != "fp32" else [])
        for mode in a.modes.split(","):
            r, err = run_graphfuse(a.graphfuse, model, data, a.steps, mode, extra)
            if err:
                print(f"{backend:<8} {mode:<14} FAILED {err}")
                continue
            rel = "-"
            if ref and len(r["losses"]) == len(ref):
                rel = f"{max(abs(x - y) / abs(y) for x, y in zip(r['losses'], ref)):.2e}"
            peak = f"{(r['peak'][0] + r['peak'][1]) / 1e6:.1f}" if r["peak"] else "?"
            dev_peak = f"{r['dev_peak'] / 2**30:.2f}" if r["dev_peak"] else "-"
            med = steady(r["ms"])
            print(f"{backend:<8} {mode:<14} {' '.join(f'{x:.6f}' for x in r['losses']):<40} "
                  f"{' '.join(f'{x:.0f}' for x in r['ms']):<20} {med:>7.1f} "
                  f"{tokens / med * 1e3:>9,.0f} {peak:>9} {dev_peak:>7} "
                  f"{'yes' if r['lce'] else 'no':>4} {rel:>16}   [{r['backend']}]")
            for line in r["fallback"]:
                print("    " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Train a Hugging Face Llama on real text with graphfuse and PyTorch, step by step.

    python3 tools/hf_text_run.py [--preset 160m] [--steps 200] [--precision bf16,fp16]
                                 [--backend cuda] [--torch-device cuda] [--text GLOB ...]
                                 [--max-tokens N] [--graphfuse PATH] [--keep DIR]

Issue 15's long run: the text is tokenized to the model's vocabulary, graphfuse
trains on it with `train --tokens` (B rows of T consecutive tokens at offsets drawn
by splitmix64 from --seed, README "graphfuse train") and PyTorch trains the same
weights on the same rows, which this script draws with the same generator.  PyTorch
runs autocast's recipe at the same precision (tools/hf_bench.py: SDPA, fused AdamW,
GradScaler for fp16).  Prints, per precision, both loss curves every 20 steps, the
mean absolute loss difference over the last half of the run as a fraction of
PyTorch's mean loss there (issue 15 asks under 1% for bf16), and for fp16
graphfuse's loss scale and skipped steps next to GradScaler's.

Text: any files (--text, globs); by default the Python standard library's sources
of the interpreter running this (every machine with python3 has them), read in
sorted order up to --max-tokens.  Tokens: words and single punctuation marks
(regex \\w+|[^\\w\\s]); the vocabulary's 31,999 most frequent of them get ids 1..,
everything else id 0 (unknown).  The export takes input_ids and labels only (no
attention mask input: every position is real text, the graph makes a mask of ones).
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_bench  # noqa: E402  (build, PRESETS, LR, WD, torch_recipe)

MASK64 = (1 << 64) - 1


def splitmix64(state):
    """(next state, value): executor/train.c's generator."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def batches(tokens, rows, seq, steps, seed=0):
    """The rows graphfuse's `train --tokens` reads, step by step."""
    starts, state = len(tokens) - seq + 1, seed
    for _ in range(steps):
        b = np.empty((rows, seq), dtype=np.int64)
        for r in range(rows):
            state, z = splitmix64(state)
            s = z % starts
            b[r] = tokens[s:s + seq]
        yield b


def tokenize(files, vocab, max_tokens):
    words, n_read = [], 0
    pat = re.compile(r"\w+|[^\w\s]")
    for f in files:
        n_read += 1
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                words += pat.findall(fh.read())
        except OSError:
            continue
        if len(words) >= max_tokens:
            break
    words = words[:max_tokens]
    ids = {w: i + 1 for i, (w, _) in enumerate(Counter(words).most_common(vocab - 1))}
    tok = np.array([ids.get(w, 0) for w in words], dtype=np.uint16)
    return tok, len(ids), n_read


class WithLabels(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, labels):  # a mask of ones, made in the graph
        mask = torch.ones_like(input_ids)
        return self.m(input_ids=input_ids, attention_mask=mask, labels=labels).loss


def export(m, p, folder):
    ids = torch.zeros((p["batch"], p["seq"]), dtype=torch.int64)
    path = os.path.join(folder, "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(WithLabels(m), (ids, ids.clone()), path, dynamo=False,
                          opset_version=17, input_names=["input_ids", "labels"],
                          output_names=["loss"],
                          dynamic_axes={k: {0: "batch", 1: "seq"} for k in ["input_ids", "labels"]})
    return path


def torch_run(p, tokens, steps, dev, precision):
    m = hf_bench.build(p).to(dev).train()
    low = hf_bench.LOW.get(precision)
    if low is not None:
        if hasattr(m, "set_attn_implementation"):
            m.set_attn_implementation("sdpa")
        else:
            m.config._attn_implementation = "sdpa"
    opt = torch.optim.AdamW(m.parameters(), lr=hf_bench.LR, weight_decay=hf_bench.WD,
                            fused=(low is not None and dev != "cpu"))
    scaler = torch.amp.GradScaler(dev) if precision == "fp16" else None
    losses, skipped = [], 0
    for b in batches(tokens, p["batch"], p["seq"], steps):
        ids = torch.from_numpy(b).to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=low, enabled=low is not None):
            loss = m(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
        if scaler:
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            skipped += scaler.get_scale() < before
        else:
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return losses, skipped, (scaler.get_scale() if scaler else None)


def graphfuse_run(gf, model, tok_file, p, steps, backend, precision, folder):
    log = os.path.join(folder, f"gf_{precision}.csv")
    cmd = [gf, "train", model, "--tokens", tok_file, "--batch", str(p["batch"]),
           "--seq", str(p["seq"]), "--steps", str(steps), "--optimizer", "adamw",
           "--lr", str(hf_bench.LR), "--weight-decay", str(hf_bench.WD), "--fuse",
           "--backend", backend, "--log", log]
    if precision != "fp32":
        cmd += ["--precision", precision]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {r.stderr.strip()[-600:]}"
    rows = [line.split(",") for line in open(log).read().split("\n")[1:] if line]
    losses = [float(x[1]) for x in rows]
    ms = [float(x[4]) for x in rows]
    scale = skipped = None
    if len(rows[0]) >= 8:
        scale, skipped = float(rows[-1][6]), int(rows[-1][7])
    return dict(losses=losses, ms=ms, scale=scale, skipped=skipped, wall=wall), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=hf_bench.PRESETS, default="160m")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--precision", default="bf16,fp16")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--torch-device", default="cuda")
    ap.add_argument("--text", nargs="*")
    ap.add_argument("--max-tokens", type=int, default=4_000_000)
    ap.add_argument("--graphfuse", default="build/graphfuse")
    ap.add_argument("--keep", help="folder to keep the export and tokens in")
    a = ap.parse_args()
    p = dict(hf_bench.PRESETS[a.preset])
    p["batch"] = a.batch or p["batch"]
    p["seq"] = a.seq or p["seq"]
    folder = a.keep or tempfile.mkdtemp(prefix="gf_text_run_")
    os.makedirs(folder, exist_ok=True)

    if a.text:
        files = sorted(f for g in a.text for f in glob.glob(g, recursive=True))
    else:
        files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "**", "*.py"),
                                 recursive=True))
    tok, n_words, n_read = tokenize(files, p["vocab"], a.max_tokens)
    tok_file = os.path.join(folder, "tokens.u16")
    tok.tofile(tok_file)
    unk = float(np.mean(tok == 0))
    print(f"text: {n_read} files ({'--text' if a.text else 'the Python standard library'}),"
          f" {len(tok):,} tokens, {n_words:,} distinct words with ids, {unk:.1%} unknown")

    m = hf_bench.build(p)
    n_params = sum(q.numel() for q in m.parameters())
    model = export(m, p, folder)
    where = torch.cuda.get_device_name() if a.torch_device != "cpu" else "cpu"
    print(f"model: LlamaForCausalLM {n_params / 1e6:.1f}M parameters, batch {p['batch']} x "
          f"{p['seq']}, AdamW lr {hf_bench.LR} wd {hf_bench.WD}, {a.steps} steps; "
          f"graphfuse --backend {a.backend}; PyTorch on {where}")
    if a.torch_device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    status = 0
    for prec in a.precision.split(","):
        g, err = graphfuse_run(a.graphfuse, model, tok_file, p, a.steps, a.backend, prec, folder)
        if err:
            print(f"{prec}: graphfuse FAILED {err}")
            status = 1
            continue
        t_losses, t_skipped, t_scale = torch_run(p, tok, a.steps, a.torch_device, prec)
        n = min(len(g["losses"]), len(t_losses))
        print(f"\n== {prec}: graphfuse vs {hf_bench.torch_recipe(prec, a.torch_device)}")
        print(f"{'step':>5} {'graphfuse':>10} {'pytorch':>10} {'diff':>9}")
        for i in list(range(0, n, 20)) + ([n - 1] if (n - 1) % 20 else []):
            x, y = g["losses"][i], t_losses[i]
            print(f"{i + 1:>5} {x:>10.4f} {y:>10.4f} {x - y:>+9.4f}")
        half = slice(n // 2, n)
        gl, tl = np.array(g["losses"][half]), np.array(t_losses[half])
        rel = float(np.mean(np.abs(gl - tl)) / np.mean(tl))
        print(f"{prec}: last {n - n // 2} steps: mean |loss difference| {np.mean(np.abs(gl - tl)):.4f}"
              f" = {rel:.2%} of PyTorch's mean loss {np.mean(tl):.4f} (graphfuse {np.mean(gl):.4f});"
              f" first loss {t_losses[0]:.4f}, last {t_losses[n - 1]:.4f} / {g['losses'][n - 1]:.4f};"
              f" graphfuse median step {np.median(g['ms'][2:]):.1f} ms")
        if prec == "fp16":
            print(f"fp16: graphfuse loss scale {g['scale']:g}, {g['skipped']} steps skipped; "
                  f"GradScaler {t_scale:g}, {t_skipped} skipped")
    return status


if __name__ == "__main__":
    sys.exit(main())

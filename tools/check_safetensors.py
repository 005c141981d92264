#!/usr/bin/env python3
"""Check graphfuse's trained weights against PyTorch.

    python3 tools/check_safetensors.py [--graphfuse build/graphfuse] [--steps N]
        [--optimizer adamw|sgd] [--lr LR] MODEL_DIR...

MODEL_DIR is an export folder with a loss output:

  models/hf/<arch>/<legacy|dynamo>-labels   a Hugging Face model: rebuilt from
      ../config.json and ../build.json (model class, seed), trained on the
      folder's own test_data_set_0;
  models/<name>/<legacy|dynamo>             a bundled model (llama_tiny,
      gpt2_tiny, mlp): rebuilt by models/export.py, trained on
      models/<name>/train_data.

For each folder:

  1. graphfuse train ... --steps N --save-safetensors W --log A (the float
     initializers export-weights finds no parameter in are frozen, unless
     --default-params: graphfuse's own choice alone);
  2. graphfuse train ... --steps N+1 --log B: its last row is the loss of
     step N+1, before that step's update, i.e. the loss of the weights in W;
  3. PyTorch: the model from its config, W loaded with
     safetensors.torch.load_file + load_state_dict(strict=False); every
     parameter must be loaded (tied names count as loaded through their
     twin; missing / unexpected are listed), except those the folder's
     initializers.txt shows the export does not hold (folded into a
     constant, dropped): listed apart, they keep their initial values; the
     loss of the batch of step N+1, in eval mode (the exports have no
     dropout);
  4. prints both losses and their relative difference; also the loss of
     the untrained weights (export-weights of the model itself) against
     graphfuse's step 1, which tells a naming problem from a training one.

Exit status 0 when every folder agrees within --rtol (default 1e-4) and
every parameter was loaded; 1 otherwise.  Needs torch, transformers (for
models/hf), safetensors and onnx; the C test suite does not use this script.
"""

import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper
import torch
from safetensors.torch import load_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return p.stdout


def last_row(log):
    with open(log) as f:
        rows = list(csv.DictReader(f))
    return int(rows[-1]["step"]), float(rows[-1]["loss"]), float(rows[0]["loss"])


# ---- the model in PyTorch ------------------------------------------------------------

def hf_model(folder):
    import transformers
    top = os.path.dirname(os.path.abspath(folder))
    with open(os.path.join(top, "build.json")) as f:
        build = json.load(f)
    cfg = getattr(transformers, build["config_class"]).from_json_file(
        os.path.join(top, "config.json"))
    torch.manual_seed(build.get("seed", 0))
    model = getattr(transformers, build["model_class"])(cfg)
    with torch.no_grad():  # the export's initial values (bf16-representable fp32)
        for p in model.parameters():
            if p.dtype.is_floating_point:
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return model, folder, "hf"


def bundled_model(folder):
    sys.path.insert(0, os.path.join(REPO, "models"))
    import export  # models/export.py
    name = os.path.basename(os.path.dirname(os.path.abspath(folder)))
    data = os.path.join(os.path.dirname(os.path.abspath(folder)), "train_data")
    return export.make_model(name), data, "bundled"


def make_model(folder):
    top = os.path.dirname(os.path.abspath(folder))
    if os.path.exists(os.path.join(top, "build.json")):
        return hf_model(folder)
    return bundled_model(folder)


def batches(data_dir, graph_inputs):
    """The batches graphfuse cycles through: test_data_set_* in numeric order
    (or the folder's input_*.pb), each a dict input name -> array."""
    sets = sorted(glob.glob(os.path.join(data_dir, "test_data_set_*")),
                  key=lambda p: int(p.rsplit("_", 1)[1]))
    out = []
    for d in sets or [data_dir]:
        files = sorted(glob.glob(os.path.join(d, "input_*.pb")),
                       key=lambda p: int(re.findall(r"(\d+)\.pb$", p)[0]))
        feeds = {}
        for i, path in enumerate(files):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            name = t.name if t.name in graph_inputs else graph_inputs[i]
            feeds[name] = onnx.numpy_helper.to_array(t)
        out.append(feeds)
    return out


def torch_loss(model, kind, feeds, graph_inputs):
    model.eval()
    with torch.no_grad():
        args = [torch.from_numpy(np.array(feeds[n])) for n in graph_inputs]
        if kind == "hf":
            out = model(**dict(zip(graph_inputs, args)))
            return float(out.loss)
        return float(model(*args)[1])


def in_file(folder):
    """The torch names initializers.txt says the export holds as is or
    transposed (None without the file): a parameter missing from the
    safetensors file but not among these was folded or dropped by the
    exporter, so graphfuse cannot train it either."""
    path = os.path.join(folder, "initializers.txt")
    if not os.path.exists(path):
        return None
    names = set()
    with open(path) as f:
        for line in f:
            col = line.rstrip("\n").split("\t")
            if len(col) == 6 and col[3] == "param" and col[5] in ("same", "transposed"):
                names.update(col[4].split("="))
    return names


def load_weights(model, path):
    """load_state_dict(strict=False); returns (missing, unexpected, loaded count),
    a tied parameter counting as loaded when any of its names was."""
    sd = load_file(path)
    res = model.load_state_dict(sd, strict=False)
    names = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    missing = []
    for group in names.values():
        if not any(n in sd for n in group):
            missing.extend(group)
    return missing, list(res.unexpected_keys), len(sd)


# ---- one folder ------------------------------------------------------------------------

def frozen_regex(gf, onnx_path, tmp):
    """^(...)$ of the float initializers export-weights finds no parameter in
    (masks, tables, buffers), or None."""
    out = run([gf, "export-weights", onnx_path, "-o", os.path.join(tmp, "untrained.safetensors"),
               "--list"], "export-weights")
    m = re.search(r"^skipped: [^:]*: (.*)$", out, re.M)
    if not m:
        return None
    names = [n.strip() for n in m.group(1).split(",")]
    return "^(" + "|".join(re.escape(n) for n in names) + ")$"


def check(folder, a):
    onnx_path = os.path.join(folder, "model.onnx")
    model, data, kind = make_model(folder)
    graph_inputs = [i.name for i in onnx.load(onnx_path, load_external_data=False).graph.input]
    with tempfile.TemporaryDirectory() as tmp:
        frozen = frozen_regex(a.graphfuse, onnx_path, tmp)
        common = [a.graphfuse, "train", onnx_path, "--data", data, "--optimizer", a.optimizer]
        if a.lr is not None:
            common += ["--lr", str(a.lr)]
        if frozen and not a.default_params:
            common += ["--freeze", frozen]
        w = os.path.join(tmp, "trained.safetensors")
        run(common + ["--steps", str(a.steps), "--save-safetensors", w,
                      "--log", os.path.join(tmp, "a.csv")], "graphfuse train")
        run(common + ["--steps", str(a.steps + 1), "--log", os.path.join(tmp, "b.csv")],
            "graphfuse train (one step more)")
        step, gf_loss, gf_first = last_row(os.path.join(tmp, "b.csv"))
        feeds = batches(data, graph_inputs)

        # untrained: export-weights of the model itself against graphfuse's step 1
        missing0, unexpected0, _ = load_weights(model, os.path.join(tmp, "untrained.safetensors"))
        pt_first = torch_loss(model, kind, feeds[0], graph_inputs)
        # trained: the weights after N steps against graphfuse's step N+1
        missing, unexpected, n = load_weights(model, w)
        pt_loss = torch_loss(model, kind, feeds[step % len(feeds)], graph_inputs)

    rel0 = abs(gf_first - pt_first) / max(abs(pt_first), 1e-30)
    rel = abs(gf_loss - pt_loss) / max(abs(pt_loss), 1e-30)
    held = in_file(folder)
    lost = [m for m in missing if held is not None and m not in held]
    missing = [m for m in missing if m not in lost]
    ok = rel <= a.rtol and rel0 <= a.rtol and not missing and not unexpected
    print(f"{folder}: {n} tensors loaded; missing {missing or 'none'}; "
          f"unexpected {unexpected or 'none'}")
    if lost:
        print(f"  not in the export (folded or dropped by the exporter, so not trained; "
              f"PyTorch keeps their initial values): {', '.join(lost)}")
    print(f"  untrained: loss graphfuse step 1 {gf_first:.9g}  PyTorch {pt_first:.9g}  "
          f"relative difference {rel0:.3g}")
    print(f"  after {a.steps} {a.optimizer} steps: loss graphfuse step {step + 1} {gf_loss:.9g}  "
          f"PyTorch {pt_loss:.9g}  relative difference {rel:.3g}  {'ok' if ok else 'FAIL'}")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", metavar="MODEL_DIR")
    p.add_argument("--graphfuse", default=os.path.join(REPO, "build", "graphfuse"))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--default-params", action="store_true",
                   help="train what graphfuse picks, without freezing what holds no parameter")
    a = p.parse_args()
    torch.set_num_threads(1)
    results = [check(f.rstrip("/"), a) for f in a.folders]
    print(f"{sum(results)} of {len(results)} agree")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

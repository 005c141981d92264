#!/usr/bin/env python3
"""Per-kernel GPU time of one graphfuse training step, from Nsight Compute.

Runs `graphfuse train MODEL --no-cuda-graph ...` under `ncu --metrics
gpu__time_duration.sum` (every kernel launch timed, caches and clocks left
alone) for 2 and for 3 steps; the launches the 3-step run has past the
2-step run's count are the third step's (the first plans and warms up).
Prints them grouped by kernel: total ms, launches, mean us, share of the
step.  The step's kernels summed is what a CUDA-graph replay of the step
costs at least.

    python3 tools/cuda_profile.py --model /tmp/m160/model.onnx --data /tmp/m160/data \\
        -- --optimizer adamw --lr 1e-4 --weight-decay 0.01 --fuse --precision bf16

Arguments after `--` go to `graphfuse train`.  Needs ncu (the CUDA toolkit's
Nsight Compute) and a CUDA device.
"""
import argparse
import csv
import io
import re
import shutil
import subprocess
import sys
from collections import defaultdict


def kernel_key(name):
    """A kernel's name without its parameter list (template arguments kept)."""
    name = re.sub(r"\(.*$", "", name)
    return re.sub(r"^void ", "", name)[:110]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphfuse", default="build/graphfuse")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="the --data folder of graphfuse train")
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--csv", help="also write ncu's raw CSV (3 steps) here")
    ap.add_argument("rest", nargs="*", help="after --: graphfuse train's options")
    a = ap.parse_args()

    def launches(steps):
        cmd = [a.ncu, "--csv", "--metrics", "gpu__time_duration.sum", "--cache-control",
               "none", "--clock-control", "none", a.graphfuse, "train", a.model, "--data",
               a.data, "--steps", str(steps), "--no-cuda-graph"] + a.rest
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-4000:])
            sys.exit(f"cuda_profile: ncu exited {r.returncode}")
        text = r.stdout
        start = text.find('"ID"')
        if start < 0:
            sys.exit("cuda_profile: no kernel rows in ncu's output (no CUDA kernels ran?)")
        if a.csv:
            with open(a.csv, "w") as f:
                f.write(text[start:])
        return [row for row in csv.DictReader(io.StringIO(text[start:]))
                if row.get("Metric Name") == "gpu__time_duration.sum"]

    before = len(launches(2))
    rows = launches(3)
    if len(rows) <= before:
        sys.exit("cuda_profile: the third step launched no kernels")
    unit = rows[0].get("Metric Unit", "nsecond")
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
    step = rows[before:]
    agg = defaultdict(lambda: [0.0, 0])
    for row in step:
        ms = float(row["Metric Value"].replace(",", "")) * scale
        k = agg[kernel_key(row["Kernel Name"])]
        k[0] += ms
        k[1] += 1
    total = sum(v[0] for v in agg.values())
    print(f"{len(step)} kernel launches in the third step, {total:.3f} ms of GPU time")
    print(f"{'ms':>8} {'share':>6} {'calls':>6} {'us/call':>8}  kernel")
    for name, (ms, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"{ms:8.3f} {100 * ms / total:5.1f}% {n:6d} {1000 * ms / n:8.1f}  {name}")


if __name__ == "__main__":
    main()

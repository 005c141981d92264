#!/usr/bin/env python3
"""graphfuse against ONNX Runtime on the CPU: forward latency, interleaved.

    python3 tools/ort_bench.py [--models llama,gpt2] [--exporters legacy,dynamo]
                               [--model FILE]... [--shapes 1x128,4x512] [--threads 1,2]
                               [--rounds N] [--iterations N] [--warmup N] [--quick]
                               [--graphfuse PATH] [--workdir DIR]
                               [--baseline PATH] [--baseline-env VAR=VALUE]...

Builds the configurations of issue 18 from transformers config objects (random
weights, nothing downloaded): LlamaForCausalLM and GPT2LMHeadModel with hidden
512, 4 layers, 8 heads, vocabulary 32000 (Llama: intermediate 1376, 8 key/value
heads; GPT-2: inner 2048), forward input_ids, attention_mask -> logits, and
exports each the way models/hf_export.py does: the TorchScript exporter
(dynamo=False, opset 17, dynamic batch / sequence axes; one file for every
shape) and the dynamo exporter (dynamo=True, its defaults: static shapes, so
one file per shape).  `--model FILE` (repeatable) times existing files
instead: integer inputs get token ids below the vocabulary of the embedding
they index (attention_mask: ones, position_ids: 0..seq-1), float inputs
random values; the first two dimensions of every input are the shape's batch
and sequence (a static file whose shape differs is skipped for that shape).

For every model, exporter, shape and thread count it times, in `--rounds`
interleaved rounds (the contenders' order rotating from round to round):

  unfused    graphfuse bench FILE --threads T           (a subprocess)
  fused      graphfuse bench FILE --threads T --fuse
  optimized  graphfuse bench OPT --threads T             (OPT: graphfuse optimize FILE)
  ort        onnxruntime, ORT_ENABLE_ALL, intra-op T threads, inter-op 1, sequential,
             in this process: time.perf_counter around sess.run

Each contender makes `--warmup` untimed and `--iterations` timed runs a
round; a round's time is the median of its runs (graphfuse bench's p50).  A
row prints the median over rounds of each contender's time in ms, the
median over rounds of the per-round ratios graphfuse / ORT, and the worst
absolute difference between each graphfuse contender's outputs
(`graphfuse run --output-dir`, same inputs as .pb files, same threads) and
ORT's.  A contender that fails prints its error under the row; the others
go on.  The machine's load average (start and end) and CPU model are
printed: judge only numbers from a quiet machine (load well under the core
count), and compare only numbers from one run.

`--baseline PATH` (another graphfuse build) and/or `--baseline-env VAR=VALUE`
(repeatable; the environment of the baseline's runs, e.g. GF_CPU_SGEMM=0;
the binary is --graphfuse's unless --baseline names one) add two contenders,
the baseline unfused and fused, timed in the same interleaved rounds: a
line under the row gives their ms and ratios to ORT, so that a change is
judged against its baseline under the same load.

`--quick`: 2 rounds of 1 warm-up + 3 timed runs, shapes 1x128 unless
--shapes is given: proves the script works, measures nothing.

Needs torch, transformers, onnx, onnxruntime (numpy); the test suite never
runs this.
"""

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTENDERS = ["unfused", "fused", "optimized", "ort"]
GF = ["unfused", "fused", "optimized"]
BASE = ["base unfused", "base fused"]  # with --baseline / --baseline-env


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "unknown"


def short(e):
    """One line of an error."""
    text = str(e).strip().splitlines()
    text = [t for t in text if t.strip()]
    if text:
        return text[-1][:300]
    return "" if isinstance(e, str) else type(e).__name__


# ---- models -----------------------------------------------------------------------------

def build_model(name):
    import torch
    import transformers
    torch.manual_seed(0)
    if name == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=2048,
            use_cache=False, attention_dropout=0.0)
        m = transformers.LlamaForCausalLM(cfg)
    elif name == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=32000, n_embd=512, n_layer=4, n_head=8, n_inner=2048, n_positions=1024,
            use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            summary_first_dropout=0.0, bos_token_id=31999, eos_token_id=31999)
        m = transformers.GPT2LMHeadModel(cfg)
    else:
        raise ValueError(f"unknown model {name!r} (llama, gpt2)")
    return m.eval()


def export(model, exporter, batch, seq, path):
    """input_ids, attention_mask -> logits, as models/hf_export.py exports."""
    import torch
    fwd = type(model).forward

    def forward(input_ids, attention_mask):
        return fwd(model, input_ids=input_ids, attention_mask=attention_mask).logits

    model.forward = forward  # on the instance: initializer names stay torch's
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    args = (ids, torch.ones_like(ids))
    ins, outs = ["input_ids", "attention_mask"], ["logits"]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), torch.no_grad():
            warnings.simplefilter("ignore")
            if exporter == "legacy":
                dyn = {n: {0: "batch", 1: "seq"} for n in ins + outs}
                torch.onnx.export(model, args, path, dynamo=False, opset_version=17,
                                  input_names=ins, output_names=outs, dynamic_axes=dyn)
            else:
                prog = torch.onnx.export(model, args, dynamo=True, input_names=ins,
                                         output_names=outs, external_data=False)
                prog.save(path, external_data=False)
    finally:
        del model.forward


# ---- inputs -----------------------------------------------------------------------------

ONNX_NP = {onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32,
           onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.BOOL: np.bool_,
           onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.DOUBLE: np.float64}


def vocab_of(m, name):
    """Rows of the initializer a Gather indexes with graph input `name`."""
    inits = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name \
                and n.input[0] in inits:
            return int(inits[n.input[0]].dims[0])
    return None


def make_inputs(m, batch, seq, seed=1):
    """{name: array} for the graph's inputs at batch x seq, or a reason."""
    init_names = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in m.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        dt = ONNX_NP.get(tt.elem_type)
        if dt is None:
            return None, f"input {vi.name}: element type {tt.elem_type} not handled"
        shape = []
        for i, d in enumerate(tt.shape.dim):
            want = batch if i == 0 else seq if i == 1 else None
            if d.HasField("dim_value"):
                if want is not None and d.dim_value != want:
                    return None, (f"input {vi.name} is static {[x.dim_value for x in tt.shape.dim]}"
                                  f", not {batch}x{seq}")
                shape.append(d.dim_value)
            else:
                shape.append(want if want is not None else 1)
        name = vi.name
        if np.issubdtype(dt, np.integer):
            if "mask" in name:
                a = np.ones(shape, dt)
            elif "position" in name:
                a = np.broadcast_to(np.arange(shape[-1] if shape else 1), shape).astype(dt)
            else:
                a = rng.integers(0, vocab_of(m, name) or 2, size=shape).astype(dt)
        elif dt == np.bool_:
            a = np.ones(shape, dt)
        else:
            a = rng.standard_normal(shape).astype(dt)
        feeds[name] = np.ascontiguousarray(a)
    return feeds, None


def write_inputs(feeds, folder):
    args = []
    for i, (name, a) in enumerate(feeds.items()):
        p = os.path.join(folder, f"input_{i}.pb")
        with open(p, "wb") as f:
            f.write(numpy_helper.from_array(a, name).SerializeToString())
        args += ["--input", f"{name}={p}"]
    return args


# ---- contenders -------------------------------------------------------------------------

def gf_bench(gf, path, threads, fuse, inputs, warmup, iters, env=None):
    cmd = [gf, "bench", path, "--threads", str(threads), "--warmup", str(warmup),
           "--iterations", str(iters), "--json"] + inputs + (["--fuse"] if fuse else [])
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **env) if env else None)
    if r.returncode != 0:
        raise RuntimeError(short(r.stderr or r.stdout) or f"exit {r.returncode}")
    j = json.loads(r.stdout[r.stdout.index("{"):])
    return j["latency_ms"]["median"]


def gf_outputs(gf, path, threads, fuse, inputs, folder):
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.unlink(os.path.join(folder, f))
    cmd = [gf, "run", path, "--threads", str(threads), "--output-dir", folder] + inputs \
        + (["--fuse"] if fuse else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(short(r.stderr or r.stdout) or f"exit {r.returncode}")
    outs, k = [], 0
    while os.path.exists(os.path.join(folder, f"output_{k}.pb")):
        t = onnx.TensorProto()
        with open(os.path.join(folder, f"output_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        outs.append(numpy_helper.to_array(t))
        k += 1
    return outs


def ort_session(path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_time(sess, feeds, warmup, iters):
    for _ in range(warmup):
        sess.run(None, feeds)
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def worst_diff(got, ref):
    if len(got) != len(ref):
        raise RuntimeError(f"{len(got)} outputs, ORT has {len(ref)}")
    worst = 0.0
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            raise RuntimeError(f"output shape {list(g.shape)}, ORT {list(r.shape)}")
        if g.size:
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64)))))
    return worst


# ---- one row ----------------------------------------------------------------------------

def fmt(x, f="%.2f"):
    return f % x if isinstance(x, float) else str(x)


def bench_row(a, label, exporter, shape, threads, path, opt_path, opt_err, work):
    batch, seq = shape
    row = dict(model=label, exporter=exporter, shape=f"{batch}x{seq}", threads=threads,
               errors={})
    m = onnx.load(path, load_external_data=False)
    feeds, why = make_inputs(m, batch, seq)
    del m
    if feeds is None:
        row["skip"] = why
        return row
    folder = os.path.join(work, f"in_{batch}x{seq}_{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    inputs = write_inputs(feeds, folder)
    errors = row["errors"]
    if opt_err:
        errors["optimized"] = opt_err
    sess = None
    try:
        sess = ort_session(path, threads)
    except Exception as e:  # noqa: BLE001 - a failing contender is reported, not fatal
        errors["ort"] = short(e)
    files = {"unfused": (path, False), "fused": (path, True), "optimized": (opt_path, False),
             "base unfused": (path, False), "base fused": (path, True)}
    conts = CONTENDERS + (BASE if a.base_env is not None else [])
    times = {c: [] for c in conts}
    for r in range(a.rounds):
        order = conts[r % len(conts):] + conts[:r % len(conts)]
        for c in order:
            if c in errors:
                continue
            try:
                if c == "ort":
                    times[c].append(ort_time(sess, feeds, a.warmup, a.iterations))
                elif c in BASE:
                    p, fuse = files[c]
                    times[c].append(gf_bench(a.baseline or a.graphfuse, p, threads, fuse, inputs,
                                             a.warmup, a.iterations, a.base_env))
                else:
                    p, fuse = files[c]
                    times[c].append(gf_bench(a.graphfuse, p, threads, fuse, inputs,
                                             a.warmup, a.iterations))
            except Exception as e:  # noqa: BLE001
                errors[c] = short(e)
    row["ms"] = {c: statistics.median(v) for c, v in times.items() if v and c not in errors}
    row["ratio"] = {}
    for c in GF + BASE:
        if c in row["ms"] and "ort" in row["ms"]:
            n = min(len(times[c]), len(times["ort"]))
            row["ratio"][c] = statistics.median(times[c][i] / times["ort"][i] for i in range(n))
    row["diff"] = {}
    if sess is not None and "ort" not in errors:
        ref = sess.run(None, feeds)
        for c in GF:
            if c in errors:
                continue
            p, fuse = files[c]
            try:
                got = gf_outputs(a.graphfuse, p, threads, fuse, inputs,
                                 os.path.join(work, f"out_{os.getpid()}"))
                row["diff"][c] = worst_diff(got, ref)
            except Exception as e:  # noqa: BLE001
                row["diff"][c] = "ERR"
                errors[c + " outputs"] = short(e)
    return row


HEAD = ("%-12s %-6s %-6s %3s | %9s %9s %9s %9s | %6s %6s %6s | %s" %
        ("model", "export", "shape", "thr", "unfused", "fused", "optimzd", "ort",
         "unf/o", "fus/o", "opt/o", "max |gf - ort| unf / fus / opt"))


def print_row(row):
    if "skip" in row:
        print("%-12s %-6s %-6s %3s | skipped: %s" % (row["model"], row["exporter"], row["shape"],
                                                    row["threads"], row["skip"]), flush=True)
        return
    ms = [fmt(row["ms"].get(c, "ERR")) for c in CONTENDERS]
    ra = [fmt(row["ratio"].get(c, "-")) for c in GF]
    df = " / ".join(fmt(row["diff"].get(c, "-"), "%.1e") for c in GF)
    print("%-12s %-6s %-6s %3d | %9s %9s %9s %9s | %6s %6s %6s | %s" %
          tuple([row["model"], row["exporter"], row["shape"], row["threads"]] + ms + ra + [df]),
          flush=True)
    if any(c in row["ms"] for c in BASE):
        print("    baseline: " + ", ".join(
            "%s %s ms (%s x ORT)" % (c[5:], fmt(row["ms"].get(c, "ERR")),
                                     fmt(row["ratio"].get(c, "-"))) for c in BASE), flush=True)
    for c, e in row["errors"].items():
        print(f"    {c}: {e}", flush=True)


def optimize(gf, path, out):
    r = subprocess.run([gf, "optimize", path, "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        return short(r.stderr or r.stdout) or f"exit {r.returncode}"
    return None


def parse_shapes(text):
    shapes = []
    for s in text.split(","):
        b, _, t = s.strip().partition("x")
        shapes.append((int(b), int(t)))
    return shapes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="llama,gpt2")
    ap.add_argument("--exporters", default="legacy,dynamo")
    ap.add_argument("--model", action="append", default=[], metavar="FILE",
                    help="time this ONNX file instead of the built models (repeatable)")
    ap.add_argument("--shapes", default=None, help="batch x seq list (default 1x128,4x512)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="timed runs per contender and round (default 10)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="2 rounds of 1 + 3 runs, shapes 1x128 unless given: a smoke test")
    ap.add_argument("--graphfuse", default=os.path.join(REPO, "build", "graphfuse"))
    ap.add_argument("--workdir", default=None, help="keep the exports here (default: a temp dir)")
    ap.add_argument("--baseline", default=None, metavar="PATH",
                    help="a second graphfuse binary, timed in the same rounds")
    ap.add_argument("--baseline-env", action="append", default=[], metavar="VAR=VALUE",
                    help="environment of the baseline's runs (repeatable)")
    a = ap.parse_args()
    a.base_env = None
    if a.baseline or a.baseline_env:
        a.base_env = dict(e.split("=", 1) for e in a.baseline_env)
    q = a.quick
    a.rounds = a.rounds or (2 if q else 7)
    a.iterations = a.iterations or (3 if q else 10)
    a.warmup = a.warmup if a.warmup is not None else (1 if q else 3)
    shapes = parse_shapes(a.shapes or ("1x128" if q else "1x128,4x512"))
    threads = [int(t) for t in a.threads.split(",")]
    if not os.access(a.graphfuse, os.X_OK):
        sys.exit(f"{a.graphfuse}: no graphfuse binary (make, or --graphfuse PATH)")

    import onnxruntime
    print(f"cpu:        {cpu_model()}, {os.cpu_count()} logical cores")
    print(f"load avg:   {loadavg()} (start)")
    print(f"versions:   onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, "
          f"graphfuse {a.graphfuse}")
    if a.base_env is not None:
        print(f"baseline:   {a.baseline or a.graphfuse}"
              + "".join(f" {k}={v}" for k, v in a.base_env.items()))
    print(f"timing:     {a.rounds} interleaved rounds x ({a.warmup} warm-up + {a.iterations} "
          f"timed runs) per contender; ms = median over rounds of each round's median; "
          f"x/o = median of per-round ratios to ORT", flush=True)

    tmp = None
    work = a.workdir
    if not work:
        tmp = tempfile.TemporaryDirectory(prefix="ort_bench_")
        work = tmp.name
    os.makedirs(work, exist_ok=True)

    # (label, exporter, {shape: path or error})
    jobs = []
    if a.model:
        for p in a.model:
            parts = os.path.abspath(p).split(os.sep)
            label = "/".join(parts[-3:-1]) if parts[-1] == "model.onnx" else parts[-1][:-5]
            jobs.append((label, "file", {s: p for s in shapes}))
    else:
        import torch
        torch.set_num_threads(max(1, os.cpu_count() or 1))
        for name in a.models.split(","):
            try:
                model = build_model(name)
            except Exception as e:  # noqa: BLE001
                print(f"{name}: cannot build: {short(e)}", flush=True)
                continue
            for ex in a.exporters.split(","):
                files = {}
                # legacy: dynamic axes, one file; dynamo: static shapes, one per shape
                for s in shapes:
                    tag = "" if ex == "legacy" else f"_{s[0]}x{s[1]}"
                    path = os.path.join(work, f"{name}_{ex}{tag}.onnx")
                    if not os.path.exists(path):
                        t0 = time.time()
                        try:
                            export(model, ex, *(s if ex != "legacy" else (2, 16)), path)
                            print(f"exported {os.path.basename(path)} in {time.time() - t0:.1f} s",
                                  flush=True)
                        except Exception as e:  # noqa: BLE001
                            files[s] = "export failed: " + short(e)
                            continue
                    files[s] = path
                jobs.append((name, ex, files))
            del model

    print(HEAD)
    for label, ex, files in jobs:
        opts = {}
        for s in shapes:
            path = files[s]
            if path.startswith("export failed:"):
                for t in threads:
                    print_row(dict(model=label, exporter=ex, shape=f"{s[0]}x{s[1]}", threads=t,
                                   skip=path))
                continue
            if path not in opts:
                out = os.path.join(work, os.path.basename(path)[:-5] + "_opt.onnx")
                opts[path] = (out, optimize(a.graphfuse, path, out))
            opt_path, opt_err = opts[path]
            for t in threads:
                try:
                    row = bench_row(a, label, ex, s, t, path, opt_path, opt_err, work)
                except Exception as e:  # noqa: BLE001
                    row = dict(model=label, exporter=ex, shape=f"{s[0]}x{s[1]}", threads=t,
                               skip="failed: " + short(e))
                print_row(row)
    print(f"load avg:   {loadavg()} (end)")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks that a graphfuse-optimized model runs in ONNX Runtime and gives the
same outputs as the original: ORT runs the fused nodes through the model-local
functions graphfuse writes (the subgraphs they replaced), or through its own
contrib ops / the standard ops that --target ort / onnx write.

    python3 tests/ort_check.py [--target T] ORIGINAL.onnx OPTIMIZED.onnx [TEST_DATA_DIR]
    python3 tests/ort_check.py --make-models DIR

The second form writes small models in the exporter forms the bundled
models lack (GeGLU, exact GELU, SiLU, decomposed and _expanded LayerNorm,
Gemma RMSNorm, epsilon outside the root, and at opsets 20 / 23 the forms
the targets write as Gelu, BiasGelu, RMSNormalization, RotaryEmbedding) for
run_ort.sh to optimize and check the same way, each with a
test_data_set_0 (random inputs, outputs by ORT from the original) for
graphfuse test.

Inputs come from TEST_DATA_DIR/input_K.pb when given (ONNX test-data
layout), else are made up from the declared shapes (symbolic dims 2, ints in
[0, 8)).  Both files run with graph optimizations off, so ORT computes what
each file says.  Exit 0 when every output agrees (rtol 1e-5, atol 1e-6 as
numpy.allclose), 1 otherwise, 2 on bad usage, 77 when this ORT cannot run
the original (an opset newer than it knows).  Runs onnx.checker on the
optimized file first (full check, model-local functions included) except
for --target ort, whose SimplifiedLayerNormalization is an ORT schema in
the ai.onnx domain that the checker does not know.
"""
import glob
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

RTOL, ATOL = 1e-5, 1e-6


def session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def make_inputs(sess, data_dir):
    if data_dir:
        feeds = {}
        files = sorted(glob.glob(os.path.join(data_dir, "input_*.pb")),
                       key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
        for meta, path in zip(sess.get_inputs(), files):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            feeds[meta.name] = onnx.numpy_helper.to_array(t)
        return feeds
    rng = np.random.default_rng(0)
    feeds = {}
    for meta in sess.get_inputs():
        shape = [d if isinstance(d, int) else 2 for d in meta.shape]
        if "int" in meta.type:
            feeds[meta.name] = rng.integers(0, 8, size=shape).astype(
                np.int64 if "int64" in meta.type else np.int32)
        elif "double" in meta.type:
            feeds[meta.name] = rng.standard_normal(shape)
        elif "float16" in meta.type:
            feeds[meta.name] = rng.standard_normal(shape).astype(np.float16)
        else:
            feeds[meta.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def make_models(out):
    from onnx import TensorProto as T, helper as h

    rng = np.random.default_rng(1)

    def const(name, value):
        return onnx.numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    def save(name, nodes, inits, shape=(2, 3, 8), extra_inputs=(), opset=17, inputs=None,
             outputs=None):
        if inputs is None:
            inputs = [("x", shape)] + [(n, shape) for n in extra_inputs]
        if outputs is None:
            outputs = [("y", shape)]
        graph = h.make_graph(nodes, name,
                             [h.make_tensor_value_info(n, T.FLOAT, list(d)) for n, d in inputs],
                             [h.make_tensor_value_info(n, T.FLOAT, list(d)) for n, d in outputs],
                             inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
        model.ir_version = 8 if opset < 21 else 10
        onnx.checker.check_model(model)
        os.makedirs(os.path.join(out, name), exist_ok=True)
        onnx.save(model, os.path.join(out, name, "model.onnx"))
        write_test_data(os.path.join(out, name))

    w = rng.standard_normal(8).astype(np.float32) * 0.1 + 1
    b = rng.standard_normal(8).astype(np.float32) * 0.1
    n = h.make_node
    # GeGLU with the exact (erf) GELU, x/sqrt(2) form; up operand "u"
    save("geglu_erf", [
        n("Div", ["x", "sqrt2"], ["xs"]), n("Erf", ["xs"], ["e"]),
        n("Add", ["e", "one"], ["p"]), n("Mul", ["x", "p"], ["q"]),
        n("Mul", ["q", "half"], ["g"]), n("Mul", ["g", "u"], ["y"])],
        [const("sqrt2", 1.4142135), const("one", 1.0), const("half", 0.5)],
        extra_inputs=["u"])
    # SiLU alone, sigmoid first
    save("silu", [n("Sigmoid", ["x"], ["s"]), n("Mul", ["s", "x"], ["y"])], [])
    # decomposed LayerNorm (torch before opset 17): Div form, weight, bias
    save("layernorm_decomposed", [
        n("ReduceMean", ["x"], ["mu"], axes=[-1]), n("Sub", ["x", "mu"], ["d"]),
        n("Pow", ["d", "two"], ["sq"]), n("ReduceMean", ["sq"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]),
        n("Div", ["d", "sd"], ["nr"]), n("Mul", ["nr", "w"], ["nw"]),
        n("Add", ["nw", "b"], ["y"])],
        [const("two", 2.0), const("eps", 1e-5), const("w", w), const("b", b)])
    # the LayerNormalization function body (_expanded), Y only: cleanup
    # folds Flatten(w) and Shape(x), the body then reads w reshaped
    save("layernorm_expanded", [
        n("Shape", ["x"], ["xs"]), n("Flatten", ["x"], ["x2"], axis=2),
        n("Cast", ["x2"], ["xu"], to=T.FLOAT), n("ReduceMean", ["xu"], ["m"], axes=[1]),
        n("Mul", ["xu", "xu"], ["sq"]), n("ReduceMean", ["sq"], ["msq"], axes=[1]),
        n("Mul", ["m", "m"], ["m2"]), n("Sub", ["msq", "m2"], ["var"]),
        n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]),
        n("Sub", ["xu", "m"], ["dev"]), n("Div", ["dev", "sd"], ["nr"]),
        n("Flatten", ["w"], ["w2"], axis=0), n("Mul", ["nr", "w2"], ["sc"]),
        n("Flatten", ["b"], ["b2"], axis=0), n("Add", ["sc", "b2"], ["bi"]),
        n("Reshape", ["bi", "xs"], ["y"])],
        [const("eps", 1e-5), const("w", w), const("b", b)])
    # Gemma RMSNorm: (1 + w), rsqrt as Pow(-0.5), weight from a graph input so
    # cleanup cannot fold the Add
    save("rmsnorm_gemma", [
        n("Pow", ["x", "two"], ["sq"]), n("ReduceMean", ["sq"], ["ms"], axes=[-1]),
        n("Add", ["ms", "eps"], ["a"]), n("Pow", ["a", "mhalf"], ["inv"]),
        n("Mul", ["x", "inv"], ["nr"]), n("Add", ["one", "u"], ["w1"]),
        n("Mul", ["nr", "w1"], ["y"])],
        [const("two", 2.0), const("eps", 1e-6), const("mhalf", -0.5), const("one", 1.0)],
        inputs=[("x", (2, 3, 8)), ("u", (8,))])
    # epsilon outside the square root, x * x, no weight
    save("rmsnorm_eps_outside", [
        n("Mul", ["x", "x"], ["sq"]), n("ReduceMean", ["sq"], ["ms"], axes=[-1]),
        n("Sqrt", ["ms"], ["r"]), n("Add", ["r", "eps"], ["d"]),
        n("Div", ["x", "d"], ["y"])], [const("eps", 1e-3)])
    make_target_models(save, const, w)
    return 0


def ints(name, values):
    return onnx.numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def make_target_models(save, const, w):
    """Models in the forms --target ort / onnx write as their own ops, at the
    opsets that have them (RMSNormalization, RotaryEmbedding: 23; Gelu: 20),
    and one RoPE whose tables the targets cannot prove half-symmetric."""
    from onnx import helper as h

    n = h.make_node
    # residual Add + RMSNorm (dynamo: Reciprocal), the sum also an output
    save("add_rmsnorm_23", [
        n("Add", ["x", "r"], ["s"]), n("Pow", ["s", "two"], ["sq"]),
        n("ReduceMean", ["sq", "axes"], ["ms"]), n("Add", ["ms", "eps"], ["a"]),
        n("Sqrt", ["a"], ["rt"]), n("Reciprocal", ["rt"], ["inv"]),
        n("Mul", ["s", "inv"], ["nr"]), n("Mul", ["nr", "w"], ["y"])],
        [const("two", 2.0), const("eps", 1e-6), const("w", w), ints("axes", [-1])],
        extra_inputs=["r"], opset=23, outputs=[("y", (2, 3, 8)), ("s", (2, 3, 8))])
    # RMSNorm without weight, x / sqrt
    save("rmsnorm_noweight_23", [
        n("Mul", ["x", "x"], ["sq"]), n("ReduceMean", ["sq", "axes"], ["ms"]),
        n("Add", ["ms", "eps"], ["a"]), n("Sqrt", ["a"], ["rt"]), n("Div", ["x", "rt"], ["y"])],
        [const("eps", 1e-5), ints("axes", [-1])], opset=23)
    # residual Add + decomposed LayerNorm without weight or bias
    save("add_layernorm_noaffine", [
        n("Add", ["x", "r"], ["s"]),
        n("ReduceMean", ["s"], ["mu"], axes=[-1]), n("Sub", ["s", "mu"], ["d"]),
        n("Pow", ["d", "two"], ["sq"]), n("ReduceMean", ["sq"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Div", ["d", "sd"], ["y"])],
        [const("two", 2.0), const("eps", 1e-5)], extra_inputs=["r"])
    # exact GELU at opset 20, x * (1/sqrt2) form
    save("gelu_erf_20", [
        n("Mul", ["x", "isqrt2"], ["xs"]), n("Erf", ["xs"], ["e"]),
        n("Add", ["e", "one"], ["p"]), n("Mul", ["x", "half"], ["g"]),
        n("Mul", ["g", "p"], ["y"])],
        [const("isqrt2", 0.70710678), const("one", 1.0), const("half", 0.5)], opset=20)
    # linear + bias + exact GELU (ort: MatMul + BiasGelu; onnx: MatMul, Add, Gelu)
    rng = np.random.default_rng(2)
    save("linear_gelu_20", [
        n("MatMul", ["x", "wm"], ["mm"]), n("Add", ["mm", "b"], ["z"]),
        n("Div", ["z", "sqrt2"], ["zs"]), n("Erf", ["zs"], ["e"]),
        n("Add", ["e", "one"], ["p"]), n("Mul", ["z", "p"], ["q"]),
        n("Mul", ["q", "half"], ["y"])],
        [const("wm", rng.standard_normal((8, 16)) * 0.3), const("b", rng.standard_normal(16)),
         const("sqrt2", 1.4142135), const("one", 1.0), const("half", 0.5)],
        opset=20, outputs=[("y", (2, 3, 16))])
    rope_models(save)


def rope_models(save):
    """q [2, 4, 5, 16] rotated by angles t [5, 8] (cos, sin of cat(t, t)),
    and the same with cos / sin given as inputs [5, 16]."""
    from onnx import helper as h

    n = h.make_node
    rot = [n("Slice", ["x", "s0", "s8", "ax"], ["x1"]),
           n("Slice", ["x", "s8", "big", "ax"], ["x2"]),
           n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["rx"], axis=-1),
           n("Mul", ["x", "cu"], ["xc"]), n("Mul", ["rx", "su"], ["xs"]),
           n("Add", ["xc", "xs"], ["y"])]
    consts = [ints("s0", [0]), ints("s8", [8]), ints("big", [2**62]), ints("ax", [-1]),
              ints("u01", [0, 1])]
    xs = (2, 4, 5, 16)
    tables = [n("Concat", ["t", "t"], ["emb"], axis=-1), n("Cos", ["emb"], ["c"]),
              n("Sin", ["emb"], ["s"])]
    unsq = [n("Unsqueeze", ["c", "u01"], ["cu"]), n("Unsqueeze", ["s", "u01"], ["su"])]
    save("rope_23", tables + unsq + rot, consts, opset=23,
         inputs=[("x", xs), ("t", (5, 8))], outputs=[("y", xs)])
    save("rope_tables_given_23", unsq + rot, consts, opset=23,
         inputs=[("x", xs), ("c", (5, 16)), ("s", (5, 16))], outputs=[("y", xs)])


def write_test_data(folder):
    """test_data_set_0: random inputs, the original's outputs by ORT."""
    sess = session(os.path.join(folder, "model.onnx"))
    feeds = make_inputs(sess, None)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for k, meta in enumerate(sess.get_inputs()):
        t = onnx.numpy_helper.from_array(feeds[meta.name], meta.name)
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for k, (meta, v) in enumerate(zip(sess.get_outputs(), sess.run(None, feeds))):
        t = onnx.numpy_helper.from_array(v, meta.name)
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())


def main(argv):
    args = argv[1:]
    if len(args) == 2 and args[0] == "--make-models":
        return make_models(args[1])
    target = "graphfuse"
    if len(args) >= 2 and args[0] == "--target":
        target, args = args[1], args[2:]
    if len(args) not in (2, 3) or target not in ("graphfuse", "ort", "onnx"):
        print(__doc__.strip().splitlines()[5].strip(), file=sys.stderr)
        return 2
    orig, opt = args[0], args[1]
    data_dir = args[2] if len(args) == 3 else None
    if target != "ort":
        onnx.checker.check_model(onnx.load(opt), full_check=True)
    try:
        a = session(orig)
    except Exception as e:  # e.g. an opset this ORT does not implement
        print(f"  skipped: onnxruntime {ort.__version__} cannot run {orig}: "
              f"{str(e).splitlines()[0][:200]}")
        return 77
    b = session(opt)
    feeds = make_inputs(a, data_dir)
    want = a.run(None, feeds)
    got = b.run(None, feeds)
    ok = len(want) == len(got)
    for meta, w, g in zip(a.get_outputs(), want, got):
        close = w.shape == g.shape and np.allclose(g, w, rtol=RTOL, atol=ATOL)
        err = float(np.max(np.abs(g.astype(np.float64) - w))) if w.shape == g.shape and w.size else 0.0
        print(f"  {meta.name}: {'ok' if close else 'DIFFERS'} (max abs diff {err:.3g})")
        ok &= close
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

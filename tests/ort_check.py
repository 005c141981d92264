#!/usr/bin/env python3
"""Checks that a graphfuse-optimized model runs in ONNX Runtime and gives the
same outputs as the original: ORT runs the fused nodes through the model-local
functions graphfuse writes (the subgraphs they replaced).

    python3 tests/ort_check.py ORIGINAL.onnx OPTIMIZED.onnx [TEST_DATA_DIR]
    python3 tests/ort_check.py --make-models DIR

The second form writes small models in the exporter forms the bundled
models lack (GeGLU, exact GELU, SiLU, decomposed and _expanded LayerNorm,
Gemma RMSNorm, epsilon outside the root) for run_ort.sh to optimize and
check the same way.

Inputs come from TEST_DATA_DIR/input_K.pb when given (ONNX test-data
layout), else are made up from the declared shapes (symbolic dims 2, ints in
[0, 8)).  Both files run with graph optimizations off, so ORT computes what
each file says.  Exit 0 when every output agrees (rtol 1e-5, atol 1e-6 as
numpy.allclose), 1 otherwise, 2 on bad usage.  Also runs onnx.checker on the
optimized file (full check, model-local functions included).
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

    def save(name, nodes, inits, shape=(2, 3, 8), extra_inputs=(), opset=17):
        inputs = [h.make_tensor_value_info("x", T.FLOAT, list(shape))]
        inputs += [h.make_tensor_value_info(n, T.FLOAT, list(shape)) for n in extra_inputs]
        graph = h.make_graph(nodes, name, inputs,
                             [h.make_tensor_value_info("y", T.FLOAT, list(shape))], inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        os.makedirs(os.path.join(out, name), exist_ok=True)
        onnx.save(model, os.path.join(out, name, "model.onnx"))

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
        extra_inputs=["u"])
    # epsilon outside the square root, x * x, no weight
    save("rmsnorm_eps_outside", [
        n("Mul", ["x", "x"], ["sq"]), n("ReduceMean", ["sq"], ["ms"], axes=[-1]),
        n("Sqrt", ["ms"], ["r"]), n("Add", ["r", "eps"], ["d"]),
        n("Div", ["x", "d"], ["y"])], [const("eps", 1e-3)])
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--make-models":
        return make_models(argv[2])
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    orig, opt = argv[1], argv[2]
    data_dir = argv[3] if len(argv) == 4 else None
    onnx.checker.check_model(onnx.load(opt), full_check=True)
    a, b = session(orig), session(opt)
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

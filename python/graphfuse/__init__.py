"""graphfuse from Python: optimize, run and train ONNX models.

    import graphfuse, numpy as np
    graphfuse.optimize("model.onnx", "fused.onnx", target="ort")
    s = graphfuse.Session("fused.onnx", backend="cpu")
    out = s.run({"x": np.ones((2, 8), np.float32)})
    t = graphfuse.train("model.onnx", data="train_data", optimizer="adamw", steps=10, lr=1e-3)
    for m in t:
        print(m["step"], m["loss"])
    state = t.weights()          # {PyTorch name: array}, for load_state_dict
    print(graphfuse.dump("model.onnx", format="text"))

A call that fails raises graphfuse.Error with graphfuse's message (it names
the file, input or option).  Reference: docs/python.md.
"""
import ctypes
import json as _json
import os

import numpy as np

from . import _native

__all__ = ["Error", "Session", "Trainer", "optimize", "dump", "train", "load_tensor",
           "version"]

_lib = _native.load()


class Error(RuntimeError):
    """A graphfuse failure; str() is graphfuse's message, .status its gf_status."""

    def __init__(self, message, status=0):
        super().__init__(message)
        self.status = status


def _check(status):
    if status != 0:
        msg = _lib.gf_flat_error()
        raise Error(msg.decode("utf-8", "replace") if msg else f"graphfuse error {status}",
                    status)


def _enc(s):
    return None if s is None else os.fsencode(s)


def version():
    """graphfuse's version ("0.1.0")."""
    return _lib.gf_flat_version().decode()


# ONNX TensorProto.DataType <-> numpy
_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
           7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
           13: np.uint64}
_ONNX_OF = {np.dtype(v): k for k, v in _DTYPES.items()}
_BFLOAT16 = 16


def _array(lst, i):
    """Entry i of a C tensor list, copied into a new numpy array (bfloat16 widened to
    float32, as numpy has no bfloat16)."""
    dt, rank = _lib.gf_flat_list_dtype(lst, i), _lib.gf_flat_list_rank(lst, i)
    dims = _lib.gf_flat_list_dims(lst, i)
    shape = tuple(dims[d] for d in range(rank))
    nbytes = _lib.gf_flat_list_nbytes(lst, i)
    raw = np.empty(nbytes, np.uint8)
    if nbytes:
        ctypes.memmove(raw.ctypes.data, _lib.gf_flat_list_data(lst, i), nbytes)
    if dt == _BFLOAT16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dt not in _DTYPES:
        raise Error(f"tensor '{_lib.gf_flat_list_name(lst, i).decode()}': data type {dt} "
                    "has no numpy type")
    return raw.view(_DTYPES[dt]).reshape(shape)


def _to_dict(lst):
    return {_lib.gf_flat_list_name(lst, i).decode(): _array(lst, i)
            for i in range(_lib.gf_flat_list_count(lst))}


def _take_list(call):
    """Runs call(out_pointer) and returns the C list it made as a dict, freeing it."""
    lst = ctypes.c_void_p()
    _check(call(ctypes.byref(lst)))
    try:
        return _to_dict(lst)
    finally:
        _lib.gf_flat_list_free(lst)


def _take_string(call):
    buf = ctypes.c_void_p()
    _check(call(ctypes.byref(buf)))
    if not buf.value:
        return None
    try:
        return ctypes.string_at(buf.value).decode("utf-8", "replace")
    finally:
        _lib.gf_flat_free(buf)


def load_tensor(path):
    """A TensorProto file (input_0.pb of the ONNX test layout) as a numpy array."""
    return next(iter(_take_list(lambda out: _lib.gf_flat_tensor_load(_enc(path), out))
                     .values()))


class _Handle:
    """A native handle (self._h) closed by close(), by `with`, or when collected;
    the subclass names its closing function in _close."""

    _close = None

    def close(self):
        if getattr(self, "_h", None) is not None and self._h.value:
            type(self)._close(self._h)
        self._h = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Session(_Handle):
    """A model ready to run: Session(path, backend="cpu", precision="fp32").run(feeds).

    backend: "cpu", "opencl", "cuda" or "auto" (None: $GRAPHFUSE_BACKEND, else auto);
    precision: "fp32", "tf32", "bf16", "fp16" (docs/precision.md); fuse=True runs the
    fused graph, as `graphfuse run --fuse`; threads=0: every core.
    """

    _close = staticmethod(lambda h: _lib.gf_flat_session_close(h))

    def __init__(self, path, backend=None, precision=None, fuse=False, threads=0):
        self.path = os.fspath(path)
        self._h = ctypes.c_void_p()
        _check(_lib.gf_flat_session_open(_enc(self.path), _enc(backend), _enc(precision),
                                         int(bool(fuse)), int(threads), ctypes.byref(self._h)))

    @property
    def backend(self):
        return _lib.gf_flat_session_backend(self._h).decode()

    @property
    def inputs(self):
        """[(name, numpy dtype or None, shape with None for a symbolic dim)]."""
        out = []
        for i in range(_lib.gf_flat_session_input_count(self._h)):
            rank = _lib.gf_flat_session_input_rank(self._h, i)
            dims = [_lib.gf_flat_session_input_dim(self._h, i, d) for d in range(max(rank, 0))]
            dt = _DTYPES.get(_lib.gf_flat_session_input_dtype(self._h, i))
            out.append((_lib.gf_flat_session_input_name(self._h, i).decode(),
                        np.dtype(dt) if dt else None,
                        tuple(d if d >= 0 else None for d in dims) if rank >= 0 else None))
        return out

    def run(self, feeds):
        """Runs the model on {input name: array}; returns {output name: array} (copies)."""
        if self._h is None or not self._h.value:
            raise Error(f"{self.path}: the session is closed")
        names, arrays = list(feeds), []
        for n in names:
            a = np.ascontiguousarray(feeds[n])
            if a.dtype not in _ONNX_OF:
                raise Error(f"{self.path}: input '{n}': numpy type {a.dtype} has no ONNX type")
            arrays.append(a)
        n = len(names)
        dims = [d for a in arrays for d in a.shape]
        _check(_lib.gf_flat_session_run(
            self._h, n, (ctypes.c_char_p * n)(*[s.encode() for s in names]),
            (ctypes.c_int * n)(*[_ONNX_OF[a.dtype] for a in arrays]),
            (ctypes.c_int * n)(*[a.ndim for a in arrays]),
            (ctypes.c_int64 * max(len(dims), 1))(*dims),
            (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays])))
        return _to_dict(_lib.gf_flat_session_outputs(self._h))



def optimize(src, dst, target="graphfuse", report=True, precision=None, disable=()):
    """`graphfuse optimize SRC -o DST --target TARGET`: cleanup and fusion, written to dst.

    target: "graphfuse", "ort" or "onnx"; disable: pattern names left out.
    report=True returns the optimize report as a dict (its JSON form), "text" as the
    table graphfuse prints, False returns None.
    """
    as_text = report == "text"
    out = ctypes.c_void_p()
    _check(_lib.gf_flat_optimize(_enc(src), _enc(dst), _enc(target), _enc(precision),
                                 _enc(",".join(disable)) if disable else None,
                                 0 if as_text else 1, ctypes.byref(out) if report else None))
    if not report:
        return None
    try:
        text = ctypes.string_at(out.value).decode("utf-8", "replace")
    finally:
        _lib.gf_flat_free(out)
    return text if as_text else _json.loads(text)


def dump(path, format="text"):
    """`graphfuse dump PATH --format FORMAT`: "text" and "dot" as str, "json" as a dict."""
    text = _take_string(lambda out: _lib.gf_flat_dump(_enc(path), _enc(format), out))
    return _json.loads(text) if format == "json" else text


class Trainer(_Handle):
    """Training in progress: iterate it for per-step metrics (dicts with step, loss,
    grad_norm, lr, ms, tokens, ...); then weights(), save(), save_safetensors()."""

    _close = staticmethod(lambda h: _lib.gf_flat_trainer_close(h))

    def __init__(self, path, **options):
        self.path = os.fspath(path)
        keys, values = [], []
        for k, v in options.items():
            if v is None:
                continue
            if isinstance(v, bool):
                v = int(v)
            keys.append(k.encode())
            values.append(os.fsencode(v) if isinstance(v, os.PathLike) else str(v).encode())
        n = len(keys)
        self._h = ctypes.c_void_p()
        _check(_lib.gf_flat_trainer_open(_enc(self.path), n, (ctypes.c_char_p * n)(*keys),
                                         (ctypes.c_char_p * n)(*values),
                                         ctypes.byref(self._h)))

    @property
    def step_count(self):
        return _lib.gf_flat_trainer_step_count(self._h)

    @property
    def total_steps(self):
        return _lib.gf_flat_trainer_total_steps(self._h)

    def step(self):
        """One optimizer step; its metrics as a dict."""
        stats = (ctypes.c_double * len(_native.STATS))()
        _check(_lib.gf_flat_trainer_step(self._h, stats))
        m = dict(zip(_native.STATS, stats))
        for k in ("step", "tokens", "n_skipped"):
            m[k] = int(m[k])
        for k in ("diverged", "skipped"):
            m[k] = bool(m[k])
        return m

    def __iter__(self):
        while self.step_count < self.total_steps:
            yield self.step()

    def weights(self, names="torch"):
        """The trained weights as {name: array}: names="torch", PyTorch's parameter names
        and layout (for model.load_state_dict); "onnx", the trained initializers as
        stored in the model."""
        if names not in ("torch", "onnx"):
            raise Error(f"weights: names must be 'torch' or 'onnx', not {names!r}")
        return _take_list(lambda out: _lib.gf_flat_trainer_weights(
            self._h, 1 if names == "torch" else 0, out))

    def save(self, path):
        """The model with the trained weights (`graphfuse train -o`)."""
        _check(_lib.gf_flat_trainer_save(self._h, _enc(path)))

    def save_safetensors(self, path):
        """The parameters by PyTorch name (`graphfuse train --save-safetensors`)."""
        _check(_lib.gf_flat_trainer_save_safetensors(self._h, _enc(path)))



def train(path, data=None, optimizer="sgd", steps=100, tokens=None, **options):
    """A Trainer for `graphfuse train PATH --data DATA --optimizer OPT --steps N ...`.

    Every other option of `graphfuse train` is a keyword with '_' for '-' (lr=1e-3,
    weight_decay=0.01, schedule="cosine", fuse=False, backend="cpu", ...).  Iterate
    the result for the per-step metrics; then .weights() gives the trained weights.
    """
    return Trainer(path, data=data, tokens=tokens, optimizer=optimizer, steps=steps,
                   **options)

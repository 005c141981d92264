"""Loading libgraphfuse.so and declaring the flat C API (executor/gf_flat.h).

Only opaque handles, C strings, numbers and arrays cross the boundary, so
nothing here mirrors a graphfuse struct.
"""
import ctypes
import ctypes.util
import os

_c = ctypes
_vp, _cp, _sz, _i, _i64, _d = (_c.c_void_p, _c.c_char_p, _c.c_size_t, _c.c_int,
                               _c.c_int64, _c.c_double)
_pp = _c.POINTER(_c.c_char_p)

# name: (result type, argument types)
_PROTOTYPES = {
    "gf_flat_error": (_cp, []),
    "gf_flat_version": (_cp, []),
    "gf_flat_free": (None, [_vp]),
    "gf_flat_list_count": (_sz, [_vp]),
    "gf_flat_list_name": (_cp, [_vp, _sz]),
    "gf_flat_list_dtype": (_i, [_vp, _sz]),
    "gf_flat_list_rank": (_i, [_vp, _sz]),
    "gf_flat_list_dims": (_c.POINTER(_i64), [_vp, _sz]),
    "gf_flat_list_data": (_vp, [_vp, _sz]),
    "gf_flat_list_nbytes": (_sz, [_vp, _sz]),
    "gf_flat_list_free": (None, [_vp]),
    "gf_flat_tensor_load": (_i, [_cp, _c.POINTER(_vp)]),
    "gf_flat_session_open": (_i, [_cp, _cp, _cp, _i, _i, _c.POINTER(_vp)]),
    "gf_flat_session_close": (None, [_vp]),
    "gf_flat_session_input_count": (_sz, [_vp]),
    "gf_flat_session_input_name": (_cp, [_vp, _sz]),
    "gf_flat_session_input_dtype": (_i, [_vp, _sz]),
    "gf_flat_session_input_rank": (_i, [_vp, _sz]),
    "gf_flat_session_input_dim": (_i64, [_vp, _sz, _i]),
    "gf_flat_session_run": (_i, [_vp, _sz, _pp, _c.POINTER(_i), _c.POINTER(_i),
                                 _c.POINTER(_i64), _c.POINTER(_vp)]),
    "gf_flat_session_outputs": (_vp, [_vp]),
    "gf_flat_session_backend": (_cp, [_vp]),
    "gf_flat_optimize": (_i, [_cp, _cp, _cp, _cp, _cp, _i, _c.POINTER(_vp)]),
    "gf_flat_dump": (_i, [_cp, _cp, _c.POINTER(_vp)]),
    "gf_flat_trainer_open": (_i, [_cp, _sz, _pp, _pp, _c.POINTER(_vp)]),
    "gf_flat_trainer_close": (None, [_vp]),
    "gf_flat_trainer_step_count": (_i64, [_vp]),
    "gf_flat_trainer_total_steps": (_i64, [_vp]),
    "gf_flat_trainer_step": (_i, [_vp, _c.POINTER(_d)]),
    "gf_flat_trainer_weights": (_i, [_vp, _i, _c.POINTER(_vp)]),
    "gf_flat_trainer_save": (_i, [_vp, _cp]),
    "gf_flat_trainer_save_safetensors": (_i, [_vp, _cp]),
}

# enum gf_flat_stat, in order
STATS = ("step", "loss", "grad_norm", "lr", "ms", "tokens", "diverged", "loss_scale",
         "skipped", "n_skipped")


def _candidates():
    """Where the library is looked for, in order (see docs/python.md)."""
    env = os.environ.get("GRAPHFUSE_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, "libgraphfuse.so"),
             os.path.join(here, "..", "..", "build", "libgraphfuse.so")]
    system = ctypes.util.find_library("graphfuse")
    return [p for p in found if os.path.exists(p)] + [system or "libgraphfuse.so"]


def load():
    """The library with every flat entry point declared; OSError if none loads."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        if not hasattr(lib, "gf_flat_error"):
            errors.append(f"{path}: no gf_flat_* functions (a graphfuse older than the "
                          "Python package)")
            continue
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        return lib
    raise OSError("graphfuse: cannot load libgraphfuse.so (set GRAPHFUSE_LIB to its path): "
                  + "; ".join(errors))

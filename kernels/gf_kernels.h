/*
 * gf_kernels.h — backends and the kernel registry.
 *
 *     struct gf_backend *be = gf_backend_get("cpu");
 *     const struct gf_kernel *k = gf_kernel_find(be, node, in, n_in);
 *     struct gf_kernel_args a = {.node = node, .in = in, .n_in = n_in,
 *                                .out = out, .n_out = n_out, .n_threads = 2};
 *     enum gf_status st = k->run(&a);
 *
 * A backend is a small table of functions (memory, copies, sync, devices).
 * A kernel is registered as {op, backend, dtype} -> {supports, run, config
 * space}.  Kernels never allocate: scratch memory is declared through
 * `workspace` and handed in by the executor.  Kernels never walk the graph:
 * they see one node (for its attributes) and dense row-major tensors whose
 * shapes the executor has already computed.
 */
#ifndef GF_KERNELS_H
#define GF_KERNELS_H

#include "gf_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GF_MAX_RANK 8

/* A dense row-major tensor handed to a kernel.  `data` is backend memory:
 * a host pointer for the CPU backend, a cl_mem (a buffer or a sub-buffer
 * holding exactly this tensor) for OpenCL.  NULL marks an omitted optional
 * input or output (and an empty tensor on a device backend).  `host` is a
 * host copy of the same bytes when the executor has one (constants folded
 * while planning, initializers, graph inputs), else NULL; on the CPU it
 * equals `data`.  Device kernels read shape-like inputs (Reshape's shape,
 * Slice's starts) through it and decline the node in `supports` when it is
 * NULL. */
struct gf_tview {
    enum gf_dtype dtype;
    int rank;
    int64_t dims[GF_MAX_RANK];
    size_t nelem;
    void *data;
    const void *host;
};

/* Sets rank/dims/nelem of a view. */
void gf_tview_set_shape(struct gf_tview *t, int rank, const int64_t *dims);
/* Bytes of the view's data. */
size_t gf_tview_bytes(const struct gf_tview *t);

struct gf_backend;
struct gf_device_info;

struct gf_backend_ops {
    const char *name;    /* "cpu", "opencl", ... */
    /* Opens the backend on a device chosen by name (NULL: its default). */
    enum gf_status (*init)(struct gf_backend *be, const char *device);
    void (*free)(struct gf_backend *be);
    /* Device memory; NULL (with gf_error set) when out of memory. */
    void *(*alloc)(struct gf_backend *be, size_t bytes);
    void (*release)(struct gf_backend *be, void *p);
    enum gf_status (*copy_in)(struct gf_backend *be, void *dst, const void *host, size_t n);
    enum gf_status (*copy_out)(struct gf_backend *be, void *host, const void *src, size_t n);
    enum gf_status (*sync)(struct gf_backend *be);
    /* Human-readable name of the device in use. */
    const char *(*device_name)(const struct gf_backend *be);
    /* A handle for bytes [off, off + n) of a block from alloc (the CPU:
     * base + off; OpenCL: a sub-buffer), released with view_release
     * (NULL: nothing to release).  off is a multiple of be->align. */
    void *(*view)(struct gf_backend *be, void *base, size_t off, size_t n);
    void (*view_release)(struct gf_backend *be, void *view);
    /* Device-to-device copy of n bytes. */
    enum gf_status (*copy)(struct gf_backend *be, void *dst, const void *src, size_t n);
    /* Devices this backend can run on, without opening it: fills up to max
     * entries and returns how many exist (0: none, e.g. no OpenCL platform);
     * is_default is the backend's own claim (gf_backend_devices: the
     * registry's view). */
    size_t (*list_devices)(struct gf_device_info *out, size_t max);
    /* Driver/runtime version of the open device (autotune cache key). */
    const char *(*driver_version)(const struct gf_backend *be);
    /* Optional: bytes of device memory the backend holds now and the most
     * it held at once since the device was opened (its own allocations and
     * library workspaces; not the driver's context); NULL: not tracked. */
    void (*memory)(const struct gf_backend *be, uint64_t *now, uint64_t *peak);
    /* Optional graph capture (CUDA Graphs); NULL on a backend without it
     * (the executor then runs node by node).  Between capture_begin and
     * capture_end the kernels and device copies sent to the backend's
     * stream are recorded, not run; alloc, release, sync, copy_in and
     * copy_out are refused then (an error naming the call; capture_end
     * reports it too).  capture_end always ends the capture: *graph is an
     * executable graph (*n_nodes: its nodes), or NULL with gf_error set.
     * graph_launch enqueues one replay on the stream, in order with every
     * other launch and copy; graph_free releases a graph. */
    enum gf_status (*capture_begin)(struct gf_backend *be);
    enum gf_status (*capture_end)(struct gf_backend *be, void **graph, size_t *n_nodes);
    enum gf_status (*graph_launch)(struct gf_backend *be, void *graph);
    void (*graph_free)(struct gf_backend *be, void *graph);
    /* Optional deferred checks (NULL on a backend without them; its kernels
     * then check bad data where they run).  Between checks_begin and
     * checks_end (a run of the executor's session `owner`), a kernel that
     * checks data on the device (an index out of range, a label outside
     * the classes) and has no host copy of it records the first bad
     * position in a slot of device memory instead of waiting for the
     * answer: it needs no host copy and no synchronization, so a CUDA graph
     * may hold it.  Each slot is registered (per owner, node and check)
     * with what its message needs.  checks_begin enqueues the reset of the
     * slots; checks_end enqueues their copy to the host; checks_report,
     * once the stream has finished, returns the error (the kernel's own
     * message: node, tensor, position, value) of the first registered slot
     * of owner that found bad data, else GF_OK; checks_release forgets
     * owner's slots (a session freed). */
    enum gf_status (*checks_begin)(struct gf_backend *be, const void *owner);
    enum gf_status (*checks_end)(struct gf_backend *be);
    enum gf_status (*checks_report)(struct gf_backend *be);
    void (*checks_release)(struct gf_backend *be, const void *owner);
};

/* One device as `graphfuse backends` lists it. */
struct gf_device_info {
    char platform[128];
    char name[256];
    char driver[64];
    uint64_t memory;      /* bytes of global memory */
    int compute_units;
    bool is_gpu;
    /* `--backend auto` may pick this backend on this device; false: opt-in
     * there, it runs only when asked for by name (docs/backends.md) */
    bool is_default;
};

struct gf_backend {
    const struct gf_backend_ops *ops;
    int n_threads;     /* host threads kernels may use (CPU backend) */
    size_t align;      /* offsets handed to view() are multiples of this */
    bool host_memory;  /* data pointers are host memory (the CPU backend) */
    void *priv;
};

/* The backend named `name` on its default device, opened on first use;
 * NULL if unknown or unavailable.  NULL names the CPU backend. */
struct gf_backend *gf_backend_get(const char *name);
/* Opens a backend for a run.  name: a backend's name ("cpu", "opencl"),
 * "auto", or NULL for $GRAPHFUSE_BACKEND (else "auto").  "auto" takes the
 * first device, in the registry's order, that a backend is the default on
 * and that is a GPU, else the CPU.  device: chosen by (a substring of) its
 * name, NULL for the default.  A backend asked for by name that is
 * unavailable (not built, no platform, no such device) is an error naming
 * what is missing; never a fallback.  Backends stay open until exit. */
enum gf_status gf_backend_open(const char *name, const char *device, struct gf_backend **out);
/* Name of the i-th backend the registry lists, built or not (NULL past the
 * last): `graphfuse backends` walks them. */
const char *gf_backend_name(size_t i);
/* Devices of backend `name`, without opening it: fills up to max entries
 * and returns how many exist (0: none, or the backend is not built;
 * gf_backend_open says why).  is_default as "auto" sees it. */
size_t gf_backend_devices(const char *name, struct gf_device_info *out, size_t max);
/* Every backend compiled in, available or not, in the registry's order. */
const struct gf_backend_ops *const *gf_backend_all(size_t *n);

/* One configuration knob of a tunable kernel (used by the autotuner). */
struct gf_config_knob {
    const char *name;
    int n_values;
    const int *values;   /* values[0] is the safe default */
};

struct gf_kernel_args {
    const struct gf_node *node;  /* for attributes and messages */
    const struct gf_tview *in;   /* n_in inputs, in node order */
    size_t n_in;
    struct gf_tview *out;        /* n_out outputs, shapes already set */
    size_t n_out;
    void *workspace;             /* `workspace(args)` bytes, or NULL */
    const int *config;           /* one value per knob; NULL: defaults */
    int n_threads;
    struct gf_backend *backend;
    /* bit i: input i keeps its bytes for the plan's life (an initializer of
     * an inference plan, a constant folded while planning); set for
     * `prepared_size` and `prepare` only */
    uint64_t fixed_in;
    /* what `prepare` made of the fixed inputs for this node, or NULL */
    const void *prepared;
};

struct gf_kernel {
    enum gf_op op;
    const char *backend;  /* "cpu", ... */
    enum gf_dtype dtype;  /* element type of input 0 it handles; GF_UNDEFINED: any */
    const char *impl;     /* implementation name, for profiles and the tuner */
    /* Optional: false when this kernel cannot run this node (an attribute
     * or dtype combination it lacks).  NULL means "always". */
    bool (*supports)(const struct gf_node *n, const struct gf_tview *in, size_t n_in);
    /* Optional: scratch bytes needed for these arguments. */
    size_t (*workspace)(const struct gf_kernel_args *a);
    /* Computes the outputs.  Bad data (an index out of range, integer
     * division by zero) is GF_ERR_INVALID with a message naming the node. */
    enum gf_status (*run)(const struct gf_kernel_args *a);
    /* Optional, host-memory backends: bytes of a copy of fixed inputs
     * (a->fixed_in) in the layout `run` reads fastest (a weight packed into
     * the GEMM's panels), 0 for none.  The executor calls it once a plan,
     * with the plan's views, then `prepare` to fill that many bytes
     * (64-byte aligned, the executor's, freed with the plan), and hands
     * them to every run of the plan as a->prepared.  `run` must give the
     * same results without them (a->prepared NULL: training, the tuner). */
    size_t (*prepared_size)(const struct gf_kernel_args *a);
    void (*prepare)(const struct gf_kernel_args *a, void *prepared);
    size_t n_knobs;
    const struct gf_config_knob *knobs;
};

/* First registered kernel of `be` for this node and these inputs, or NULL. */
const struct gf_kernel *gf_kernel_find(const struct gf_backend *be, const struct gf_node *n,
                                       const struct gf_tview *in, size_t n_in);
/* Every kernel registered for op on backend (for the tuner), count in *n. */
const struct gf_kernel *const *gf_kernel_list(const char *backend, enum gf_op op, size_t *n);

/* Runs fn(ctx, begin, end) over [0, n) split into chunks on up to
 * n_threads threads (the calling thread included); grain is the smallest
 * chunk worth a thread. */
void gf_parallel_for(int n_threads, size_t n, size_t grain,
                     void (*fn)(void *ctx, size_t begin, size_t end), void *ctx);
/* n_threads, or 1 while gf_parallel_for's pool is put aside on a busy
 * machine (kernels/registry.c): how many threads a BLAS call may take. */
int gf_parallel_width(int n_threads);

#ifdef __cplusplus
}
#endif
#endif /* GF_KERNELS_H */

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

/* A dense row-major tensor handed to a kernel.  `data` is backend memory
 * (a host pointer for the CPU backend); NULL marks an omitted optional
 * input or output. */
struct gf_tview {
    enum gf_dtype dtype;
    int rank;
    int64_t dims[GF_MAX_RANK];
    size_t nelem;
    void *data;
};

/* Sets rank/dims/nelem of a view. */
void gf_tview_set_shape(struct gf_tview *t, int rank, const int64_t *dims);
/* Bytes of the view's data. */
size_t gf_tview_bytes(const struct gf_tview *t);

struct gf_backend;

struct gf_backend_ops {
    const char *name;    /* "cpu", "opencl", "cuda" */
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
};

struct gf_backend {
    const struct gf_backend_ops *ops;
    int n_threads;   /* host threads kernels may use (CPU backend) */
    void *priv;
};

/* The backend named `name`, opened on first use; NULL if unknown. */
struct gf_backend *gf_backend_get(const char *name);

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

#ifdef __cplusplus
}
#endif
#endif /* GF_KERNELS_H */

/*
 * backend.h — what a backend folder (kernels/cpu, kernels/opencl, ...)
 * exports to the registry, and the helpers every backend's kernels share.
 * Internal to kernels/; docs/backends.md says how to add a backend.
 *
 *     // kernels/<name>/tables.c: the kernel tables, in lookup order
 *     const struct gf_kernel_table *const gf_<name>_tables[] = {
 *         &gf_<name>_layout_table, ..., NULL};
 *     // kernels/<name>/backend.c: the descriptor
 *     const struct gf_backend_desc gf_<name>_backend = {
 *         .name = "<name>", .ops = &<name>_ops, .open = <name>_open,
 *         .is_default_on = <name>_is_default_on,
 *         .tables = gf_<name>_tables};
 *     // kernels/registry.c: one line in BACKENDS
 *
 * No backend includes another backend's headers: what they share lives in
 * kernels/ (this file, checks.h) and graph/ (opcheck.h: per-op rules that
 * shape inference uses too).
 */
#ifndef GF_BACKEND_H
#define GF_BACKEND_H

#include "gf_kernels.h"

/* A backend's kernels of one family (one file), as the registry walks them. */
struct gf_kernel_table {
    const struct gf_kernel *kernels;
    size_t count;
};

/* One backend, as its folder exports it. */
struct gf_backend_desc {
    const char *name;                /* "cpu", "opencl", ...: --backend NAME */
    /* Memory, copies, devices (ops->list_devices: every device it can run
     * on, without opening it, each with is_default = is_default_on(it)).
     * NULL for a backend the build left out (`missing` says why). */
    const struct gf_backend_ops *ops;
    /* Opens the backend on the device whose name contains `device` (NULL:
     * the first device it is the default on, else its first).  Asked twice
     * for one device, it returns the same backend, kept open until exit.
     * Unavailable (no driver, no such device): GF_ERR_UNSUPPORTED, the
     * message naming what is missing and what exists. */
    enum gf_status (*open)(const char *device, struct gf_backend **out);
    /* Whether `--backend auto` may pick this backend on device d (one of
     * its list_devices); false: opt-in there, it runs only when asked for
     * by name.  The registry also makes a backend opt-in on a device that
     * a backend listed before it claims (same device name). */
    bool (*is_default_on)(const struct gf_device_info *d);
    const struct gf_kernel_table *const *tables; /* in lookup order, NULL last */
    const char *missing; /* a backend the build left out: what it lacks */
};

/* Error naming the node: "node 'x' (Op): message". */
enum gf_status gf_kernel_error(const struct gf_kernel_args *a, enum gf_status st,
                               const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* GF_BACKEND_H */

/*
 * gf_tune.h — the autotuner: which kernel, and which configuration of its
 * knobs, runs a node fastest on a device; winners cached in a YAML file.
 *
 *     struct gf_tuner *t;
 *     gf_tuner_open(NULL, &t);             // ~/.cache/graphfuse/autotune.yaml
 *     for (size_t i = 0; i < gf_tuner_warning_count(t); i++)
 *         fprintf(stderr, "warning: %s\n", gf_tuner_warning(t, i));
 *     struct gf_tune_choice c;
 *     if (!gf_tuner_lookup(t, be, node, in, n_in, out, n_out, &c, NULL)) {
 *         struct gf_tune_result r;
 *         if (gf_tuner_tune(t, be, node, in, n_in, out, n_out, NULL, &r) == GF_OK)
 *             c = r.choice;                // also recorded in t
 *     }
 *     ... run c.kernel with .config = c.config ...
 *     gf_tuner_save(t);                    // merges into the file, atomically
 *     gf_tuner_free(t);
 *
 * Tuning one node is self-contained: the tuner allocates the node's
 * inputs, outputs and workspace on the backend, fills the inputs with
 * reproducible random values (inputs whose view has `host` values take
 * those: initializers, shapes), and computes the reference output with the
 * default kernel (the first gf_kernel_find returns, config NULL; the CPU
 * kernel when CPU kernels compete too).  Every candidate (a kernel whose
 * `supports` accepts the node, times a configuration of its knobs) first
 * runs once on output buffers filled with NaN and must reproduce the
 * reference (max |got - ref| <= tol * max |ref|, NaN where the reference
 * has NaN; integers exactly); a wrong or failing candidate is rejected and
 * counted.  The others are timed: warm-up runs, then the median of
 * `repeats` samples, each sample running the kernel enough times to last
 * `sample_ms`, synchronized before the clock stops; the default stays
 * unless a candidate is at least 3% faster.  Large spaces are sampled:
 * every kernel's default configuration plus random others up to `budget`.
 *
 * The cache (YAML, human readable) holds one entry per key: device name,
 * driver version, graphfuse version, backend, op and domain, input dtypes,
 * input and output shapes (outputs tell apart what shape-like inputs such
 * as Reshape's decide) and the node's attributes.  Entries of other
 * devices and versions are kept when saving (a file may be shared) but
 * not used; those of another graphfuse version are reported once as
 * stale.  A damaged file (YAML error, wrong types) or one that is not a
 * graphfuse cache is reported as one warning naming the file and line and
 * treated as empty; it is replaced only when new entries are saved, and
 * then kept as FILE.bak.  A directory or an unreadable path is reported
 * and not used.  Saving takes an flock() on FILE.lock (left in place),
 * re-reads the file, merges (this tuner's entries replace those with the
 * same key), writes FILE.tmp.XXXXXX (created exclusively, with FILE's
 * mode), fsyncs and renames: two processes tuning at once both keep their
 * entries.
 */
#ifndef GF_TUNE_H
#define GF_TUNE_H

#include "gf_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GF_TUNE_MAX_KNOBS 8

struct gf_tuner;

/* A kernel and one value per knob (config[i] among knobs[i].values). */
struct gf_tune_choice {
    const struct gf_kernel *kernel;
    int config[GF_TUNE_MAX_KNOBS];
};

struct gf_tune_opts {
    int budget;          /* configurations tried per node, defaults included; 0: 64 */
    int repeats;         /* timed samples per candidate (the median counts); 0: 7 */
    int warmup;          /* untimed runs after the check run; 0: 2 */
    double sample_ms;    /* a sample repeats the kernel until it lasts this long; 0: 1 */
    uint64_t seed;       /* random inputs and sampling of large spaces; 0: 1 */
    bool with_cpu;       /* on a device backend, CPU kernels compete too (their time
                            includes copying the inputs out and the outputs back) */
    /* called after each candidate: done of total candidates of this node */
    void (*progress)(void *ctx, size_t done, size_t total);
    void *progress_ctx;
};

struct gf_tune_result {
    struct gf_tune_choice choice;   /* the fastest correct candidate */
    struct gf_tune_choice fallback; /* the default: first kernel found, default config */
    double best_ms, default_ms;     /* median time of one run of each */
    size_t n_space;                 /* configurations of every supporting kernel */
    size_t n_tried;                 /* candidates run (<= budget) */
    size_t n_rejected;              /* wrong output */
    size_t n_failed;                /* the kernel returned an error (e.g. too many
                                       work-items for the device) */
    double worst_err;               /* largest relative error of an accepted candidate */
    bool cached;                    /* from the cache, not measured now */
};

/* A tuner with the cache file `path` (NULL: $GRAPHFUSE_TUNE_CACHE, else
 * $XDG_CACHE_HOME/graphfuse/autotune.yaml, else ~/.cache/graphfuse/...).
 * A missing file is an empty cache; a bad one gives a warning.  Fails only
 * when out of memory. */
enum gf_status gf_tuner_open(const char *path, struct gf_tuner **out);
void gf_tuner_free(struct gf_tuner *t);
/* The cache file in use. */
const char *gf_tuner_path(const struct gf_tuner *t);
/* Warnings so far (damaged, foreign or stale cache, entries naming a
 * kernel or value that no longer exists): one line each, naming the file. */
size_t gf_tuner_warning_count(const struct gf_tuner *t);
const char *gf_tuner_warning(const struct gf_tuner *t, size_t i);

/* The cached choice for this node on this backend and device; false when
 * there is none (or it names a kernel or value that no longer exists).
 * `in` and `out` describe the tensors (dtype, shape; data not read; an
 * omitted one is a zeroed view, dtype GF_UNDEFINED).  `cached` (may be NULL) receives the entry's
 * times and counts, with .cached set.  The kernel may be a CPU kernel
 * on a device backend (tuned with opts.with_cpu). */
bool gf_tuner_lookup(struct gf_tuner *t, struct gf_backend *be, const struct gf_node *n,
                     const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                     size_t n_out, struct gf_tune_choice *c, struct gf_tune_result *cached);
/* Tunes the node among gf_kernel_list(be) (and the CPU's with
 * opts->with_cpu) and records the winner in t (not yet on disk).  `out`
 * gives the output shapes.  opts NULL: defaults.  GF_ERR_UNSUPPORTED when
 * no kernel supports the node; an error when the reference fails. */
enum gf_status gf_tuner_tune(struct gf_tuner *t, struct gf_backend *be, const struct gf_node *n,
                             const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                             size_t n_out, const struct gf_tune_opts *opts,
                             struct gf_tune_result *res);
/* Writes the entries recorded since open into the file (see above);
 * nothing to write is GF_OK.  GF_ERR_IO names the file. */
enum gf_status gf_tuner_save(struct gf_tuner *t);
/* Entries recorded since open (not yet saved or saved). */
size_t gf_tuner_recorded(const struct gf_tuner *t);

/* Candidates the node has on be: configurations of every kernel of
 * gf_kernel_list whose dtype and supports() accept it (1: nothing to
 * tune). */
size_t gf_tune_count_candidates(const struct gf_backend *be, const struct gf_node *n,
                                const struct gf_tview *in, size_t n_in);

/* ---- tuning a session's plan (graphfuse tune) ----------------------------------
 *
 *     gf_session_plan(s, n_in, inputs);    // plans as gf_session_run does
 *     struct gf_tune_site site;
 *     for (size_t i = 0; gf_session_tune_site(s, i, &site); i++)
 *         if (!gf_tuner_lookup(t, site.be, site.node, site.in, site.n_in, site.out,
 *                              site.n_out, &c, NULL))
 *             gf_tuner_tune(t, site.be, site.node, site.in, site.n_in, site.out,
 *                           site.n_out, NULL, &r);
 *
 * The sites are the nodes whose kernel the plan looks up in the cache,
 * with the views it looks them up with: tuning them keys the cache
 * exactly as a run of the session with those input shapes reads it.
 * Nodes folded into constants while planning are no sites. */

struct gf_session;

struct gf_tune_site {
    struct gf_backend *be;         /* the session's backend */
    const struct gf_node *node;
    size_t n_in, n_out;
    struct gf_tview in[64], out[64];
    size_t n_candidates;           /* configurations of the backend's kernels for it; 1 on
                                      a device backend: only CPU kernels may compete */
};
/* Sites of the session's last plan (0 before one). */
size_t gf_session_tune_count(const struct gf_session *s);
/* Site i in schedule order; false past the last. */
bool gf_session_tune_site(const struct gf_session *s, size_t i, struct gf_tune_site *site);

/* ---- the pieces, for tests and tools ------------------------------------------- */

/* Configurations of k: the product of its knobs' value counts (1 without
 * knobs). */
size_t gf_tune_space_size(const struct gf_kernel *k);
/* Configuration number i of k (0: every knob's default; knob 0 varies
 * fastest) into config[k->n_knobs]. */
void gf_tune_config_at(const struct gf_kernel *k, size_t i, int *config);
/* "tile_m=64 tile_n=32" ("default" without knobs) into buf; returns buf. */
char *gf_tune_format_config(const struct gf_kernel *k, const int *config, char *buf,
                            size_t len);
/* Shapes as the cache writes them: "4096x4096,4096x4096->4096x4096";
 * "scalar"; "-" for an omitted tensor; without "->..." when out is NULL. */
char *gf_tune_format_shapes(const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                            size_t n_out, char *buf, size_t len);

/* The tuning core over an explicit kernel list: the candidates are the
 * configurations of kernels[0..n_kernels) (each on the backend its
 * `backend` names: be, or the CPU), the reference and the default is
 * `ref` with config NULL.  Records nothing. */
enum gf_status gf_tune_node(struct gf_backend *be, const struct gf_node *n,
                            const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                            size_t n_out, const struct gf_kernel *const *kernels,
                            size_t n_kernels, const struct gf_kernel *ref,
                            const struct gf_tune_opts *opts, struct gf_tune_result *res);
/* Records res->choice for the node in t (what gf_tuner_tune does after
 * tuning). */
enum gf_status gf_tuner_record(struct gf_tuner *t, struct gf_backend *be,
                               const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                               const struct gf_tview *out, size_t n_out,
                               const struct gf_tune_result *res);
/* gf_tuner_lookup resolving the cached kernel by impl name in
 * kernels[0..n_kernels) instead of the registry. */
bool gf_tuner_lookup_in(struct gf_tuner *t, struct gf_backend *be, const struct gf_node *n,
                        const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                        size_t n_out, const struct gf_kernel *const *kernels, size_t n_kernels,
                        struct gf_tune_choice *c, struct gf_tune_result *cached);

#ifdef __cplusplus
}
#endif
#endif /* GF_TUNE_H */

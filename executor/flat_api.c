/*
 * flat_api.c — the flat C API of gf_flat.h: each entry point does what one
 * CLI subcommand does (cli/graphfuse.c, cli/train.c), with handles and plain
 * arrays in and out, for callers that cannot mirror C structs (ctypes).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gf_exec.h"
#include "gf_flat.h"
#include "gf_graph.h"
#include "gf_passes.h"

const char *gf_flat_error(void) { return gf_last_error(); }
const char *gf_flat_version(void) { return GF_VERSION; }
void gf_flat_free(void *p) { free(p); }

/* ---- tensor lists ----------------------------------------------------------- */

struct flat_entry {
    const char *name;
    int dtype, rank;
    const int64_t *dims;
    const void *data;
    size_t nbytes;
};

/* Entries either borrowed (a session's outputs) or owned: then every name,
 * dims array and data block is a malloc'ed copy. */
struct flat_list {
    size_t n, cap;
    struct flat_entry *e;
    int owned;
};

size_t gf_flat_list_count(const void *l) { return l ? ((const struct flat_list *)l)->n : 0; }

static const struct flat_entry *entry(const void *l, size_t i)
{
    const struct flat_list *fl = l;
    return fl && i < fl->n ? &fl->e[i] : NULL;
}

const char *gf_flat_list_name(const void *l, size_t i)
{
    const struct flat_entry *e = entry(l, i);
    return e ? e->name : NULL;
}
int gf_flat_list_dtype(const void *l, size_t i)
{
    const struct flat_entry *e = entry(l, i);
    return e ? e->dtype : 0;
}
int gf_flat_list_rank(const void *l, size_t i)
{
    const struct flat_entry *e = entry(l, i);
    return e ? e->rank : 0;
}
const int64_t *gf_flat_list_dims(const void *l, size_t i)
{
    const struct flat_entry *e = entry(l, i);
    return e ? e->dims : NULL;
}
const void *gf_flat_list_data(const void *l, size_t i)
{
    const struct flat_entry *e = entry(l, i);
    return e ? e->data : NULL;
}
size_t gf_flat_list_nbytes(const void *l, size_t i)
{
    const struct flat_entry *e = entry(l, i);
    return e ? e->nbytes : 0;
}

static void list_clear(struct flat_list *l)
{
    for (size_t i = 0; l->owned && i < l->n; i++) {
        free((void *)l->e[i].name);
        free((void *)l->e[i].dims);
        free((void *)l->e[i].data);
    }
    l->n = 0;
}

void gf_flat_list_free(void *list)
{
    struct flat_list *l = list;
    if (!l)
        return;
    list_clear(l);
    free(l->e);
    free(l);
}

static struct flat_entry *list_add(struct flat_list *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        struct flat_entry *e = realloc(l->e, cap * sizeof(*e));
        if (!e)
            return NULL;
        l->e = e;
        l->cap = cap;
    }
    memset(&l->e[l->n], 0, sizeof(l->e[0]));
    return &l->e[l->n++];
}

/* Appends a copy of t under `name` (t's data transposed when transpose and
 * t is 2-D: PyTorch's [out, in] of a Linear weight stored [in, out]). */
static enum gf_status list_add_copy(struct flat_list *l, const char *name,
                                    const struct gf_tensor *t, bool transpose)
{
    struct flat_entry *e = list_add(l);
    if (!e)
        return gf_error(GF_ERR_NOMEM, "out of memory copying '%s'", name);
    int64_t *dims = malloc((size_t)(t->rank ? t->rank : 1) * sizeof(*dims));
    void *data = malloc(t->nbytes ? t->nbytes : 1);
    char *nm = strdup(name);
    *e = (struct flat_entry){nm, (int)t->dtype, t->rank, dims, data, t->nbytes};
    if (!dims || !data || !nm)
        return gf_error(GF_ERR_NOMEM, "out of memory copying '%s'", name);
    transpose = transpose && t->rank == 2 && gf_dtype_size(t->dtype) > 0;
    for (int d = 0; d < t->rank; d++)
        dims[d] = transpose ? t->dims[1 - d] : t->dims[d];
    if (!transpose) {
        memcpy(data, t->data, t->nbytes);
        return GF_OK;
    }
    size_t es = gf_dtype_size(t->dtype), rows = (size_t)t->dims[0], cols = (size_t)t->dims[1];
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            memcpy((char *)data + (c * rows + r) * es, (const char *)t->data + (r * cols + c) * es,
                   es);
    return GF_OK;
}

static struct flat_list *list_new(int owned)
{
    struct flat_list *l = calloc(1, sizeof(*l));
    if (l)
        l->owned = owned;
    else
        gf_error(GF_ERR_NOMEM, "out of memory");
    return l;
}

int gf_flat_tensor_load(const char *path, void **list)
{
    *list = NULL;
    struct gf_model *m = gf_model_new(9, "tensor"); /* an arena for the tensor */
    struct flat_list *l = list_new(1);
    struct gf_tensor *t;
    enum gf_status st = m && l ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory");
    if (st == GF_OK)
        st = gf_tensor_load(m, path, &t);
    if (st == GF_OK && t->dtype == GF_STRING)
        st = gf_error(GF_ERR_UNSUPPORTED, "%s: string tensors are not supported", path);
    if (st == GF_OK)
        st = list_add_copy(l, t->name && *t->name ? t->name : path, t, false);
    gf_model_free(m);
    if (st != GF_OK) {
        gf_flat_list_free(l);
        return st;
    }
    *list = l;
    return GF_OK;
}

/* ---- sessions ------------------------------------------------------------------- */

struct flat_session {
    char *path;
    struct gf_model *m;
    struct gf_session *s;
    struct gf_tensor *in;  /* the last run's inputs (views of the caller's data) */
    int64_t *dims;         /* their dims */
    struct flat_list outs; /* borrowed from the session */
};

static const char *const run_opt_in[] = {"attention"};

/* The autocast pass, then (fuse) cleanup and fusion as `graphfuse run
 * --precision P --fuse` do them. */
static enum gf_status prepare_model(struct gf_model *m, const char *path, const char *precision,
                                    int fuse)
{
    enum gf_precision p = GF_PRECISION_FP32;
    if (precision && !gf_precision_parse(precision, &p))
        return gf_error(GF_ERR_ARG, "unknown precision '%s' (fp32, tf32, bf16 or fp16)",
                        precision);
    enum gf_status st = gf_pass_precision(m, p, NULL);
    if (st == GF_OK && fuse) {
        struct gf_fuse_opts fo = {.enabled = run_opt_in, .n_enabled = 1};
        st = gf_graph_infer_shapes(m->graph);
        if (st == GF_OK)
            st = gf_pass_cleanup(m->graph, &(struct gf_cleanup_opts){.eval = gf_exec_eval_node},
                                 NULL);
        if (st == GF_OK)
            st = gf_pass_fuse(m, &fo, NULL);
    }
    if (st != GF_OK)
        gf_error_prefix(path);
    return st;
}

void gf_flat_session_close(void *session)
{
    struct flat_session *fs = session;
    if (!fs)
        return;
    gf_session_free(fs->s);
    gf_model_free(fs->m);
    free(fs->in);
    free(fs->dims);
    free(fs->outs.e);
    free(fs->path);
    free(fs);
}

int gf_flat_session_open(const char *path, const char *backend, const char *precision,
                         int fuse, int n_threads, void **session)
{
    *session = NULL;
    struct flat_session *fs = calloc(1, sizeof(*fs));
    if (!fs || !(fs->path = strdup(path))) {
        free(fs);
        return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    struct gf_exec_opts o = {.backend = backend, .n_threads = n_threads < 0 ? 0 : n_threads};
    enum gf_status st = gf_model_load(path, NULL, &fs->m);
    if (st == GF_OK)
        st = prepare_model(fs->m, path, precision, fuse);
    if (st == GF_OK && (st = gf_session_new(fs->m, &o, &fs->s)) != GF_OK)
        gf_error_prefix(path);
    if (st != GF_OK) {
        gf_flat_session_close(fs);
        return st;
    }
    *session = fs;
    return GF_OK;
}

size_t gf_flat_session_input_count(const void *session)
{
    return gf_session_input_count(((const struct flat_session *)session)->s);
}

static const struct gf_value *session_input(const void *session, size_t i)
{
    const struct flat_session *fs = session;
    return i < gf_session_input_count(fs->s) ? gf_session_input(fs->s, i) : NULL;
}

const char *gf_flat_session_input_name(const void *session, size_t i)
{
    const struct gf_value *v = session_input(session, i);
    return v ? v->name : NULL;
}
int gf_flat_session_input_dtype(const void *session, size_t i)
{
    const struct gf_value *v = session_input(session, i);
    return v && v->type.kind == GF_TYPE_TENSOR ? (int)v->type.dtype : 0;
}
int gf_flat_session_input_rank(const void *session, size_t i)
{
    const struct gf_value *v = session_input(session, i);
    return v && v->type.kind == GF_TYPE_TENSOR ? v->type.rank : -1;
}
int64_t gf_flat_session_input_dim(const void *session, size_t i, int d)
{
    const struct gf_value *v = session_input(session, i);
    if (!v || v->type.kind != GF_TYPE_TENSOR || d < 0 || d >= v->type.rank)
        return -1;
    return v->type.dims[d].value;
}

/* Views the caller's arrays as the session's inputs, in its order. */
static enum gf_status bind_inputs(struct flat_session *fs, size_t n, const char *const *names,
                                  const int *dtypes, const int *ranks, const int64_t *dims,
                                  const void *const *data)
{
    size_t n_in = gf_session_input_count(fs->s), n_dims = 0;
    for (size_t k = 0; k < n; k++)
        n_dims += ranks[k] > 0 ? (size_t)ranks[k] : 0;
    free(fs->in);
    free(fs->dims);
    fs->in = calloc(n_in ? n_in : 1, sizeof(*fs->in));
    fs->dims = malloc((n_dims ? n_dims : 1) * sizeof(*fs->dims));
    if (!fs->in || !fs->dims)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    if (n_dims)
        memcpy(fs->dims, dims, n_dims * sizeof(*dims));
    for (size_t k = 0, off = 0; k < n; off += ranks[k] > 0 ? (size_t)ranks[k] : 0, k++) {
        size_t i = 0;
        while (i < n_in && strcmp(gf_session_input(fs->s, i)->name, names[k]) != 0)
            i++;
        if (i == n_in)
            return gf_error(GF_ERR_ARG, "%s: the model has no input '%s'", fs->path, names[k]);
        if (fs->in[i].name)
            return gf_error(GF_ERR_ARG, "%s: input '%s' given twice", fs->path, names[k]);
        if (!gf_dtype_valid(dtypes[k]) || dtypes[k] == GF_STRING || ranks[k] < 0)
            return gf_error(GF_ERR_ARG, "%s: input '%s': unsupported data type %d or rank %d",
                            fs->path, names[k], dtypes[k], ranks[k]);
        size_t nelem = 1;
        for (int d = 0; d < ranks[k]; d++)
            nelem *= (size_t)fs->dims[off + (size_t)d];
        fs->in[i] = (struct gf_tensor){.name = gf_session_input(fs->s, i)->name,
                                       .dtype = (enum gf_dtype)dtypes[k], .rank = ranks[k],
                                       .dims = fs->dims + off, .nelem = nelem,
                                       .nbytes = gf_dtype_bytes((enum gf_dtype)dtypes[k], nelem),
                                       .data = (void *)data[k]};
    }
    for (size_t i = 0; i < n_in; i++)
        if (!fs->in[i].name)
            return gf_error(GF_ERR_ARG, "%s: input '%s' is missing", fs->path,
                            gf_session_input(fs->s, i)->name);
    return GF_OK;
}

int gf_flat_session_run(void *session, size_t n, const char *const *names, const int *dtypes,
                        const int *ranks, const int64_t *dims, const void *const *data)
{
    struct flat_session *fs = session;
    fs->outs.n = 0;
    enum gf_status st = bind_inputs(fs, n, names, dtypes, ranks, dims, data);
    if (st != GF_OK)
        return st;
    size_t n_in = gf_session_input_count(fs->s), n_out;
    struct gf_tensor **ptrs = malloc((n_in ? n_in : 1) * sizeof(*ptrs)), **outs;
    if (!ptrs)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_in; i++)
        ptrs[i] = &fs->in[i];
    st = gf_session_run(fs->s, n_in, ptrs, &outs, &n_out);
    free(ptrs);
    if (st != GF_OK) {
        gf_error_prefix(fs->path);
        return st;
    }
    for (size_t i = 0; i < n_out; i++) {
        struct flat_entry *e = list_add(&fs->outs);
        if (!e)
            return gf_error(GF_ERR_NOMEM, "out of memory");
        const struct gf_tensor *t = outs[i];
        const char *name = fs->m->graph->outputs[i]->name;
        *e = (struct flat_entry){name, (int)t->dtype, t->rank, t->dims, t->data, t->nbytes};
    }
    return GF_OK;
}

const void *gf_flat_session_outputs(const void *session)
{
    return &((const struct flat_session *)session)->outs;
}

const char *gf_flat_session_backend(const void *session)
{
    return gf_session_backend(((const struct flat_session *)session)->s);
}

/* ---- optimize and dump ------------------------------------------------------------ */

static size_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

/* Splits a comma-separated list in place into at most cap names. */
static size_t split_list(char *s, const char **out, size_t cap)
{
    size_t n = 0;
    char *save = NULL;
    for (char *t = s ? strtok_r(s, ",", &save) : NULL; t && n < cap;
         t = strtok_r(NULL, ",", &save))
        out[n++] = t;
    return n;
}

/* Text written to a memory stream, or NULL after recording an error. */
static FILE *mem_open(char **buf, size_t *len)
{
    FILE *f = open_memstream(buf, len);
    if (!f)
        gf_error(GF_ERR_NOMEM, "out of memory: %s", strerror(errno));
    return f;
}

static enum gf_status optimize_in_memory(struct gf_model *m, const char *src,
                                         const struct gf_fuse_opts *fo,
                                         struct gf_fuse_report *rep, struct gf_cleanup_stats *cs)
{
    enum gf_status st = gf_graph_infer_shapes(m->graph);
    if (st == GF_OK)
        st = gf_pass_cleanup(m->graph, &(struct gf_cleanup_opts){.eval = gf_exec_eval_node}, cs);
    if (st == GF_OK)
        st = gf_pass_fuse(m, fo, rep);
    if (st != GF_OK)
        gf_error_prefix(src);
    return st;
}

static enum gf_status print_report(struct gf_fuse_report *rep, int json, char **report)
{
    size_t len;
    FILE *f = mem_open(report, &len);
    if (!f)
        return GF_ERR_NOMEM;
    gf_fuse_report_print(rep, f, json != 0);
    return fclose(f) == 0 ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory");
}

int gf_flat_optimize(const char *src, const char *dst, const char *target,
                     const char *precision, const char *disable, int json, char **report)
{
    if (report)
        *report = NULL;
    struct gf_fuse_opts fo = {.target = GF_TARGET_GRAPHFUSE};
    if (target && !gf_fuse_target_parse(target, &fo.target))
        return gf_error(GF_ERR_ARG, "unknown target '%s' (graphfuse, ort or onnx)", target);
    enum gf_precision p = GF_PRECISION_FP32;
    if (precision && !gf_precision_parse(precision, &p))
        return gf_error(GF_ERR_ARG, "unknown precision '%s' (fp32, tf32, bf16 or fp16)",
                        precision);
    char *list = disable ? strdup(disable) : NULL;
    const char *names[128];
    fo.disabled = names;
    fo.n_disabled = split_list(list, names, 128);
    struct gf_model *m = NULL;
    struct gf_op_census input = {0};
    struct gf_fuse_report rep;
    struct gf_cleanup_stats cs;
    memset(&rep, 0, sizeof(rep));
    enum gf_status st = gf_model_load(src, NULL, &m);
    if (st == GF_OK)
        st = gf_op_census_take(&input, m->graph);
    if (st == GF_OK && (st = gf_pass_precision(m, p, NULL)) != GF_OK)
        gf_error_prefix(src);
    if (st == GF_OK)
        st = optimize_in_memory(m, src, &fo, &rep, &cs);
    if (st == GF_OK)
        st = gf_model_save(m, dst, NULL);
    if (st == GF_OK && report) {
        /* as `graphfuse optimize`: the table compares the output file with the input */
        gf_op_census_free(&rep.before);
        rep.before = input;
        input = (struct gf_op_census){0};
        rep.bytes_before = file_size(src);
        rep.bytes_after = file_size(dst);
        rep.have_cleanup = true;
        rep.cleanup = cs;
        st = print_report(&rep, json, report);
    }
    gf_op_census_free(&input);
    gf_fuse_report_free(&rep);
    gf_model_free(m);
    free(list);
    return st;
}

int gf_flat_dump(const char *path, const char *format, char **text)
{
    *text = NULL;
    enum gf_dump_format fmt = GF_DUMP_TEXT;
    if (format && !gf_dump_format_parse(format, &fmt))
        return gf_error(GF_ERR_ARG, "unknown dump format '%s' (text, dot or json)", format);
    struct gf_model *m;
    enum gf_status st = gf_model_load(path, NULL, &m);
    if (st != GF_OK)
        return st;
    if ((st = gf_graph_infer_shapes(m->graph)) != GF_OK)
        gf_error_prefix(path);
    size_t len;
    FILE *f = st == GF_OK ? mem_open(text, &len) : NULL;
    if (st == GF_OK && !f)
        st = GF_ERR_NOMEM;
    if (f) {
        st = gf_model_dump(m, fmt, f);
        if (fclose(f) != 0 && st == GF_OK)
            st = gf_error(GF_ERR_NOMEM, "out of memory");
    }
    if (st != GF_OK) {
        free(*text);
        *text = NULL;
    }
    gf_model_free(m);
    return st;
}

/* ---- training ------------------------------------------------------------------------ */

struct flat_trainer {
    struct gf_trainer *t;
    struct gf_data *d;
    struct gf_trainer_opts to;
    struct gf_token_opts tk;
    const char *data, *tokens, *resume, *precision;
    char **strings; /* copies of the option values the options point into */
    size_t n_strings;
};

void gf_flat_trainer_close(void *trainer)
{
    struct flat_trainer *ft = trainer;
    if (!ft)
        return;
    gf_data_free(ft->d);
    gf_trainer_free(ft->t);
    for (size_t i = 0; i < ft->n_strings; i++)
        free(ft->strings[i]);
    free(ft->strings);
    free(ft);
}

/* "--weight-decay", "weight_decay" -> "weight_decay" into buf. */
static void option_key(const char *k, char *buf, size_t cap)
{
    while (*k == '-')
        k++;
    size_t n = 0;
    for (; *k && n + 1 < cap; k++)
        buf[n++] = *k == '-' ? '_' : *k;
    buf[n] = 0;
}

static bool parse_real(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_int(const char *s, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo)
        return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, bool *out)
{
    if (strcmp(s, "1") == 0 || strcmp(s, "true") == 0 || strcmp(s, "True") == 0)
        *out = true;
    else if (strcmp(s, "0") == 0 || strcmp(s, "false") == 0 || strcmp(s, "False") == 0)
        *out = false;
    else
        return false;
    return true;
}

/* Options whose value is a string the trainer keeps (v: the handle's copy). */
static bool string_option(struct flat_trainer *ft, const char *k, const char *v)
{
    static const char *const names[] = {"data", "tokens", "resume", "precision", "loss",
                                        "trainable", "freeze", "untie", "disable", "backend",
                                        "device", "tune_cache"};
    const char **dst[] = {&ft->data, &ft->tokens, &ft->resume, &ft->precision, &ft->to.loss,
                          &ft->to.trainable, &ft->to.freeze, &ft->to.untie, &ft->to.disable,
                          &ft->to.exec.backend, &ft->to.exec.device, &ft->to.exec.tune_cache};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(k, names[i]) == 0) {
            *dst[i] = v;
            return true;
        }
    return false;
}

static double *real_option(struct flat_trainer *ft, const char *k)
{
    struct gf_optim_opts *o = &ft->to.optim;
    static const char *const names[] = {"lr", "momentum", "dampening", "beta1", "beta2", "eps",
                                        "weight_decay", "clip_grad_norm", "min_lr",
                                        "loss_scale"};
    double *dst[] = {&o->lr, &o->momentum, &o->dampening, &o->beta1, &o->beta2, &o->eps,
                     &o->weight_decay, &ft->to.clip_grad_norm, &ft->to.min_lr,
                     &ft->to.loss_scale};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(k, names[i]) == 0)
            return dst[i];
    return NULL;
}

static int64_t *int_option(struct flat_trainer *ft, const char *k, int64_t *lo)
{
    static const char *const names[] = {"steps", "warmup", "batch", "seq", "vocab",
                                        "loss_scale_window"};
    static const int64_t mins[] = {0, 0, 1, 1, 1, 1};
    int64_t *dst[] = {&ft->to.steps, &ft->to.warmup, &ft->tk.batch, &ft->tk.seq, &ft->tk.vocab,
                      &ft->to.loss_scale_window};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(k, names[i]) == 0) {
            *lo = mins[i];
            return dst[i];
        }
    return NULL;
}

/* Options with a value of their own kind, and the flags. */
static enum gf_status other_option(struct flat_trainer *ft, const char *k, const char *v)
{
    int64_t n;
    bool b;
    bool *flag = strcmp(k, "fuse") == 0       ? &ft->to.fuse
                 : strcmp(k, "nesterov") == 0 ? &ft->to.optim.nesterov
                 : strcmp(k, "no_tie") == 0   ? &ft->to.no_tie
                 : strcmp(k, "no_cuda_graph") == 0 ? &ft->to.exec.no_cuda_graph
                 : strcmp(k, "autotune") == 0 ? &ft->to.exec.autotune
                                              : NULL;
    if (flag) {
        if (!parse_bool(v, &b))
            return gf_error(GF_ERR_ARG, "train option %s: bad value '%s' (true or false)", k, v);
        *flag = b;
    } else if (strcmp(k, "accumulate") == 0 || strcmp(k, "threads") == 0) {
        if (!parse_int(v, 1, &n) || n > 1 << 20)
            return gf_error(GF_ERR_ARG, "train option %s: bad count '%s' (1 or more)", k, v);
        *(k[0] == 'a' ? &ft->to.accumulate : &ft->to.exec.n_threads) = (int)n;
    } else if (strcmp(k, "seed") == 0) {
        if (!parse_int(v, 0, &n))
            return gf_error(GF_ERR_ARG, "train option seed: bad seed '%s'", v);
        ft->tk.seed = (uint64_t)n;
    } else if (strcmp(k, "token_bytes") == 0) {
        if (!parse_int(v, 2, &n) || (n != 2 && n != 4))
            return gf_error(GF_ERR_ARG, "train option token_bytes: bad value '%s' (2 or 4)", v);
        ft->tk.token_bytes = (int)n;
    } else if (strcmp(k, "max_memory") == 0) {
        if (!parse_int(v, 0, &n))
            return gf_error(GF_ERR_ARG, "train option max_memory: bad size '%s' (bytes)", v);
        ft->to.exec.max_memory = (size_t)n;
    } else if (strcmp(k, "schedule") == 0) {
        if (strcmp(v, "constant") == 0)
            ft->to.schedule = GF_LR_CONSTANT;
        else if (strcmp(v, "cosine") == 0)
            ft->to.schedule = GF_LR_COSINE;
        else
            return gf_error(GF_ERR_ARG, "train option schedule: unknown schedule '%s' "
                            "(constant or cosine)", v);
    } else if (strcmp(k, "optimizer") != 0) { /* read first, by the caller */
        return gf_error(GF_ERR_ARG, "unknown train option '%s'", k);
    }
    return GF_OK;
}

static enum gf_status set_option(struct flat_trainer *ft, const char *key, const char *v)
{
    char k[64];
    double *r;
    int64_t *ip, lo, n;
    option_key(key, k, sizeof(k));
    if (string_option(ft, k, v))
        return GF_OK;
    if ((r = real_option(ft, k)))
        return parse_real(v, r) ? GF_OK
                                : gf_error(GF_ERR_ARG, "train option %s: bad number '%s'", k, v);
    if ((ip = int_option(ft, k, &lo))) {
        if (!parse_int(v, lo, &n))
            return gf_error(GF_ERR_ARG, "train option %s: bad value '%s' (a whole number >= "
                            "%lld)", k, v, (long long)lo);
        *ip = n;
        return GF_OK;
    }
    return other_option(ft, k, v);
}

/* Copies the values (the options keep pointers into them), picks the
 * optimizer (it decides the defaults), then applies every option. */
static enum gf_status set_options(struct flat_trainer *ft, size_t n, const char *const *keys,
                                  const char *const *values)
{
    enum gf_optim_kind kind = GF_OPTIM_SGD;
    if (!(ft->strings = calloc(n ? n : 1, sizeof(*ft->strings))))
        return gf_error(GF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char k[64];
        if (!(ft->strings[ft->n_strings++] = strdup(values[i])))
            return gf_error(GF_ERR_NOMEM, "out of memory");
        option_key(keys[i], k, sizeof(k));
        if (strcmp(k, "optimizer") == 0 && !gf_optim_parse(values[i], &kind))
            return gf_error(GF_ERR_ARG, "unknown optimizer '%s' (sgd or adamw)", values[i]);
    }
    gf_trainer_opts_init(&ft->to, kind);
    ft->to.steps = 100; /* the CLI's defaults */
    ft->to.fuse = true;
    enum gf_status st = GF_OK;
    for (size_t i = 0; i < n && st == GF_OK; i++)
        st = set_option(ft, keys[i], ft->strings[i]);
    if (st == GF_OK && !ft->data == !ft->tokens)
        st = gf_error(GF_ERR_ARG, "give the training data: data (a folder) or tokens (a file)");
    if (st == GF_OK && ft->tokens && (!ft->tk.batch || !ft->tk.seq))
        st = gf_error(GF_ERR_ARG, "tokens needs batch and seq");
    if (st == GF_OK && ft->precision && !gf_precision_parse(ft->precision, &ft->to.precision))
        st = gf_error(GF_ERR_ARG, "unknown precision '%s' (fp32, tf32, bf16 or fp16)",
                      ft->precision);
    return st;
}

int gf_flat_trainer_open(const char *path, size_t n, const char *const *keys,
                         const char *const *values, void **trainer)
{
    *trainer = NULL;
    struct flat_trainer *ft = calloc(1, sizeof(*ft));
    if (!ft)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    struct gf_model *m = NULL;
    enum gf_status st = set_options(ft, n, keys, values);
    if (st == GF_OK)
        st = gf_model_load(path, NULL, &m);
    if (st == GF_OK && (st = gf_trainer_new(m, &ft->to, &ft->t)) != GF_OK)
        gf_error_prefix(path);
    gf_model_free(m); /* the trainer copied it */
    if (st == GF_OK && ft->data)
        st = gf_data_open_dir(ft->t, ft->data, &ft->d);
    else if (st == GF_OK)
        st = gf_data_open_tokens(ft->t, ft->tokens, &ft->tk, &ft->d);
    if (st == GF_OK && ft->resume)
        st = gf_trainer_load_checkpoint(ft->t, ft->d, ft->resume);
    if (st != GF_OK) {
        gf_flat_trainer_close(ft);
        return st;
    }
    *trainer = ft;
    return GF_OK;
}

int64_t gf_flat_trainer_step_count(const void *trainer)
{
    return gf_trainer_get_step(((const struct flat_trainer *)trainer)->t);
}

int64_t gf_flat_trainer_total_steps(const void *trainer)
{
    return ((const struct flat_trainer *)trainer)->to.steps;
}

int gf_flat_trainer_step(void *trainer, double *stats)
{
    struct flat_trainer *ft = trainer;
    struct gf_train_stats s;
    memset(&s, 0, sizeof(s));
    enum gf_status st = gf_trainer_step(ft->t, ft->d, &s);
    double v[GF_FLAT_STAT_COUNT] = {
        [GF_FLAT_STAT_STEP] = (double)s.step, [GF_FLAT_STAT_LOSS] = s.loss,
        [GF_FLAT_STAT_GRAD_NORM] = s.grad_norm, [GF_FLAT_STAT_LR] = s.lr,
        [GF_FLAT_STAT_MS] = s.ms, [GF_FLAT_STAT_TOKENS] = (double)s.tokens,
        [GF_FLAT_STAT_DIVERGED] = s.diverged, [GF_FLAT_STAT_LOSS_SCALE] = s.loss_scale,
        [GF_FLAT_STAT_SKIPPED] = s.skipped, [GF_FLAT_STAT_N_SKIPPED] = (double)s.n_skipped};
    memcpy(stats, v, sizeof(v));
    return st;
}

/* The trained parameters by ONNX name, as stored in the exported model. */
static enum gf_status onnx_weights(const struct flat_trainer *ft, const struct gf_model *m,
                                   struct flat_list *l)
{
    enum gf_status st = GF_OK;
    for (size_t i = 0; i < gf_trainer_param_count(ft->t) && st == GF_OK; i++) {
        struct gf_param_info p;
        gf_trainer_get_param(ft->t, i, &p);
        const struct gf_value *v = gf_graph_find(m->graph, p.name);
        if (v && v->init)
            st = list_add_copy(l, p.name, v->init, false);
    }
    return st;
}

/* The parameters by PyTorch name and in its layout (gf_weights_map). */
static enum gf_status torch_weights(const struct gf_model *m, struct flat_list *l)
{
    struct gf_weights *w = NULL;
    enum gf_status st = gf_weights_map(m, &w);
    for (size_t i = 0; st == GF_OK && i < gf_weights_count(w); i++) {
        struct gf_weight_info wi;
        gf_weights_get(w, i, &wi);
        st = list_add_copy(l, wi.torch_name, wi.t, wi.transposed);
    }
    gf_weights_free(w);
    return st;
}

int gf_flat_trainer_weights(const void *trainer, int torch_names, void **list)
{
    const struct flat_trainer *ft = trainer;
    *list = NULL;
    struct gf_model *m = NULL;
    struct flat_list *l = list_new(1);
    enum gf_status st = l ? gf_trainer_export(ft->t, &m) : GF_ERR_NOMEM;
    if (st == GF_OK)
        st = torch_names ? torch_weights(m, l) : onnx_weights(ft, m, l);
    gf_model_free(m);
    if (st != GF_OK) {
        gf_flat_list_free(l);
        return st;
    }
    *list = l;
    return GF_OK;
}

int gf_flat_trainer_save(const void *trainer, const char *path)
{
    return gf_trainer_save(((const struct flat_trainer *)trainer)->t, path);
}

int gf_flat_trainer_save_safetensors(const void *trainer, const char *path)
{
    struct gf_model *m = NULL;
    struct gf_weights *w = NULL;
    enum gf_status st = gf_trainer_export(((const struct flat_trainer *)trainer)->t, &m);
    if (st == GF_OK)
        st = gf_weights_map(m, &w);
    if (st == GF_OK)
        st = gf_weights_save_safetensors(w, path, NULL);
    gf_weights_free(w);
    gf_model_free(m);
    return st;
}

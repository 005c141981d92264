/* The fusion pass: the pattern registry, the report, and the emitters
 * that turn the engine's fused nodes into what a target runs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_target.h"
#include "pattern.h"

/* ---- the registry ------------------------------------------------------------ */

/* Pattern files in priority order: earlier files win at a shared root op
 * (layernorm's tables come before rmsnorm's inside patterns_norm.c, since
 * an RMSNorm of x - mean(x) is the tail of a LayerNorm). */
static const struct {
    const struct gf_pattern *p;
    const size_t *n;
} registry[] = {
    {gf_patterns_norm, &gf_patterns_norm_count},
    {gf_patterns_act, &gf_patterns_act_count},
    {gf_patterns_rope, &gf_patterns_rope_count},
    {gf_patterns_matmul, &gf_patterns_matmul_count},
    {gf_patterns_loss, &gf_patterns_loss_count},
    {gf_patterns_attn, &gf_patterns_attn_count},
};
#define N_SETS (sizeof(registry) / sizeof(registry[0]))

/* Patterns applied only when gf_fuse_opts.enabled names them. */
static const char *const opt_in[] = {"attention"};

bool gf_fuse_pattern_opt_in(const char *name)
{
    for (size_t i = 0; name && i < sizeof(opt_in) / sizeof(opt_in[0]); i++)
        if (strcmp(opt_in[i], name) == 0)
            return true;
    return false;
}

/* Number of pattern tables, all files together. */
static size_t table_count(void)
{
    size_t n = 0;
    for (size_t s = 0; s < N_SETS; s++)
        n += *registry[s].n;
    return n;
}

static const struct gf_pattern *table_at(size_t i)
{
    for (size_t s = 0; s < N_SETS; s++) {
        if (i < *registry[s].n)
            return &registry[s].p[i];
        i -= *registry[s].n;
    }
    return NULL;
}

/* True when table i is the first one carrying its name. */
static bool first_of_name(size_t i)
{
    const char *name = table_at(i)->name;
    for (size_t j = 0; j < i; j++)
        if (strcmp(table_at(j)->name, name) == 0)
            return false;
    return true;
}

size_t gf_fuse_pattern_count(void)
{
    size_t n = 0, total = table_count();
    for (size_t i = 0; i < total; i++)
        n += first_of_name(i);
    return n;
}

const char *gf_fuse_pattern_name(size_t k)
{
    size_t total = table_count();
    for (size_t i = 0; i < total; i++)
        if (first_of_name(i) && k-- == 0)
            return table_at(i)->name;
    return NULL;
}

bool gf_fuse_pattern_known(const char *name)
{
    size_t total = table_count();
    for (size_t i = 0; name && i < total; i++)
        if (strcmp(table_at(i)->name, name) == 0)
            return true;
    return false;
}

static const char *const target_names[] = {"graphfuse", "ort", "onnx"};

const char *gf_fuse_target_name(enum gf_fuse_target t)
{
    return (unsigned)t < 3 ? target_names[t] : "?";
}

bool gf_fuse_target_parse(const char *s, enum gf_fuse_target *t)
{
    for (unsigned i = 0; s && i < 3; i++)
        if (strcmp(s, target_names[i]) == 0) {
            *t = (enum gf_fuse_target)i;
            return true;
        }
    return false;
}

/* ---- fused-op signatures: formal names of the function bodies --------------------- */

struct fused_sig {
    enum gf_op op;
    const char *in[5], *out[4];
    const char *attrs[6]; /* every attribute the op defines (README "Fused ops") */
};

#define NORM_ATTRS {"axis", "epsilon", "eps_outside", "weight_offset"}
static const struct fused_sig sigs[] = {
    {GF_OP_RMS_NORM, {"X", "W"}, {"Y"}, NORM_ATTRS},
    {GF_OP_ADD_RMS_NORM, {"X", "R", "W"}, {"Y", "S"}, NORM_ATTRS},
    {GF_OP_LAYER_NORM, {"X", "W", "B"}, {"Y", "Mean", "InvStdDev"}, {"axis", "epsilon"}},
    {GF_OP_ADD_LAYER_NORM, {"X", "R", "W", "B"}, {"Y", "S", "Mean", "InvStdDev"},
     {"axis", "epsilon"}},
    {GF_OP_SWIGLU, {"G", "U"}, {"Y"}, {NULL}},
    {GF_OP_GEGLU, {"G", "U"}, {"Y"}, {"approximate"}},
    {GF_OP_SILU, {"X"}, {"Y"}, {NULL}},
    {GF_OP_FUSED_GELU, {"X"}, {"Y"}, {"approximate"}},
    {GF_OP_MATMUL_EPILOGUE, {"A", "B", "Bias", "Res"}, {"Y"},
     {"transA", "transB", "alpha", "beta", "activation"}},
    {GF_OP_ROPE, {"X", "Cos", "Sin"}, {"Y"}, {NULL}},
    {GF_OP_SOFTMAX_CROSS_ENTROPY, {"L", "T", "Wc"}, {"Loss", "LogP"},
     {"reduction", "ignore_index", "shift"}},
    {GF_OP_LINEAR_CROSS_ENTROPY, {"H", "W", "T", "Bias"}, {"Loss"},
     {"transB", "reduction", "ignore_index", "shift", "chunk_rows"}},
    {GF_OP_JSD, {"X", "Y", "T"}, {"Loss"}, {"beta", "ignore_index"}},
    {GF_OP_ATTENTION, {"Q", "K", "V", "Mask"}, {"O", "Stats"},
     {"scale", "transB", "zero_masked_rows"}},
};

static const struct fused_sig *sig_of(enum gf_op op)
{
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (sigs[i].op == op)
            return &sigs[i];
    return NULL;
}

/* ---- what the engine reports back ---------------------------------------------------- */

/* A fused node made by this pass and the original nodes it stands for
 * (in graph order, themselves never fused nodes): the function body. */
struct record {
    struct gf_node *node;
    struct gf_node **origin;
    size_t n, cap;
    bool live; /* false once a later rewrite absorbed the node */
};

struct fuse_ctx {
    struct gf_model *m;
    struct record *rec;
    size_t n_rec, cap_rec;
    char **lines;
    size_t n_lines, cap_lines;
    enum gf_status err; /* first allocation failure in a callback */
};

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

static struct record *record_of(struct fuse_ctx *c, const struct gf_node *n)
{
    for (size_t i = c->n_rec; i-- > 0;)
        if (c->rec[i].live && c->rec[i].node == n)
            return &c->rec[i];
    return NULL;
}

static bool record_push(struct record *r, struct gf_node *n)
{
    if (!grow((void **)&r->origin, &r->cap, r->n + 1, sizeof(*r->origin)))
        return false;
    r->origin[r->n++] = n;
    return true;
}

static void on_rewrite(void *ctx, struct gf_node *fused, struct gf_node *const *removed,
                       size_t n_removed)
{
    struct fuse_ctx *c = ctx;
    if (c->err != GF_OK)
        return;
    if (!grow((void **)&c->rec, &c->cap_rec, c->n_rec + 1, sizeof(*c->rec))) {
        c->err = gf_error(GF_ERR_NOMEM, "out of memory recording a fusion");
        return;
    }
    struct record r = {.node = fused, .live = true};
    bool ok = true;
    for (size_t i = 0; ok && i < n_removed; i++) {
        struct record *inner = record_of(c, removed[i]);
        if (!inner) {
            ok = record_push(&r, removed[i]);
            continue;
        }
        for (size_t k = 0; ok && k < inner->n; k++)
            ok = record_push(&r, inner->origin[k]);
        inner->live = false;
    }
    if (!ok) {
        free(r.origin);
        c->err = gf_error(GF_ERR_NOMEM, "out of memory recording a fusion");
        return;
    }
    c->rec[c->n_rec++] = r;
}

static void on_explain(void *ctx, const char *line)
{
    struct fuse_ctx *c = ctx;
    for (size_t i = 0; i < c->n_lines; i++)
        if (strcmp(c->lines[i], line) == 0)
            return; /* the same attempt again, in a later round */
    char *copy = strdup(line);
    if (!copy || !grow((void **)&c->lines, &c->cap_lines, c->n_lines + 1, sizeof(char *))) {
        free(copy);
        c->err = gf_error(GF_ERR_NOMEM, "out of memory recording --explain");
        return;
    }
    c->lines[c->n_lines++] = copy;
}

static void ctx_free(struct fuse_ctx *c)
{
    for (size_t i = 0; i < c->n_rec; i++)
        free(c->rec[i].origin);
    free(c->rec);
    for (size_t i = 0; i < c->n_lines; i++)
        free(c->lines[i]);
    free(c->lines);
}

/* ---- function bodies (target graphfuse) ------------------------------------------------ */

/* A growable string, for body signatures. */
struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !b->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        if (!grow((void **)&b->s, &b->cap, b->n + (size_t)k + 1, 1))
            b->oom = true;
    }
}

static uint64_t fnv(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void sig_tensor(struct sbuf *b, const struct gf_tensor *t)
{
    sb_add(b, "<%d:", (int)t->dtype);
    for (int i = 0; i < t->rank; i++)
        sb_add(b, "%lld,", (long long)t->dims[i]);
    sb_add(b, ":%016llx>", (unsigned long long)(t->data ? fnv(t->data, t->nbytes) : 0));
}

static void sig_attr(struct sbuf *b, const struct gf_attr *a)
{
    sb_add(b, " %s:%d=", a->name, (int)a->type);
    switch (a->type) {
    case GF_ATTR_INT: sb_add(b, "%lld", (long long)a->i); break;
    case GF_ATTR_FLOAT: sb_add(b, "%a", (double)a->f); break;
    case GF_ATTR_STRING: sb_add(b, "%zu:%016llx", a->s.len,
                                (unsigned long long)fnv(a->s.data, a->s.len)); break;
    case GF_ATTR_INTS:
        for (size_t i = 0; i < a->n; i++)
            sb_add(b, "%lld,", (long long)a->ints[i]);
        break;
    case GF_ATTR_FLOATS:
        for (size_t i = 0; i < a->n; i++)
            sb_add(b, "%a,", (double)a->floats[i]);
        break;
    case GF_ATTR_TENSOR:
        if (a->t)
            sig_tensor(b, a->t);
        break;
    default: /* graphs and the rest: never shared */
        sb_add(b, "%p", (const void *)a);
        break;
    }
}

/* A canonical text of a function body: equal texts, equal functions. */
static char *body_signature(const struct gf_graph *body, const char *domain)
{
    struct sbuf b = {0};
    sb_add(&b, "%s|in", domain);
    for (size_t i = 0; i < body->n_inputs; i++)
        sb_add(&b, " %s", body->inputs[i]->name);
    sb_add(&b, "|out");
    for (size_t i = 0; i < body->n_outputs; i++)
        sb_add(&b, " %s", body->outputs[i]->name);
    for (const struct gf_node *n = body->first; n; n = n->next) {
        sb_add(&b, "\n%s.%s(", n->domain ? n->domain : "", n->op_type);
        for (size_t i = 0; i < n->n_inputs; i++)
            sb_add(&b, "%s,", n->inputs[i] ? n->inputs[i]->name : "");
        sb_add(&b, ")->");
        for (size_t i = 0; i < n->n_outputs; i++)
            sb_add(&b, "%s,", n->outputs[i] ? n->outputs[i]->name : "");
        for (size_t i = 0; i < n->n_attrs; i++)
            sig_attr(&b, &n->attrs[i]);
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* Original value -> body value, for one body. */
struct vmap {
    const struct gf_node *fused;
    const struct gf_value *from[512];
    struct gf_value *to[512];
    size_t n;
    unsigned n_tmp, n_const;
};

static struct gf_value *vmap_get(const struct vmap *vm, const struct gf_value *v)
{
    for (size_t i = 0; i < vm->n; i++)
        if (vm->from[i] == v)
            return vm->to[i];
    return NULL;
}

static enum gf_status vmap_put(struct vmap *vm, const struct gf_value *v, struct gf_value *to)
{
    if (vm->n == sizeof(vm->from) / sizeof(vm->from[0]))
        return gf_error(GF_ERR_UNSUPPORTED, "fused subgraph too large for a function body");
    vm->from[vm->n] = v;
    vm->to[vm->n++] = to;
    return GF_OK;
}

/* A constant holding the same bytes as a constant the fused node takes as
 * an input (a weight a pattern gave the fused op in another shape) is
 * read in the body as that formal input reshaped, so bodies carry no
 * weights.  NULL when no formal input matches. */
static struct gf_value *alias_formal(struct gf_model *m, struct gf_graph *b, struct vmap *vm,
                                     const struct gf_tensor *t)
{
    const struct gf_node *f = vm->fused;
    for (size_t i = 0; t->nelem > 1 && i < f->n_inputs; i++) {
        const struct gf_tensor *ft = gf_value_constant(f->inputs[i]);
        struct gf_value *formal = vmap_get(vm, f->inputs[i]);
        if (!ft || !formal || ft->dtype != t->dtype || ft->nbytes != t->nbytes ||
            !t->data || !ft->data || memcmp(ft->data, t->data, t->nbytes) != 0)
            continue;
        char name[32];
        int64_t rank = t->rank;
        snprintf(name, sizeof(name), "c%u", vm->n_const++);
        struct gf_value *sv = gf_graph_new_value(b, name, NULL);
        snprintf(name, sizeof(name), "t%u", vm->n_tmp++);
        struct gf_value *rv = gf_graph_new_value(b, name, NULL);
        struct gf_tensor *shape = gf_tensor_new(m, "", GF_INT64, 1, &rank, t->dims);
        struct gf_node *sn = sv && shape ? gf_graph_add_node(b, "Constant", "", NULL, 0, NULL, 1, &sv)
                                         : NULL;
        struct gf_value *ins[2] = {formal, sv};
        if (!sn || !rv || gf_node_set_attr_tensor(sn, "value", shape) != GF_OK ||
            !gf_graph_add_node(b, "Reshape", "", NULL, 2, ins, 1, &rv))
            return NULL;
        return rv;
    }
    return NULL;
}

/* The body value for `v`, read by an original node: a formal input, a
 * value made earlier in the body, or a constant copied into a Constant
 * node (bodies must not refer to the main graph). */
static enum gf_status body_input(struct gf_model *m, struct gf_graph *b, struct vmap *vm,
                                 const struct gf_value *v, struct gf_value **out)
{
    if ((*out = vmap_get(vm, v)))
        return GF_OK;
    const struct gf_tensor *t = gf_value_constant(v);
    if (!t)
        return gf_error(GF_ERR_INTERNAL, "fused body reads '%s', which is no input of the "
                        "fused node", v->name);
    if ((*out = alias_formal(m, b, vm, t)))
        return vmap_put(vm, v, *out);
    char name[32];
    snprintf(name, sizeof(name), "c%u", vm->n_const++);
    struct gf_value *cv = gf_graph_new_value(b, name, NULL);
    struct gf_tensor *copy = gf_tensor_new(m, "", t->dtype, t->rank, t->dims, t->data);
    struct gf_node *cn = cv && copy ? gf_graph_add_node(b, "Constant", "", NULL, 0, NULL, 1, &cv)
                                    : NULL;
    if (!cn || gf_node_set_attr_tensor(cn, "value", copy) != GF_OK)
        return gf_error(GF_ERR_NOMEM, "out of memory building a function body");
    *out = cv;
    return vmap_put(vm, v, cv);
}

/* Copies one original node into the body. */
static enum gf_status body_node(struct gf_model *m, struct gf_graph *b, struct vmap *vm,
                                const struct gf_node *o)
{
    struct gf_value *in[64], *out[16];
    enum gf_status st;
    if (o->n_inputs > 64 || o->n_outputs > 16)
        return gf_error(GF_ERR_UNSUPPORTED, "node '%s' has too many inputs for a body", o->name);
    for (size_t i = 0; i < o->n_inputs; i++) {
        in[i] = NULL;
        if (o->inputs[i] && (st = body_input(m, b, vm, o->inputs[i], &in[i])) != GF_OK)
            return st;
    }
    for (size_t i = 0; i < o->n_outputs; i++) {
        out[i] = o->outputs[i] ? vmap_get(vm, o->outputs[i]) : NULL;
        if (o->outputs[i] && !out[i]) {
            char name[32];
            snprintf(name, sizeof(name), "t%u", vm->n_tmp++);
            if (!(out[i] = gf_graph_new_value(b, name, NULL)) ||
                (st = vmap_put(vm, o->outputs[i], out[i])) != GF_OK)
                return out[i] ? st : GF_ERR_NOMEM;
        }
    }
    struct gf_node *n = gf_graph_add_node(b, o->op_type, o->domain, NULL, o->n_inputs, in,
                                          o->n_outputs, out);
    struct gf_attr *attrs = gf_model_alloc(m, (o->n_attrs + 1) * sizeof(*attrs));
    if (!n || !attrs)
        return gf_error(GF_ERR_NOMEM, "out of memory building a function body");
    /* shallow copies: attribute payloads live in the model's arena and are
     * never changed in place (setters replace them) */
    if (o->n_attrs)
        memcpy(attrs, o->attrs, o->n_attrs * sizeof(*attrs));
    n->attrs = attrs;
    n->n_attrs = o->n_attrs;
    return GF_OK;
}

/* Formal inputs and outputs of the body, named after the fused op's
 * operands (README "Fused ops"); an omitted optional input still gets
 * its formal name, unused, so the call's positions line up. */
static enum gf_status body_formals(struct gf_graph *b, struct vmap *vm, const struct gf_node *f,
                                   const struct fused_sig *sig)
{
    char name[32];
    size_t n_in = f->n_inputs;
    while (n_in > 0 && !f->inputs[n_in - 1])
        n_in--;
    for (size_t i = 0; i < n_in + f->n_outputs; i++) {
        bool is_in = i < n_in;
        size_t k = is_in ? i : i - n_in;
        const char *nm = sig ? (is_in ? (k < 5 ? sig->in[k] : NULL) : (k < 4 ? sig->out[k] : NULL))
                             : NULL;
        if (!nm) {
            snprintf(name, sizeof(name), "%s%zu", is_in ? "in" : "out", k);
            nm = name;
        }
        struct gf_value *fv = gf_graph_new_value(b, nm, NULL);
        const struct gf_value *orig = is_in ? f->inputs[k] : f->outputs[k];
        if (!fv)
            return GF_ERR_NOMEM;
        enum gf_status st = is_in ? gf_graph_add_input(b, fv) : GF_OK;
        if (st == GF_OK && orig && !vmap_get(vm, orig))
            st = vmap_put(vm, orig, fv);
        if (st != GF_OK)
            return st;
    }
    return GF_OK;
}

/* A new function (not yet in the model) whose body is r's subgraph. */
static enum gf_status build_body(struct gf_model *m, const struct record *r,
                                 struct gf_function **out)
{
    const struct gf_node *f = r->node;
    struct vmap *vm = calloc(1, sizeof(*vm));
    struct gf_function *fn = gf_function_new(m, f->op_type, "graphfuse");
    struct gf_graph *b = fn ? fn->body : NULL;
    enum gf_status st = vm && b ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory");
    if (st == GF_OK) {
        vm->fused = f;
        st = body_formals(b, vm, f, sig_of(f->op));
    }
    for (size_t i = 0; st == GF_OK && i < r->n; i++)
        st = body_node(m, b, vm, r->origin[i]);
    for (size_t i = 0; st == GF_OK && i < f->n_outputs; i++) {
        /* an omitted output before a used one (LayerNormalization's Mean
         * unused, InvStdDev used): the body has no value for it */
        if (!f->outputs[i]) {
            st = gf_error(GF_ERR_UNSUPPORTED, "fused %s: output %zu is omitted but output %zu "
                          "is used: not written as a function (try --target ort or "
                          "--disable the pattern)", f->op_type, i, f->n_outputs - 1);
            break;
        }
        struct gf_value *o = vmap_get(vm, f->outputs[i]);
        if (!o || !o->producer)
            st = gf_error(GF_ERR_INTERNAL, "fused %s: output '%s' is not computed by its body",
                          f->op_type, f->outputs[i]->name);
        else
            st = gf_graph_add_output(b, o);
    }
    free(vm);
    *out = fn;
    return st;
}

/* Signatures of the model's functions, computed once per emission. */
struct fn_sigs {
    char **sig; /* per m->functions[i]; NULL until computed */
    size_t n;
};

static const char *fn_sig(struct fn_sigs *fs, const struct gf_model *m, size_t i)
{
    if (i >= fs->n) {
        char **p = realloc(fs->sig, m->n_functions * sizeof(*p));
        if (!p)
            return NULL;
        for (size_t k = fs->n; k < m->n_functions; k++)
            p[k] = NULL;
        fs->sig = p;
        fs->n = m->n_functions;
    }
    if (!fs->sig[i]) {
        const struct gf_function *f = m->functions[i];
        fs->sig[i] = body_signature(f->body, f->domain ? f->domain : "");
    }
    return fs->sig[i];
}

static void fn_sigs_free(struct fn_sigs *fs)
{
    for (size_t i = 0; i < fs->n; i++)
        free(fs->sig[i]);
    free(fs->sig);
}

/* Index of graphfuse function `name` in m->functions, or -1. */
static long find_function(const struct gf_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_functions; i++) {
        const struct gf_function *f = m->functions[i];
        if (strcmp(f->name, name) == 0 && f->domain && strcmp(f->domain, "graphfuse") == 0)
            return (long)i;
    }
    return -1;
}

/* Names fn `name`, declares what the call may carry and adds it to the
 * model. */
static enum gf_status add_function(struct gf_model *m, const char *name, struct gf_function *f,
                                   const struct gf_node *call)
{
    const struct fused_sig *sig = sig_of(call->op);
    const struct gf_graph *b = f->body;
    struct gf_opset *ops = gf_model_alloc(m, (b->n_nodes + 1) * sizeof(*ops));
    const char **attrs = gf_model_alloc(m, (6 + call->n_attrs + 1) * sizeof(*attrs));
    f->name = gf_model_strdup(m, name);
    if (!ops || !attrs || !f->name)
        return gf_error(GF_ERR_NOMEM, "out of memory adding function %s", name);
    f->doc_string = "graphfuse fused op: the subgraph it replaced, for runtimes without "
                    "graphfuse kernels";
    /* every attribute the op defines, so calls may carry any of them */
    for (size_t i = 0; sig && i < 6 && sig->attrs[i]; i++)
        attrs[f->n_attr_names++] = sig->attrs[i];
    for (size_t i = 0; !sig && i < call->n_attrs; i++)
        attrs[f->n_attr_names++] = call->attrs[i].name;
    f->attr_names = attrs;
    /* the body's domains, at the versions the model imports */
    for (const struct gf_node *n = b->first; n; n = n->next) {
        const char *d = n->domain && strcmp(n->domain, "ai.onnx") != 0 ? n->domain : "";
        size_t k = 0;
        while (k < f->n_opsets && strcmp(ops[k].domain, d) != 0)
            k++;
        if (k == f->n_opsets)
            ops[f->n_opsets++] = (struct gf_opset){d, gf_model_opset(m, d)};
    }
    f->opsets = ops;
    return gf_model_add_function(m, f);
}

/* Replaces fused node n by the same node calling op type `name`. */
static enum gf_status rename_call(struct gf_graph *g, struct gf_node *n, const char *name)
{
    struct gf_value *in[GF_FUSED_MAX_IO], *out[GF_FUSED_MAX_IO];
    if (n->n_inputs > GF_FUSED_MAX_IO || n->n_outputs > GF_FUSED_MAX_IO)
        return gf_error(GF_ERR_INTERNAL, "fused node with too many inputs");
    memcpy(in, n->inputs, n->n_inputs * sizeof(*in));
    memcpy(out, n->outputs, n->n_outputs * sizeof(*out));
    struct gf_node *next = n->next;
    gf_graph_remove_node(g, n);
    struct gf_node *c = gf_graph_add_node(g, name, "graphfuse", n->name, n->n_inputs, in,
                                          n->n_outputs, out);
    if (!c)
        return GF_ERR_NOMEM;
    gf_node_move_before(c, next);
    c->attrs = n->attrs; /* the removed node's attributes, now the call's */
    c->n_attrs = n->n_attrs;
    return c->op == n->op ? GF_OK
                          : gf_error(GF_ERR_INTERNAL, "function %s does not map to op %s", name,
                                     n->op_type);
}

/* Wraps fused node r->node in a function holding its original subgraph:
 * the same body as an existing function reuses it, a new body of an op
 * whose name is taken gets the name OP_2, OP_3, ... */
static enum gf_status wrap_in_function(struct gf_model *m, struct fn_sigs *fs,
                                       const struct record *r, size_t *added)
{
    struct gf_function *fn;
    if (m->ir_version < 8)
        m->ir_version = 8; /* model-local functions need IR 8 */
    enum gf_status st = gf_model_set_opset(m, "graphfuse", 1);
    if (st == GF_OK)
        st = build_body(m, r, &fn);
    if (st != GF_OK)
        return st;
    char *sig = body_signature(fn->body, "graphfuse");
    if (!sig)
        return gf_error(GF_ERR_NOMEM, "out of memory comparing function bodies");
    const char *base = gf_op_get_info(r->node->op)->name;
    char name[128];
    for (unsigned k = 1;; k++) {
        if (k == 1)
            snprintf(name, sizeof(name), "%s", base);
        else
            snprintf(name, sizeof(name), "%s_%u", base, k);
        long idx = find_function(m, name);
        if (idx < 0) {
            st = add_function(m, name, fn, r->node);
            *added += st == GF_OK;
            break;
        }
        const char *fsig = fn_sig(fs, m, (size_t)idx);
        if (fsig && strcmp(fsig, sig) == 0)
            break; /* the same body: share it (fn stays unused in the arena) */
    }
    free(sig);
    if (st == GF_OK && strcmp(r->node->op_type, name) != 0)
        st = rename_call(m->graph, r->node, name);
    return st;
}

/* The fused nodes as target t writes them: the target's own ops where
 * fuse_target.c finds ops computing exactly the same (ort, onnx), else a
 * call of a model-local function whose body is the replaced subgraph. */
static enum gf_status emit(struct gf_model *m, struct fuse_ctx *c, enum gf_fuse_target t,
                           size_t *added)
{
    struct fn_sigs fs = {0};
    struct gf_lower *lw = t == GF_TARGET_GRAPHFUSE ? NULL : gf_lower_new(m, t);
    enum gf_status st = t == GF_TARGET_GRAPHFUSE || lw ? GF_OK
                                                      : gf_error(GF_ERR_NOMEM, "out of memory");
    for (struct gf_node *n = m->graph->first; n && st == GF_OK;) {
        struct gf_node *next = n->next;
        const struct record *r = record_of(c, n);
        bool done = false;
        if (r && lw)
            st = gf_lower_node(lw, n, &done);
        if (r && st == GF_OK && !done)
            st = wrap_in_function(m, &fs, r, added);
        n = next;
    }
    fn_sigs_free(&fs);
    gf_lower_free(lw);
    return st;
}

/* ---- census and report ------------------------------------------------------------------- */

static int cmp_tally(const void *a, const void *b)
{
    const struct gf_op_tally *x = a, *y = b;
    int d = strcmp(x->domain, y->domain);
    return d ? d : strcmp(x->op, y->op);
}

enum gf_status gf_op_census_take(struct gf_op_census *c, const struct gf_graph *g)
{
    size_t cap = 0;
    memset(c, 0, sizeof(*c));
    for (const struct gf_node *n = g->first; n; n = n->next) {
        const char *d = n->domain && strcmp(n->domain, "ai.onnx") != 0 ? n->domain : "";
        /* calls of a second function body (RMSNorm_2) count as their op */
        const char *name = strcmp(d, "graphfuse") == 0 && n->op != GF_OP_UNKNOWN
                               ? gf_op_get_info(n->op)->name : n->op_type;
        size_t i = 0;
        while (i < c->n_ops && (strcmp(c->ops[i].op, name) || strcmp(c->ops[i].domain, d)))
            i++;
        if (i == c->n_ops) {
            char *op = strdup(name), *dom = strdup(d);
            if (!op || !dom || !grow((void **)&c->ops, &cap, c->n_ops + 1, sizeof(*c->ops))) {
                free(op);
                free(dom);
                gf_op_census_free(c);
                return gf_error(GF_ERR_NOMEM, "out of memory counting ops");
            }
            c->ops[c->n_ops++] = (struct gf_op_tally){op, dom, 0};
        }
        c->ops[i].count++;
        c->n_nodes++;
    }
    if (c->n_ops)
        qsort(c->ops, c->n_ops, sizeof(*c->ops), cmp_tally);
    return GF_OK;
}

void gf_op_census_free(struct gf_op_census *c)
{
    for (size_t i = 0; i < c->n_ops; i++) {
        free(c->ops[i].op);
        free(c->ops[i].domain);
    }
    free(c->ops);
    memset(c, 0, sizeof(*c));
}

void gf_fuse_report_free(struct gf_fuse_report *rep)
{
    if (!rep)
        return;
    gf_op_census_free(&rep->before);
    gf_op_census_free(&rep->after);
    free(rep->patterns);
    for (size_t i = 0; i < rep->n_explain; i++)
        free(rep->explain_lines[i]);
    free(rep->explain_lines);
    memset(rep, 0, sizeof(*rep));
}

static size_t census_count(const struct gf_op_census *c, const char *domain, const char *op)
{
    for (size_t i = 0; i < c->n_ops; i++)
        if (strcmp(c->ops[i].op, op) == 0 && strcmp(c->ops[i].domain, domain) == 0)
            return c->ops[i].count;
    return 0;
}

/* Rows of the op table: every op type of either census, sorted. */
static size_t op_rows(const struct gf_fuse_report *r, struct gf_op_tally *rows)
{
    size_t n = 0;
    for (int side = 0; side < 2; side++) {
        const struct gf_op_census *c = side ? &r->after : &r->before;
        for (size_t i = 0; i < c->n_ops; i++) {
            size_t k = 0;
            while (k < n && cmp_tally(&rows[k], &c->ops[i]) != 0)
                k++;
            if (k == n)
                rows[n++] = c->ops[i];
        }
    }
    qsort(rows, n, sizeof(*rows), cmp_tally);
    return n;
}


static void print_text(const struct gf_fuse_report *r, FILE *f, struct gf_op_tally *rows,
                       size_t n_rows)
{
    char name[160];
    fprintf(f, "%-36s %8s %8s\n", "op", "before", "after");
    for (size_t i = 0; i < n_rows; i++) {
        snprintf(name, sizeof(name), "%s%s%s", rows[i].domain, *rows[i].domain ? "." : "",
                 rows[i].op);
        fprintf(f, "%-36s %8zu %8zu\n", name, census_count(&r->before, rows[i].domain, rows[i].op),
                census_count(&r->after, rows[i].domain, rows[i].op));
    }
    fprintf(f, "%-36s %8zu %8zu\n", "nodes", r->before.n_nodes, r->after.n_nodes);
    if (r->bytes_before || r->bytes_after)
        fprintf(f, "%-36s %8zu %8zu\n", "file size (bytes)", r->bytes_before, r->bytes_after);
    fprintf(f, "\n%-36s %8s\n", "pattern", "hits");
    for (size_t i = 0; i < r->n_patterns; i++)
        fprintf(f, "%-36s %8zu%s\n", r->patterns[i].pattern, r->patterns[i].hits,
                r->patterns[i].disabled ? "  (disabled)" : "");
    fprintf(f, "\ntarget %s, %zu model-local function%s added\n", gf_fuse_target_name(r->target),
            r->n_functions, r->n_functions == 1 ? "" : "s");
    if (r->have_cleanup)
        fprintf(f, "cleanup before fusion: %zu folded, %zu no-ops, %zu merged, %zu dead nodes, "
                "%zu dead initializers\n", r->cleanup.folded, r->cleanup.identities,
                r->cleanup.cse, r->cleanup.dead, r->cleanup.dead_inits);
    if (r->explain) {
        fprintf(f, "\nexplain %s (%zu attempt%s):\n", r->explain, r->n_explain,
                r->n_explain == 1 ? "" : "s");
        for (size_t i = 0; i < r->n_explain; i++)
            fprintf(f, "  %s\n", r->explain_lines[i]);
    }
}

static void print_json(const struct gf_fuse_report *r, FILE *f, struct gf_op_tally *rows,
                       size_t n_rows)
{
    fprintf(f, "{\n  \"format\": \"graphfuse-fuse-report\",\n  \"version\": 1,\n");
    fprintf(f, "  \"target\": \"%s\",\n", gf_fuse_target_name(r->target));
    fprintf(f, "  \"nodes\": {\"before\": %zu, \"after\": %zu},\n", r->before.n_nodes,
            r->after.n_nodes);
    if (r->bytes_before || r->bytes_after)
        fprintf(f, "  \"bytes\": {\"before\": %zu, \"after\": %zu},\n", r->bytes_before,
                r->bytes_after);
    else
        fprintf(f, "  \"bytes\": null,\n");
    fprintf(f, "  \"ops\": [");
    for (size_t i = 0; i < n_rows; i++) {
        fprintf(f, "%s\n    {\"op\": ", i ? "," : "");
        gf_json_write_string(f, rows[i].op);
        fprintf(f, ", \"domain\": ");
        gf_json_write_string(f, rows[i].domain);
        fprintf(f, ", \"before\": %zu, \"after\": %zu}",
                census_count(&r->before, rows[i].domain, rows[i].op),
                census_count(&r->after, rows[i].domain, rows[i].op));
    }
    fprintf(f, "\n  ],\n  \"patterns\": [");
    for (size_t i = 0; i < r->n_patterns; i++)
        fprintf(f, "%s\n    {\"name\": \"%s\", \"hits\": %zu, \"disabled\": %s}", i ? "," : "",
                r->patterns[i].pattern, r->patterns[i].hits,
                r->patterns[i].disabled ? "true" : "false");
    fprintf(f, "\n  ],\n  \"functions_added\": %zu,\n", r->n_functions);
    if (r->have_cleanup)
        fprintf(f, "  \"cleanup\": {\"folded\": %zu, \"identities\": %zu, \"cse\": %zu, "
                "\"dead\": %zu, \"dead_inits\": %zu},\n", r->cleanup.folded,
                r->cleanup.identities, r->cleanup.cse, r->cleanup.dead, r->cleanup.dead_inits);
    else
        fprintf(f, "  \"cleanup\": null,\n");
    if (!r->explain) {
        fprintf(f, "  \"explain\": null\n}\n");
        return;
    }
    fprintf(f, "  \"explain\": {\"pattern\": ");
    gf_json_write_string(f, r->explain);
    fprintf(f, ", \"lines\": [");
    for (size_t i = 0; i < r->n_explain; i++) {
        fprintf(f, "%s\n    ", i ? "," : "");
        gf_json_write_string(f, r->explain_lines[i]);
    }
    fprintf(f, "\n  ]}\n}\n");
}

void gf_fuse_report_print(const struct gf_fuse_report *r, FILE *f, bool json)
{
    size_t cap = r->before.n_ops + r->after.n_ops;
    struct gf_op_tally *rows = malloc((cap + 1) * sizeof(*rows));
    size_t n = rows ? op_rows(r, rows) : 0;
    if (json)
        print_json(r, f, rows, n);
    else
        print_text(r, f, rows, n);
    free(rows);
}

/* ---- the pass ------------------------------------------------------------------------------ */

enum gf_status gf_pass_drop_output(struct gf_graph *g, const char *name)
{
    bool found = false;
    for (size_t i = g->n_outputs; i-- > 0;)
        if (g->outputs[i] && strcmp(g->outputs[i]->name, name) == 0) {
            gf_graph_remove_output(g, i);
            found = true;
        }
    if (!found)
        return gf_error(GF_ERR_ARG, "the graph has no output named '%s'", name);
    return GF_OK;
}

/* Values the fusion left without producer or reader keep their types;
 * forgetting them keeps the saved file free of value_info for names no
 * node computes. */
static void forget_orphans(struct gf_graph *g)
{
    for (size_t i = 0; i < g->n_values; i++) {
        struct gf_value *v = g->values[i];
        if (!v->producer && !v->init && !v->is_input && !v->is_output && !v->n_uses &&
            !v->sparse_init) {
            v->has_value_info = false;
            v->type.kind = GF_TYPE_NONE;
        }
    }
}

static enum gf_status check_opts(const struct gf_fuse_opts *o)
{
    if ((unsigned)o->target > GF_TARGET_ONNX)
        return gf_error(GF_ERR_ARG, "unknown fusion target %d", (int)o->target);
    for (size_t i = 0; i < o->n_disabled; i++)
        if (!gf_fuse_pattern_known(o->disabled[i]))
            return gf_error(GF_ERR_ARG, "unknown pattern '%s' (graphfuse --help "
                            "lists them)", o->disabled[i] ? o->disabled[i] : "");
    if (o->explain && !gf_fuse_pattern_known(o->explain))
        return gf_error(GF_ERR_ARG, "unknown pattern '%s' to explain", o->explain);
    for (size_t i = 0; i < o->n_enabled; i++)
        if (!gf_fuse_pattern_opt_in(o->enabled[i]))
            return gf_error(GF_ERR_ARG, "'%s' is not an opt-in pattern", o->enabled[i] ?
                            o->enabled[i] : "");
    return GF_OK;
}

/* Disabled by the options, or opt-in and not enabled. */
static bool is_disabled(const struct gf_fuse_opts *o, const char *name)
{
    for (size_t i = 0; i < o->n_disabled; i++)
        if (strcmp(o->disabled[i], name) == 0)
            return true;
    bool on = !gf_fuse_pattern_opt_in(name);
    for (size_t i = 0; !on && i < o->n_enabled; i++)
        on = strcmp(o->enabled[i], name) == 0;
    return !on;
}

/* Hits per pattern name, in priority order. */
static enum gf_status report_hits(struct gf_fuse_report *rep, const struct gf_fuse_opts *o,
                                  const struct gf_pattern *const *enabled, const size_t *hits,
                                  size_t n_enabled)
{
    size_t n = gf_fuse_pattern_count();
    rep->patterns = calloc(n + 1, sizeof(*rep->patterns));
    if (!rep->patterns)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    rep->n_patterns = n;
    for (size_t i = 0; i < n; i++) {
        struct gf_fuse_hit *h = &rep->patterns[i];
        h->pattern = gf_fuse_pattern_name(i);
        h->disabled = is_disabled(o, h->pattern);
        for (size_t k = 0; k < n_enabled; k++)
            if (strcmp(enabled[k]->name, h->pattern) == 0)
                h->hits += hits[k];
    }
    return GF_OK;
}

static enum gf_status run_fusion(struct gf_model *m, const struct gf_fuse_opts *o,
                                 struct gf_fuse_report *rep, struct fuse_ctx *c)
{
    size_t total = table_count(), n_en = 0;
    const struct gf_pattern **en = calloc(total + 1, sizeof(*en));
    size_t *hits = calloc(total + 1, sizeof(*hits));
    enum gf_status st = en && hits ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == GF_OK && i < total; i++)
        if (!is_disabled(o, table_at(i)->name))
            en[n_en++] = table_at(i);
    struct gf_engine e = {en, n_en, hits, o->explain, on_rewrite, on_explain, c};
    if (st == GF_OK)
        st = gf_engine_run(m->graph, &e);
    if (st == GF_OK && c->err != GF_OK)
        st = c->err;
    if (st == GF_OK && rep)
        st = report_hits(rep, o, en, hits, n_en);
    free(en);
    free(hits);
    return st;
}

enum gf_status gf_pass_fuse(struct gf_model *m, const struct gf_fuse_opts *o,
                            struct gf_fuse_report *rep)
{
    static const struct gf_fuse_opts dflt = {0};
    struct fuse_ctx c = {.m = m};
    size_t added = 0;
    if (!o)
        o = &dflt;
    if (rep)
        memset(rep, 0, sizeof(*rep));
    enum gf_status st = check_opts(o);
    if (st == GF_OK && rep) {
        rep->target = o->target;
        rep->explain = o->explain;
        st = gf_op_census_take(&rep->before, m->graph);
    }
    if (st == GF_OK)
        st = gf_graph_infer_shapes(m->graph);
    if (st == GF_OK)
        st = run_fusion(m, o, rep, &c);
    /* bodies copy the constants they read: emit before dce drops them */
    if (st == GF_OK && c.n_rec)
        st = emit(m, &c, o->target, &added);
    if (st == GF_OK && c.n_rec)
        st = gf_pass_dce(m->graph, NULL);
    /* types for the values the target's ops introduced */
    if (st == GF_OK && c.n_rec && o->target != GF_TARGET_GRAPHFUSE)
        st = gf_graph_infer_shapes(m->graph);
    if (st == GF_OK) {
        forget_orphans(m->graph);
        if (gf_graph_validate(m->graph) != GF_OK) {
            char why[400];
            snprintf(why, sizeof(why), "%s", gf_last_error());
            st = gf_error(GF_ERR_INTERNAL, "fusion left an invalid graph: %s", why);
        }
    }
    if (st == GF_OK && rep) {
        rep->n_functions = added;
        st = gf_op_census_take(&rep->after, m->graph);
        rep->explain_lines = c.lines;
        rep->n_explain = c.n_lines;
        c.lines = NULL;
        c.n_lines = 0;
    }
    ctx_free(&c);
    return st;
}

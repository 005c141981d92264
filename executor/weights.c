/*
 * Weights back to PyTorch: which initializer holds which torch parameter,
 * in which layout, and a safetensors writer.
 *
 * The names come from the graph:
 *  - an initializer named like a parameter path ("model.norm.weight") is
 *    that parameter as is (when the model carries torch.export's graph
 *    signature, only if it lists the name as a PARAMETER: buffers such as
 *    "model.rotary_emb.inv_freq" are left out);
 *  - an Identity or Cast of it whose output has such a name stands for
 *    that parameter too (the legacy exporter's way of sharing one
 *    initializer among parameters with equal values);
 *  - every node reading it (through Identity, Cast and a 2-D Transpose)
 *    says which module it belongs to: legacy node names are module paths
 *    ("/model/layers.0/self_attn/q_proj/MatMul"), dynamo nodes carry the
 *    path in metadata_props ("pkg.torch.onnx.name_scopes") and the aten
 *    call with its parameter placeholders ("pkg.torch.onnx.fx_node":
 *    "%p_model_norm_weight", resolved through the signature).  The op and
 *    input slot give the attribute ("weight", "bias") and the layout: a
 *    MatMul's B (or Gemm's without transB) is a Linear weight stored
 *    [in, out], written back as torch's [out, in].
 *
 * An initializer standing for several parameters (equal values merged by
 * the exporter, tied embedding and head) is written under each name; a
 * name reached from several initializers is written once, from the best
 * source (its own name first, then an alias, the aten call, the module).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gf_exec.h"

#define STATE_PREFIX "graphfuse." /* checkpoint state: graphfuse.optim.*, graphfuse.train.* */
#define MAX_DEPTH 8               /* Identity / Cast / Transpose chains followed */

enum prio { OWN_NAME, ALIAS_NAME, FX_PARAM, MODULE_SCOPE };

struct entry {
    char *name;               /* torch name */
    const struct gf_value *v; /* the initializer */
    bool transposed;
    enum prio prio;
};

struct gf_weights {
    const struct gf_model *m;
    size_t n, cap;
    struct entry *e;
    size_t n_skipped;
    const char **skipped;
    size_t n_copies;          /* initializers whose names are all written from another */
    size_t n_state;
    bool hit;                 /* the initializer being mapped got a name */
    size_t n_sig;             /* torch.export graph signature: PARAMETER placeholders */
    char **sig_ph, **sig_target;
    size_t n_unread;          /* signature parameters written from no initializer */
    const char **unread;
    bool oom;
};



/* ---- names --------------------------------------------------------------------- */

/* "a.b.c" with parts of letters, digits and '_': how torch names parameters. */
static bool torch_like(const char *s)
{
    size_t parts = 1, len = 0;
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return false;
    for (const char *p = s; *p; p++) {
        if (*p == '.') {
            if (!len)
                return false;
            parts++;
            len = 0;
        } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                   (*p >= '0' && *p <= '9') || *p == '_') {
            len++;
        } else {
            return false;
        }
    }
    return len && parts > 1;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* The graph signature torch.export leaves in the graph's metadata:
 * lines "p_model_norm_weight: PARAMETER target='model.norm.weight'". */
static void read_signature(struct gf_weights *w, const struct gf_graph *g)
{
    const char *sig_text = gf_graph_metadata(g, "pkg.torch.export.ExportedProgram.graph_signature");
    char *sig = sig_text ? strdup(sig_text) : NULL;
    for (char *line = sig, *next; line && *line && !w->oom; line = next) {
        next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        const char *colon = strstr(line, ": PARAMETER target='");
        if (!colon || colon > next)
            continue;
        const char *t = colon + strlen(": PARAMETER target='"), *q = strchr(t, '\'');
        if (!q || q > next)
            continue;
        char **ph = realloc(w->sig_ph, (w->n_sig + 1) * sizeof(*ph));
        char **tg = ph ? realloc(w->sig_target, (w->n_sig + 1) * sizeof(*tg)) : NULL;
        if (ph)
            w->sig_ph = ph;
        if (tg)
            w->sig_target = tg;
        if (!ph || !tg || !(ph[w->n_sig] = dup_n(line, (size_t)(colon - line)))) {
            w->oom = true;
            break;
        }
        if (!(tg[w->n_sig] = dup_n(t, (size_t)(q - t)))) {
            free(ph[w->n_sig]);
            w->oom = true;
            break;
        }
        w->n_sig++;
    }
    free(sig);
}

static bool is_param_target(const struct gf_weights *w, const char *name)
{
    for (size_t i = 0; i < w->n_sig; i++)
        if (strcmp(w->sig_target[i], name) == 0)
            return true;
    return false;
}

/* The module path of node n ("model.layers.0.self_attn.q_proj"), malloc'ed,
 * or NULL: dynamo's name_scopes "['', 'model', ..., 'model.layers.0.self_attn.q_proj',
 * 'linear']" without the op; a legacy name "/model/layers.0/self_attn/q_proj/MatMul"
 * without the op, '/' as '.'. */
static char *module_of(const struct gf_node *n)
{
    const char *scopes = gf_node_metadata(n, "pkg.torch.onnx.name_scopes");
    if (scopes) {
        const char *item[2] = {NULL, NULL}; /* the last two quoted items */
        size_t len[2] = {0, 0};
        for (const char *p = strchr(scopes, '\''); p; p = strchr(p, '\'')) {
            const char *q = strchr(p + 1, '\'');
            if (!q)
                break;
            item[0] = item[1], len[0] = len[1];
            item[1] = p + 1, len[1] = (size_t)(q - p - 1);
            p = q + 1;
        }
        return item[0] && len[0] ? dup_n(item[0], len[0]) : NULL;
    }
    const char *name = n->name, *last = name ? strrchr(name, '/') : NULL;
    if (!name || name[0] != '/' || last == name)
        return NULL;
    char *mod = dup_n(name + 1, (size_t)(last - name - 1));
    for (char *p = mod; p && *p; p++)
        if (*p == '/')
            *p = '.';
    return mod;
}

/* ---- what a node does with the initializer -------------------------------------- */

struct role {
    const char *attr; /* "weight" / "bias" */
    bool transposed;  /* read as [in, out]: the Linear weight transposed */
};

static bool op_is(const struct gf_node *n, const char *op)
{
    return (!n->domain || !*n->domain || !strcmp(n->domain, "ai.onnx")) &&
           strcmp(n->op_type, op) == 0;
}

/* The role of the tensor t read by n as input `slot`; false: none known. */
static bool role_of(const struct gf_node *n, int slot, const struct gf_tensor *t, struct role *r)
{
    *r = (struct role){NULL, false};
    if (op_is(n, "MatMul") && slot == 1 && t->rank == 2)
        *r = (struct role){"weight", true};
    else if (op_is(n, "Gemm") && slot == 1)
        *r = (struct role){"weight", gf_node_attr_int(n, "transB", 0) == 0};
    else if (op_is(n, "Gemm") && slot == 2)
        r->attr = "bias";
    else if (op_is(n, "Gather") && slot == 0)
        r->attr = "weight";
    else if ((op_is(n, "LayerNormalization") || op_is(n, "BatchNormalization") ||
              op_is(n, "InstanceNormalization") || op_is(n, "GroupNormalization") ||
              op_is(n, "Conv") || op_is(n, "ConvTranspose")) && (slot == 1 || slot == 2))
        r->attr = slot == 1 ? "weight" : "bias";
    else if (op_is(n, "Mul") && t->rank == 1)
        r->attr = "weight"; /* RMSNorm's scale */
    else if (op_is(n, "Add") && t->rank == 1 && n->n_inputs == 2) {
        const struct gf_value *o = n->inputs[1 - slot];
        const struct gf_node *p = o ? o->producer : NULL;
        if (p && (op_is(p, "MatMul") || op_is(p, "Gemm")))
            r->attr = "bias"; /* a Linear's bias after its MatMul */
    }
    return r->attr != NULL;
}

/* ---- collecting names --------------------------------------------------------- */

static void add(struct gf_weights *w, const char *name, size_t len, const struct gf_value *v,
                bool transposed, enum prio prio)
{
    if (transposed && v->init->rank != 2)
        return;
    w->hit = true;
    for (size_t i = 0; i < w->n; i++) {
        struct entry *e = &w->e[i];
        if (strlen(e->name) != len || strncmp(e->name, name, len) != 0)
            continue;
        if (prio < e->prio || (prio == e->prio && e->transposed && !transposed)) {
            e->v = v;
            e->transposed = transposed;
            e->prio = prio;
        }
        return;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct entry *e = realloc(w->e, cap * sizeof(*e));
        if (!e) {
            w->oom = true;
            return;
        }
        w->e = e;
        w->cap = cap;
    }
    char *copy = dup_n(name, len);
    if (!copy) {
        w->oom = true;
        return;
    }
    w->e[w->n++] = (struct entry){copy, v, transposed, prio};
}

/* The torch names of the parameters the aten call of dynamo node n reads:
 * the "%p_..." placeholders among its arguments in "pkg.torch.onnx.fx_node",
 * through the graph signature; at most max.  -1: n has no such metadata. */
static int fx_params(const struct gf_weights *w, const struct gf_node *n, const char **found,
                     int max)
{
    const char *fx = w->n_sig ? gf_node_metadata(n, "pkg.torch.onnx.fx_node") : NULL;
    const char *args = fx ? strstr(fx, "(args = (") : NULL;
    int k = 0;
    for (const char *p = args; p && (p = strstr(p, "%p_")) && k < max;) {
        const char *s = ++p;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
               (*p >= '0' && *p <= '9') || *p == '_')
            p++;
        for (size_t i = 0; i < w->n_sig; i++)
            if (strlen(w->sig_ph[i]) == (size_t)(p - s) && !strncmp(w->sig_ph[i], s, p - s)) {
                found[k++] = w->sig_target[i];
                break;
            }
    }
    return fx ? k : -1;
}

/* The one of found[] whose attribute is r->attr (any, without a role), or NULL. */
static const char *pick_param(const char *const *found, int k, const struct role *r)
{
    const char *pick = NULL;
    for (int i = 0; i < k; i++) {
        const char *dot = strrchr(found[i], '.');
        if (r->attr && (!dot || strcmp(dot + 1, r->attr) != 0))
            continue;
        if (pick)
            return NULL; /* ambiguous */
        pick = found[i];
    }
    return pick;
}

/* "<module of n>.<attr>" when it is a parameter (in the signature, if any). */
static void add_module_name(struct gf_weights *w, const struct gf_value *v,
                            const struct gf_node *n, const struct role *r, bool transposed)
{
    char *mod = module_of(n);
    if (mod && *mod) {
        size_t len = strlen(mod) + strlen(r->attr) + 2;
        char *name = malloc(len);
        if (name) {
            snprintf(name, len, "%s.%s", mod, r->attr);
            if (!w->n_sig || is_param_target(w, name))
                add(w, name, strlen(name), v, transposed != r->transposed, MODULE_SCOPE);
        }
        w->oom |= !name;
        free(name);
    }
    free(mod);
}

/* Names node n gives to initializer v, which it reads as input `slot`
 * (transposed: through a Transpose; own: v's own name is a parameter).
 * Dynamo nodes name the parameters their aten call reads: those, and the
 * module's when v itself is one of them (tied: the embedding's Gather
 * reading "lm_head.weight").  Else the module's: for v's own parameter
 * (merged with equal ones), or for a folded copy read as a Linear weight
 * (other folded constants, such as Gemma's 1 + weight, are no parameter). */
static void consumer(struct gf_weights *w, const struct gf_value *v, const struct gf_node *n,
                     int slot, bool transposed, bool own)
{
    struct role r;
    bool has_role = role_of(n, slot, v->init, &r);
    const char *found[8];
    int k = fx_params(w, n, found, 8);
    if (k >= 0) {
        const char *pick = pick_param(found, k, &r);
        if (pick)
            add(w, pick, strlen(pick), v, transposed != r.transposed, FX_PARAM);
        bool reads_v = false;
        for (int i = 0; i < k; i++)
            reads_v |= strcmp(found[i], v->name) == 0;
        if (has_role && own && reads_v)
            add_module_name(w, v, n, &r, transposed);
    } else if (has_role && (own || ((op_is(n, "MatMul") || op_is(n, "Gemm")) &&
                                    !strcmp(r.attr, "weight")))) {
        add_module_name(w, v, n, &r, transposed);
    }
}

/* The uses of value x, which carries initializer v's values (transposed or not). */
static void visit(struct gf_weights *w, const struct gf_value *v, const struct gf_value *x,
                  bool transposed, bool own, int depth)
{
    for (size_t i = 0; i < x->n_uses && depth < MAX_DEPTH; i++) {
        const struct gf_node *n = x->uses[i].node;
        int slot = x->uses[i].slot;
        const struct gf_value *out = n->n_outputs ? n->outputs[0] : NULL;
        if (slot < 0)
            continue;
        if ((op_is(n, "Identity") || op_is(n, "Cast")) && out) {
            if (torch_like(out->name) && (!w->n_sig || is_param_target(w, out->name)))
                add(w, out->name, strlen(out->name), v, transposed, ALIAS_NAME);
            visit(w, v, out, transposed, own, depth + 1);
        } else if (op_is(n, "Transpose") && out && v->init->rank == 2) {
            visit(w, v, out, !transposed, own, depth + 1);
        } else {
            consumer(w, v, n, slot, transposed, own);
        }
    }
}

static bool is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_FLOAT16 || t == GF_BFLOAT16 || t == GF_DOUBLE;
}

/* Its own name: a parameter path (in the signature when there is one; else
 * ending in .weight / .bias, or read in a parameter's role). */
static bool own_name_is_param(const struct gf_weights *w, const struct gf_value *v)
{
    if (!torch_like(v->name))
        return false;
    if (w->n_sig)
        return is_param_target(w, v->name);
    if (ends_with(v->name, ".weight") || ends_with(v->name, ".bias"))
        return true;
    struct role r;
    for (size_t i = 0; i < v->n_uses; i++)
        if (v->uses[i].slot >= 0 && role_of(v->uses[i].node, v->uses[i].slot, v->init, &r))
            return true;
    return false;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

enum gf_status gf_weights_map(const struct gf_model *m, struct gf_weights **out)
{
    *out = NULL;
    struct gf_weights *w = calloc(1, sizeof(*w));
    const struct gf_graph *g = m->graph;
    if (!w || !(w->skipped = calloc(g->n_inits + 1, sizeof(*w->skipped)))) {
        free(w);
        return gf_error(GF_ERR_NOMEM, "out of memory mapping weights");
    }
    w->m = m;
    read_signature(w, g);
    for (size_t i = 0; i < g->n_inits && !w->oom; i++) {
        const struct gf_value *v = g->inits[i];
        if (!strncmp(v->name, STATE_PREFIX, strlen(STATE_PREFIX))) {
            w->n_state++;
            continue;
        }
        if (!is_float(v->init->dtype))
            continue;
        w->hit = false;
        bool own = own_name_is_param(w, v);
        if (own)
            add(w, v->name, strlen(v->name), v, false, OWN_NAME);
        visit(w, v, v, false, own, 0);
        if (!w->hit)
            w->skipped[w->n_skipped++] = v->name;
        else
            w->n_copies++; /* until an entry is found to come from it */
    }
    for (size_t i = 0; i < g->n_inits; i++) {
        bool used = false;
        for (size_t k = 0; k < w->n && !used; k++)
            used = w->e[k].v == g->inits[i];
        w->n_copies -= used;
    }
    if (w->oom) {
        gf_weights_free(w);
        return gf_error(GF_ERR_NOMEM, "out of memory mapping weights");
    }
    if (w->n == 0) {
        gf_weights_free(w);
        return gf_error(GF_ERR_INVALID, "no initializer holds a PyTorch module parameter "
                        "(parameter names, legacy node names or dynamo metadata)");
    }
    qsort(w->e, w->n, sizeof(*w->e), by_name);
    if (!(w->unread = calloc(w->n_sig + 1, sizeof(*w->unread)))) {
        gf_weights_free(w);
        return gf_error(GF_ERR_NOMEM, "out of memory mapping weights");
    }
    for (size_t i = 0; i < w->n_sig; i++) {
        struct entry key = {.name = w->sig_target[i]};
        if (!bsearch(&key, w->e, w->n, sizeof(*w->e), by_name))
            w->unread[w->n_unread++] = w->sig_target[i];
    }
    *out = w;
    return GF_OK;
}

void gf_weights_free(struct gf_weights *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->e[i].name);
    for (size_t i = 0; i < w->n_sig; i++) {
        free(w->sig_ph[i]);
        free(w->sig_target[i]);
    }
    free(w->sig_ph);
    free(w->sig_target);
    free(w->e);
    free(w->skipped);
    free(w->unread);
    free(w);
}

size_t gf_weights_count(const struct gf_weights *w)
{
    return w->n;
}

void gf_weights_get(const struct gf_weights *w, size_t i, struct gf_weight_info *out)
{
    const struct entry *e = &w->e[i];
    *out = (struct gf_weight_info){e->name, e->v->name, e->v->init, e->transposed};
}

size_t gf_weights_skipped_count(const struct gf_weights *w)
{
    return w->n_skipped;
}

const char *gf_weights_get_skipped(const struct gf_weights *w, size_t i)
{
    return w->skipped[i];
}

size_t gf_weights_unread_count(const struct gf_weights *w)
{
    return w->n_unread;
}

const char *gf_weights_get_unread(const struct gf_weights *w, size_t i)
{
    return w->unread[i];
}

size_t gf_weights_copy_count(const struct gf_weights *w)
{
    return w->n_copies;
}

size_t gf_weights_state_count(const struct gf_weights *w)
{
    return w->n_state;
}

enum gf_status gf_weights_save_safetensors(const struct gf_weights *w, const char *path,
                                           size_t *bytes)
{
    struct gf_safetensor *t = calloc(w->n + 1, sizeof(*t));
    if (!t)
        return gf_error(GF_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < w->n; i++) {
        const struct gf_tensor *x = w->e[i].v->init;
        t[i] = (struct gf_safetensor){w->e[i].name, x->dtype, x->rank, x->dims, x->data,
                                      w->e[i].transposed};
    }
    static const struct gf_kv meta[] = {{"format", "pt"}, {"producer", "graphfuse " GF_VERSION}};
    enum gf_status st = gf_safetensors_write(path, w->n, t, 2, meta, bytes);
    free(t);
    return st;
}

/* ---- the safetensors writer ------------------------------------------------------
 *
 * [8 bytes: N, little-endian] [N bytes: JSON header, space-padded to a
 * multiple of 8] [data: each tensor's bytes, little-endian, row-major]
 * The header maps each name to {"dtype", "shape", "data_offsets": [begin,
 * end)} relative to the start of the data, plus "__metadata__" (strings).
 * Tensors are laid out by element size, largest first, then by name, so
 * that every tensor is aligned to its element size (as safetensors does). */

static const char *st_dtype(enum gf_dtype t)
{
    switch (t) {
    case GF_FLOAT: return "F32";
    case GF_FLOAT16: return "F16";
    case GF_BFLOAT16: return "BF16";
    case GF_DOUBLE: return "F64";
    case GF_INT64: return "I64";
    case GF_INT32: return "I32";
    case GF_INT16: return "I16";
    case GF_INT8: return "I8";
    case GF_UINT64: return "U64";
    case GF_UINT32: return "U32";
    case GF_UINT16: return "U16";
    case GF_UINT8: return "U8";
    case GF_BOOL: return "BOOL";
    case GF_FLOAT8E4M3FN: return "F8_E4M3";
    case GF_FLOAT8E5M2: return "F8_E5M2";
    default: return NULL;
    }
}

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void puts_(struct sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* s as a JSON string: quotes, backslashes and control characters escaped. */
static void put_json(struct sbuf *b, const char *s)
{
    put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\', esc[1] = (char)*p;
            put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", *p);
            put(b, esc, 6);
        } else {
            put(b, (const char *)p, 1);
        }
    }
    put(b, "\"", 1);
}

static size_t elem_size(const struct gf_safetensor *t)
{
    return gf_dtype_size(t->dtype);
}

static size_t st_nelem(const struct gf_safetensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

static int by_layout(const void *a, const void *b, void *base)
{
    const struct gf_safetensor *x = (const struct gf_safetensor *)base + *(const size_t *)a;
    const struct gf_safetensor *y = (const struct gf_safetensor *)base + *(const size_t *)b;
    size_t ex = elem_size(x), ey = elem_size(y);
    return ex != ey ? (ex < ey ? 1 : -1) : strcmp(x->name, y->name);
}

/* Each tensor's name, dtype and shape are checked, and their order
 * (order[k] = index of the k-th tensor in the file) chosen. */
static enum gf_status check_tensors(const char *path, size_t n, const struct gf_safetensor *t,
                                    size_t *order)
{
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !*t[i].name || !strcmp(t[i].name, "__metadata__"))
            return gf_error(GF_ERR_ARG, "%s: tensor %zu has no usable name", path, i);
        if (!st_dtype(t[i].dtype))
            return gf_error(GF_ERR_UNSUPPORTED, "%s: tensor '%s': safetensors has no %s type",
                            path, t[i].name, gf_dtype_name(t[i].dtype));
        if (t[i].rank < 0 || (t[i].transpose && t[i].rank != 2))
            return gf_error(GF_ERR_ARG, "%s: tensor '%s': rank %d%s", path, t[i].name,
                            t[i].rank, t[i].transpose ? " cannot be transposed" : "");
        for (int d = 0; d < t[i].rank; d++)
            if (t[i].dims[d] < 0)
                return gf_error(GF_ERR_ARG, "%s: tensor '%s' has a negative dimension", path,
                                t[i].name);
        if (!t[i].data && st_nelem(&t[i]))
            return gf_error(GF_ERR_ARG, "%s: tensor '%s' has no data", path, t[i].name);
        order[i] = i;
    }
    qsort_r(order, n, sizeof(*order), by_layout, (void *)t);
    for (size_t k = 1; k < n; k++)
        for (size_t j = 0; j < k; j++)
            if (!strcmp(t[order[j]].name, t[order[k]].name))
                return gf_error(GF_ERR_ARG, "%s: tensor name '%s' given twice", path,
                                t[order[k]].name);
    return GF_OK;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static enum gf_status build_header(const char *path, size_t n, const struct gf_safetensor *t,
                                   const size_t *order, size_t n_meta, const struct gf_kv *meta,
                                   struct sbuf *b)
{
    char num[64];
    uint64_t off = 0;
    puts_(b, "{");
    if (n_meta) {
        puts_(b, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta; i++) {
            puts_(b, i ? "," : "");
            put_json(b, meta[i].key);
            puts_(b, ":");
            put_json(b, meta[i].value);
        }
        puts_(b, "}");
    }
    for (size_t k = 0; k < n; k++) {
        const struct gf_safetensor *x = &t[order[k]];
        puts_(b, k || n_meta ? "," : "");
        put_json(b, x->name);
        puts_(b, ":{\"dtype\":\"");
        puts_(b, st_dtype(x->dtype));
        puts_(b, "\",\"shape\":[");
        for (int d = 0; d < x->rank; d++) {
            int64_t dim = x->dims[x->transpose ? 1 - d : d];
            snprintf(num, sizeof(num), "%s%lld", d ? "," : "", (long long)dim);
            puts_(b, num);
        }
        uint64_t end = off + (uint64_t)gf_dtype_bytes(x->dtype, st_nelem(x));
        snprintf(num, sizeof(num), "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)end);
        puts_(b, num);
        off = end;
    }
    puts_(b, "}");
    while (b->len % 8)
        puts_(b, " ");
    return b->oom ? gf_error(GF_ERR_NOMEM, "%s: out of memory building the header", path)
                  : GF_OK;
}

/* Writes x's data, transposed when asked (buf: scratch of its size). */
static bool write_data(FILE *f, const struct gf_safetensor *x)
{
    size_t es = elem_size(x), n = st_nelem(x);
    if (!n)
        return true;
    if (!x->transpose)
        return fwrite(x->data, es, n, f) == n;
    size_t rows = (size_t)x->dims[0], cols = (size_t)x->dims[1];
    unsigned char *buf = malloc(es * rows); /* one output row: column j of the input */
    const unsigned char *in = x->data;
    bool ok = buf != NULL;
    for (size_t j = 0; ok && j < cols; j++) {
        for (size_t i = 0; i < rows; i++)
            memcpy(buf + i * es, in + (i * cols + j) * es, es);
        ok = fwrite(buf, es, rows, f) == rows;
    }
    free(buf);
    return ok;
}

static enum gf_status write_file(const char *path, char *tmp, FILE *f, size_t n,
                                 const struct gf_safetensor *t, const size_t *order,
                                 const struct sbuf *h)
{
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)h->len >> (8 * i));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h->p, 1, h->len, f) == h->len;
    for (size_t k = 0; ok && k < n; k++)
        ok = write_data(f, &t[order[k]]);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        gf_file_temp_discard(tmp);
        return gf_error(GF_ERR_IO, "%s: write failed: %s", path, strerror(err ? err : errno));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        gf_file_temp_discard(tmp);
        return gf_error(GF_ERR_IO, "%s: cannot rename into place: %s", path, strerror(err));
    }
    gf_file_temp_done(tmp);
    return GF_OK;
}

/* A temporary file next to path (path.tmp.XXXXXX), created exclusively
 * with the mode of the file it replaces (gf_file_create_temp). */
static FILE *open_temp(const char *path, char **tmp)
{
    int fd = gf_file_create_temp(path, tmp);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        gf_file_temp_discard(*tmp);
        errno = e;
    }
    return f;
}

enum gf_status gf_safetensors_write(const char *path, size_t n, const struct gf_safetensor *t,
                                    size_t n_meta, const struct gf_kv *meta, size_t *bytes)
{
    size_t *order = malloc((n + 1) * sizeof(*order));
    struct sbuf h = {0};
    char *tmp = NULL;
    enum gf_status st = order ? check_tensors(path, n, t, order)
                                     : gf_error(GF_ERR_NOMEM, "%s: out of memory", path);
    if (st == GF_OK)
        st = build_header(path, n, t, order, n_meta, meta, &h);
    FILE *f = NULL;
    if (st == GF_OK && !(f = open_temp(path, &tmp)))
        st = gf_error(GF_ERR_IO, "%s: cannot create file: %s", path, strerror(errno));
    if (st == GF_OK)
        st = write_file(path, tmp, f, n, t, order, &h);
    if (st == GF_OK && bytes) {
        *bytes = 8 + h.len;
        for (size_t i = 0; i < n; i++)
            *bytes += gf_dtype_bytes(t[i].dtype, st_nelem(&t[i]));
    }
    free(h.p);
    free(tmp);
    free(order);
    return st;
}

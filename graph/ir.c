/* The IR: models, graphs, values and nodes, and the editing API that keeps
 * producers and uses consistent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gf_half.h"
#include "internal.h"

/* ---- model ------------------------------------------------------------- */

void *gf_model_alloc(struct gf_model *m, size_t size)
{
    return gf_arena_alloc(m->priv->arena, size);
}

const char *gf_model_strdup(struct gf_model *m, const char *s)
{
    return s ? gf_arena_strndup(m->priv->arena, s, strlen(s)) : NULL;
}

static struct gf_model *model_alloc(void)
{
    struct gf_model *m = calloc(1, sizeof(*m));
    struct gf_model_priv *p = calloc(1, sizeof(*p));
    struct gf_arena *a = gf_arena_new();
    if (!m || !p || !a) {
        free(m);
        free(p);
        gf_arena_free(a);
        return NULL;
    }
    p->arena = a;
    m->priv = p;
    m->dir = ".";
    return m;
}

struct gf_model *gf_model_new(int64_t ir_version, const char *name)
{
    struct gf_model *m = model_alloc();
    if (!m)
        return NULL;
    m->ir_version = ir_version;
    m->graph = gf_graph_create(m, NULL, NULL);
    if (!m->graph) {
        gf_model_free(m);
        return NULL;
    }
    m->graph->name = gf_model_strdup(m, name);
    return m;
}

/* Used by load.c, which fills the model itself. */
struct gf_model *gf_model_alloc_empty(void)
{
    return model_alloc();
}

static void graph_free_arrays(struct gf_graph *g)
{
    for (size_t i = 0; i < g->n_values; i++)
        free(g->values[i]->uses);
    free(g->values);
    free(g->inputs);
    free(g->outputs);
    free(g->inits);
    free(g->priv->table);
}

void gf_model_free(struct gf_model *m)
{
    if (!m)
        return;
    struct gf_model_priv *p = m->priv;
    for (size_t i = 0; i < p->n_graphs; i++)
        graph_free_arrays(p->graphs[i]);
    free(p->graphs);
    for (struct gf_mapping *map = p->mappings; map;) {
        struct gf_mapping *next = map->next;
        gf_unmap(map->addr, map->len);
        free(map);
        map = next;
    }
    gf_arena_free(p->arena);
    free(p);
    free(m);
}

int64_t gf_model_opset(const struct gf_model *m, const char *domain)
{
    if (!domain || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    for (size_t i = 0; i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain ? m->opsets[i].domain : "";
        if (strcmp(d, "ai.onnx") == 0)
            d = "";
        if (strcmp(d, domain) == 0)
            return m->opsets[i].version;
    }
    return 0;
}

enum gf_status gf_model_set_opset(struct gf_model *m, const char *domain,
                                  int64_t version)
{
    if (!domain)
        domain = "";
    for (size_t i = 0; i < m->n_opsets; i++) {
        if (strcmp(m->opsets[i].domain ? m->opsets[i].domain : "", domain) == 0) {
            m->opsets[i].version = version;
            return GF_OK;
        }
    }
    struct gf_opset *o = gf_model_alloc(m, (m->n_opsets + 1) * sizeof(*o));
    if (!o)
        return gf_error(GF_ERR_NOMEM, "out of memory adding opset import");
    if (m->n_opsets)
        memcpy(o, m->opsets, m->n_opsets * sizeof(*o));
    o[m->n_opsets].domain = gf_model_strdup(m, domain);
    o[m->n_opsets].version = version;
    m->opsets = o;
    m->n_opsets++;
    return GF_OK;
}

void gf_model_param_count(const struct gf_model *m, size_t *elems, size_t *bytes)
{
    size_t e = 0, b = 0;
    for (size_t i = 0; i < m->graph->n_inits; i++) {
        const struct gf_tensor *t = m->graph->inits[i]->init;
        e += t->nelem;
        b += t->nbytes;
    }
    *elems = e;
    *bytes = b;
}

/* ---- growable arrays (malloc'ed, freed with the model) ------------------ */

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 8;
    while (c < need)
        c *= 2;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

static struct gf_attr *attr_slot(struct gf_node *n, const char *name);

/* ---- graph ------------------------------------------------------------- */

struct gf_graph *gf_graph_create(struct gf_model *m, struct gf_graph *parent,
                                 struct gf_node *owner)
{
    struct gf_model_priv *p = m->priv;
    if (!grow((void **)&p->graphs, &p->cap_graphs, p->n_graphs + 1, sizeof(void *)))
        return NULL;
    struct gf_graph *g = gf_model_alloc(m, sizeof(*g));
    struct gf_graph_priv *gp = gf_model_alloc(m, sizeof(*gp));
    if (!g || !gp)
        return NULL;
    g->model = m;
    g->parent = parent;
    g->owner = owner;
    g->priv = gp;
    p->graphs[p->n_graphs++] = g;
    return g;
}

/* ---- model-local functions ------------------------------------------------- */

struct gf_function *gf_function_new(struct gf_model *m, const char *name, const char *domain)
{
    struct gf_function *f = gf_model_alloc(m, sizeof(*f));
    struct gf_graph *body = f ? gf_graph_create(m, NULL, NULL) : NULL;
    if (!body) {
        gf_error(GF_ERR_NOMEM, "out of memory creating function %s", name ? name : "");
        return NULL;
    }
    f->name = gf_model_strdup(m, name);
    f->domain = gf_model_strdup(m, domain);
    body->name = f->name;
    f->body = body;
    return f;
}

enum gf_status gf_model_add_function(struct gf_model *m, struct gf_function *fn)
{
    /* the list lives in the arena (a loaded model's is sized exactly) */
    struct gf_function **list = gf_model_alloc(m, (m->n_functions + 2) * sizeof(*list));
    if (!list)
        return gf_error(GF_ERR_NOMEM, "out of memory adding function %s", fn->name);
    if (m->n_functions)
        memcpy(list, m->functions, m->n_functions * sizeof(*list));
    list[m->n_functions++] = fn;
    m->functions = list;
    return GF_OK;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool table_insert(struct gf_graph_priv *p, struct gf_value *v)
{
    size_t mask = p->table_cap - 1;
    for (size_t i = hash_name(v->name) & mask;; i = (i + 1) & mask) {
        if (!p->table[i]) {
            p->table[i] = v;
            return true;
        }
    }
}

static bool table_grow(struct gf_graph *g)
{
    struct gf_graph_priv *p = g->priv;
    size_t cap = p->table_cap ? p->table_cap * 2 : 64;
    struct gf_value **old = p->table;
    size_t old_cap = p->table_cap;
    p->table = calloc(cap, sizeof(*p->table));
    if (!p->table) {
        p->table = old;
        return false;
    }
    p->table_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i])
            table_insert(p, old[i]);
    free(old);
    return true;
}

struct gf_value *gf_graph_find(const struct gf_graph *g, const char *name)
{
    const struct gf_graph_priv *p = g->priv;
    if (!name || !p->table_cap)
        return NULL;
    size_t mask = p->table_cap - 1;
    for (size_t i = hash_name(name) & mask; p->table[i]; i = (i + 1) & mask)
        if (strcmp(p->table[i]->name, name) == 0)
            return p->table[i];
    return NULL;
}

struct gf_value *gf_graph_lookup(const struct gf_graph *g, const char *name)
{
    for (; g; g = g->parent) {
        struct gf_value *v = gf_graph_find(g, name);
        if (v)
            return v;
    }
    return NULL;
}

const char *gf_graph_unique_name(struct gf_graph *g, const char *hint)
{
    char buf[256];
    if (!hint || !*hint)
        hint = "t";
    if (!gf_graph_lookup(g, hint))
        return gf_model_strdup(g->model, hint);
    do
        snprintf(buf, sizeof(buf), "%.200s_%u", hint, ++g->priv->name_counter);
    while (gf_graph_lookup(g, buf));
    return gf_model_strdup(g->model, buf);
}

struct gf_value *gf_graph_new_value(struct gf_graph *g, const char *name,
                                    const char *hint)
{
    struct gf_graph_priv *p = g->priv;
    if (name && gf_graph_find(g, name)) {
        gf_error(GF_ERR_INVALID, "value '%s' is defined twice", name);
        return NULL;
    }
    struct gf_value *v = gf_model_alloc(g->model, sizeof(*v));
    if (!v)
        goto oom;
    v->name = name ? gf_model_strdup(g->model, name) : gf_graph_unique_name(g, hint);
    if (!v->name)
        goto oom;
    v->graph = g;
    v->type.rank = -1;
    v->producer_slot = -1;
    if ((g->n_values + 1) * 2 > p->table_cap && !table_grow(g))
        goto oom;
    if (!grow((void **)&g->values, &p->cap_values, g->n_values + 1, sizeof(void *)))
        goto oom;
    v->id = (int)g->n_values;
    g->values[g->n_values++] = v;
    table_insert(p, v);
    return v;
oom:
    gf_error(GF_ERR_NOMEM, "out of memory creating value '%s'", name ? name : "");
    return NULL;
}

enum gf_status gf_graph_add_input(struct gf_graph *g, struct gf_value *v)
{
    if (!grow((void **)&g->inputs, &g->priv->cap_inputs, g->n_inputs + 1, sizeof(void *)))
        return gf_error(GF_ERR_NOMEM, "out of memory adding input");
    g->inputs[g->n_inputs++] = v;
    v->is_input = true;
    return GF_OK;
}

enum gf_status gf_graph_add_output(struct gf_graph *g, struct gf_value *v)
{
    if (!grow((void **)&g->outputs, &g->priv->cap_outputs, g->n_outputs + 1,
              sizeof(void *)))
        return gf_error(GF_ERR_NOMEM, "out of memory adding output");
    g->outputs[g->n_outputs++] = v;
    v->is_output = true;
    return GF_OK;
}

static void refresh_output_flag(struct gf_graph *g, struct gf_value *v)
{
    v->is_output = false;
    for (size_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v)
            v->is_output = true;
}

void gf_graph_set_output(struct gf_graph *g, size_t i, struct gf_value *v)
{
    struct gf_value *old = g->outputs[i];
    g->outputs[i] = v;
    if (old)
        refresh_output_flag(g, old);
    if (v)
        v->is_output = true;
}

enum gf_status gf_graph_remove_output(struct gf_graph *g, size_t i)
{
    if (i >= g->n_outputs)
        return gf_error(GF_ERR_ARG, "graph '%s' has no output %zu (it has %zu)",
                        g->name ? g->name : "", i, g->n_outputs);
    struct gf_value *v = g->outputs[i];
    memmove(g->outputs + i, g->outputs + i + 1, (g->n_outputs - i - 1) * sizeof(*g->outputs));
    g->n_outputs--;
    if (v)
        refresh_output_flag(g, v);
    return GF_OK;
}

enum gf_status gf_graph_list_init(struct gf_graph *g, struct gf_value *v)
{
    if (!grow((void **)&g->inits, &g->priv->cap_inits, g->n_inits + 1, sizeof(void *)))
        return gf_error(GF_ERR_NOMEM, "out of memory adding initializer");
    g->inits[g->n_inits++] = v;
    return GF_OK;
}

struct gf_value *gf_graph_add_initializer(struct gf_graph *g, const char *name,
                                          struct gf_tensor *t)
{
    struct gf_value *v = gf_graph_new_value(g, name, name ? NULL : "const");
    if (!v || gf_graph_list_init(g, v) != GF_OK)
        return NULL;
    v->init = t;
    t->name = v->name;
    gf_value_set_tensor_type(v, t->dtype, 0, NULL);
    v->type.rank = t->rank;
    v->type.dims = gf_model_alloc(g->model, (size_t)t->rank * sizeof(struct gf_dim) + 1);
    for (int i = 0; i < t->rank; i++)
        v->type.dims[i].value = t->dims[i];
    return v;
}

/* ---- uses ---------------------------------------------------------------- */

/* The ancestor of `n` (itself included) that lives in graph `g`. */
static struct gf_node *ancestor_in(struct gf_node *n, const struct gf_graph *g)
{
    while (n && n->graph != g)
        n = n->graph->owner;
    return n;
}

static enum gf_status push_use(struct gf_value *v, struct gf_node *n, int slot)
{
    if (!grow((void **)&v->uses, &v->cap_uses, v->n_uses + 1, sizeof(*v->uses)))
        return gf_error(GF_ERR_NOMEM, "out of memory recording use of '%s'", v->name);
    v->uses[v->n_uses].node = n;
    v->uses[v->n_uses].slot = slot;
    v->n_uses++;
    return GF_OK;
}

static void pop_use(struct gf_value *v, struct gf_node *n, int slot)
{
    for (size_t i = 0; i < v->n_uses; i++) {
        if (v->uses[i].node == n && v->uses[i].slot == slot) {
            memmove(&v->uses[i], &v->uses[i + 1], (v->n_uses - i - 1) * sizeof(*v->uses));
            v->n_uses--;
            return;
        }
    }
}

/* A node inside a subgraph reading an outer value also gives the value an
 * implicit use by the subgraph's owner in the value's own graph. */
enum gf_status gf_value_add_use(struct gf_value *v, struct gf_node *n, int slot)
{
    if (push_use(v, n, slot) != GF_OK)
        return GF_ERR_NOMEM;
    struct gf_node *anc = v->graph != n->graph ? ancestor_in(n, v->graph) : NULL;
    return anc ? push_use(v, anc, -1) : GF_OK;
}

void gf_value_remove_use(struct gf_value *v, struct gf_node *n, int slot)
{
    pop_use(v, n, slot);
    struct gf_node *anc = v->graph != n->graph ? ancestor_in(n, v->graph) : NULL;
    if (anc)
        pop_use(v, anc, -1);
}

size_t gf_value_use_count(const struct gf_value *v)
{
    size_t n = v->n_uses;
    for (size_t i = 0; i < v->graph->n_outputs; i++)
        n += v->graph->outputs[i] == v;
    return n;
}

/* True when graph `g` is `n`'s subgraph or nested inside one. */
static bool graph_inside(const struct gf_graph *g, const struct gf_node *n)
{
    for (; g && g->owner; g = g->owner->graph)
        if (g->owner == n)
            return true;
    return false;
}

/* Drops the uses that nodes inside `sub` (at any depth) make of values
 * defined outside `owner`'s subgraphs, as when `owner` is removed. */
static void drop_subgraph_uses(struct gf_node *owner, const struct gf_graph *sub)
{
    for (struct gf_node *n = sub->first; n; n = n->next) {
        for (size_t i = 0; i < n->n_inputs; i++) {
            struct gf_value *v = n->inputs[i];
            if (v && !graph_inside(v->graph, owner))
                gf_value_remove_use(v, n, (int)i);
        }
        for (size_t a = 0; a < n->n_attrs; a++) {
            const struct gf_attr *at = &n->attrs[a];
            if (at->type == GF_ATTR_GRAPH && at->g)
                drop_subgraph_uses(owner, at->g);
            for (size_t k = 0; at->type == GF_ATTR_GRAPHS && k < at->n; k++)
                drop_subgraph_uses(owner, at->graphs[k]);
        }
    }
}

struct gf_graph *gf_node_add_subgraph(struct gf_node *n, const char *attr_name)
{
    struct gf_graph *g = gf_graph_create(n->graph->model, n->graph, n);
    struct gf_attr *a = g ? attr_slot(n, attr_name) : NULL;
    if (!a) {
        gf_error(GF_ERR_NOMEM, "out of memory adding subgraph %s", attr_name);
        return NULL;
    }
    a->type = GF_ATTR_GRAPH;
    a->g = g;
    g->name = gf_model_strdup(n->graph->model, attr_name);
    return g;
}

/* ---- nodes --------------------------------------------------------------- */

static void list_append(struct gf_graph *g, struct gf_node *n)
{
    n->prev = g->last;
    n->next = NULL;
    if (g->last)
        g->last->next = n;
    else
        g->first = n;
    g->last = n;
}

static void list_unlink(struct gf_graph *g, struct gf_node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        g->first = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        g->last = n->prev;
    n->prev = n->next = NULL;
}

struct gf_node *gf_graph_add_node(struct gf_graph *g, const char *op_type,
                                  const char *domain, const char *name,
                                  size_t n_inputs, struct gf_value *const *inputs,
                                  size_t n_outputs, struct gf_value *const *outputs)
{
    struct gf_model *m = g->model;
    struct gf_node *n = gf_model_alloc(m, sizeof(*n));
    if (!n)
        goto oom;
    n->op_type = gf_model_strdup(m, op_type);
    n->domain = gf_model_strdup(m, domain);
    n->name = gf_model_strdup(m, name);
    n->op = gf_op_lookup(domain, op_type);
    n->graph = g;
    n->id = g->priv->next_node_id++;
    n->inputs = gf_model_alloc(m, (n_inputs + 1) * sizeof(void *));
    n->outputs = gf_model_alloc(m, (n_outputs + 1) * sizeof(void *));
    if (!n->inputs || !n->outputs)
        goto oom;
    n->n_inputs = n_inputs;
    n->n_outputs = n_outputs;
    for (size_t i = 0; i < n_outputs; i++) {
        struct gf_value *v = outputs ? outputs[i] : NULL;
        if (v && v->producer) {
            gf_error(GF_ERR_INVALID, "value '%s' is produced twice (by '%s' and '%s')",
                     v->name, v->producer->op_type, op_type);
            return NULL;
        }
        n->outputs[i] = v;
        if (v) {
            v->producer = n;
            v->producer_slot = (int)i;
        }
    }
    for (size_t i = 0; i < n_inputs; i++) {
        n->inputs[i] = inputs ? inputs[i] : NULL;
        if (n->inputs[i] && gf_value_add_use(n->inputs[i], n, (int)i) != GF_OK)
            return NULL;
    }
    list_append(g, n);
    g->n_nodes++;
    return n;
oom:
    gf_error(GF_ERR_NOMEM, "out of memory creating node %s", op_type);
    return NULL;
}

void gf_node_move_before(struct gf_node *n, struct gf_node *before)
{
    struct gf_graph *g = n->graph;
    list_unlink(g, n);
    if (!before) {
        list_append(g, n);
        return;
    }
    n->next = before;
    n->prev = before->prev;
    if (before->prev)
        before->prev->next = n;
    else
        g->first = n;
    before->prev = n;
}

void gf_graph_remove_node(struct gf_graph *g, struct gf_node *n)
{
    for (size_t i = 0; i < n->n_inputs; i++)
        if (n->inputs[i])
            gf_value_remove_use(n->inputs[i], n, (int)i);
    for (size_t a = 0; a < n->n_attrs; a++) {
        const struct gf_attr *at = &n->attrs[a];
        if (at->type == GF_ATTR_GRAPH && at->g)
            drop_subgraph_uses(n, at->g);
        for (size_t k = 0; at->type == GF_ATTR_GRAPHS && k < at->n; k++)
            drop_subgraph_uses(n, at->graphs[k]);
    }
    for (size_t i = 0; i < n->n_outputs; i++) {
        if (n->outputs[i] && n->outputs[i]->producer == n) {
            n->outputs[i]->producer = NULL;
            n->outputs[i]->producer_slot = -1;
        }
    }
    list_unlink(g, n);
    g->n_nodes--;
}

void gf_node_set_input(struct gf_node *n, size_t i, struct gf_value *v)
{
    if (n->inputs[i])
        gf_value_remove_use(n->inputs[i], n, (int)i);
    n->inputs[i] = v;
    if (v)
        gf_value_add_use(v, n, (int)i);
}

enum gf_status gf_node_set_inputs(struct gf_node *n, size_t count,
                                  struct gf_value *const *inputs)
{
    for (size_t i = 0; i < n->n_inputs; i++)
        if (n->inputs[i])
            gf_value_remove_use(n->inputs[i], n, (int)i);
    if (count > n->n_inputs) {
        n->inputs = gf_model_alloc(n->graph->model, (count + 1) * sizeof(void *));
        if (!n->inputs)
            return gf_error(GF_ERR_NOMEM, "out of memory setting inputs");
    }
    n->n_inputs = count;
    for (size_t i = 0; i < count; i++) {
        n->inputs[i] = inputs[i];
        if (inputs[i] && gf_value_add_use(inputs[i], n, (int)i) != GF_OK)
            return GF_ERR_NOMEM;
    }
    return GF_OK;
}

enum gf_status gf_node_set_output(struct gf_node *n, size_t i, struct gf_value *v)
{
    char lab[160];
    if (i >= n->n_outputs || (v && v->producer) || (v && v->graph != n->graph))
        return gf_error(GF_ERR_ARG, "%s: cannot make '%s' its output %zu",
                        gf_node_label(n, lab, sizeof(lab)), v ? v->name : "", i);
    struct gf_value *old = n->outputs[i];
    if (old && old->producer == n) {
        old->producer = NULL;
        old->producer_slot = -1;
    }
    n->outputs[i] = v;
    if (v) {
        v->producer = n;
        v->producer_slot = (int)i;
    }
    return GF_OK;
}

enum gf_status gf_value_set_initializer(struct gf_value *v, struct gf_tensor *t)
{
    struct gf_graph *g = v->graph;
    if (v->producer || (t && t->dtype == GF_STRING))
        return gf_error(GF_ERR_ARG, "value '%s' cannot become an initializer", v->name);
    if (!t) {
        size_t k = 0;
        for (size_t i = 0; i < g->n_inits; i++)
            if (g->inits[i] != v)
                g->inits[k++] = g->inits[i];
        g->n_inits = k;
        v->init = NULL;
        return GF_OK;
    }
    if (!v->init && gf_graph_list_init(g, v) != GF_OK)
        return GF_ERR_NOMEM;
    v->init = t;
    t->name = v->name;
    gf_value_set_tensor_type(v, t->dtype, t->rank, NULL);
    for (int i = 0; i < t->rank && v->type.dims; i++)
        v->type.dims[i].value = t->dims[i];
    return GF_OK;
}

void gf_value_replace_uses(struct gf_value *from, struct gf_value *to)
{
    /* implicit uses (slot -1) follow their explicit use */
    for (size_t i = from->n_uses; i-- > 0;) {
        if (i >= from->n_uses || from->uses[i].slot < 0)
            continue;
        struct gf_use u = from->uses[i];
        gf_node_set_input(u.node, (size_t)u.slot, to);
    }
    struct gf_graph *g = from->graph;
    for (size_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == from)
            gf_graph_set_output(g, i, to);
}

/* ---- topological order ---------------------------------------------------- */

static void heap_push(size_t *h, size_t *n, size_t x)
{
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2] > x) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static size_t heap_pop(size_t *h, size_t *n)
{
    size_t top = h[0], x = h[--(*n)], i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= x)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

/* Kahn's algorithm over the node list, taking nodes in their current order
 * whenever they are ready, so an already sorted graph is left unchanged. */
enum gf_status gf_graph_toposort(struct gf_graph *g)
{
    size_t n = g->n_nodes, k = 0;
    if (n == 0)
        return GF_OK;
    struct gf_node **order = malloc(n * sizeof(*order));
    int *pending = calloc(n, sizeof(*pending));
    struct gf_node **byidx = malloc(n * sizeof(*byidx));
    if (!order || !pending || !byidx) {
        free(order);
        free(pending);
        free(byidx);
        return gf_error(GF_ERR_NOMEM, "out of memory sorting graph");
    }
    /* aux holds the node's index during the sort */
    size_t idx = 0;
    for (struct gf_node *nd = g->first; nd; nd = nd->next, idx++) {
        nd->aux = (void *)(uintptr_t)idx;
        byidx[idx] = nd;
    }
    for (size_t i = 0; i < n; i++) {
        struct gf_node *nd = byidx[i];
        for (size_t j = 0; j < nd->n_outputs; j++) {
            struct gf_value *v = nd->outputs[j];
            if (!v || v->producer != nd)
                continue;
            for (size_t u = 0; u < v->n_uses; u++)
                if (v->uses[u].node->graph == g)
                    pending[(uintptr_t)v->uses[u].node->aux]++;
        }
    }
    /* ready nodes in a min-heap of list positions: the earliest ready node
     * goes next, so a sorted graph keeps its order and the sort is
     * O(n log n) whatever the input order. */
    bool *done = calloc(n, sizeof(*done));
    size_t *heap = malloc(n * sizeof(*heap)), hn = 0;
    if (!done || !heap) {
        free(done);
        free(heap);
        free(order);
        free(pending);
        free(byidx);
        return gf_error(GF_ERR_NOMEM, "out of memory sorting graph");
    }
    for (size_t i = 0; i < n; i++)
        if (!pending[i])
            heap_push(heap, &hn, i);
    while (hn) {
        size_t i = heap_pop(heap, &hn);
        struct gf_node *nd = byidx[i];
        done[i] = true;
        order[k++] = nd;
        for (size_t j = 0; j < nd->n_outputs; j++) {
            struct gf_value *v = nd->outputs[j];
            if (!v || v->producer != nd)
                continue;
            for (size_t u = 0; u < v->n_uses; u++) {
                if (v->uses[u].node->graph != g)
                    continue;
                size_t w = (uintptr_t)v->uses[u].node->aux;
                if (--pending[w] == 0)
                    heap_push(heap, &hn, w);
            }
        }
    }
    free(heap);
    enum gf_status st = GF_OK;
    if (k < n) {
        for (size_t i = 0; i < n; i++) {
            if (!done[i]) {
                char lab[160];
                st = gf_error(GF_ERR_INVALID, "graph has a cycle through %s",
                              gf_node_label(byidx[i], lab, sizeof(lab)));
                break;
            }
        }
    } else {
        g->first = g->last = NULL;
        for (size_t i = 0; i < n; i++)
            list_append(g, order[i]);
    }
    for (size_t i = 0; i < n; i++)
        byidx[i]->aux = NULL;
    free(done);
    free(order);
    free(pending);
    free(byidx);
    return st;
}

const char *gf_node_label(const struct gf_node *n, char *buf, size_t len)
{
    if (n->name && *n->name)
        snprintf(buf, len, "node '%.80s' (%.60s)", n->name, n->op_type ? n->op_type : "?");
    else
        snprintf(buf, len, "node #%d (%.60s)", n->id, n->op_type ? n->op_type : "?");
    return buf;
}

/* ---- attributes ------------------------------------------------------------ */

/* A varint at *p (below end); false when cut short. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Field `field` (length-delimited) of message bytes [p, end). */
static bool read_bytes_field(const uint8_t *p, const uint8_t *end, uint32_t field,
                             const uint8_t **s, size_t *len)
{
    while (p < end) {
        uint64_t key, n;
        if (!read_varint(&p, end, &key))
            return false;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &n))
                return false;
            break;
        case 1: p += 8; break;
        case 5: p += 4; break;
        case 2:
            if (!read_varint(&p, end, &n) || n > (uint64_t)(end - p))
                return false;
            if ((key >> 3) == field) {
                *s = p;
                *len = (size_t)n;
                return true;
            }
            p += n;
            break;
        default:
            return false;
        }
    }
    return false;
}

/* metadata_props entry `key` among unknown fields x (field number `tag`),
 * copied into m's arena. */
static const char *extra_metadata(const struct gf_extra *x, uint32_t tag, struct gf_model *m,
                                  const char *key)
{
    size_t klen = strlen(key);
    for (unsigned i = 0; x && m && i < x->n; i++) {
        const ProtobufCMessageUnknownField *f = &x->fields[i];
        const uint8_t *k, *v, *p = f->data, *end = f->data + f->len;
        size_t kl, vl;
        uint64_t mlen; /* the data starts with the field's length */
        if (f->tag != tag || f->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED ||
            !read_varint(&p, end, &mlen) || mlen != (uint64_t)(end - p) ||
            !read_bytes_field(p, end, 1, &k, &kl) || kl != klen || memcmp(k, key, klen) != 0 ||
            !read_bytes_field(p, end, 2, &v, &vl))
            continue;
        char *out = gf_model_alloc(m, vl + 1);
        if (!out)
            return NULL;
        memcpy(out, v, vl);
        out[vl] = '\0';
        return out;
    }
    return NULL;
}

/* NodeProto.metadata_props (field 9) and GraphProto.metadata_props (field
 * 16), ONNX 1.16, are newer than the schema we build against: they are
 * kept among the unknown fields. */
const char *gf_node_metadata(const struct gf_node *n, const char *key)
{
    return extra_metadata(n->extra, 9, n->graph ? n->graph->model : NULL, key);
}

const char *gf_graph_metadata(const struct gf_graph *g, const char *key)
{
    return extra_metadata(g->extra, 16, g->model, key);
}

const struct gf_attr *gf_node_attr(const struct gf_node *n, const char *name)
{
    for (size_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].name && strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t gf_node_attr_int(const struct gf_node *n, const char *name, int64_t dflt)
{
    const struct gf_attr *a = gf_node_attr(n, name);
    return a && a->type == GF_ATTR_INT ? a->i : dflt;
}

float gf_node_attr_float(const struct gf_node *n, const char *name, float dflt)
{
    const struct gf_attr *a = gf_node_attr(n, name);
    return a && a->type == GF_ATTR_FLOAT ? a->f : dflt;
}

const char *gf_node_attr_string(const struct gf_node *n, const char *name,
                                const char *dflt)
{
    const struct gf_attr *a = gf_node_attr(n, name);
    if (!a || a->type != GF_ATTR_STRING)
        return dflt;
    return a->s.data ? (const char *)a->s.data : "";
}

const int64_t *gf_node_attr_ints(const struct gf_node *n, const char *name,
                                 size_t *count)
{
    const struct gf_attr *a = gf_node_attr(n, name);
    if (!a || a->type != GF_ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->ints;
}

/* The attribute slot named `name`, added if missing and reset. */
static struct gf_attr *attr_slot(struct gf_node *n, const char *name)
{
    struct gf_model *m = n->graph->model;
    struct gf_attr *a = (struct gf_attr *)gf_node_attr(n, name);
    if (!a) {
        struct gf_attr *arr = gf_model_alloc(m, (n->n_attrs + 1) * sizeof(*arr));
        if (!arr)
            return NULL;
        if (n->n_attrs)
            memcpy(arr, n->attrs, n->n_attrs * sizeof(*arr));
        n->attrs = arr;
        a = &arr[n->n_attrs++];
    }
    memset(a, 0, sizeof(*a));
    a->name = gf_model_strdup(m, name);
    return a;
}

enum gf_status gf_node_set_attr_int(struct gf_node *n, const char *name, int64_t v)
{
    struct gf_attr *a = attr_slot(n, name);
    if (!a)
        return gf_error(GF_ERR_NOMEM, "out of memory setting attribute %s", name);
    a->type = GF_ATTR_INT;
    a->i = v;
    return GF_OK;
}

enum gf_status gf_node_set_attr_float(struct gf_node *n, const char *name, float v)
{
    struct gf_attr *a = attr_slot(n, name);
    if (!a)
        return gf_error(GF_ERR_NOMEM, "out of memory setting attribute %s", name);
    a->type = GF_ATTR_FLOAT;
    a->f = v;
    return GF_OK;
}

enum gf_status gf_node_set_attr_ints(struct gf_node *n, const char *name,
                                     size_t count, const int64_t *v)
{
    struct gf_attr *a = attr_slot(n, name);
    int64_t *copy = gf_model_alloc(n->graph->model, count * sizeof(int64_t) + 1);
    if (!a || !copy)
        return gf_error(GF_ERR_NOMEM, "out of memory setting attribute %s", name);
    if (count)
        memcpy(copy, v, count * sizeof(int64_t));
    a->type = GF_ATTR_INTS;
    a->n = count;
    a->ints = copy;
    return GF_OK;
}

enum gf_status gf_node_set_attr_string(struct gf_node *n, const char *name,
                                       const char *v)
{
    struct gf_attr *a = attr_slot(n, name);
    const char *copy = gf_model_strdup(n->graph->model, v);
    if (!a || !copy)
        return gf_error(GF_ERR_NOMEM, "out of memory setting attribute %s", name);
    a->type = GF_ATTR_STRING;
    a->s.data = (const uint8_t *)copy;
    a->s.len = strlen(copy);
    return GF_OK;
}

enum gf_status gf_node_set_attr_tensor(struct gf_node *n, const char *name,
                                       struct gf_tensor *t)
{
    struct gf_attr *a = attr_slot(n, name);
    if (!a)
        return gf_error(GF_ERR_NOMEM, "out of memory setting attribute %s", name);
    a->type = GF_ATTR_TENSOR;
    a->t = t;
    return GF_OK;
}

/* ---- tensors ----------------------------------------------------------------- */

int64_t gf_dims_numel(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] && n > INT64_MAX / dims[i])
            return -1;
        n *= dims[i];
    }
    return n;
}

struct gf_tensor *gf_tensor_new(struct gf_model *m, const char *name,
                                enum gf_dtype dtype, int rank,
                                const int64_t *dims, const void *data)
{
    int64_t n = gf_dims_numel(rank, dims);
    if (n < 0 || !gf_dtype_valid(dtype) || dtype == GF_STRING ||
        (uint64_t)n > SIZE_MAX / 16) {
        gf_error(GF_ERR_ARG, "tensor '%s': bad dims or dtype", name ? name : "");
        return NULL;
    }
    struct gf_tensor *t = gf_model_alloc(m, sizeof(*t));
    if (!t)
        goto oom;
    t->name = gf_model_strdup(m, name);
    t->dtype = dtype;
    t->rank = rank;
    t->dims = gf_model_alloc(m, (size_t)rank * sizeof(int64_t) + 1);
    if (!t->dims)
        goto oom;
    if (rank)
        memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    t->nelem = (size_t)n;
    t->nbytes = gf_dtype_bytes(dtype, t->nelem);
    if (t->nbytes) {
        t->data = gf_model_alloc(m, t->nbytes);
        if (!t->data)
            goto oom;
        if (data)
            memcpy(t->data, data, t->nbytes);
    }
    return t;
oom:
    gf_error(GF_ERR_NOMEM, "out of memory creating tensor '%s'", name ? name : "");
    return NULL;
}

double gf_tensor_get_f64(const struct gf_tensor *t, size_t i)
{
    const uint8_t *p = t->data;
    if (!p || i >= t->nelem)
        return 0;
    switch (t->dtype) {
    case GF_FLOAT: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case GF_DOUBLE: { double d; memcpy(&d, p + 8 * i, 8); return d; }
    case GF_FLOAT16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return gf_half_to_float(h); }
    case GF_BFLOAT16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return gf_bf16_to_float(h); }
    case GF_UINT64: { uint64_t u; memcpy(&u, p + 8 * i, 8); return (double)u; }
    default: return (double)gf_tensor_get_i64(t, i);
    }
}

int64_t gf_tensor_get_i64(const struct gf_tensor *t, size_t i)
{
    const uint8_t *p = t->data;
    if (!p || i >= t->nelem)
        return 0;
    switch (t->dtype) {
    case GF_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    case GF_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case GF_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case GF_INT8: return (int8_t)p[i];
    case GF_UINT8: case GF_BOOL: return p[i];
    case GF_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case GF_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case GF_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (int64_t)v; }
    case GF_FLOAT: case GF_DOUBLE: case GF_FLOAT16: case GF_BFLOAT16: {
        /* truncated; NaN gives 0 and the rest saturate (a plain cast is UB) */
        double d = gf_tensor_get_f64(t, i);
        if (isnan(d))
            return 0;
        if (d >= 9223372036854775808.0)
            return INT64_MAX;
        return d <= -9223372036854775808.0 ? INT64_MIN : (int64_t)d;
    }
    default: return 0;
    }
}

/* ---- types ------------------------------------------------------------------ */

int64_t gf_type_numel(const struct gf_type *t)
{
    if (t->kind != GF_TYPE_TENSOR || t->rank < 0)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[i].value;
        if (d < 0 || (d && n > INT64_MAX / d))
            return -1;
        n *= d;
    }
    return n;
}

void gf_value_set_tensor_type(struct gf_value *v, enum gf_dtype dtype, int rank,
                              const struct gf_dim *dims)
{
    struct gf_model *m = v->graph->model;
    v->type.kind = GF_TYPE_TENSOR;
    v->type.dtype = dtype;
    v->type.rank = rank;
    v->type.dims = NULL;
    if (rank > 0) {
        struct gf_dim *d = gf_model_alloc(m, (size_t)rank * sizeof(*d));
        if (!d) {
            v->type.rank = -1;
            return;
        }
        if (dims)
            memcpy(d, dims, (size_t)rank * sizeof(*d));
        else
            for (int i = 0; i < rank; i++)
                d[i].value = -1;
        v->type.dims = d;
    }
}

char *gf_type_format(const struct gf_type *t, char *buf, size_t len)
{
    if (len == 0)
        return buf;
    if (t->kind != GF_TYPE_TENSOR || t->rank < 0) {
        snprintf(buf, len, "%s", t->kind == GF_TYPE_OTHER ? "<non-tensor>" : "[?]");
        return buf;
    }
    size_t k = 0;
    buf[0] = 0;
    /* append; once full, further pieces are dropped (k stays <= len - 1) */
#define APPEND(...)                                                             \
    do {                                                                        \
        int w_ = snprintf(buf + k, len - k, __VA_ARGS__);                       \
        k = (w_ < 0 || (size_t)w_ >= len - k) ? len - 1 : k + (size_t)w_;       \
    } while (0)
    APPEND("[");
    for (int i = 0; i < t->rank; i++) {
        const struct gf_dim *d = &t->dims[i];
        const char *sep = i ? "," : "";
        if (d->value >= 0)
            APPEND("%s%lld", sep, (long long)d->value);
        else if (d->param)
            APPEND("%s%s", sep, d->param);
        else
            APPEND("%s?", sep);
    }
    APPEND("]");
#undef APPEND
    return buf;
}

/* gf_graph_validate: the IR's invariants, checked after edits (passes run
 * it in tests to catch a rewrite that left the graph inconsistent). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* True when `v` is visible from `g`: defined in g or an enclosing graph. */
static bool in_scope(const struct gf_value *v, const struct gf_graph *g)
{
    for (; g; g = g->parent)
        if (v->graph == g)
            return true;
    return false;
}

static bool has_use(const struct gf_value *v, const struct gf_node *n, int slot)
{
    for (size_t i = 0; i < v->n_uses; i++)
        if (v->uses[i].node == n && v->uses[i].slot == slot)
            return true;
    return false;
}

/* A value of g read by node `n` at position `pos` must already exist. */
static bool defined_before(const struct gf_value *v, const struct gf_graph *g,
                           const int *pos, int at)
{
    if (v->graph != g)
        return true; /* outer scope: defined before the owner */
    if (v->init || v->is_input || v->sparse_init)
        return true;
    return v->producer && v->producer->graph == g && pos[v->producer->id] >= 0 &&
           pos[v->producer->id] < at;
}

static enum gf_status check_node(const struct gf_graph *g, const struct gf_node *n,
                                 const int *pos, int at)
{
    char lab[160];
    gf_node_label(n, lab, sizeof(lab));
    if (n->graph != g)
        return gf_error(GF_ERR_INTERNAL, "%s is listed in a graph it does not belong to", lab);
    for (size_t i = 0; i < n->n_inputs; i++) {
        const struct gf_value *v = n->inputs[i];
        if (!v)
            continue;
        if (!in_scope(v, g) || !defined_before(v, g, pos, at))
            return gf_error(GF_ERR_INTERNAL, "%s: input '%s' is not defined before it", lab,
                            v->name);
        if (!has_use(v, n, (int)i))
            return gf_error(GF_ERR_INTERNAL, "%s: input '%s' does not list the use", lab,
                            v->name);
    }
    for (size_t i = 0; i < n->n_outputs; i++) {
        const struct gf_value *v = n->outputs[i];
        if (v && (v->producer != n || v->producer_slot != (int)i || v->graph != g))
            return gf_error(GF_ERR_INTERNAL, "%s: output '%s' names another producer", lab,
                            v->name);
        if (v && (v->init || v->is_input))
            return gf_error(GF_ERR_INTERNAL, "%s: output '%s' is also an initializer or "
                            "input", lab, v->name);
    }
    for (size_t i = 0; i < n->n_attrs; i++) {
        const struct gf_attr *a = &n->attrs[i];
        if (!a->name)
            return gf_error(GF_ERR_INTERNAL, "%s: attribute %zu has no name", lab, i);
        if (a->type == GF_ATTR_GRAPH && (!a->g || a->g->owner != n || a->g->parent != g))
            return gf_error(GF_ERR_INTERNAL, "%s: subgraph '%s' is not linked to it", lab,
                            a->name);
    }
    return GF_OK;
}

/* Every recorded use points at a node reading the value there. */
static enum gf_status check_value(const struct gf_graph *g, const struct gf_value *v,
                                  const int *pos)
{
    if (v->graph != g)
        return gf_error(GF_ERR_INTERNAL, "value '%s' is listed in the wrong graph", v->name);
    if (v->producer && (v->producer->graph != g || pos[v->producer->id] < 0 ||
                        v->producer->outputs[v->producer_slot] != v))
        return gf_error(GF_ERR_INTERNAL, "value '%s': its producer is not in the graph",
                        v->name);
    for (size_t i = 0; i < v->n_uses; i++) {
        const struct gf_use *u = &v->uses[i];
        bool ok = u->slot < 0 ? u->node->graph == g
                              : (size_t)u->slot < u->node->n_inputs &&
                                    u->node->inputs[u->slot] == v;
        if (ok && u->node->graph == g)
            ok = pos[u->node->id] >= 0; /* not a removed node */
        if (!ok)
            return gf_error(GF_ERR_INTERNAL, "value '%s': stale use by node '%s' (%s)",
                            v->name, u->node->name ? u->node->name : "",
                            u->node->op_type);
    }
    return GF_OK;
}

static enum gf_status check_lists(const struct gf_graph *g, const int *pos, int end)
{
    for (size_t i = 0; i < g->n_outputs; i++) {
        const struct gf_value *v = g->outputs[i];
        if (!v || !v->is_output || !in_scope(v, g) || !defined_before(v, g, pos, end))
            return gf_error(GF_ERR_INTERNAL, "graph output %zu ('%s') is not defined", i,
                            v ? v->name : "");
    }
    for (size_t i = 0; i < g->n_inits; i++)
        if (!g->inits[i]->init || g->inits[i]->graph != g)
            return gf_error(GF_ERR_INTERNAL, "initializer '%s' has no tensor",
                            g->inits[i]->name);
    for (size_t i = 0; i < g->n_inputs; i++)
        if (!g->inputs[i]->is_input)
            return gf_error(GF_ERR_INTERNAL, "graph input '%s' is not flagged as one",
                            g->inputs[i]->name);
    for (size_t i = 0; i < g->n_values; i++) {
        const struct gf_value *v = g->values[i];
        bool listed = false;
        for (size_t k = 0; v->is_output && !listed && k < g->n_outputs; k++)
            listed = g->outputs[k] == v;
        if (v->is_output != listed)
            return gf_error(GF_ERR_INTERNAL, "value '%s': output flag and list disagree",
                            v->name);
    }
    return GF_OK;
}

static enum gf_status validate_graph(struct gf_graph *g)
{
    int n_ids = g->priv->next_node_id;
    int *pos = malloc(((size_t)n_ids + 1) * sizeof(*pos));
    if (!pos)
        return gf_error(GF_ERR_NOMEM, "out of memory validating graph");
    for (int i = 0; i < n_ids; i++)
        pos[i] = -1;
    enum gf_status st = GF_OK;
    size_t count = 0;
    const struct gf_node *prev = NULL;
    for (struct gf_node *n = g->first; n; prev = n, n = n->next, count++) {
        if (n->prev != prev || n->id < 0 || n->id >= n_ids || pos[n->id] >= 0 ||
            count > g->n_nodes) {
            st = gf_error(GF_ERR_INTERNAL, "graph '%s': node list is broken at node #%d",
                          g->name ? g->name : "", n->id);
            goto out;
        }
        pos[n->id] = (int)count;
    }
    if (count != g->n_nodes || g->last != prev) {
        st = gf_error(GF_ERR_INTERNAL, "graph '%s': %zu nodes listed, %zu counted",
                      g->name ? g->name : "", count, g->n_nodes);
        goto out;
    }
    for (struct gf_node *n = g->first; n && st == GF_OK; n = n->next)
        st = check_node(g, n, pos, pos[n->id]);
    for (size_t i = 0; i < g->n_values && st == GF_OK; i++)
        st = check_value(g, g->values[i], pos);
    if (st == GF_OK)
        st = check_lists(g, pos, (int)count);
    /* subgraphs, recursively */
    for (struct gf_node *n = g->first; n && st == GF_OK; n = n->next) {
        for (size_t a = 0; a < n->n_attrs && st == GF_OK; a++) {
            const struct gf_attr *at = &n->attrs[a];
            if (at->type == GF_ATTR_GRAPH)
                st = validate_graph(at->g);
            for (size_t k = 0; at->type == GF_ATTR_GRAPHS && k < at->n && st == GF_OK; k++)
                st = validate_graph(at->graphs[k]);
        }
    }
out:
    free(pos);
    return st;
}

enum gf_status gf_graph_validate(struct gf_graph *g)
{
    if (!g)
        return gf_error(GF_ERR_ARG, "gf_graph_validate: no graph");
    return validate_graph(g);
}

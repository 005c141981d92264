/*
 * Evaluating one node on constant inputs, for constant folding.
 *
 * The node is copied into a scratch one-node model whose inputs are
 * initializers (the given tensors) and whose outputs are graph outputs,
 * and run through an ordinary CPU session: shape inference gives the
 * output shapes and dtypes, the registry gives the kernel.  Reusing the
 * session keeps one code path for shapes, kernel choice and workspaces.
 */
#include <stdio.h>
#include <string.h>

#include "gf_exec.h"

static const char *label(const struct gf_node *n)
{
    return n->name && *n->name ? n->name : "unnamed node";
}

/* Dropout is random in training mode: training_mode input true, or the
 * opset-6 attribute is_test=0. */
static bool dropout_training(const struct gf_node *n, struct gf_tensor *const *in)
{
    if (gf_node_attr(n, "is_test") && gf_node_attr_int(n, "is_test", 1) == 0)
        return true;
    if (n->n_inputs < 3 || !n->inputs[2])
        return false;
    return !in[2] || in[2]->nelem != 1 || gf_tensor_get_i64(in[2], 0) != 0;
}

/* Nodes this evaluator refuses before trying: no op graphfuse knows,
 * subgraphs, function-body attribute references, strings, random ops. */
static enum gf_status check_node(const struct gf_node *n, struct gf_tensor *const *in)
{
    if (n->op == GF_OP_UNKNOWN)
        return gf_error(GF_ERR_UNSUPPORTED, "eval: node '%s': op %s is not supported",
                        label(n), n->op_type);
    for (size_t i = 0; i < n->n_attrs; i++) {
        const struct gf_attr *a = &n->attrs[i];
        if (a->type == GF_ATTR_GRAPH || a->type == GF_ATTR_GRAPHS || a->ref_attr_name)
            return gf_error(GF_ERR_UNSUPPORTED, "eval: node '%s' (%s): attribute '%s' is a "
                            "subgraph or a reference", label(n), n->op_type, a->name);
    }
    for (size_t i = 0; i < n->n_inputs; i++) {
        if (n->inputs[i] && !in[i])
            return gf_error(GF_ERR_ARG, "eval: node '%s' (%s): input %zu has no tensor",
                            label(n), n->op_type, i);
        if (in[i] && (in[i]->dtype == GF_STRING || (!in[i]->data && in[i]->nbytes)))
            return gf_error(GF_ERR_UNSUPPORTED, "eval: node '%s' (%s): input '%s' has no "
                            "numeric data", label(n), n->op_type, n->inputs[i]->name);
    }
    for (size_t i = 0; i < n->n_outputs; i++)
        if (n->outputs[i] && n->outputs[i]->type.kind == GF_TYPE_OTHER)
            return gf_error(GF_ERR_UNSUPPORTED, "eval: node '%s' (%s): output '%s' is not a "
                            "tensor", label(n), n->op_type, n->outputs[i]->name);
    if (n->op == GF_OP_DROPOUT && dropout_training(n, in))
        return gf_error(GF_ERR_UNSUPPORTED, "eval: node '%s' (Dropout) is random in training "
                        "mode", label(n));
    return GF_OK;
}

/* The scratch model: same opsets, inputs as initializers, the node with
 * the original's attributes (borrowed: they outlive the scratch model). */
static enum gf_status build_scratch(const struct gf_model *m, const struct gf_node *n,
                                    struct gf_tensor *const *in, struct gf_model **out)
{
    struct gf_model *s = gf_model_new(m->ir_version, "eval");
    if (!s)
        return gf_error(GF_ERR_NOMEM, "eval: out of memory");
    *out = s;
    struct gf_graph *g = s->graph;
    struct gf_value **ins = gf_model_alloc(s, (n->n_inputs + 1) * sizeof(*ins));
    struct gf_value **outs = gf_model_alloc(s, (n->n_outputs + 1) * sizeof(*outs));
    if (!ins || !outs)
        return gf_error(GF_ERR_NOMEM, "eval: out of memory");
    for (size_t i = 0; i < m->n_opsets; i++)
        if (gf_model_set_opset(s, m->opsets[i].domain, m->opsets[i].version) != GF_OK)
            return GF_ERR_NOMEM;
    for (size_t i = 0; i < n->n_inputs; i++) {
        if (!in[i])
            continue;
        /* a header of our own: add_initializer renames its tensor */
        struct gf_tensor *t = gf_model_alloc(s, sizeof(*t));
        if (!t)
            return gf_error(GF_ERR_NOMEM, "eval: out of memory");
        *t = *in[i];
        if (!(ins[i] = gf_graph_add_initializer(g, NULL, t)))
            return GF_ERR_NOMEM;
    }
    for (size_t i = 0; i < n->n_outputs; i++) {
        if (!n->outputs[i])
            continue;
        if (!(outs[i] = gf_graph_new_value(g, NULL, "out")) ||
            gf_graph_add_output(g, outs[i]) != GF_OK)
            return GF_ERR_NOMEM;
    }
    struct gf_node *c = gf_graph_add_node(g, n->op_type, n->domain, n->name, n->n_inputs, ins,
                                          n->n_outputs, outs);
    if (!c)
        return GF_ERR_NOMEM;
    c->n_attrs = n->n_attrs;
    c->attrs = n->attrs;
    return GF_OK;
}

/* Runs the scratch model and copies its outputs into m's arena. */
static enum gf_status run_scratch(struct gf_model *m, struct gf_model *s, const struct gf_node *n,
                                  struct gf_tensor **out)
{
    struct gf_exec_opts o = {.backend = "cpu"};
    struct gf_session *ses;
    struct gf_tensor **res;
    size_t n_res, k = 0;
    enum gf_status st = gf_session_new(s, &o, &ses);
    if (st != GF_OK)
        return st;
    if ((st = gf_session_run(ses, 0, NULL, &res, &n_res)) != GF_OK)
        goto out;
    for (size_t i = 0; i < n->n_outputs; i++) {
        if (!n->outputs[i])
            continue;
        const struct gf_tensor *r = res[k++];
        out[i] = gf_tensor_new(m, n->outputs[i]->name, r->dtype, r->rank, r->dims, r->data);
        if (!out[i]) {
            st = GF_ERR_NOMEM;
            goto out;
        }
    }
out:
    gf_session_free(ses);
    return st;
}

enum gf_status gf_exec_eval_node(struct gf_model *m, const struct gf_node *n,
                                 struct gf_tensor *const *in, struct gf_tensor **out)
{
    for (size_t i = 0; i < n->n_outputs; i++)
        out[i] = NULL;
    enum gf_status st = check_node(n, in);
    if (st != GF_OK)
        return st;
    struct gf_model *s = NULL;
    st = build_scratch(m, n, in, &s);
    if (st == GF_OK)
        st = run_scratch(m, s, n, out);
    gf_model_free(s);
    if (st != GF_OK) {
        char pre[200];
        for (size_t i = 0; i < n->n_outputs; i++)
            out[i] = NULL;
        snprintf(pre, sizeof(pre), "eval of node '%.80s' (%.60s)", label(n), n->op_type);
        gf_error_prefix(pre);
    }
    return st;
}

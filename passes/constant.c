/* Constant values: initializers and Constant nodes, seen the same way. */
#include <string.h>

#include "gf_passes.h"

/* The tensor of a Constant node, built from whichever value attribute it
 * has (value, value_float(s), value_int(s)); NULL for strings/sparse. */
static const struct gf_tensor *constant_node_tensor(struct gf_node *n)
{
    struct gf_model *m = n->graph->model;
    for (size_t i = 0; i < n->n_attrs; i++) {
        const struct gf_attr *a = &n->attrs[i];
        int64_t len;
        if (strcmp(a->name, "value") == 0 && a->type == GF_ATTR_TENSOR)
            return a->t && a->t->dtype != GF_STRING ? a->t : NULL;
        if (strcmp(a->name, "value_float") == 0 && a->type == GF_ATTR_FLOAT)
            return gf_tensor_new(m, n->outputs[0]->name, GF_FLOAT, 0, NULL, &a->f);
        if (strcmp(a->name, "value_int") == 0 && a->type == GF_ATTR_INT)
            return gf_tensor_new(m, n->outputs[0]->name, GF_INT64, 0, NULL, &a->i);
        if (strcmp(a->name, "value_floats") == 0 && a->type == GF_ATTR_FLOATS) {
            len = (int64_t)a->n;
            return gf_tensor_new(m, n->outputs[0]->name, GF_FLOAT, 1, &len, a->floats);
        }
        if (strcmp(a->name, "value_ints") == 0 && a->type == GF_ATTR_INTS) {
            len = (int64_t)a->n;
            return gf_tensor_new(m, n->outputs[0]->name, GF_INT64, 1, &len, a->ints);
        }
    }
    return NULL;
}

const struct gf_tensor *gf_value_constant(const struct gf_value *v)
{
    if (!v)
        return NULL;
    if (v->init)
        return v->is_input ? NULL : v->init; /* an input may override it */
    if (v->producer && v->producer->op == GF_OP_CONSTANT && v->producer->n_outputs == 1)
        return constant_node_tensor(v->producer);
    return NULL;
}

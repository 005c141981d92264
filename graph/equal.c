/* Structural equality of two models, for round-trip tests: the first
 * difference found is described in `why`. */
#include <stdarg.h>
#include <string.h>

#include "internal.h"

struct cmp {
    char *why;
    size_t len;
};

static bool differ(struct cmp *c, const char *fmt, ...)
{
    if (c->why && c->len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, c->len, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool str_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static bool bytes_eq(struct gf_bytes a, struct gf_bytes b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
}

static bool extra_eq(const struct gf_extra *a, const struct gf_extra *b)
{
    unsigned na = a ? a->n : 0, nb = b ? b->n : 0;
    if (na != nb)
        return false;
    for (unsigned i = 0; i < na; i++) {
        const ProtobufCMessageUnknownField *x = &a->fields[i], *y = &b->fields[i];
        if (x->tag != y->tag || x->wire_type != y->wire_type || x->len != y->len ||
            (x->len && memcmp(x->data, y->data, x->len) != 0))
            return false;
    }
    return true;
}

static bool type_eq(struct cmp *c, const char *what, const struct gf_type *a,
                    const struct gf_type *b)
{
    if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank ||
        !str_eq(a->denotation, b->denotation) || !bytes_eq(a->packed, b->packed))
        return differ(c, "%s: types differ", what);
    for (int i = 0; i < a->rank; i++) {
        const struct gf_dim *x = &a->dims[i], *y = &b->dims[i];
        if (x->value != y->value || !str_eq(x->param, y->param) ||
            !str_eq(x->denotation, y->denotation))
            return differ(c, "%s: dim %d differs", what, i);
    }
    return true;
}

static bool tensor_eq(struct cmp *c, const char *what, const struct gf_tensor *a,
                      const struct gf_tensor *b)
{
    if (!a || !b)
        return a == b ? true : differ(c, "%s: tensor missing on one side", what);
    if (!str_eq(a->name, b->name) || !str_eq(a->doc_string, b->doc_string))
        return differ(c, "%s: tensor name or doc differs", what);
    if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes ||
        a->nelem != b->nelem)
        return differ(c, "%s: tensor '%s' type or size differs", what, a->name ? a->name : "");
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return differ(c, "%s: tensor '%s' dims differ", what, a->name ? a->name : "");
    if (a->nbytes && memcmp(a->data, b->data, a->nbytes) != 0)
        return differ(c, "%s: tensor '%s' data differs", what, a->name ? a->name : "");
    for (size_t i = 0; a->dtype == GF_STRING && i < a->nelem; i++)
        if (!bytes_eq(a->strings[i], b->strings[i]))
            return differ(c, "%s: tensor '%s' string %zu differs", what, a->name, i);
    if (a->has_segment != b->has_segment || a->segment_begin != b->segment_begin ||
        a->segment_end != b->segment_end || !extra_eq(a->extra, b->extra))
        return differ(c, "%s: tensor '%s' segment or unknown fields differ", what,
                      a->name ? a->name : "");
    return true;
}

static bool graph_eq(struct cmp *c, const struct gf_graph *a, const struct gf_graph *b);

static bool attr_eq(struct cmp *c, const char *where, const struct gf_attr *a,
                    const struct gf_attr *b)
{
    char what[300];
    snprintf(what, sizeof(what), "%s attribute '%s'", where, a->name);
    if (!str_eq(a->name, b->name) || a->type != b->type ||
        !str_eq(a->ref_attr_name, b->ref_attr_name) || !str_eq(a->doc_string, b->doc_string) ||
        !extra_eq(a->extra, b->extra))
        return differ(c, "%s: name, type or doc differs", what);
    size_t n = a->n;
    if (a->n != b->n)
        return differ(c, "%s: lengths differ", what);
    switch (a->type) {
    case GF_ATTR_FLOAT:
        return memcmp(&a->f, &b->f, sizeof(float)) == 0 ? true : differ(c, "%s differs", what);
    case GF_ATTR_INT: return a->i == b->i ? true : differ(c, "%s differs", what);
    case GF_ATTR_STRING: return bytes_eq(a->s, b->s) ? true : differ(c, "%s differs", what);
    case GF_ATTR_TENSOR: return tensor_eq(c, what, a->t, b->t);
    case GF_ATTR_GRAPH:
        if (!a->g || !b->g)
            return a->g == b->g ? true : differ(c, "%s: graph missing", what);
        return graph_eq(c, a->g, b->g);
    case GF_ATTR_SPARSE_TENSOR: case GF_ATTR_TYPE_PROTO:
        return bytes_eq(a->packed, b->packed) ? true : differ(c, "%s differs", what);
    case GF_ATTR_FLOATS:
        return !n || memcmp(a->floats, b->floats, n * sizeof(float)) == 0
                   ? true : differ(c, "%s differs", what);
    case GF_ATTR_INTS:
        return !n || memcmp(a->ints, b->ints, n * sizeof(int64_t)) == 0
                   ? true : differ(c, "%s differs", what);
    case GF_ATTR_STRINGS:
        for (size_t i = 0; i < n; i++)
            if (!bytes_eq(a->strings[i], b->strings[i]))
                return differ(c, "%s: element %zu differs", what, i);
        return true;
    case GF_ATTR_TENSORS:
        for (size_t i = 0; i < n; i++)
            if (!tensor_eq(c, what, a->tensors[i], b->tensors[i]))
                return false;
        return true;
    case GF_ATTR_GRAPHS:
        for (size_t i = 0; i < n; i++)
            if (!graph_eq(c, a->graphs[i], b->graphs[i]))
                return false;
        return true;
    case GF_ATTR_SPARSE_TENSORS: case GF_ATTR_TYPE_PROTOS:
        for (size_t i = 0; i < n; i++)
            if (!bytes_eq(a->packed_list[i], b->packed_list[i]))
                return differ(c, "%s: element %zu differs", what, i);
        return true;
    default:
        return true;
    }
}

static bool value_ref_eq(const struct gf_value *a, const struct gf_value *b)
{
    if (!a || !b)
        return a == b;
    return strcmp(a->name, b->name) == 0;
}

static bool node_eq(struct cmp *c, const struct gf_node *a, const struct gf_node *b)
{
    char where[200];
    gf_node_label(a, where, sizeof(where));
    if (!str_eq(a->name, b->name) || !str_eq(a->op_type, b->op_type) ||
        !str_eq(a->domain, b->domain) || !str_eq(a->doc_string, b->doc_string) ||
        !extra_eq(a->extra, b->extra))
        return differ(c, "%s: name, op, domain or doc differs", where);
    if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs || a->n_attrs != b->n_attrs)
        return differ(c, "%s: input, output or attribute count differs", where);
    for (size_t i = 0; i < a->n_inputs; i++)
        if (!value_ref_eq(a->inputs[i], b->inputs[i]))
            return differ(c, "%s: input %zu differs", where, i);
    for (size_t i = 0; i < a->n_outputs; i++)
        if (!value_ref_eq(a->outputs[i], b->outputs[i]))
            return differ(c, "%s: output %zu differs", where, i);
    for (size_t i = 0; i < a->n_attrs; i++)
        if (!attr_eq(c, where, &a->attrs[i], &b->attrs[i]))
            return false;
    return true;
}

static bool values_eq(struct cmp *c, const struct gf_graph *a, const struct gf_graph *b)
{
    /* Every value of a typed or listed in a must match by name in b. */
    for (size_t i = 0; i < a->n_values; i++) {
        const struct gf_value *x = a->values[i];
        const struct gf_value *y = gf_graph_find(b, x->name);
        if (!y)
            return differ(c, "value '%s' missing", x->name);
        char what[300];
        snprintf(what, sizeof(what), "value '%s'", x->name);
        if (!type_eq(c, what, &x->type, &y->type))
            return false;
        if (x->is_input != y->is_input || x->is_output != y->is_output ||
            !str_eq(x->doc_string, y->doc_string) || !extra_eq(x->extra, y->extra) ||
            x->sparse_init != y->sparse_init)
            return differ(c, "%s: flags, doc or unknown fields differ", what);
        if (!tensor_eq(c, what, x->init, y->init))
            return false;
    }
    return true;
}

static bool graph_eq(struct cmp *c, const struct gf_graph *a, const struct gf_graph *b)
{
    if (!str_eq(a->name, b->name) || !str_eq(a->doc_string, b->doc_string) ||
        !extra_eq(a->extra, b->extra))
        return differ(c, "graph '%s': name, doc or unknown fields differ", a->name ? a->name : "");
    if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs ||
        a->n_inits != b->n_inits || a->n_nodes != b->n_nodes ||
        a->n_sparse_inits != b->n_sparse_inits ||
        a->n_quant_annotations != b->n_quant_annotations)
        return differ(c, "graph '%s': counts differ", a->name ? a->name : "");
    for (size_t i = 0; i < a->n_inputs; i++)
        if (!value_ref_eq(a->inputs[i], b->inputs[i]))
            return differ(c, "graph input %zu differs", i);
    for (size_t i = 0; i < a->n_outputs; i++)
        if (!value_ref_eq(a->outputs[i], b->outputs[i]))
            return differ(c, "graph output %zu differs", i);
    for (size_t i = 0; i < a->n_inits; i++)
        if (!value_ref_eq(a->inits[i], b->inits[i]))
            return differ(c, "initializer %zu differs", i);
    for (size_t i = 0; i < a->n_sparse_inits; i++)
        if (!bytes_eq(a->sparse_inits[i], b->sparse_inits[i]))
            return differ(c, "sparse initializer %zu differs", i);
    for (size_t i = 0; i < a->n_quant_annotations; i++)
        if (!bytes_eq(a->quant_annotations[i], b->quant_annotations[i]))
            return differ(c, "quantization annotation %zu differs", i);
    const struct gf_node *x = a->first, *y = b->first;
    for (; x && y; x = x->next, y = y->next)
        if (!node_eq(c, x, y))
            return false;
    return values_eq(c, a, b);
}

static bool function_eq(struct cmp *c, const struct gf_function *a,
                        const struct gf_function *b)
{
    if (!str_eq(a->name, b->name) || !str_eq(a->domain, b->domain) ||
        !str_eq(a->doc_string, b->doc_string) || a->n_attr_names != b->n_attr_names ||
        a->n_opsets != b->n_opsets || !extra_eq(a->extra, b->extra))
        return differ(c, "function '%s' differs", a->name);
    for (size_t i = 0; i < a->n_attr_names; i++)
        if (!str_eq(a->attr_names[i], b->attr_names[i]))
            return differ(c, "function '%s': attribute names differ", a->name);
    for (size_t i = 0; i < a->n_opsets; i++)
        if (!str_eq(a->opsets[i].domain, b->opsets[i].domain) ||
            a->opsets[i].version != b->opsets[i].version)
            return differ(c, "function '%s': opsets differ", a->name);
    return graph_eq(c, a->body, b->body);
}

bool gf_model_equal(const struct gf_model *a, const struct gf_model *b, char *why,
                    size_t why_len)
{
    struct cmp c = {why, why_len};
    if (why && why_len)
        why[0] = 0;
    if (a->ir_version != b->ir_version || a->model_version != b->model_version ||
        !str_eq(a->producer_name, b->producer_name) ||
        !str_eq(a->producer_version, b->producer_version) || !str_eq(a->domain, b->domain) ||
        !str_eq(a->doc_string, b->doc_string) || !extra_eq(a->extra, b->extra))
        return differ(&c, "model header differs");
    if (a->n_opsets != b->n_opsets || a->n_metadata != b->n_metadata ||
        a->n_functions != b->n_functions || a->n_training_info != b->n_training_info)
        return differ(&c, "model opsets, metadata, functions or training info count differs");
    for (size_t i = 0; i < a->n_opsets; i++)
        if (!str_eq(a->opsets[i].domain, b->opsets[i].domain) ||
            a->opsets[i].version != b->opsets[i].version)
            return differ(&c, "opset import %zu differs", i);
    for (size_t i = 0; i < a->n_metadata; i++)
        if (!str_eq(a->metadata[i].key, b->metadata[i].key) ||
            !str_eq(a->metadata[i].value, b->metadata[i].value))
            return differ(&c, "metadata entry %zu differs", i);
    for (size_t i = 0; i < a->n_training_info; i++)
        if (!bytes_eq(a->training_info[i], b->training_info[i]))
            return differ(&c, "training info %zu differs", i);
    for (size_t i = 0; i < a->n_functions; i++)
        if (!function_eq(&c, a->functions[i], b->functions[i]))
            return false;
    return graph_eq(&c, a->graph, b->graph);
}

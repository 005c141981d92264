/*
 * ONNX load: file -> wire check -> protobuf-c unpack (into the model's
 * arena) -> IR, validating what the ONNX checker validates on the way.
 * Strings and tensor bytes are borrowed from the unpacked message, which
 * lives in the arena, so nothing big is copied twice.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_MAX_DEPTH 32

struct loader {
    struct gf_model *m;
    struct gf_arena *arena;
    int max_depth;     /* subgraph nesting limit */
    bool no_external;
    bool in_function;  /* ref_attr_name is only valid in function bodies */
    char label[200];   /* scratch for node labels in messages */
};

static const char *str_or(const char *s, const char *dflt)
{
    return s && *s ? s : dflt;
}

static struct gf_extra *extra_of(struct loader *L, const ProtobufCMessage *msg)
{
    if (!msg->n_unknown_fields)
        return NULL;
    struct gf_extra *e = gf_arena_alloc(L->arena, sizeof(*e));
    if (e) {
        e->n = msg->n_unknown_fields;
        e->fields = msg->unknown_fields;
    }
    return e;
}

/* Packs a sub-message into the arena (for parts kept opaque). */
static struct gf_bytes pack_msg(struct loader *L, const ProtobufCMessage *msg)
{
    struct gf_bytes b = {NULL, 0};
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *p = gf_arena_alloc(L->arena, n + 1);
    if (p) {
        protobuf_c_message_pack(msg, p);
        b.data = p;
        b.len = n;
    }
    return b;
}

static enum gf_status oom(void)
{
    return gf_error(GF_ERR_NOMEM, "out of memory while loading");
}

/* ---- duplicate names ------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name appearing twice in names[0..n), or NULL: sorting a copy keeps
 * this O(n log n) for hostile files with thousands of entries. */
static const char *find_duplicate(const char **names, size_t n)
{
    if (n < 2)
        return NULL;
    const char **c = malloc(n * sizeof(*c));
    if (!c)
        return NULL;
    memcpy(c, names, n * sizeof(*c));
    qsort(c, n, sizeof(*c), cmp_str);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(c[i - 1], c[i]) == 0)
            dup = c[i];
    free(c);
    return dup;
}

static const char *onnx_domain(const char *d)
{
    return !d || strcmp(d, "ai.onnx") == 0 ? "" : d;
}

/* ---- mappings of external data files ------------------------------------ */

void gf_unmap(void *addr, size_t len)
{
    if (addr && len)
        munmap(addr, len);
}

enum gf_status gf_model_add_mapping(struct gf_model *m, void *addr, size_t len)
{
    struct gf_mapping *map = malloc(sizeof(*map));
    if (!map)
        return oom();
    map->addr = addr;
    map->len = len;
    map->next = m->priv->mappings;
    m->priv->mappings = map;
    return GF_OK;
}

/* ---- external data -------------------------------------------------------- */

static enum gf_status check_location(const char *tname, const char *loc)
{
    if (!loc || !*loc)
        return gf_error(GF_ERR_INVALID, "tensor '%s': external data has no location", tname);
    if (loc[0] == '/' || loc[0] == '\\' || (loc[0] && loc[1] == ':'))
        return gf_error(GF_ERR_INVALID,
                        "tensor '%s': external data location '%s' is an absolute path",
                        tname, loc);
    for (const char *p = loc; *p;) {
        size_t n = strcspn(p, "/\\");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return gf_error(GF_ERR_INVALID,
                            "tensor '%s': external data location '%s' contains '..'", tname,
                            loc);
        p += n;
        if (*p)
            p++;
    }
    return GF_OK;
}

/* A sparse tensor stays packed and its data is never read here, but its
 * values and indices name their external files like any tensor: the same
 * location rules apply (a saved copy must not point outside the folder). */
static enum gf_status check_sparse(const Onnx__SparseTensorProto *sp)
{
    const Onnx__TensorProto *parts[2] = {sp ? sp->values : NULL, sp ? sp->indices : NULL};
    for (int i = 0; i < 2; i++) {
        const Onnx__TensorProto *tp = parts[i];
        if (!tp || !tp->has_data_location ||
            tp->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
            continue;
        const char *loc = NULL;
        for (size_t k = 0; k < tp->n_external_data; k++)
            if (tp->external_data[k]->key && strcmp(tp->external_data[k]->key, "location") == 0)
                loc = tp->external_data[k]->value;
        enum gf_status st = check_location(str_or(tp->name, i ? "(sparse indices)"
                                                               : "(sparse values)"), loc);
        if (st != GF_OK)
            return st;
    }
    return GF_OK;
}

static enum gf_status parse_int_entry(const char *tname, const char *key, const char *s,
                                      int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s ? s : "", &end, 10);
    if (!s || !*s || *end || errno || v < 0)
        return gf_error(GF_ERR_INVALID, "tensor '%s': external data %s '%s' is not a "
                        "non-negative integer", tname, key, s ? s : "");
    *out = v;
    return GF_OK;
}

/* Resolves, checks and maps the external data of a tensor: every check
 * happens before anything is mapped or allocated. */
static enum gf_status load_external(struct loader *L, Onnx__TensorProto *tp,
                                    struct gf_tensor *t)
{
    const char *tname = str_or(tp->name, "(unnamed)");
    struct gf_external *ext = gf_arena_alloc(L->arena, sizeof(*ext));
    size_t n = tp->n_external_data;
    if (!ext || !(ext->keys = gf_arena_alloc(L->arena, (n + 1) * sizeof(char *))) ||
        !(ext->values = gf_arena_alloc(L->arena, (n + 1) * sizeof(char *))))
        return oom();
    ext->n_entries = n;
    ext->length = -1;
    for (size_t i = 0; i < n; i++) {
        const char *k = tp->external_data[i]->key, *v = tp->external_data[i]->value;
        ext->keys[i] = k;
        ext->values[i] = v;
        enum gf_status st = GF_OK;
        if (k && strcmp(k, "location") == 0)
            ext->location = v;
        else if (k && strcmp(k, "offset") == 0)
            st = parse_int_entry(tname, "offset", v, &ext->offset);
        else if (k && strcmp(k, "length") == 0)
            st = parse_int_entry(tname, "length", v, &ext->length);
        if (st != GF_OK)
            return st;
    }
    t->ext = ext;
    enum gf_status st = check_location(tname, ext->location);
    if (st != GF_OK)
        return st;
    if (t->dtype == GF_STRING)
        return gf_error(GF_ERR_UNSUPPORTED, "tensor '%s': string tensors cannot use "
                        "external data", tname);
    if (L->no_external || !L->m->dir)
        return gf_error(GF_ERR_UNSUPPORTED, "tensor '%s': external data '%s' refused "
                        "(model not loaded from a folder)", tname, ext->location);

    /* Canonical-path check: the resolved file must lie inside the model's
     * folder, whatever symlinks the path goes through. */
    char dirreal[PATH_MAX], joined[PATH_MAX * 2], real[PATH_MAX];
    if (!realpath(L->m->dir, dirreal))
        return gf_error(GF_ERR_IO, "cannot resolve model folder '%s': %s", L->m->dir,
                        strerror(errno));
    snprintf(joined, sizeof(joined), "%s/%s", dirreal, ext->location);
    if (!realpath(joined, real))
        return gf_error(GF_ERR_IO, "tensor '%s': external data file '%s': %s", tname,
                        ext->location, strerror(errno));
    size_t dl = strlen(dirreal);
    if (strncmp(real, dirreal, dl) != 0 || (real[dl] != '/' && real[dl] != 0 && dl > 1))
        return gf_error(GF_ERR_INVALID, "tensor '%s': external data '%s' resolves outside "
                        "the model folder (to '%s')", tname, ext->location, real);
    struct stat sb;
    int fd = gf_file_open_read(real, O_NOFOLLOW, &sb);
    if (fd == GF_FILE_NOT_REGULAR)
        return gf_error(GF_ERR_INVALID, "tensor '%s': external data '%s' is not a regular "
                        "file", tname, ext->location);
    if (fd < 0)
        return gf_error(GF_ERR_IO, "tensor '%s': cannot open external data '%s': %s", tname,
                        ext->location, strerror(errno));
    /* a hard link inside the folder can name any file of the same file
     * system: the path check above cannot see it */
    if (sb.st_nlink > 1) {
        close(fd);
        return gf_error(GF_ERR_INVALID, "tensor '%s': external data '%s' has %lu hard links "
                        "(a file with more than one is refused: it may lie outside the model "
                        "folder)", tname, ext->location, (unsigned long)sb.st_nlink);
    }
    int64_t size = sb.st_size;
    int64_t len = ext->length >= 0 ? ext->length : size - ext->offset;
    if (ext->offset > size || len < 0 || len > size - ext->offset) {
        close(fd);
        return gf_error(GF_ERR_INVALID, "tensor '%s': external data range offset %lld + "
                        "length %lld is past the end of '%s' (%lld bytes)", tname,
                        (long long)ext->offset, (long long)len, ext->location,
                        (long long)size);
    }
    if ((uint64_t)len != t->nbytes) {
        close(fd);
        return gf_error(GF_ERR_INVALID, "tensor '%s': external data length %lld does not "
                        "match dims and type (%zu bytes)", tname, (long long)len, t->nbytes);
    }
    if (len > 0) {
        void *addr = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr == MAP_FAILED) {
            close(fd);
            return gf_error(GF_ERR_IO, "tensor '%s': cannot map '%s': %s", tname,
                            ext->location, strerror(errno));
        }
        if (gf_model_add_mapping(L->m, addr, (size_t)size) != GF_OK) {
            munmap(addr, (size_t)size);
            close(fd);
            return GF_ERR_NOMEM;
        }
        t->data = (uint8_t *)addr + ext->offset;
        if (ext->offset % 16) { /* kernels expect aligned elements: copy */
            void *copy = gf_arena_alloc(L->arena, t->nbytes);
            if (!copy) {
                close(fd);
                return oom();
            }
            memcpy(copy, t->data, t->nbytes);
            t->data = copy;
        }
    }
    close(fd);
    return GF_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

/* Typed-field element count and copy into raw layout. */
static enum gf_status typed_data(struct loader *L, Onnx__TensorProto *tp,
                                 struct gf_tensor *t, const char *tname)
{
    size_t want = t->nelem, have;
    const char *field;
    switch (t->dtype) {
    case GF_FLOAT: case GF_COMPLEX64:
        field = "float_data"; have = tp->n_float_data; break;
    case GF_DOUBLE: case GF_COMPLEX128:
        field = "double_data"; have = tp->n_double_data; break;
    case GF_INT64:
        field = "int64_data"; have = tp->n_int64_data; break;
    case GF_UINT32: case GF_UINT64:
        field = "uint64_data"; have = tp->n_uint64_data; break;
    case GF_STRING:
        field = "string_data"; have = tp->n_string_data; break;
    case GF_UINT4: case GF_INT4:
        field = "int32_data"; have = tp->n_int32_data; want = (t->nelem + 1) / 2; break;
    default:
        field = "int32_data"; have = tp->n_int32_data; break;
    }
    if (t->dtype == GF_COMPLEX64 || t->dtype == GF_COMPLEX128)
        want *= 2;
    if (have != want)
        return gf_error(GF_ERR_INVALID, "tensor '%s': dims need %zu values but %s has %zu",
                        tname, want, field, have);
    if (want == 0)
        return GF_OK;
    switch (t->dtype) {
    case GF_FLOAT: case GF_COMPLEX64: t->data = tp->float_data; return GF_OK;
    case GF_DOUBLE: case GF_COMPLEX128: t->data = tp->double_data; return GF_OK;
    case GF_INT64: t->data = tp->int64_data; return GF_OK;
    case GF_UINT64: t->data = tp->uint64_data; return GF_OK;
    case GF_INT32: t->data = tp->int32_data; return GF_OK;
    case GF_STRING:
        t->strings = gf_arena_alloc(L->arena, want * sizeof(*t->strings));
        if (!t->strings)
            return oom();
        for (size_t i = 0; i < want; i++) {
            t->strings[i].data = tp->string_data[i].data;
            t->strings[i].len = tp->string_data[i].len;
        }
        return GF_OK;
    default:
        break;
    }
    uint8_t *p = gf_arena_alloc(L->arena, t->nbytes);
    if (!p)
        return oom();
    size_t es = gf_dtype_size(t->dtype);
    for (size_t i = 0; i < want; i++) {
        uint64_t v = t->dtype == GF_UINT32 ? tp->uint64_data[i] : (uint32_t)tp->int32_data[i];
        if (t->dtype == GF_UINT4 || t->dtype == GF_INT4)
            p[i] = (uint8_t)v;
        else
            memcpy(p + i * es, &v, es); /* little-endian: low bytes first */
    }
    t->data = p;
    return GF_OK;
}

static enum gf_status convert_tensor(struct loader *L, Onnx__TensorProto *tp,
                                     struct gf_tensor **out)
{
    const char *tname = str_or(tp->name, "(unnamed)");
    struct gf_tensor *t = gf_arena_alloc(L->arena, sizeof(*t));
    if (!t)
        return oom();
    t->name = tp->name;
    t->doc_string = tp->doc_string;
    t->extra = extra_of(L, &tp->base);
    if (!tp->has_data_type || tp->data_type == 0)
        return gf_error(GF_ERR_INVALID, "tensor '%s' has no data type", tname);
    if (!gf_dtype_valid(tp->data_type))
        return gf_error(GF_ERR_INVALID, "tensor '%s' has data type %d, which no ONNX version "
                        "defines", tname, tp->data_type);
    t->dtype = (enum gf_dtype)tp->data_type;
    if (tp->n_dims > 64)
        return gf_error(GF_ERR_INVALID, "tensor '%s' has rank %zu (limit 64)", tname,
                        tp->n_dims);
    t->rank = (int)tp->n_dims;
    t->dims = tp->dims;
    for (size_t i = 0; i < tp->n_dims; i++)
        if (tp->dims[i] < 0)
            return gf_error(GF_ERR_INVALID, "tensor '%s' has negative dimension %lld at "
                            "axis %zu", tname, (long long)tp->dims[i], i);
    int64_t n = gf_dims_numel(t->rank, t->dims);
    if (n < 0 || (uint64_t)n > SIZE_MAX / 16)
        return gf_error(GF_ERR_INVALID, "tensor '%s': element count overflows", tname);
    t->nelem = (size_t)n;
    t->nbytes = gf_dtype_bytes(t->dtype, t->nelem);
    if (tp->segment) {
        t->has_segment = true;
        t->segment_begin = tp->segment->begin;
        t->segment_end = tp->segment->end;
    }
    size_t typed = tp->n_float_data + tp->n_int32_data + tp->n_string_data +
                   tp->n_int64_data + tp->n_double_data + tp->n_uint64_data;
    bool external = tp->has_data_location &&
                    tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if ((external && (tp->has_raw_data || typed)) || (tp->has_raw_data && typed))
        return gf_error(GF_ERR_INVALID, "tensor '%s' has data in more than one field", tname);
    *out = t;
    if (external)
        return load_external(L, tp, t);
    if (tp->has_raw_data) {
        if (t->dtype == GF_STRING)
            return gf_error(GF_ERR_INVALID, "tensor '%s': string tensors cannot use raw_data",
                            tname);
        if (tp->raw_data.len != t->nbytes)
            return gf_error(GF_ERR_INVALID, "tensor '%s': raw_data has %zu bytes, dims and "
                            "type need %zu", tname, tp->raw_data.len, t->nbytes);
        t->data = tp->raw_data.data;
        return GF_OK;
    }
    return typed_data(L, tp, t, tname);
}

/* ---- types ------------------------------------------------------------------ */

static enum gf_status convert_type(struct loader *L, const Onnx__TypeProto *tp,
                                   struct gf_type *ty, const char *vname)
{
    memset(ty, 0, sizeof(*ty));
    ty->rank = -1;
    if (!tp)
        return GF_OK;
    ty->denotation = tp->denotation;
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        ty->kind = GF_TYPE_OTHER;
        ty->packed = pack_msg(L, &tp->base);
        return ty->packed.data ? GF_OK : oom();
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    ty->kind = GF_TYPE_TENSOR;
    if (tt->has_elem_type && tt->elem_type != 0 && !gf_dtype_valid(tt->elem_type))
        return gf_error(GF_ERR_INVALID, "value '%s' has element type %d, which no ONNX "
                        "version defines", vname, tt->elem_type);
    ty->dtype = tt->has_elem_type ? (enum gf_dtype)tt->elem_type : GF_UNDEFINED;
    if (!tt->shape)
        return GF_OK;
    if (tt->shape->n_dim > 64)
        return gf_error(GF_ERR_INVALID, "value '%s' has rank %zu (limit 64)", vname,
                        tt->shape->n_dim);
    ty->rank = (int)tt->shape->n_dim;
    ty->dims = gf_arena_alloc(L->arena, (size_t)ty->rank * sizeof(*ty->dims) + 1);
    if (!ty->dims)
        return oom();
    for (int i = 0; i < ty->rank; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        struct gf_dim *o = &ty->dims[i];
        o->value = -1;
        o->denotation = d->denotation;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
            d->dim_value >= 0)
            o->value = d->dim_value;
        else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
            o->param = d->dim_param;
    }
    return GF_OK;
}

/* ---- attributes ---------------------------------------------------------------- */

static enum gf_status convert_graph(struct loader *L, Onnx__GraphProto *gp,
                                    struct gf_graph *g, int depth);

static enum gf_status load_subgraph(struct loader *L, Onnx__GraphProto *gp,
                                    struct gf_node *owner, int depth,
                                    struct gf_graph **out)
{
    if (depth >= L->max_depth)
        return gf_error(GF_ERR_INVALID, "%s: subgraphs nested deeper than %d levels",
                        gf_node_label(owner, L->label, sizeof(L->label)), L->max_depth);
    struct gf_graph *g = gf_graph_create(L->m, owner->graph, owner);
    if (!g)
        return oom();
    *out = g;
    return convert_graph(L, gp, g, depth + 1);
}

/* Number of value fields set in an attribute, and whether the declared
 * type's own field is among them. */
static int attr_fields_set(const Onnx__AttributeProto *ap, int *declared_set)
{
    struct { bool set; int type; } f[] = {
        {ap->has_f, 1}, {ap->has_i, 2}, {ap->has_s, 3}, {ap->t != NULL, 4},
        {ap->g != NULL, 5}, {ap->n_floats > 0, 6}, {ap->n_ints > 0, 7},
        {ap->n_strings > 0, 8}, {ap->n_tensors > 0, 9}, {ap->n_graphs > 0, 10},
        {ap->sparse_tensor != NULL, 11}, {ap->n_sparse_tensors > 0, 12},
        {ap->tp != NULL, 13}, {ap->n_type_protos > 0, 14},
    };
    int count = 0;
    *declared_set = 0;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        count += f[i].set;
        if (f[i].set && f[i].type == (int)ap->type)
            *declared_set = 1;
    }
    return count;
}

static enum gf_status convert_attr(struct loader *L, Onnx__AttributeProto *ap,
                                   struct gf_attr *a, struct gf_node *owner, int depth)
{
    const char *nl = gf_node_label(owner, L->label, sizeof(L->label));
    if (!ap->name || !*ap->name)
        return gf_error(GF_ERR_INVALID, "%s has an attribute without a name", nl);
    a->name = ap->name;
    a->ref_attr_name = ap->ref_attr_name;
    a->doc_string = ap->doc_string;
    if (ap->ref_attr_name && !L->in_function)
        return gf_error(GF_ERR_INVALID, "%s: attribute '%s' refers to '%s' (ref_attr_name), "
                        "which only a function body may do", nl, ap->name, ap->ref_attr_name);
    a->extra = extra_of(L, &ap->base);
    if (!ap->has_type || ap->type == 0)
        return gf_error(GF_ERR_INVALID, "%s: attribute '%s' has no type", nl, ap->name);
    a->type = (enum gf_attr_type)ap->type;
    if (ap->type > 14)
        return gf_error(GF_ERR_INVALID, "%s: attribute '%s' has unknown type %d", nl,
                        ap->name, ap->type);
    int declared;
    int nset = attr_fields_set(ap, &declared);
    if (nset > 1)
        return gf_error(GF_ERR_INVALID, "%s: attribute '%s' has more than one value field "
                        "set", nl, ap->name);
    bool is_list = ap->type >= 6 && ap->type <= 14 && ap->type != 11 && ap->type != 13;
    if (nset == 1 && !declared)
        return gf_error(GF_ERR_INVALID, "%s: attribute '%s' is declared %s but holds another "
                        "type", nl, ap->name, gf_attr_type_name(a->type));
    if (nset == 0 && !is_list && !ap->ref_attr_name)
        return gf_error(GF_ERR_INVALID, "%s: attribute '%s' is declared %s but has no value",
                        nl, ap->name, gf_attr_type_name(a->type));
    a->f = ap->f;
    a->i = ap->i;
    if (ap->has_s) { /* a NUL-terminated copy, so readers can borrow it as a C string */
        a->s.data = (const uint8_t *)gf_arena_strndup(L->arena, (const char *)ap->s.data,
                                                      ap->s.len);
        if (!a->s.data)
            return oom();
        a->s.len = ap->s.len;
    }
    enum gf_status st = GF_OK;
    switch (a->type) {
    case GF_ATTR_TENSOR:
        if (ap->t)
            st = convert_tensor(L, ap->t, &a->t);
        break;
    case GF_ATTR_GRAPH:
        if (ap->g)
            st = load_subgraph(L, ap->g, owner, depth, &a->g);
        break;
    case GF_ATTR_SPARSE_TENSOR:
        if (ap->sparse_tensor && (st = check_sparse(ap->sparse_tensor)) == GF_OK)
            a->packed = pack_msg(L, &ap->sparse_tensor->base);
        break;
    case GF_ATTR_TYPE_PROTO:
        if (ap->tp)
            a->packed = pack_msg(L, &ap->tp->base);
        break;
    case GF_ATTR_FLOATS: a->n = ap->n_floats; a->floats = ap->floats; break;
    case GF_ATTR_INTS: a->n = ap->n_ints; a->ints = ap->ints; break;
    case GF_ATTR_STRINGS:
        a->n = ap->n_strings;
        a->strings = gf_arena_alloc(L->arena, (a->n + 1) * sizeof(*a->strings));
        if (!a->strings)
            return oom();
        for (size_t i = 0; i < a->n; i++) {
            a->strings[i].data = ap->strings[i].data;
            a->strings[i].len = ap->strings[i].len;
        }
        break;
    case GF_ATTR_TENSORS:
        a->n = ap->n_tensors;
        a->tensors = gf_arena_alloc(L->arena, (a->n + 1) * sizeof(void *));
        if (!a->tensors)
            return oom();
        for (size_t i = 0; i < a->n && st == GF_OK; i++)
            st = convert_tensor(L, ap->tensors[i], &a->tensors[i]);
        break;
    case GF_ATTR_GRAPHS:
        a->n = ap->n_graphs;
        a->graphs = gf_arena_alloc(L->arena, (a->n + 1) * sizeof(void *));
        if (!a->graphs)
            return oom();
        for (size_t i = 0; i < a->n && st == GF_OK; i++)
            st = load_subgraph(L, ap->graphs[i], owner, depth, &a->graphs[i]);
        break;
    case GF_ATTR_SPARSE_TENSORS:
    case GF_ATTR_TYPE_PROTOS: {
        size_t n = a->type == GF_ATTR_SPARSE_TENSORS ? ap->n_sparse_tensors
                                                     : ap->n_type_protos;
        a->n = n;
        a->packed_list = gf_arena_alloc(L->arena, (n + 1) * sizeof(*a->packed_list));
        if (!a->packed_list)
            return oom();
        for (size_t i = 0; i < n && a->type == GF_ATTR_SPARSE_TENSORS && st == GF_OK; i++)
            st = check_sparse(ap->sparse_tensors[i]);
        for (size_t i = 0; i < n && st == GF_OK; i++)
            a->packed_list[i] = pack_msg(L, a->type == GF_ATTR_SPARSE_TENSORS
                                                ? &ap->sparse_tensors[i]->base
                                                : &ap->type_protos[i]->base);
        break;
    }
    default:
        break;
    }
    if (st != GF_OK && (a->type == GF_ATTR_TENSOR || a->type == GF_ATTR_SPARSE_TENSOR ||
                        a->type == GF_ATTR_SPARSE_TENSORS))
        gf_error_prefix(nl);
    return st;
}

/* ---- graphs ------------------------------------------------------------------- */

static enum gf_status new_named_value(struct gf_graph *g, const char *name,
                                      const char *what, struct gf_value **out)
{
    if (!name || !*name)
        return gf_error(GF_ERR_INVALID, "graph '%s' has a %s without a name",
                        str_or(g->name, "(unnamed)"), what);
    *out = gf_graph_new_value(g, name, NULL);
    if (!*out) {
        if (gf_graph_find(g, name))
            return gf_error(GF_ERR_INVALID, "%s '%s' is defined twice", what, name);
        return GF_ERR_NOMEM;
    }
    return GF_OK;
}

static enum gf_status load_inputs_inits(struct loader *L, Onnx__GraphProto *gp,
                                        struct gf_graph *g)
{
    enum gf_status st;
    for (size_t i = 0; i < gp->n_input; i++) {
        Onnx__ValueInfoProto *vi = gp->input[i];
        struct gf_value *v;
        if ((st = new_named_value(g, vi->name, "graph input", &v)) != GF_OK)
            return st;
        if ((st = convert_type(L, vi->type, &v->type, vi->name)) != GF_OK)
            return st;
        v->doc_string = vi->doc_string;
        v->extra = extra_of(L, &vi->base);
        if ((st = gf_graph_add_input(g, v)) != GF_OK)
            return st;
    }
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        struct gf_value *v = tp->name ? gf_graph_find(g, tp->name) : NULL;
        if (v && (v->init || !v->is_input))
            return gf_error(GF_ERR_INVALID, "initializer '%s' is defined twice", tp->name);
        if (!v && (st = new_named_value(g, tp->name, "initializer", &v)) != GF_OK)
            return st;
        if ((st = convert_tensor(L, tp, &v->init)) != GF_OK)
            return st;
        if ((st = gf_graph_list_init(g, v)) != GF_OK)
            return st;
        if (!v->is_input) { /* an input keeps its declared type */
            struct gf_tensor *t = v->init;
            v->type.kind = GF_TYPE_TENSOR;
            v->type.dtype = t->dtype;
            v->type.rank = t->rank;
            v->type.dims = gf_arena_alloc(L->arena, (size_t)t->rank * sizeof(struct gf_dim) + 1);
            if (!v->type.dims)
                return oom();
            for (int k = 0; k < t->rank; k++)
                v->type.dims[k].value = t->dims[k];
        }
    }
    g->n_sparse_inits = gp->n_sparse_initializer;
    g->sparse_inits = gf_arena_alloc(L->arena, (gp->n_sparse_initializer + 1) *
                                                   sizeof(struct gf_bytes));
    if (!g->sparse_inits)
        return oom();
    for (size_t i = 0; i < gp->n_sparse_initializer; i++) {
        Onnx__SparseTensorProto *sp = gp->sparse_initializer[i];
        if ((st = check_sparse(sp)) != GF_OK)
            return st;
        g->sparse_inits[i] = pack_msg(L, &sp->base);
        const char *name = sp->values ? sp->values->name : NULL;
        struct gf_value *v;
        if ((st = new_named_value(g, name, "sparse initializer", &v)) != GF_OK)
            return st;
        v->sparse_init = true;
    }
    return GF_OK;
}

/* Creates the node objects and their outputs, in file order. */
static enum gf_status load_node_outputs(struct loader *L, Onnx__GraphProto *gp,
                                        struct gf_graph *g, struct gf_node **nodes)
{
    for (size_t i = 0; i < gp->n_node; i++) {
        Onnx__NodeProto *np = gp->node[i];
        struct gf_node *n = gf_graph_add_node(g, np->op_type, np->domain, np->name, 0, NULL,
                                              0, NULL);
        if (!n)
            return GF_ERR_NOMEM;
        /* borrow the strings instead of the copies add_node made */
        n->op_type = np->op_type;
        n->domain = np->domain;
        n->name = np->name;
        n->doc_string = np->doc_string;
        n->extra = extra_of(L, &np->base);
        nodes[i] = n;
        const char *nl = gf_node_label(n, L->label, sizeof(L->label));
        if (!np->op_type || !*np->op_type)
            return gf_error(GF_ERR_INVALID, "%s has no op_type", nl);
        n->outputs = gf_arena_alloc(L->arena, (np->n_output + 1) * sizeof(void *));
        if (!n->outputs)
            return oom();
        n->n_outputs = np->n_output;
        for (size_t j = 0; j < np->n_output; j++) {
            const char *name = np->output[j];
            if (!name || !*name)
                continue;
            struct gf_value *v = gf_graph_find(g, name);
            if (v) {
                const char *by = v->producer ? "another node" : v->init ? "an initializer"
                                 : v->is_input ? "a graph input" : "a sparse initializer";
                char other[200] = "";
                if (v->producer)
                    gf_node_label(v->producer, other, sizeof(other));
                return gf_error(GF_ERR_INVALID, "%s: output '%s' is already produced by %s",
                                gf_node_label(n, L->label, sizeof(L->label)), name,
                                v->producer ? other : by);
            }
            struct gf_value *outer = g->parent ? gf_graph_lookup(g->parent, name) : NULL;
            if (outer)
                return gf_error(GF_ERR_INVALID, "%s: output '%s' is already produced by an "
                                "enclosing graph (names must be unique across scopes)",
                                gf_node_label(n, L->label, sizeof(L->label)), name);
            v = gf_graph_new_value(g, name, NULL);
            if (!v)
                return GF_ERR_NOMEM;
            v->producer = n;
            v->producer_slot = (int)j;
            n->outputs[j] = v;
        }
    }
    return GF_OK;
}

static enum gf_status load_value_infos(struct loader *L, Onnx__GraphProto *gp,
                                       struct gf_graph *g)
{
    for (size_t i = 0; i < gp->n_value_info; i++) {
        Onnx__ValueInfoProto *vi = gp->value_info[i];
        struct gf_value *v = vi->name ? gf_graph_find(g, vi->name) : NULL;
        enum gf_status st;
        if (v && v->has_value_info)
            return gf_error(GF_ERR_INVALID, "value_info entry '%s' is defined twice", vi->name);
        if (!v && (st = new_named_value(g, vi->name, "value_info entry", &v)) != GF_OK)
            return st;
        if ((st = convert_type(L, vi->type, &v->type, vi->name)) != GF_OK)
            return st;
        v->doc_string = vi->doc_string;
        v->extra = extra_of(L, &vi->base);
        v->has_value_info = true;
    }
    return GF_OK;
}

static bool is_defined(const struct gf_value *v)
{
    return v->producer || v->init || v->is_input || v->sparse_init;
}

/* Input / output counts of known ops, and the graphs control flow needs. */
static enum gf_status check_node_shape(struct loader *L, struct gf_node *n)
{
    const char *nl = gf_node_label(n, L->label, sizeof(L->label));
    if (n->op != GF_OP_UNKNOWN) {
        const struct gf_op_info *oi = gf_op_get_info(n->op);
        if ((int)n->n_inputs < oi->min_inputs ||
            (oi->max_inputs >= 0 && (int)n->n_inputs > oi->max_inputs))
            return gf_error(GF_ERR_INVALID, "%s has %zu inputs; %s takes %d to %d", nl,
                            n->n_inputs, oi->name, oi->min_inputs, oi->max_inputs);
        if ((int)n->n_outputs < oi->min_outputs ||
            (oi->max_outputs >= 0 && (int)n->n_outputs > oi->max_outputs))
            return gf_error(GF_ERR_INVALID, "%s has %zu outputs; %s gives %d to %d", nl,
                            n->n_outputs, oi->name, oi->min_outputs, oi->max_outputs);
    }
    static const struct { const char *op, *attrs[2]; } need[] = {
        {"If", {"then_branch", "else_branch"}}, {"Loop", {"body", NULL}},
        {"Scan", {"body", NULL}},
    };
    if (*onnx_domain(n->domain))
        return GF_OK;
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        if (strcmp(n->op_type, need[i].op) != 0)
            continue;
        for (int k = 0; k < 2 && need[i].attrs[k]; k++) {
            const struct gf_attr *a = gf_node_attr(n, need[i].attrs[k]);
            if (!a || a->type != GF_ATTR_GRAPH || !a->g)
                return gf_error(GF_ERR_INVALID, "%s lacks its graph attribute '%s'", nl,
                                need[i].attrs[k]);
        }
    }
    return GF_OK;
}

static enum gf_status load_node_inputs(struct loader *L, Onnx__NodeProto *np,
                                       struct gf_node *n, int depth)
{
    struct gf_graph *g = n->graph;
    n->inputs = gf_arena_alloc(L->arena, (np->n_input + 1) * sizeof(void *));
    if (!n->inputs)
        return oom();
    for (size_t j = 0; j < np->n_input; j++) {
        const char *name = np->input[j];
        if (!name || !*name)
            continue;
        struct gf_value *v = gf_graph_lookup(g, name);
        if (!v || !is_defined(v))
            return gf_error(GF_ERR_INVALID, "%s: input '%s' is not defined (no graph input, "
                            "initializer or node output has that name)",
                            gf_node_label(n, L->label, sizeof(L->label)), name);
        n->inputs[j] = v;
        if (gf_value_add_use(v, n, (int)j) != GF_OK)
            return GF_ERR_NOMEM;
    }
    n->n_inputs = np->n_input;
    n->attrs = gf_arena_alloc(L->arena, (np->n_attribute + 1) * sizeof(struct gf_attr));
    if (!n->attrs)
        return oom();
    n->n_attrs = np->n_attribute;
    const char **names = gf_arena_alloc(L->arena, (np->n_attribute + 1) * sizeof(char *));
    if (!names)
        return oom();
    for (size_t k = 0; k < np->n_attribute; k++) {
        enum gf_status st = convert_attr(L, np->attribute[k], &n->attrs[k], n, depth);
        if (st != GF_OK)
            return st;
        names[k] = n->attrs[k].name;
    }
    const char *dup = find_duplicate(names, np->n_attribute);
    if (dup)
        return gf_error(GF_ERR_INVALID, "%s: attribute '%s' appears twice",
                        gf_node_label(n, L->label, sizeof(L->label)), dup);
    return check_node_shape(L, n);
}

static enum gf_status load_outputs(struct loader *L, Onnx__GraphProto *gp, struct gf_graph *g)
{
    for (size_t i = 0; i < gp->n_output; i++) {
        Onnx__ValueInfoProto *vi = gp->output[i];
        const char *name = vi->name;
        if (!name || !*name)
            return gf_error(GF_ERR_INVALID, "graph '%s' has an output without a name",
                            str_or(g->name, "(unnamed)"));
        struct gf_value *v = gf_graph_lookup(g, name);
        if (!v || !is_defined(v))
            return gf_error(GF_ERR_INVALID, "graph output '%s' is not produced by any node, "
                            "input or initializer", name);
        if (v->graph == g) {
            enum gf_status st = convert_type(L, vi->type, &v->type, name);
            if (st != GF_OK)
                return st;
            v->doc_string = vi->doc_string;
            v->extra = extra_of(L, &vi->base);
        }
        /* an outer-scope value passed through keeps its own flags */
        bool was_output = v->is_output;
        if (gf_graph_add_output(g, v) != GF_OK)
            return GF_ERR_NOMEM;
        if (v->graph != g)
            v->is_output = was_output;
    }
    return GF_OK;
}

static enum gf_status convert_graph(struct loader *L, Onnx__GraphProto *gp,
                                    struct gf_graph *g, int depth)
{
    g->name = gp->name;
    g->doc_string = gp->doc_string;
    g->extra = extra_of(L, &gp->base);
    enum gf_status st = load_inputs_inits(L, gp, g);
    if (st != GF_OK)
        return st;
    struct gf_node **nodes = malloc((gp->n_node + 1) * sizeof(*nodes));
    if (!nodes)
        return oom();
    st = load_node_outputs(L, gp, g, nodes);
    if (st == GF_OK)
        st = load_value_infos(L, gp, g);
    for (size_t i = 0; st == GF_OK && i < gp->n_node; i++)
        st = load_node_inputs(L, gp->node[i], nodes[i], depth);
    free(nodes);
    if (st == GF_OK)
        st = load_outputs(L, gp, g);
    g->n_quant_annotations = gp->n_quantization_annotation;
    g->quant_annotations = gf_arena_alloc(L->arena, (gp->n_quantization_annotation + 1) *
                                                       sizeof(struct gf_bytes));
    if (st == GF_OK && !g->quant_annotations)
        st = oom();
    for (size_t i = 0; st == GF_OK && i < gp->n_quantization_annotation; i++)
        g->quant_annotations[i] = pack_msg(L, &gp->quantization_annotation[i]->base);
    if (st == GF_OK)
        st = gf_graph_toposort(g);
    return st;
}

/* ---- functions and the model ----------------------------------------------------- */

static enum gf_status convert_function(struct loader *L, Onnx__FunctionProto *fp,
                                       struct gf_function **out)
{
    struct gf_function *f = gf_arena_alloc(L->arena, sizeof(*f));
    if (!f)
        return oom();
    *out = f;
    f->name = fp->name;
    f->domain = fp->domain;
    f->doc_string = fp->doc_string;
    f->extra = extra_of(L, &fp->base);
    if (!fp->name || !*fp->name)
        return gf_error(GF_ERR_INVALID, "a model-local function has no name");
    f->n_attr_names = fp->n_attribute;
    f->attr_names = (const char **)fp->attribute;
    f->n_opsets = fp->n_opset_import;
    f->opsets = gf_arena_alloc(L->arena, (fp->n_opset_import + 1) * sizeof(*f->opsets));
    if (!f->opsets)
        return oom();
    for (size_t i = 0; i < fp->n_opset_import; i++) {
        f->opsets[i].domain = fp->opset_import[i]->domain;
        f->opsets[i].version = fp->opset_import[i]->version;
    }
    /* The body is an ordinary graph with untyped inputs and outputs. */
    Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
    Onnx__ValueInfoProto *vis = gf_arena_alloc(L->arena, (fp->n_input + fp->n_output + 1) *
                                                             sizeof(*vis));
    Onnx__ValueInfoProto **in = gf_arena_alloc(L->arena, (fp->n_input + 1) * sizeof(void *));
    Onnx__ValueInfoProto **outp = gf_arena_alloc(L->arena, (fp->n_output + 1) * sizeof(void *));
    if (!vis || !in || !outp)
        return oom();
    for (size_t i = 0; i < fp->n_input + fp->n_output; i++) {
        Onnx__ValueInfoProto init = ONNX__VALUE_INFO_PROTO__INIT;
        vis[i] = init;
        vis[i].name = i < fp->n_input ? fp->input[i] : fp->output[i - fp->n_input];
        if (i < fp->n_input)
            in[i] = &vis[i];
        else
            outp[i - fp->n_input] = &vis[i];
    }
    gp.name = fp->name;
    gp.n_input = fp->n_input;
    gp.input = in;
    gp.n_output = fp->n_output;
    gp.output = outp;
    gp.n_node = fp->n_node;
    gp.node = fp->node;
    f->body = gf_graph_create(L->m, NULL, NULL);
    if (!f->body)
        return oom();
    L->in_function = true;
    enum gf_status st = convert_graph(L, &gp, f->body, 0);
    L->in_function = false;
    if (st != GF_OK) {
        char pre[300];
        snprintf(pre, sizeof(pre), "function '%s'", fp->name);
        gf_error_prefix(pre);
    }
    return st;
}

/* Index of the model-local function a node calls, or -1. */
static long called_function(const struct gf_model *m, const struct gf_node *n)
{
    for (size_t i = 0; i < m->n_functions; i++) {
        const struct gf_function *f = m->functions[i];
        if (strcmp(f->name, n->op_type) == 0 &&
            strcmp(onnx_domain(f->domain), onnx_domain(n->domain)) == 0)
            return (long)i;
    }
    return -1;
}

/* Functions may call functions but never (even indirectly) themselves:
 * an iterative depth-first search over the call graph. */
static enum gf_status check_function_recursion(struct gf_model *m)
{
    size_t nf = m->n_functions;
    if (nf == 0)
        return GF_OK;
    unsigned char *color = calloc(nf, 1); /* 0 new, 1 on stack, 2 done */
    struct frame { size_t f; const struct gf_node *next; } *st = malloc(nf * sizeof(*st));
    enum gf_status rc = GF_OK;
    if (!color || !st)
        rc = oom();
    for (size_t root = 0; rc == GF_OK && root < nf; root++) {
        if (color[root])
            continue;
        size_t sp = 0;
        st[sp++] = (struct frame){root, m->functions[root]->body->first};
        color[root] = 1;
        while (sp && rc == GF_OK) {
            struct frame *fr = &st[sp - 1];
            if (!fr->next) {
                color[fr->f] = 2;
                sp--;
                continue;
            }
            long callee = called_function(m, fr->next);
            fr->next = fr->next->next;
            if (callee < 0 || color[callee] == 2)
                continue;
            if (color[callee] == 1)
                rc = gf_error(GF_ERR_INVALID, "function '%s' calls itself through '%s' "
                              "(recursion is not allowed)", m->functions[callee]->name,
                              m->functions[fr->f]->name);
            else {
                color[callee] = 1;
                st[sp++] = (struct frame){(size_t)callee, m->functions[callee]->body->first};
            }
        }
    }
    free(color);
    free(st);
    return rc;
}

static enum gf_status check_node_domains(struct gf_model *m, const struct gf_graph *g)
{
    for (const struct gf_node *n = g->first; n; n = n->next) {
        const char *d = n->domain ? n->domain : "";
        bool ok = gf_model_opset(m, d) > 0;
        for (size_t i = 0; !ok && i < m->n_functions; i++) {
            const char *fd = m->functions[i]->domain ? m->functions[i]->domain : "";
            ok = strcmp(fd, d) == 0 && strcmp(m->functions[i]->name, n->op_type) == 0;
        }
        if (!ok) {
            char lab[200];
            return gf_error(GF_ERR_INVALID, "%s uses domain '%s', which the model does not "
                            "import (no opset_import entry)", gf_node_label(n, lab, sizeof(lab)),
                            *d ? d : "ai.onnx");
        }
        for (size_t a = 0; a < n->n_attrs; a++) {
            const struct gf_attr *at = &n->attrs[a];
            enum gf_status st = GF_OK;
            if (at->type == GF_ATTR_GRAPH && at->g)
                st = check_node_domains(m, at->g);
            for (size_t k = 0; st == GF_OK && at->type == GF_ATTR_GRAPHS && k < at->n; k++)
                st = check_node_domains(m, at->graphs[k]);
            if (st != GF_OK)
                return st;
        }
    }
    return GF_OK;
}

static enum gf_status convert_model(struct loader *L, Onnx__ModelProto *mp)
{
    struct gf_model *m = L->m;
    m->extra = extra_of(L, &mp->base);
    if (!mp->has_ir_version || mp->ir_version <= 0)
        return gf_error(GF_ERR_INVALID, "model has no ir_version");
    m->ir_version = mp->ir_version;
    m->producer_name = mp->producer_name;
    m->producer_version = mp->producer_version;
    m->domain = mp->domain;
    m->model_version = mp->has_model_version ? mp->model_version : 0;
    m->doc_string = mp->doc_string;
    if (mp->n_opset_import == 0 && mp->ir_version >= 3)
        return gf_error(GF_ERR_INVALID, "model has no opset_import (required since IR "
                        "version 3)");
    m->n_opsets = mp->n_opset_import;
    m->opsets = gf_arena_alloc(L->arena, (mp->n_opset_import + 1) * sizeof(*m->opsets));
    if (!m->opsets)
        return oom();
    const char **domains = gf_arena_alloc(L->arena, (mp->n_opset_import + 1) * sizeof(char *));
    if (!domains)
        return oom();
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        m->opsets[i].domain = o->domain;
        m->opsets[i].version = o->version;
        domains[i] = onnx_domain(o->domain);
        if (!o->has_version || o->version < 1)
            return gf_error(GF_ERR_INVALID, "opset_import for domain '%s' has %s version",
                            *domains[i] ? domains[i] : "ai.onnx",
                            o->has_version ? "an invalid" : "no");
    }
    const char *dup = find_duplicate(domains, mp->n_opset_import);
    if (dup)
        return gf_error(GF_ERR_INVALID, "opset_import lists domain '%s' twice",
                        *dup ? dup : "ai.onnx");
    m->n_metadata = mp->n_metadata_props;
    m->metadata = gf_arena_alloc(L->arena, (mp->n_metadata_props + 1) * sizeof(*m->metadata));
    if (!m->metadata)
        return oom();
    for (size_t i = 0; i < mp->n_metadata_props; i++) {
        m->metadata[i].key = mp->metadata_props[i]->key;
        m->metadata[i].value = mp->metadata_props[i]->value;
    }
    m->n_training_info = mp->n_training_info;
    m->training_info = gf_arena_alloc(L->arena, (mp->n_training_info + 1) *
                                                   sizeof(struct gf_bytes));
    if (!m->training_info)
        return oom();
    for (size_t i = 0; i < mp->n_training_info; i++)
        m->training_info[i] = pack_msg(L, &mp->training_info[i]->base);
    m->n_functions = mp->n_functions;
    m->functions = gf_arena_alloc(L->arena, (mp->n_functions + 1) * sizeof(void *));
    if (!m->functions)
        return oom();
    enum gf_status st;
    for (size_t i = 0; i < mp->n_functions; i++)
        if ((st = convert_function(L, mp->functions[i], &m->functions[i])) != GF_OK)
            return st;
    if ((st = check_function_recursion(m)) != GF_OK)
        return st;
    if (!mp->graph)
        return gf_error(GF_ERR_INVALID, "model has no graph");
    m->graph = gf_graph_create(m, NULL, NULL);
    if (!m->graph)
        return oom();
    if ((st = convert_graph(L, mp->graph, m->graph, 0)) != GF_OK)
        return st;
    return check_node_domains(m, m->graph);
}

/* ---- entry points ------------------------------------------------------------------ */

static enum gf_status load_bytes(const uint8_t *buf, size_t len, const char *path,
                                 const char *dir, const struct gf_load_opts *opts,
                                 struct gf_model **out)
{
    struct loader L = {0};
    L.max_depth = opts && opts->max_depth > 0 ? opts->max_depth : DEFAULT_MAX_DEPTH;
    L.no_external = opts && opts->no_external;
    /* Three protobuf message levels per subgraph (graph, node, attribute)
     * plus type nesting inside. */
    int wire_depth = 3 * L.max_depth + 12;
    bool known;
    enum gf_status st = gf_wire_check(buf, len, &onnx__model_proto__descriptor, wire_depth,
                                      &known);
    if (st != GF_OK && !known) { /* not one ModelProto field before the damage */
        char why[512];
        snprintf(why, sizeof(why), "%s", gf_last_error());
        return gf_error(GF_ERR_PARSE, "not an ONNX model (%s)", why);
    }
    if (st != GF_OK)
        return st;
    L.m = gf_model_alloc_empty();
    if (!L.m)
        return oom();
    L.arena = L.m->priv->arena;
    L.m->path = path ? gf_model_strdup(L.m, path) : NULL;
    L.m->dir = dir ? gf_model_strdup(L.m, dir) : NULL;
    ProtobufCAllocator alloc;
    gf_arena_pb_allocator(L.arena, &alloc);
    Onnx__ModelProto *mp = onnx__model_proto__unpack(&alloc, len, buf);
    if (!mp)
        st = gf_error(GF_ERR_PARSE, "not a valid ONNX model (protobuf decoding failed)");
    else
        st = convert_model(&L, mp);
    if (st != GF_OK) {
        gf_model_free(L.m);
        return st;
    }
    *out = L.m;
    return GF_OK;
}

enum gf_status gf_model_load_buffer(const void *buf, size_t len, const char *dir,
                                    const struct gf_load_opts *opts,
                                    struct gf_model **out)
{
    *out = NULL;
    return load_bytes(buf, len, NULL, dir, opts, out);
}

/* Reads a whole file (mapped when large).  *unmap says how to release. */
static enum gf_status read_file(const char *path, uint8_t **buf, size_t *len, bool *mapped)
{
    struct stat sb;
    int fd = gf_file_open_read(path, 0, &sb);
    if (fd == GF_FILE_NOT_REGULAR)
        return gf_error(GF_ERR_IO, "not a regular file");
    if (fd < 0)
        return gf_error(GF_ERR_IO, "cannot open: %s", strerror(errno));
    *len = (size_t)sb.st_size;
    *mapped = false;
    if (*len == 0) {
        close(fd);
        *buf = NULL;
        return gf_error(GF_ERR_PARSE, "file is empty");
    }
    void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return gf_error(GF_ERR_IO, "cannot map file: %s", strerror(errno));
    *buf = p;
    *mapped = true;
    return GF_OK;
}

static char *dirname_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

enum gf_status gf_model_load(const char *path, const struct gf_load_opts *opts,
                             struct gf_model **out)
{
    *out = NULL;
    uint8_t *buf;
    size_t len;
    bool mapped;
    enum gf_status st = read_file(path, &buf, &len, &mapped);
    if (st == GF_OK) {
        char *dir = dirname_of(path);
        st = dir ? load_bytes(buf, len, path, dir, opts, out) : oom();
        free(dir);
        munmap(buf, len);
    }
    if (st != GF_OK)
        gf_error_prefix(path);
    return st;
}

enum gf_status gf_tensor_load(struct gf_model *m, const char *path, struct gf_tensor **out)
{
    *out = NULL;
    uint8_t *buf;
    size_t len;
    bool mapped;
    enum gf_status st = read_file(path, &buf, &len, &mapped);
    if (st == GF_OK) {
        struct loader L = {.m = m, .arena = m->priv->arena, .max_depth = 1,
                           .no_external = true};
        bool known;
        st = gf_wire_check(buf, len, &onnx__tensor_proto__descriptor, 8, &known);
        if (st != GF_OK && !known) { /* not one TensorProto field before the damage */
            char why[512];
            snprintf(why, sizeof(why), "%s", gf_last_error());
            st = gf_error(GF_ERR_PARSE, "not an ONNX tensor file (TensorProto) (%s)", why);
        }
        if (st == GF_OK) {
            ProtobufCAllocator alloc;
            gf_arena_pb_allocator(L.arena, &alloc);
            Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&alloc, len, buf);
            st = tp ? convert_tensor(&L, tp, out)
                    : gf_error(GF_ERR_PARSE, "not a valid TensorProto");
        }
        munmap(buf, len);
    }
    if (st != GF_OK)
        gf_error_prefix(path);
    return st;
}

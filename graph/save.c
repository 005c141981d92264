/*
 * ONNX save: IR -> protobuf-c messages (built in a scratch arena, borrowing
 * the IR's strings and tensor bytes) -> streamed into a temporary file in
 * the destination folder -> fsync -> rename.  Parts graphfuse keeps packed
 * (training info, sparse tensors, non-tensor types, unknown fields) are
 * restored as they were read.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct saver {
    struct gf_arena *arena;
    ProtobufCAllocator alloc;
    bool failed;
    /* external data side file (NULL when everything is inline) */
    FILE *ext;
    char *ext_name;      /* shared by every location entry; its hash part is
                            filled in once the data is written */
    size_t ext_threshold;
    uint64_t ext_offset;
    uint64_t ext_hash;   /* of the bytes written to the side file */
};

static void *salloc(struct saver *S, size_t n)
{
    void *p = gf_arena_alloc(S->arena, n ? n : 1);
    if (!p)
        S->failed = true;
    return p;
}

static void restore_extra(ProtobufCMessage *msg, const struct gf_extra *e)
{
    if (e) {
        msg->n_unknown_fields = e->n;
        msg->unknown_fields = e->fields;
    }
}

static char *cs(const char *s)
{
    return (char *)s;
}

/* Unpacks a kept-packed sub-message back into the scratch arena. */
static void *unpack_kept(struct saver *S, const ProtobufCMessageDescriptor *d,
                         struct gf_bytes b)
{
    void *m = protobuf_c_message_unpack(d, &S->alloc, b.len, b.data);
    if (!m)
        S->failed = true;
    return m;
}

/* ---- tensors ------------------------------------------------------------- */

/* A 64-bit hash of bytes (FNV-1a's constants, eight bytes a step with a
 * rotation so that every bit reaches every other): it names the side file
 * after its content, not a checksum against tampering. */
static uint64_t hash_bytes(uint64_t h, const uint8_t *p, size_t n)
{
    const uint64_t prime = 0x100000001b3ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h ^= w;
        h = ((h << 29) | (h >> 35)) * prime;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * prime;
    return h;
}

static bool write_external(struct saver *S, const struct gf_tensor *t,
                           Onnx__TensorProto *tp)
{
    /* 64-byte aligned offsets let readers map tensors directly. */
    uint64_t pad = (64 - S->ext_offset % 64) % 64;
    static const uint8_t zeros[64];
    if (pad && fwrite(zeros, 1, pad, S->ext) != pad)
        return false;
    S->ext_offset += pad;
    if (fwrite(t->data, 1, t->nbytes, S->ext) != t->nbytes)
        return false;
    S->ext_hash = hash_bytes(S->ext_hash ^ t->nbytes, t->data, t->nbytes);
    char off[32], len[32];
    snprintf(off, sizeof(off), "%llu", (unsigned long long)S->ext_offset);
    snprintf(len, sizeof(len), "%zu", t->nbytes);
    S->ext_offset += t->nbytes;
    Onnx__StringStringEntryProto **e = salloc(S, 3 * sizeof(*e));
    const char *keys[3] = {"location", "offset", "length"};
    const char *vals[3] = {S->ext_name, gf_arena_strndup(S->arena, off, strlen(off)),
                           gf_arena_strndup(S->arena, len, strlen(len))};
    if (!e)
        return false;
    for (int i = 0; i < 3; i++) {
        e[i] = salloc(S, sizeof(**e));
        if (!e[i] || !vals[i])
            return false;
        onnx__string_string_entry_proto__init(e[i]);
        e[i]->key = cs(keys[i]);
        e[i]->value = cs(vals[i]);
    }
    tp->n_external_data = 3;
    tp->external_data = e;
    tp->has_data_location = true;
    tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    return true;
}

static Onnx__TensorProto *build_tensor(struct saver *S, const struct gf_tensor *t,
                                       bool may_externalize)
{
    Onnx__TensorProto *tp = salloc(S, sizeof(*tp));
    if (!tp)
        return NULL;
    onnx__tensor_proto__init(tp);
    restore_extra(&tp->base, t->extra);
    tp->name = cs(t->name);
    tp->doc_string = cs(t->doc_string);
    tp->has_data_type = true;
    tp->data_type = t->dtype;
    tp->n_dims = (size_t)t->rank;
    tp->dims = t->dims;
    if (t->has_segment) {
        tp->segment = salloc(S, sizeof(*tp->segment));
        if (!tp->segment)
            return NULL;
        onnx__tensor_proto__segment__init(tp->segment);
        tp->segment->has_begin = tp->segment->has_end = true;
        tp->segment->begin = t->segment_begin;
        tp->segment->end = t->segment_end;
    }
    if (t->dtype == GF_STRING) {
        tp->n_string_data = t->nelem;
        tp->string_data = salloc(S, t->nelem * sizeof(ProtobufCBinaryData));
        if (!tp->string_data)
            return NULL;
        for (size_t i = 0; i < t->nelem; i++) {
            tp->string_data[i].data = (uint8_t *)t->strings[i].data;
            tp->string_data[i].len = t->strings[i].len;
        }
        return tp;
    }
    if (may_externalize && S->ext && t->nbytes >= S->ext_threshold) {
        if (!write_external(S, t, tp))
            S->failed = true;
        return tp;
    }
    tp->has_raw_data = true;
    tp->raw_data.data = t->data;
    tp->raw_data.len = t->nbytes;
    return tp;
}

/* ---- types and values -------------------------------------------------------- */

static Onnx__TypeProto *build_type(struct saver *S, const struct gf_type *ty)
{
    if (ty->kind == GF_TYPE_NONE)
        return NULL;
    if (ty->kind == GF_TYPE_OTHER)
        return unpack_kept(S, &onnx__type_proto__descriptor, ty->packed);
    Onnx__TypeProto *tp = salloc(S, sizeof(*tp));
    Onnx__TypeProto__Tensor *tt = salloc(S, sizeof(*tt));
    if (!tp || !tt)
        return NULL;
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tp->denotation = cs(ty->denotation);
    if (ty->dtype != GF_UNDEFINED) {
        tt->has_elem_type = true;
        tt->elem_type = ty->dtype;
    }
    if (ty->rank < 0)
        return tp;
    Onnx__TensorShapeProto *sh = salloc(S, sizeof(*sh));
    Onnx__TensorShapeProto__Dimension *dims = salloc(S, (size_t)ty->rank * sizeof(*dims));
    Onnx__TensorShapeProto__Dimension **dp = salloc(S, (size_t)ty->rank * sizeof(*dp));
    if (!sh || !dims || !dp)
        return NULL;
    onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < ty->rank; i++) {
        onnx__tensor_shape_proto__dimension__init(&dims[i]);
        const struct gf_dim *d = &ty->dims[i];
        if (d->value >= 0) {
            dims[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dims[i].dim_value = d->value;
        } else if (d->param) {
            dims[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dims[i].dim_param = cs(d->param);
        }
        dims[i].denotation = cs(d->denotation);
        dp[i] = &dims[i];
    }
    sh->n_dim = (size_t)ty->rank;
    sh->dim = dp;
    tt->shape = sh;
    return tp;
}

static Onnx__ValueInfoProto *build_value_info(struct saver *S, const struct gf_value *v)
{
    Onnx__ValueInfoProto *vi = salloc(S, sizeof(*vi));
    if (!vi)
        return NULL;
    onnx__value_info_proto__init(vi);
    restore_extra(&vi->base, v->extra);
    vi->name = cs(v->name);
    vi->doc_string = cs(v->doc_string);
    vi->type = build_type(S, &v->type);
    return vi;
}

/* ---- attributes, nodes, graphs ------------------------------------------------- */

static Onnx__GraphProto *build_graph(struct saver *S, const struct gf_graph *g);

static void build_attr(struct saver *S, const struct gf_attr *a, Onnx__AttributeProto *ap)
{
    onnx__attribute_proto__init(ap);
    restore_extra(&ap->base, a->extra);
    ap->name = cs(a->name);
    ap->ref_attr_name = cs(a->ref_attr_name);
    ap->doc_string = cs(a->doc_string);
    ap->has_type = true;
    ap->type = (Onnx__AttributeProto__AttributeType)a->type;
    if (a->ref_attr_name)
        return; /* a reference carries no value */
    size_t n = a->n;
    switch (a->type) {
    case GF_ATTR_FLOAT: ap->has_f = true; ap->f = a->f; break;
    case GF_ATTR_INT: ap->has_i = true; ap->i = a->i; break;
    case GF_ATTR_STRING:
        ap->has_s = true;
        ap->s.data = (uint8_t *)a->s.data;
        ap->s.len = a->s.len;
        break;
    case GF_ATTR_TENSOR: ap->t = a->t ? build_tensor(S, a->t, false) : NULL; break;
    case GF_ATTR_GRAPH: ap->g = a->g ? build_graph(S, a->g) : NULL; break;
    case GF_ATTR_SPARSE_TENSOR:
        ap->sparse_tensor = unpack_kept(S, &onnx__sparse_tensor_proto__descriptor, a->packed);
        break;
    case GF_ATTR_TYPE_PROTO:
        ap->tp = unpack_kept(S, &onnx__type_proto__descriptor, a->packed);
        break;
    case GF_ATTR_FLOATS: ap->n_floats = n; ap->floats = a->floats; break;
    case GF_ATTR_INTS: ap->n_ints = n; ap->ints = a->ints; break;
    case GF_ATTR_STRINGS:
        ap->n_strings = n;
        ap->strings = salloc(S, n * sizeof(*ap->strings));
        for (size_t i = 0; ap->strings && i < n; i++) {
            ap->strings[i].data = (uint8_t *)a->strings[i].data;
            ap->strings[i].len = a->strings[i].len;
        }
        break;
    case GF_ATTR_TENSORS:
        ap->n_tensors = n;
        ap->tensors = salloc(S, n * sizeof(void *));
        for (size_t i = 0; ap->tensors && i < n; i++)
            ap->tensors[i] = build_tensor(S, a->tensors[i], false);
        break;
    case GF_ATTR_GRAPHS:
        ap->n_graphs = n;
        ap->graphs = salloc(S, n * sizeof(void *));
        for (size_t i = 0; ap->graphs && i < n; i++)
            ap->graphs[i] = build_graph(S, a->graphs[i]);
        break;
    case GF_ATTR_SPARSE_TENSORS:
        ap->n_sparse_tensors = n;
        ap->sparse_tensors = salloc(S, n * sizeof(void *));
        for (size_t i = 0; ap->sparse_tensors && i < n; i++)
            ap->sparse_tensors[i] = unpack_kept(S, &onnx__sparse_tensor_proto__descriptor,
                                                a->packed_list[i]);
        break;
    case GF_ATTR_TYPE_PROTOS:
        ap->n_type_protos = n;
        ap->type_protos = salloc(S, n * sizeof(void *));
        for (size_t i = 0; ap->type_protos && i < n; i++)
            ap->type_protos[i] = unpack_kept(S, &onnx__type_proto__descriptor,
                                             a->packed_list[i]);
        break;
    default:
        break;
    }
}

static char **value_names(struct saver *S, size_t n, struct gf_value *const *vals)
{
    char **names = salloc(S, n * sizeof(char *));
    for (size_t i = 0; names && i < n; i++)
        names[i] = vals[i] ? cs(vals[i]->name) : cs("");
    return names;
}

static Onnx__NodeProto *build_node(struct saver *S, const struct gf_node *n)
{
    Onnx__NodeProto *np = salloc(S, sizeof(*np));
    if (!np)
        return NULL;
    onnx__node_proto__init(np);
    restore_extra(&np->base, n->extra);
    np->name = cs(n->name);
    np->op_type = cs(n->op_type);
    np->domain = cs(n->domain);
    np->doc_string = cs(n->doc_string);
    np->n_input = n->n_inputs;
    np->input = value_names(S, n->n_inputs, n->inputs);
    np->n_output = n->n_outputs;
    np->output = value_names(S, n->n_outputs, n->outputs);
    np->n_attribute = n->n_attrs;
    Onnx__AttributeProto *attrs = salloc(S, n->n_attrs * sizeof(*attrs));
    np->attribute = salloc(S, n->n_attrs * sizeof(void *));
    for (size_t i = 0; attrs && np->attribute && i < n->n_attrs; i++) {
        build_attr(S, &n->attrs[i], &attrs[i]);
        np->attribute[i] = &attrs[i];
    }
    return np;
}

/* Intermediate values that carry information worth writing as value_info. */
static bool wants_value_info(const struct gf_value *v)
{
    if (v->is_input || v->is_output)
        return false;
    if (v->has_value_info)
        return true;
    return v->type.kind != GF_TYPE_NONE && v->producer;
}

static Onnx__GraphProto *build_graph(struct saver *S, const struct gf_graph *g)
{
    Onnx__GraphProto *gp = salloc(S, sizeof(*gp));
    if (!gp)
        return NULL;
    onnx__graph_proto__init(gp);
    restore_extra(&gp->base, g->extra);
    gp->name = cs(g->name);
    gp->doc_string = cs(g->doc_string);
    gp->n_node = g->n_nodes;
    gp->node = salloc(S, g->n_nodes * sizeof(void *));
    size_t k = 0;
    for (const struct gf_node *n = g->first; gp->node && n; n = n->next)
        gp->node[k++] = build_node(S, n);
    gp->n_initializer = g->n_inits;
    gp->initializer = salloc(S, g->n_inits * sizeof(void *));
    for (size_t i = 0; gp->initializer && i < g->n_inits; i++) {
        const struct gf_value *v = g->inits[i];
        gp->initializer[i] = build_tensor(S, v->init, g->parent == NULL);
        if (gp->initializer[i])
            gp->initializer[i]->name = cs(v->name);
    }
    gp->n_input = g->n_inputs;
    gp->input = salloc(S, g->n_inputs * sizeof(void *));
    for (size_t i = 0; gp->input && i < g->n_inputs; i++)
        gp->input[i] = build_value_info(S, g->inputs[i]);
    gp->n_output = g->n_outputs;
    gp->output = salloc(S, g->n_outputs * sizeof(void *));
    for (size_t i = 0; gp->output && i < g->n_outputs; i++)
        gp->output[i] = build_value_info(S, g->outputs[i]);
    size_t nvi = 0;
    gp->value_info = salloc(S, g->n_values * sizeof(void *));
    for (size_t i = 0; gp->value_info && i < g->n_values; i++)
        if (wants_value_info(g->values[i]))
            gp->value_info[nvi++] = build_value_info(S, g->values[i]);
    gp->n_value_info = nvi;
    gp->n_sparse_initializer = g->n_sparse_inits;
    gp->sparse_initializer = salloc(S, g->n_sparse_inits * sizeof(void *));
    for (size_t i = 0; gp->sparse_initializer && i < g->n_sparse_inits; i++)
        gp->sparse_initializer[i] =
            unpack_kept(S, &onnx__sparse_tensor_proto__descriptor, g->sparse_inits[i]);
    gp->n_quantization_annotation = g->n_quant_annotations;
    gp->quantization_annotation = salloc(S, g->n_quant_annotations * sizeof(void *));
    for (size_t i = 0; gp->quantization_annotation && i < g->n_quant_annotations; i++)
        gp->quantization_annotation[i] =
            unpack_kept(S, &onnx__tensor_annotation__descriptor, g->quant_annotations[i]);
    return gp;
}

/* ---- functions and model ---------------------------------------------------------- */

static Onnx__OperatorSetIdProto **build_opsets(struct saver *S, size_t n,
                                               const struct gf_opset *o)
{
    Onnx__OperatorSetIdProto *arr = salloc(S, n * sizeof(*arr));
    Onnx__OperatorSetIdProto **p = salloc(S, n * sizeof(*p));
    for (size_t i = 0; arr && p && i < n; i++) {
        onnx__operator_set_id_proto__init(&arr[i]);
        arr[i].domain = cs(o[i].domain);
        arr[i].has_version = true;
        arr[i].version = o[i].version;
        p[i] = &arr[i];
    }
    return p;
}

static Onnx__FunctionProto *build_function(struct saver *S, const struct gf_function *f)
{
    Onnx__FunctionProto *fp = salloc(S, sizeof(*fp));
    if (!fp)
        return NULL;
    onnx__function_proto__init(fp);
    restore_extra(&fp->base, f->extra);
    fp->name = cs(f->name);
    fp->domain = cs(f->domain);
    fp->doc_string = cs(f->doc_string);
    fp->n_attribute = f->n_attr_names;
    fp->attribute = (char **)f->attr_names;
    fp->n_opset_import = f->n_opsets;
    fp->opset_import = build_opsets(S, f->n_opsets, f->opsets);
    const struct gf_graph *b = f->body;
    fp->n_input = b->n_inputs;
    fp->input = value_names(S, b->n_inputs, b->inputs);
    fp->n_output = b->n_outputs;
    fp->output = value_names(S, b->n_outputs, b->outputs);
    fp->n_node = b->n_nodes;
    fp->node = salloc(S, b->n_nodes * sizeof(void *));
    size_t k = 0;
    for (const struct gf_node *n = b->first; fp->node && n; n = n->next)
        fp->node[k++] = build_node(S, n);
    return fp;
}

static Onnx__ModelProto *build_model(struct saver *S, const struct gf_model *m)
{
    Onnx__ModelProto *mp = salloc(S, sizeof(*mp));
    if (!mp)
        return NULL;
    onnx__model_proto__init(mp);
    restore_extra(&mp->base, m->extra);
    mp->has_ir_version = true;
    mp->ir_version = m->ir_version;
    mp->n_opset_import = m->n_opsets;
    mp->opset_import = build_opsets(S, m->n_opsets, m->opsets);
    mp->producer_name = cs(m->producer_name);
    mp->producer_version = cs(m->producer_version);
    mp->domain = cs(m->domain);
    mp->has_model_version = m->model_version != 0;
    mp->model_version = m->model_version;
    mp->doc_string = cs(m->doc_string);
    mp->n_metadata_props = m->n_metadata;
    Onnx__StringStringEntryProto *kv = salloc(S, m->n_metadata * sizeof(*kv));
    mp->metadata_props = salloc(S, m->n_metadata * sizeof(void *));
    for (size_t i = 0; kv && mp->metadata_props && i < m->n_metadata; i++) {
        onnx__string_string_entry_proto__init(&kv[i]);
        kv[i].key = cs(m->metadata[i].key);
        kv[i].value = cs(m->metadata[i].value);
        mp->metadata_props[i] = &kv[i];
    }
    mp->n_training_info = m->n_training_info;
    mp->training_info = salloc(S, m->n_training_info * sizeof(void *));
    for (size_t i = 0; mp->training_info && i < m->n_training_info; i++)
        mp->training_info[i] =
            unpack_kept(S, &onnx__training_info_proto__descriptor, m->training_info[i]);
    mp->n_functions = m->n_functions;
    mp->functions = salloc(S, m->n_functions * sizeof(void *));
    for (size_t i = 0; mp->functions && i < m->n_functions; i++)
        mp->functions[i] = build_function(S, m->functions[i]);
    mp->graph = build_graph(S, m->graph);
    return mp;
}

/* ---- atomic files ------------------------------------------------------------------ */

struct file_buffer {
    ProtobufCBuffer base;
    FILE *f;
    bool failed;
};

static void file_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    struct file_buffer *fb = (struct file_buffer *)b;
    if (len && !fb->failed && fwrite(data, 1, len, fb->f) != len)
        fb->failed = true;
}

/* A temporary file next to `path`, opened for writing: created
 * exclusively, with the mode of the file it replaces, and registered so
 * that a signal handler can remove it (gf_file_temp_cleanup). */
static FILE *open_temp(const char *path, char **tmp_path)
{
    char *t;
    int fd = gf_file_create_temp(path, &t);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        gf_file_temp_discard(t);
        free(t);
        errno = e;
        return NULL;
    }
    *tmp_path = t;
    return f;
}

/* Flushes, syncs and closes; false (and the temp removed) on failure. */
static bool close_temp(FILE *f, char *tmp, bool ok)
{
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        int e = errno;
        gf_file_temp_discard(tmp);
        errno = e;
    }
    return ok;
}

/* Renames the temporary file into place; on failure it is removed. */
static bool commit_temp(char *tmp, const char *path)
{
    if (rename(tmp, path) != 0) {
        int e = errno;
        gf_file_temp_discard(tmp);
        errno = e;
        return false;
    }
    gf_file_temp_done(tmp);
    return true;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static bool any_external(const struct gf_graph *g)
{
    for (size_t i = 0; i < g->n_inits; i++)
        if (g->inits[i]->init->ext)
            return true;
    return false;
}

/* ---- the model and its side file as one pair ----------------------------------
 *
 * The side file is named after its content: OUT.HHHHHHHHHHHHHHHH.data (16
 * hex digits of hash_bytes), written to a temp file and renamed into place
 * first, the model last.  Until the model's rename a reader opens the old
 * model, whose side file (another name) is untouched; after it, the new
 * model and the new file.  A crash in between leaves a side file nothing
 * refers to, which the next save of OUT removes with the old model's:
 * every OUT.<16 hex digits>.data other than the one the new model names. */
#define EXT_HASH_DIGITS 16

bool (*gf_save_test_stop)(const char *stage);

static bool test_stop(const char *stage)
{
    return gf_save_test_stop && gf_save_test_stop(stage);
}

/* Whether `name` is OUT.<16 hex digits>.data for OUT = `base`. */
static bool is_side_file_of(const char *name, const char *base)
{
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || name[bl] != '.')
        return false;
    const char *h = name + bl + 1;
    for (int i = 0; i < EXT_HASH_DIGITS; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return false;
    return strcmp(h + EXT_HASH_DIGITS, ".data") == 0;
}

/* The folder holding `path` into dir (size n): "." for a bare name; NULL
 * when it does not fit. */
static const char *dir_of(const char *path, char *dir, size_t n)
{
    size_t dl = (size_t)(base_name(path) - path);
    if (dl >= n)
        return NULL;
    memcpy(dir, path, dl);
    dir[dl] = '\0';
    return dl ? dir : ".";
}

/* After OUT was replaced: removes the side files of earlier saves of OUT
 * (and of saves that died before their model's rename), keeping `keep`
 * (NULL: the new model has none).  Best effort: a file left is harmless. */
static void remove_old_side_files(const char *path, const char *keep)
{
    const char *base = base_name(path);
    char buf[4096];
    const char *dir = dir_of(path, buf, sizeof(buf));
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d)
        return;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat sb;
        if (is_side_file_of(e->d_name, base) && (!keep || strcmp(e->d_name, keep) != 0) &&
            fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

/* fsync of the folder holding `path`, so that a rename in it is on disk
 * before the next one (best effort: not every file system allows it). */
static void sync_dir_of(const char *path)
{
    char buf[4096];
    const char *dir = dir_of(path, buf, sizeof(buf));
    int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

enum gf_status gf_model_save(const struct gf_model *m, const char *path,
                             const struct gf_save_opts *opts)
{
    struct saver S = {0};
    S.arena = gf_arena_new();
    if (!S.arena)
        return gf_error(GF_ERR_NOMEM, "%s: out of memory", path);
    gf_arena_pb_allocator(S.arena, &S.alloc);
    char *ext_tmp = NULL, *ext_path = NULL, *tmp = NULL;
    enum gf_status st = GF_OK;
    bool external = (opts && opts->external_data) || any_external(m->graph);
    /* by default the side file is named after its content (above) */
    bool hashed = external && !(opts && opts->external_name);
    if (external) {
        S.ext_threshold = opts && opts->external_threshold ? opts->external_threshold : 1024;
        char def[4096];
        snprintf(def, sizeof(def), "%s.%0*d.data", base_name(path), EXT_HASH_DIGITS, 0);
        const char *name = hashed ? def : opts->external_name;
        S.ext_name = gf_arena_strndup(S.arena, name, strlen(name));
        size_t dl = (size_t)(base_name(path) - path);
        ext_path = S.ext_name ? malloc(dl + strlen(S.ext_name) + 1) : NULL;
        if (!ext_path || !S.ext_name) {
            st = gf_error(GF_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        memcpy(ext_path, path, dl);
        strcpy(ext_path + dl, S.ext_name);
        /* the hashed file's temp lies next to the model, with its mode */
        S.ext = open_temp(hashed ? path : ext_path, &ext_tmp);
        if (!S.ext) {
            st = gf_error(GF_ERR_IO, "%s: cannot create external data file: %s", ext_path,
                          strerror(errno));
            goto out;
        }
    }
    Onnx__ModelProto *mp = build_model(&S, m);
    if (S.ext && !close_temp(S.ext, ext_tmp, !S.failed)) {
        S.ext = NULL;
        st = gf_error(GF_ERR_IO, "%s: cannot write external data: %s", ext_path,
                      strerror(errno));
        goto out;
    }
    bool had_ext = S.ext != NULL;
    S.ext = NULL;
    if (!mp || S.failed) {
        st = gf_error(GF_ERR_NOMEM, "%s: out of memory building the model", path);
        goto out_ext;
    }
    if (hashed) { /* the name every location entry shares, and the file's */
        char hex[EXT_HASH_DIGITS + 1];
        snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)S.ext_hash);
        size_t at = strlen(base_name(path)) + 1;
        memcpy(S.ext_name + at, hex, EXT_HASH_DIGITS);
        memcpy(ext_path + strlen(ext_path) - strlen(S.ext_name) + at, hex, EXT_HASH_DIGITS);
    }
    FILE *f = open_temp(path, &tmp);
    if (!f) {
        st = gf_error(GF_ERR_IO, "%s: cannot create file: %s", path, strerror(errno));
        goto out_ext;
    }
    struct file_buffer fb = {{file_append}, f, false};
    protobuf_c_message_pack_to_buffer(&mp->base, &fb.base);
    if (!close_temp(f, tmp, !fb.failed)) {
        st = gf_error(GF_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        goto out_ext;
    }
    /* the side file first, then the model: a reader never pairs them wrongly */
    if (had_ext && !commit_temp(ext_tmp, ext_path)) {
        st = gf_error(GF_ERR_IO, "%s: cannot rename external data: %s", ext_path,
                      strerror(errno));
        gf_file_temp_discard(tmp);
        goto out;
    }
    if (had_ext)
        sync_dir_of(ext_path);
    if (test_stop("side file renamed")) {
        gf_file_temp_discard(tmp); /* as the signal handler would */
        st = gf_error(GF_ERR_IO, "%s: save stopped after the external data (test)", path);
        goto out;
    }
    if (!commit_temp(tmp, path)) {
        st = gf_error(GF_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
        goto out;
    }
    sync_dir_of(path);
    if (!(opts && opts->external_name))
        remove_old_side_files(path, hashed ? S.ext_name : NULL);
    goto out;
out_ext:
    if (ext_tmp && had_ext)
        gf_file_temp_discard(ext_tmp);
out:
    if (S.ext) {
        fclose(S.ext);
        gf_file_temp_discard(ext_tmp);
    }
    free(tmp);
    free(ext_tmp);
    free(ext_path);
    gf_arena_free(S.arena);
    return st;
}

enum gf_status gf_model_save_buffer(const struct gf_model *m, uint8_t **buf, size_t *len)
{
    struct saver S = {0};
    S.arena = gf_arena_new();
    if (!S.arena)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    gf_arena_pb_allocator(S.arena, &S.alloc);
    enum gf_status st = GF_OK;
    Onnx__ModelProto *mp = build_model(&S, m);
    if (!mp || S.failed) {
        st = gf_error(GF_ERR_NOMEM, "out of memory building the model");
    } else {
        *len = protobuf_c_message_get_packed_size(&mp->base);
        *buf = malloc(*len ? *len : 1);
        if (!*buf)
            st = gf_error(GF_ERR_NOMEM, "out of memory packing the model");
        else
            protobuf_c_message_pack(&mp->base, *buf);
    }
    gf_arena_free(S.arena);
    return st;
}

enum gf_status gf_tensor_save(const struct gf_tensor *t, const char *path)
{
    struct saver S = {0};
    S.arena = gf_arena_new();
    if (!S.arena)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    gf_arena_pb_allocator(S.arena, &S.alloc);
    enum gf_status st = GF_OK;
    char *tmp = NULL;
    Onnx__TensorProto *tp = build_tensor(&S, t, false);
    FILE *f = tp && !S.failed ? open_temp(path, &tmp) : NULL;
    if (!f) {
        st = gf_error(GF_ERR_IO, "%s: cannot create file: %s", path, strerror(errno));
    } else {
        struct file_buffer fb = {{file_append}, f, false};
        protobuf_c_message_pack_to_buffer(&tp->base, &fb.base);
        if (!close_temp(f, tmp, !fb.failed) || !commit_temp(tmp, path)) {
            st = gf_error(GF_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
    }
    free(tmp);
    gf_arena_free(S.arena);
    return st;
}

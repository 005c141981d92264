/*
 * gf_graph.h — graphfuse's graph library: the IR, ONNX load/save, validation,
 * shape inference and dumps.
 *
 *     struct gf_model *m;
 *     if (gf_model_load("model.onnx", NULL, &m) != GF_OK) {
 *         fprintf(stderr, "%s\n", gf_last_error());
 *         return 2;
 *     }
 *     for (struct gf_node *n = m->graph->first; n; n = n->next)
 *         printf("%s %s\n", n->op_type, n->name ? n->name : "");
 *     gf_graph_infer_shapes(m->graph);
 *     gf_model_save(m, "copy.onnx", NULL);
 *     gf_model_free(m);
 *
 * A model owns one arena: every node, value, name, attribute and tensor
 * header of the model (subgraphs and functions included) lives in it and is
 * freed with gf_model_free().  Tensor data is borrowed from the unpacked
 * file, mapped from an external-data file, or allocated in the arena.
 *
 * Fields of the structs below may be read freely; change the graph only
 * through the functions, which keep producers and users consistent.
 */
#ifndef GF_GRAPH_H
#define GF_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GF_VERSION "0.1.0"

/* ---- status and errors ------------------------------------------------ */

enum gf_status {
    GF_OK = 0,
    GF_ERR_IO,          /* a file could not be opened, read or written */
    GF_ERR_PARSE,       /* bytes are not a well-formed ONNX protobuf */
    GF_ERR_INVALID,     /* well-formed but breaks an ONNX rule */
    GF_ERR_UNSUPPORTED, /* valid, but graphfuse cannot handle it */
    GF_ERR_NOMEM,       /* allocation failed or exceeded a limit */
    GF_ERR_ARG,         /* bad argument from the caller */
    GF_ERR_INTERNAL,    /* broken invariant: a graphfuse bug */
};

/* The message of the last failure on this thread: one line naming the
 * file, node, op or tensor concerned.  Valid until the next failure. */
const char *gf_last_error(void);
/* Records a failure message (printf-style) and returns `st`. */
enum gf_status gf_error(enum gf_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "prefix: " (e.g. the file name). */
void gf_error_prefix(const char *prefix);
/* Short name of a status ("io error", "invalid model", ...). */
const char *gf_status_name(enum gf_status st);

/* ---- element types (numbers are ONNX TensorProto.DataType) ------------ */

enum gf_dtype {
    GF_UNDEFINED = 0,
    GF_FLOAT = 1,
    GF_UINT8 = 2,
    GF_INT8 = 3,
    GF_UINT16 = 4,
    GF_INT16 = 5,
    GF_INT32 = 6,
    GF_INT64 = 7,
    GF_STRING = 8,
    GF_BOOL = 9,
    GF_FLOAT16 = 10,
    GF_DOUBLE = 11,
    GF_UINT32 = 12,
    GF_UINT64 = 13,
    GF_COMPLEX64 = 14,
    GF_COMPLEX128 = 15,
    GF_BFLOAT16 = 16,
    GF_FLOAT8E4M3FN = 17,
    GF_FLOAT8E4M3FNUZ = 18,
    GF_FLOAT8E5M2 = 19,
    GF_FLOAT8E5M2FNUZ = 20,
    GF_UINT4 = 21,
    GF_INT4 = 22,
    GF_DTYPE_COUNT
};

/* Bytes per element (0 for UNDEFINED and STRING; 1 for the 4-bit types,
 * which are stored packed two to a byte: use gf_dtype_bytes for sizes). */
size_t gf_dtype_size(enum gf_dtype t);
/* Bytes needed by `n` elements, 4-bit types rounded up. */
size_t gf_dtype_bytes(enum gf_dtype t, size_t n);
/* ONNX name of the type ("float", "int64", "bfloat16", ...); "?" if unknown. */
const char *gf_dtype_name(enum gf_dtype t);
/* True for the types graphfuse knows (1..22). */
bool gf_dtype_valid(int t);

/* ---- ops: one X-macro table, graph/ops.def ----------------------------- */

enum gf_op {
    GF_OP_UNKNOWN = 0, /* any op not in ops.def: kept and saved, not run */
#define GF_OP(id, name, domain, min_in, max_in, min_out, max_out) GF_OP_##id,
#include "ops.def"
#undef GF_OP
    GF_OP_COUNT
};

struct gf_op_info {
    const char *name;   /* ONNX op_type */
    const char *domain; /* "" for ai.onnx */
    int min_inputs, max_inputs, min_outputs, max_outputs; /* -1: unbounded */
};
/* Table entry of an op (GF_OP_UNKNOWN gives an entry named "?"). */
const struct gf_op_info *gf_op_get_info(enum gf_op op);
/* Op for a (domain, op_type) pair; "ai.onnx" is the same as "". */
enum gf_op gf_op_lookup(const char *domain, const char *op_type);

/* ---- the IR ------------------------------------------------------------ */

struct gf_model;
struct gf_graph;
struct gf_node;
struct gf_value;
struct gf_extra; /* protobuf fields graphfuse does not model, kept for save */

/* A byte string (ONNX strings are bytes, not necessarily NUL-free). */
struct gf_bytes {
    const uint8_t *data;
    size_t len;
};

/* One dimension: value >= 0 is known; otherwise value is -1 and `param`
 * is the symbolic name, or NULL when nothing is known. */
struct gf_dim {
    int64_t value;
    const char *param;
    const char *denotation;
};

enum gf_type_kind {
    GF_TYPE_NONE = 0, /* no type information */
    GF_TYPE_TENSOR,   /* dtype and (optionally) shape below */
    GF_TYPE_OTHER,    /* sequence / map / optional / sparse: kept packed */
};

struct gf_type {
    enum gf_type_kind kind;
    enum gf_dtype dtype;
    int rank;            /* -1: unknown rank (no shape) */
    struct gf_dim *dims; /* rank entries */
    const char *denotation;
    struct gf_bytes packed; /* GF_TYPE_OTHER: the TypeProto bytes */
};

/* External data reference of a tensor (ONNX "external_data" entries). */
struct gf_external {
    const char *location; /* relative to the model's folder */
    int64_t offset, length; /* length -1: to the end of the file */
    size_t n_entries;     /* all key/value entries, in file order */
    const char **keys, **values;
};

struct gf_tensor {
    const char *name;
    const char *doc_string;
    enum gf_dtype dtype;
    int rank;
    int64_t *dims;
    size_t nelem;   /* product of dims */
    size_t nbytes;  /* bytes of data */
    void *data;     /* little-endian, ONNX raw_data layout */
    struct gf_bytes *strings;   /* GF_STRING: nelem entries */
    struct gf_external *ext;    /* where the data came from, or NULL */
    bool has_segment;
    int64_t segment_begin, segment_end;
    struct gf_extra *extra;
};

enum gf_attr_type { /* numbers are ONNX AttributeProto.AttributeType */
    GF_ATTR_UNDEFINED = 0,
    GF_ATTR_FLOAT = 1,
    GF_ATTR_INT = 2,
    GF_ATTR_STRING = 3,
    GF_ATTR_TENSOR = 4,
    GF_ATTR_GRAPH = 5,
    GF_ATTR_FLOATS = 6,
    GF_ATTR_INTS = 7,
    GF_ATTR_STRINGS = 8,
    GF_ATTR_TENSORS = 9,
    GF_ATTR_GRAPHS = 10,
    GF_ATTR_SPARSE_TENSOR = 11,
    GF_ATTR_SPARSE_TENSORS = 12,
    GF_ATTR_TYPE_PROTO = 13,
    GF_ATTR_TYPE_PROTOS = 14,
};
/* Name of an attribute type ("int", "floats", ...). */
const char *gf_attr_type_name(enum gf_attr_type t);

struct gf_attr {
    const char *name;
    enum gf_attr_type type;
    const char *ref_attr_name; /* in function bodies: parent attribute */
    const char *doc_string;
    float f;
    int64_t i;
    struct gf_bytes s;      /* STRING: also NUL-terminated (s.data[s.len] == 0) */
    struct gf_tensor *t;
    struct gf_graph *g;
    struct gf_bytes packed; /* SPARSE_TENSOR / TYPE_PROTO, kept packed */
    size_t n;               /* element count of the list types */
    float *floats;
    int64_t *ints;
    struct gf_bytes *strings;
    struct gf_tensor **tensors;
    struct gf_graph **graphs;
    struct gf_bytes *packed_list; /* SPARSE_TENSORS / TYPE_PROTOS */
    struct gf_extra *extra;
};

/* A use of a value: `node` reads it as input `slot`; or, with slot -1,
 * some node inside a subgraph of `node` reads it (an implicit input that
 * orders `node` after the value's producer).  Implicit uses are recorded
 * only on nodes in the value's own graph. */
struct gf_use {
    struct gf_node *node;
    int slot;
};

struct gf_value {
    const char *name;
    const char *doc_string;
    struct gf_type type;
    struct gf_graph *graph;   /* the graph that defines it */
    struct gf_node *producer; /* NULL for inputs and initializers */
    int producer_slot;
    size_t n_uses;            /* node uses; see struct gf_use.  Subgraph */
    struct gf_use *uses;      /* nodes reading it from an outer scope are */
    size_t cap_uses;          /* listed too, besides their ancestor's implicit use */
    struct gf_tensor *init;   /* initializer data, or NULL */
    bool is_input;            /* listed in graph inputs */
    bool is_output;           /* listed in graph outputs */
    bool has_value_info;      /* listed in value_info (or given a type) */
    bool sparse_init;         /* defined by a sparse initializer (kept packed) */
    int id;                   /* index in graph->values */
    void *aux;                /* scratch for passes; not preserved */
    struct gf_extra *extra;
};

struct gf_node {
    const char *name;
    const char *op_type;
    const char *domain; /* NULL or "" for ai.onnx */
    const char *doc_string;
    enum gf_op op;
    struct gf_graph *graph;
    size_t n_inputs, n_outputs;
    struct gf_value **inputs;  /* NULL entry: omitted optional input */
    struct gf_value **outputs; /* NULL entry: omitted optional output */
    size_t n_attrs;
    struct gf_attr *attrs;
    struct gf_node *prev, *next; /* graph order (topological after load) */
    int id;                      /* unique within the graph */
    void *aux;                   /* scratch for passes; not preserved */
    struct gf_extra *extra;
};

struct gf_graph {
    struct gf_model *model;
    struct gf_graph *parent; /* enclosing graph of a subgraph */
    struct gf_node *owner;   /* node whose attribute holds this subgraph */
    const char *name;
    const char *doc_string;
    size_t n_inputs, n_outputs, n_inits;
    struct gf_value **inputs, **outputs;
    struct gf_value **inits;  /* initializers, in file order */
    size_t n_values;
    struct gf_value **values; /* every value defined or named here */
    struct gf_node *first, *last;
    size_t n_nodes;
    size_t n_sparse_inits, n_quant_annotations;
    struct gf_bytes *sparse_inits, *quant_annotations; /* kept packed */
    struct gf_extra *extra;
    struct gf_graph_priv *priv;
};

struct gf_opset {
    const char *domain; /* "" for ai.onnx */
    int64_t version;
};

struct gf_kv {
    const char *key, *value;
};

/* A model-local function; the body's inputs and outputs carry no types. */
struct gf_function {
    const char *name;
    const char *domain;
    const char *doc_string;
    size_t n_attr_names;
    const char **attr_names;
    size_t n_opsets;
    struct gf_opset *opsets;
    struct gf_graph *body;
    struct gf_extra *extra;
};

struct gf_model {
    int64_t ir_version;
    size_t n_opsets;
    struct gf_opset *opsets;
    const char *producer_name, *producer_version;
    const char *domain;
    int64_t model_version;
    const char *doc_string;
    size_t n_metadata;
    struct gf_kv *metadata;
    struct gf_graph *graph;
    size_t n_functions;
    struct gf_function **functions;
    size_t n_training_info;
    struct gf_bytes *training_info; /* kept packed */
    const char *path; /* file it was loaded from, or NULL */
    const char *dir;  /* folder for external data ("." by default) */
    struct gf_extra *extra;
    struct gf_model_priv *priv;
};

/* ---- model: load, save, create, compare -------------------------------- */

struct gf_load_opts {
    int max_depth;        /* subgraph nesting limit; 0: default (32) */
    bool no_external;     /* refuse external data instead of mapping it */
};

/* Loads and validates an ONNX file; a graph out of order is sorted.
 * On failure *out is NULL and gf_last_error() names the file and the
 * offending node, tensor or byte offset. */
enum gf_status gf_model_load(const char *path, const struct gf_load_opts *opts,
                             struct gf_model **out);
/* Same from bytes in memory; external data is resolved against `dir`
 * (NULL: external data refused).  The bytes are copied. */
enum gf_status gf_model_load_buffer(const void *buf, size_t len, const char *dir,
                                    const struct gf_load_opts *opts,
                                    struct gf_model **out);

struct gf_save_opts {
    bool external_data;        /* write large initializers to a side file */
    size_t external_threshold; /* bytes; 0: 1024 */
    const char *external_name; /* side file name, replaced in place; NULL:
                                  "<out>.<16 hex digits>.data", named after its bytes */
};

/* Writes the model to `path` atomically (temp file in the same folder,
 * flushed, renamed).  On failure no file is left behind.  With external
 * data (default name) the side file is renamed into place before the
 * model, so a reader sees the old pair or the new one, never a mix; side
 * files of earlier saves of `path` are removed after (docs/library.md). */
enum gf_status gf_model_save(const struct gf_model *m, const char *path,
                             const struct gf_save_opts *opts);
/* Serializes to a malloc'ed buffer (no external data). */
enum gf_status gf_model_save_buffer(const struct gf_model *m, uint8_t **buf,
                                    size_t *len);

/* A new empty model: IR version `ir_version`, one empty graph `name`. */
struct gf_model *gf_model_new(int64_t ir_version, const char *name);
void gf_model_free(struct gf_model *m);

/* Opset version imported for a domain ("" = ai.onnx), 0 if none. */
int64_t gf_model_opset(const struct gf_model *m, const char *domain);
/* Adds or updates an opset import. */
enum gf_status gf_model_set_opset(struct gf_model *m, const char *domain,
                                  int64_t version);
/* Structural equality of two models (names, order, attributes, data,
 * types, preserved unknown fields).  When different, `why` (if not NULL)
 * receives where. */
bool gf_model_equal(const struct gf_model *a, const struct gf_model *b,
                    char *why, size_t why_len);

/* Arena allocation tied to the model's lifetime (zeroed).  NULL on OOM. */
void *gf_model_alloc(struct gf_model *m, size_t size);
/* Copy of `s` in the model's arena (NULL stays NULL). */
const char *gf_model_strdup(struct gf_model *m, const char *s);
/* Total parameter elements and bytes of the main graph's initializers. */
void gf_model_param_count(const struct gf_model *m, size_t *elems, size_t *bytes);
/* A new model-local function domain.name (copied) with an empty body
 * graph (no enclosing scope), in m's arena; no attributes or opsets yet.
 * It is not part of the model until gf_model_add_function.  NULL on OOM. */
struct gf_function *gf_function_new(struct gf_model *m, const char *name,
                                    const char *domain);
/* Appends fn (from gf_function_new on m) to m->functions. */
enum gf_status gf_model_add_function(struct gf_model *m, struct gf_function *fn);

/* ---- graph editing: the API passes use ---------------------------------- */

/* Value named `name` in `g` (not outer scopes), or NULL. */
struct gf_value *gf_graph_find(const struct gf_graph *g, const char *name);
/* Same, searching enclosing graphs too. */
struct gf_value *gf_graph_lookup(const struct gf_graph *g, const char *name);
/* New value in `g`; name NULL makes a fresh unique one from `hint`.
 * Fails (NULL, error set) if the name exists. */
struct gf_value *gf_graph_new_value(struct gf_graph *g, const char *name,
                                    const char *hint);
/* A value name not yet used in `g`, built from `hint` ("x" -> "x_1"...). */
const char *gf_graph_unique_name(struct gf_graph *g, const char *hint);
/* Appends `v` to the graph inputs / outputs. */
enum gf_status gf_graph_add_input(struct gf_graph *g, struct gf_value *v);
enum gf_status gf_graph_add_output(struct gf_graph *g, struct gf_value *v);
/* Replaces graph output `i` by `v`. */
void gf_graph_set_output(struct gf_graph *g, size_t i, struct gf_value *v);
/* Removes graph output `i` (later ones move up); the value stays, and is
 * still an output if listed again.  GF_ERR_ARG if i is out of range. */
enum gf_status gf_graph_remove_output(struct gf_graph *g, size_t i);
/* New initializer value holding tensor `t` (t->name is set to the value's). */
struct gf_value *gf_graph_add_initializer(struct gf_graph *g, const char *name,
                                          struct gf_tensor *t);

/* New node appended at the end of `g` (use gf_node_move_before to place
 * it).  inputs may contain NULL (omitted); outputs may contain NULL.
 * Outputs must not have a producer yet. */
struct gf_node *gf_graph_add_node(struct gf_graph *g, const char *op_type,
                                  const char *domain, const char *name,
                                  size_t n_inputs, struct gf_value *const *inputs,
                                  size_t n_outputs, struct gf_value *const *outputs);
/* A new empty subgraph held by `n`'s GRAPH attribute `attr_name` (e.g.
 * "then_branch"); its nodes may read values of enclosing graphs. */
struct gf_graph *gf_node_add_subgraph(struct gf_node *n, const char *attr_name);
/* Moves `n` just before `before` (NULL: to the end). */
void gf_node_move_before(struct gf_node *n, struct gf_node *before);
/* Unlinks `n`: its inputs lose the use, its outputs lose their producer. */
void gf_graph_remove_node(struct gf_graph *g, struct gf_node *n);
/* Sets input `i` of `n` (may be NULL), keeping uses consistent. */
void gf_node_set_input(struct gf_node *n, size_t i, struct gf_value *v);
/* Replaces the input list of `n`. */
enum gf_status gf_node_set_inputs(struct gf_node *n, size_t count,
                                  struct gf_value *const *inputs);
/* Makes output `i` of `n` the value `v` (which must have no producer, or be
 * NULL); the old output loses its producer.  Used to keep a name. */
enum gf_status gf_node_set_output(struct gf_node *n, size_t i, struct gf_value *v);
/* Makes `v` (no producer) an initializer holding `t`, typed from it; with
 * t NULL, `v` stops being one (unlisted from the initializers). */
enum gf_status gf_value_set_initializer(struct gf_value *v, struct gf_tensor *t);
/* Points every use of `from` (and graph outputs) at `to`. */
void gf_value_replace_uses(struct gf_value *from, struct gf_value *to);
/* Number of node uses plus graph-output listings. */
size_t gf_value_use_count(const struct gf_value *v);

/* Sorts the nodes topologically, keeping the existing order where it is
 * already valid.  A cycle is GF_ERR_INVALID naming a node on it. */
enum gf_status gf_graph_toposort(struct gf_graph *g);
/* Checks the graph's invariants (defined inputs, single producer,
 * order, attributes), recursively; error names the node. */
enum gf_status gf_graph_validate(struct gf_graph *g);

/* ---- attributes ---------------------------------------------------------- */

const struct gf_attr *gf_node_attr(const struct gf_node *n, const char *name);
/* The node's metadata_props entry `key` (e.g. "pkg.torch.onnx.name_scopes",
 * written by the dynamo exporter), copied into the model's arena; NULL when
 * absent. */
const char *gf_node_metadata(const struct gf_node *n, const char *key);
/* The same for the graph's metadata_props (e.g. the dynamo exporter's
 * "pkg.torch.export.ExportedProgram.graph_signature"). */
const char *gf_graph_metadata(const struct gf_graph *g, const char *key);
int64_t gf_node_attr_int(const struct gf_node *n, const char *name, int64_t dflt);
float gf_node_attr_float(const struct gf_node *n, const char *name, float dflt);
/* String attribute as a C string (borrowed: STRING attributes are always
 * stored NUL-terminated; an embedded NUL ends it early), or dflt. */
const char *gf_node_attr_string(const struct gf_node *n, const char *name,
                                const char *dflt);
/* INTS attribute: count in *n (0 and NULL when absent). */
const int64_t *gf_node_attr_ints(const struct gf_node *n, const char *name,
                                 size_t *count);
/* Setters add or replace the attribute. */
enum gf_status gf_node_set_attr_int(struct gf_node *n, const char *name, int64_t v);
enum gf_status gf_node_set_attr_float(struct gf_node *n, const char *name, float v);
enum gf_status gf_node_set_attr_ints(struct gf_node *n, const char *name,
                                     size_t count, const int64_t *v);
enum gf_status gf_node_set_attr_string(struct gf_node *n, const char *name,
                                       const char *v);
enum gf_status gf_node_set_attr_tensor(struct gf_node *n, const char *name,
                                       struct gf_tensor *t);

/* ---- tensors --------------------------------------------------------------- */

/* New tensor in the model's arena; data (nbytes of it) copied if not NULL,
 * zeroed otherwise.  Not for strings. */
struct gf_tensor *gf_tensor_new(struct gf_model *m, const char *name,
                                enum gf_dtype dtype, int rank,
                                const int64_t *dims, const void *data);
/* Element i of a numeric tensor converted to double / int64. */
double gf_tensor_get_f64(const struct gf_tensor *t, size_t i);
int64_t gf_tensor_get_i64(const struct gf_tensor *t, size_t i);
/* Parses a TensorProto (.pb) file, as in the ONNX test data. */
enum gf_status gf_tensor_load(struct gf_model *m, const char *path,
                              struct gf_tensor **out);
/* Writes a TensorProto file atomically. */
enum gf_status gf_tensor_save(const struct gf_tensor *t, const char *path);

/* ---- shapes and types ------------------------------------------------------ */

/* Element count of a fully known shape, or -1 (unknown or overflow). */
int64_t gf_type_numel(const struct gf_type *t);
/* Sets `v`'s type to a tensor of dtype and dims (copied). */
void gf_value_set_tensor_type(struct gf_value *v, enum gf_dtype dtype, int rank,
                              const struct gf_dim *dims);
/* Writes a shape as "[2,seq,?]" into buf; returns buf. */
char *gf_type_format(const struct gf_type *t, char *buf, size_t len);

/* Infers dtypes and static / symbolic shapes for every node of `g` (and
 * its subgraphs) whose op graphfuse knows, in order.  Unknown ops leave
 * their outputs untyped.  A contradiction (e.g. broadcasting 3 with 4) is
 * GF_ERR_INVALID naming the node. */
enum gf_status gf_graph_infer_shapes(struct gf_graph *g);
/* Receives an output of a main-graph node that inference found to be an
 * int32/int64 tensor with every element known (a shape computation). */
typedef void (*gf_shape_value_fn)(void *ctx, const struct gf_value *v, size_t n,
                                  const int64_t *values);
/* gf_graph_infer_shapes, calling fn (when not NULL) for each such output. */
enum gf_status gf_graph_infer_shapes_values(struct gf_graph *g, gf_shape_value_fn fn,
                                            void *ctx);

/* ---- files ------------------------------------------------------------------ */

struct stat;
#define GF_FILE_NOT_REGULAR (-2)
/* Opens path for reading without blocking (a FIFO or a device never hangs
 * the open) and only if it is a regular file; flags may add O_NOFOLLOW.
 * Returns the descriptor (blocking again) and fills *sb when not NULL; -1
 * (errno set) or GF_FILE_NOT_REGULAR on failure. */
int gf_file_open_read(const char *path, int flags, struct stat *sb);
/* The reason a gf_file_open_read result rc < 0 gives, for messages. */
const char *gf_file_open_error(int rc);
/* Creates PATH.tmp.XXXXXX exclusively (never through a planted file or
 * symlink) with the mode of the file at path when there is one, else the
 * mode a plain create gives; *tmp (malloc'd) is registered for
 * gf_file_temp_cleanup.  Returns the descriptor, or -1 with errno set. */
int gf_file_create_temp(const char *path, char **tmp);
/* The temporary file was renamed into place or removed: unregisters it. */
void gf_file_temp_done(const char *tmp);
/* unlink(tmp) and gf_file_temp_done(tmp); NULL does nothing. */
void gf_file_temp_discard(char *tmp);
/* Removes every registered temporary file; async-signal-safe, for a
 * SIGTERM / SIGHUP / SIGINT handler that then re-raises the signal. */
void gf_file_temp_cleanup(void);

/* ---- dumps ------------------------------------------------------------------ */

enum gf_dump_format { GF_DUMP_TEXT, GF_DUMP_DOT, GF_DUMP_JSON };
/* Writes the model's main graph (with subgraphs) in the given format. */
enum gf_status gf_model_dump(const struct gf_model *m, enum gf_dump_format fmt,
                             FILE *out);
/* gf_model_dump into the file at path, written whole or not at all (a
 * temporary file beside it, renamed at the end). */
enum gf_status gf_model_dump_file(const struct gf_model *m, enum gf_dump_format fmt,
                                  const char *path);
/* s (NULL: "") as a JSON string literal, as the JSON dump writes strings:
 * control bytes escaped, well-formed UTF-8 kept, other bytes as \u00XX. */
void gf_json_write_string(FILE *out, const char *s);
/* "text", "dot" or "json": false for any other name. */
bool gf_dump_format_parse(const char *name, enum gf_dump_format *fmt);
/* The format a file name's extension names (.dot, .json), else text. */
enum gf_dump_format gf_dump_format_of_path(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* GF_GRAPH_H */

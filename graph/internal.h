/* Internal to graph/: the arena, private parts of model and graph, and the
 * protobuf-c glue shared by load.c, save.c and equal.c. */
#ifndef GF_GRAPH_INTERNAL_H
#define GF_GRAPH_INTERNAL_H

#include "gf_graph.h"
#include "onnx.pb-c.h"

/* ---- arena: bump allocation in chunks, freed at once ------------------- */

struct gf_arena;
struct gf_arena *gf_arena_new(void);
void gf_arena_free(struct gf_arena *a);
/* Zeroed, 16-byte aligned; NULL when out of memory. */
void *gf_arena_alloc(struct gf_arena *a, size_t size);
char *gf_arena_strndup(struct gf_arena *a, const char *s, size_t n);
/* Bytes handed out so far (for reports). */
size_t gf_arena_used(const struct gf_arena *a);
/* A protobuf-c allocator drawing from the arena (free is a no-op). */
void gf_arena_pb_allocator(struct gf_arena *a, ProtobufCAllocator *out);

/* Walks protobuf wire bytes against a descriptor without recursion:
 * truncation, bad lengths and wire types, nesting over max_depth.
 * *known (may be NULL): whether a field of root's own, of the right wire
 * type, was met at the top level (false on a failure: the bytes are likely
 * not that message at all, as a text file read as a model). */
enum gf_status gf_wire_check(const uint8_t *buf, size_t len,
                             const ProtobufCMessageDescriptor *root, int max_depth,
                             bool *known);

/* ---- preserved protobuf fields graphfuse does not model ---------------- */

struct gf_extra {
    unsigned n;
    ProtobufCMessageUnknownField *fields; /* arena-owned */
};

/* ---- private parts ------------------------------------------------------- */

struct gf_mapping {
    void *addr;
    size_t len;
    struct gf_mapping *next;
};

struct gf_model_priv {
    struct gf_arena *arena;
    struct gf_mapping *mappings;  /* external-data files mapped read-only */
    struct gf_graph **graphs;     /* every graph of the model, for free() */
    size_t n_graphs, cap_graphs;
};

struct gf_graph_priv {
    struct gf_value **table; /* open-addressing hash: name -> value */
    size_t table_cap;        /* power of two */
    size_t cap_values, cap_inputs, cap_outputs, cap_inits;
    int next_node_id;
    unsigned name_counter;
};

/* A model with an arena and nothing else (load.c fills it). */
struct gf_model *gf_model_alloc_empty(void);
/* Maps a file read-only / unmaps it (load.c). */
void gf_unmap(void *addr, size_t len);
/* Registers a mapping to be unmapped with the model. */
enum gf_status gf_model_add_mapping(struct gf_model *m, void *addr, size_t len);
/* Tests only (save.c): when set and it returns true for a stage, gf_model_save
 * stops there as a crash would (its temp files removed as on a signal); the
 * stage is "side file renamed": the new external data is in place, the model
 * not yet. */
extern bool (*gf_save_test_stop)(const char *stage);

/* New empty graph registered with the model (parent may be NULL). */
struct gf_graph *gf_graph_create(struct gf_model *m, struct gf_graph *parent,
                                 struct gf_node *owner);
/* Adds an initializer listing for an existing value. */
enum gf_status gf_graph_list_init(struct gf_graph *g, struct gf_value *v);
/* Adds / removes the use of `v` as input `slot` of `n`, with the implicit
 * use by n's ancestor when `v` belongs to an enclosing graph. */
enum gf_status gf_value_add_use(struct gf_value *v, struct gf_node *n, int slot);
void gf_value_remove_use(struct gf_value *v, struct gf_node *n, int slot);
/* Number of elements of dims, or -1 on a negative dim or overflow. */
int64_t gf_dims_numel(int rank, const int64_t *dims);
/* Where a node sits, for messages: "node 'name' (Op)" or "node #3 (Op)". */
const char *gf_node_label(const struct gf_node *n, char *buf, size_t len);

#endif

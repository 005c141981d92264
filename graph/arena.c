/* Bump allocator: one per model, freed at once. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CHUNK_SIZE (256 * 1024)
#define ALIGN 16

struct chunk {
    struct chunk *next;
    size_t size, used;
    _Alignas(ALIGN) unsigned char data[];
};

struct gf_arena {
    struct chunk *head; /* current chunk for small allocations */
    struct chunk *big;  /* dedicated chunks of large allocations */
    size_t total;
};

struct gf_arena *gf_arena_new(void)
{
    return calloc(1, sizeof(struct gf_arena));
}

static void free_list(struct chunk *c)
{
    while (c) {
        struct chunk *next = c->next;
        free(c);
        c = next;
    }
}

void gf_arena_free(struct gf_arena *a)
{
    if (!a)
        return;
    free_list(a->head);
    free_list(a->big);
    free(a);
}

static struct chunk *chunk_new(size_t size)
{
    struct chunk *c = malloc(sizeof(*c) + size);
    if (!c)
        return NULL;
    c->next = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

static void *arena_alloc(struct gf_arena *a, size_t size, bool zero)
{
    if (size > SIZE_MAX - ALIGN)
        return NULL;
    size_t need = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (need == 0)
        need = ALIGN;
    if (need > CHUNK_SIZE / 4) {
        /* Large blocks (tensor data) get their own chunk. */
        struct chunk *c = malloc(sizeof(*c) + need);
        if (!c)
            return NULL;
        if (zero)
            memset(c->data, 0, need);
        c->size = c->used = need;
        c->next = a->big;
        a->big = c;
        a->total += need;
        return c->data;
    }
    if (!a->head || a->head->size - a->head->used < need) {
        struct chunk *c = chunk_new(CHUNK_SIZE);
        if (!c)
            return NULL;
        c->next = a->head;
        a->head = c;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += need;
    a->total += need;
    if (zero)
        memset(p, 0, need);
    return p;
}

void *gf_arena_alloc(struct gf_arena *a, size_t size)
{
    return arena_alloc(a, size, true);
}

char *gf_arena_strndup(struct gf_arena *a, const char *s, size_t n)
{
    char *p = gf_arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

size_t gf_arena_used(const struct gf_arena *a)
{
    return a->total;
}

/* protobuf-c initializes what it allocates: no need to zero (this keeps
 * tensor bytes from being written twice on load). */
static void *pb_alloc(void *ctx, size_t size)
{
    return arena_alloc(ctx, size, false);
}

static void pb_free(void *ctx, void *p)
{
    (void)ctx;
    (void)p;
}

void gf_arena_pb_allocator(struct gf_arena *a, ProtobufCAllocator *out)
{
    out->alloc = pb_alloc;
    out->free = pb_free;
    out->allocator_data = a;
}

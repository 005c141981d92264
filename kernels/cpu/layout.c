/* CPU kernels: the layout family.
 *
 *   shapes and constants   Constant ConstantOfShape Shape Size Range
 *   pure data movement     Transpose Reshape Flatten Squeeze Unsqueeze Concat
 *                          Split Slice Expand Tile Pad Trilu
 *   indexing               Gather GatherElements GatherND ScatterND
 *                          ScatterElements OneHot
 *
 * Data movement is dtype-generic: an element is an opaque block of
 * gf_dtype_size() bytes moved with memcpy, so every fixed-size dtype works
 * (strings and the packed 4-bit types are refused in `supports`).  Only
 * Range and the Scatter reductions do arithmetic, through small
 * macro-generated typed loops.
 *
 * Transpose, Slice and Expand are strided copies ("xcopy": a source byte
 * stride per output axis), reduced to as few axes as they really have and
 * run as memcpy of the blocks that stay contiguous, or as cache-blocked tiles
 * where the innermost axis moves.  Tile, Pad and Gather are one "remap":
 * every output axis k gets a table off[k][i] of source element offsets and
 *     out[i0, ..., iR-1] = src[off[0][i0] + ... + off[R-1][iR-1]]
 * (the pad value where an entry is -1).  They differ only in how they fill
 * the tables, which live in the kernel's workspace.
 */
#include <inttypes.h>
#include <stdint.h>

#include "cpu.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define GRAIN 16384                /* elements worth a thread */

/* ---- small helpers (the shape checks: kernels/layout_checks.c) ---------- */

/* Element types moved as opaque blocks: fixed size, not packed. */
static bool is_movable(enum gf_dtype t)
{
    return gf_dtype_size(t) > 0 && t != GF_INT4 && t != GF_UINT4;
}

/* Element i of an integer tensor (indices, shapes, axes: int32/int64). */
static int64_t ival(const struct gf_tview *t, size_t i)
{
    return gf_int_at(t, t->data, i);
}

static double fval(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_f64(&tmp, i);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static size_t max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Row-major element strides of a view. */
static void strides_of(const struct gf_tview *t, int64_t *stride)
{
    gf_strides_of(t->rank, t->dims, stride);
}

/* ---- copies and fills ------------------------------------------------------ */

static inline void copy_elem(char *d, const char *s, size_t es)
{
    switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    default: memcpy(d, s, es); break;
    }
}

/* n copies of the es-byte element `val` (by doubling memcpy). */
static void fill_elems(char *dst, const void *val, size_t es, size_t n)
{
    if (!n)
        return;
    memcpy(dst, val, es);
    for (size_t done = 1; done < n;) {
        size_t k = done < n - done ? done : n - done;
        memcpy(dst + done * es, dst, k * es);
        done += k;
    }
}

struct fill_job {
    char *dst;
    const void *val;
    size_t es;
};

static void fill_range(void *ctx, size_t begin, size_t end)
{
    const struct fill_job *j = ctx;
    fill_elems(j->dst + begin * j->es, j->val, j->es, end - begin);
}

static void fill_par(const struct gf_kernel_args *a, void *dst, const void *val, size_t es,
                     size_t n)
{
    struct fill_job j = {dst, val, es};
    gf_parallel_for(a->n_threads, n, GRAIN, fill_range, &j);
}

/* rows blocks of len bytes: dst + r * dst_pitch <- src + r * src_pitch. */
struct block_job {
    char *dst;
    const char *src;
    size_t len, dst_pitch, src_pitch;
};

static void block_range(void *ctx, size_t begin, size_t end)
{
    const struct block_job *j = ctx;
    for (size_t r = begin; r < end; r++)
        memcpy(j->dst + r * j->dst_pitch, j->src + r * j->src_pitch, j->len);
}

static void copy_blocks(const struct gf_kernel_args *a, char *dst, size_t dst_pitch,
                        const char *src, size_t src_pitch, size_t len, size_t rows)
{
    if (!len || !rows || dst == src)
        return;
    struct block_job j = {dst, src, len, dst_pitch, src_pitch};
    gf_parallel_for(a->n_threads, rows, max_sz(1, 4 * GRAIN / len), block_range, &j);
}

/* Parallel memcpy of n bytes (nothing when in place). */
static void copy_bytes(const struct gf_kernel_args *a, void *dst, const void *src, size_t n)
{
    const size_t chunk = 4096;
    size_t rows = n / chunk, tail = n % chunk;
    if (!n || dst == src)
        return;
    copy_blocks(a, dst, chunk, src, chunk, chunk, rows);
    if (tail)
        memcpy((char *)dst + rows * chunk, (const char *)src + rows * chunk, tail);
}

/* Writes v into one element of type t (Pad's float `value` attribute). */
static void store_f64(enum gf_dtype t, void *p, double v)
{
    /* saturate first: converting an out-of-range double is undefined */
    int64_t i = isnan(v) ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    union {
        float f;
        double d;
        uint16_t h;
        int8_t i8;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        uint8_t b;
    } u = {0};
    switch (t) {
    case GF_FLOAT: u.f = (float)v; break;
    case GF_DOUBLE: u.d = v; break;
    case GF_FLOAT16: u.h = gf_float_to_half((float)v); break;
    case GF_BFLOAT16: u.h = gf_float_to_bf16((float)v); break;
    case GF_BOOL: u.b = v != 0; break;
    case GF_INT8: case GF_UINT8: u.i8 = (int8_t)i; break;
    case GF_INT16: case GF_UINT16: u.i16 = (int16_t)i; break;
    case GF_INT32: case GF_UINT32: u.i32 = (int32_t)i; break;
    default: u.i64 = i; break;
    }
    memcpy(p, &u, gf_dtype_size(t));
}

/* ---- remap: gather through per-axis offset tables ------------------------------ */

struct remap {
    int rank;                  /* >= 1 (a scalar is viewed as [1]) */
    int64_t dims[GF_MAX_RANK]; /* shape of the output (or a view of it) */
    int64_t *off[GF_MAX_RANK]; /* off[k][dims[k]]: source element offsets, -1: fill */
    const char *src;
    char *dst;
    size_t es;
    const void *fill; /* es bytes for -1 entries */
    bool contig;      /* the last axis reads consecutive elements */
};

/* Workspace of the remap ops: one int64 per index of every output axis
 * (Gather: of its view, [data dims before axis, N indices, data dims after]). */
static size_t remap_ws(const struct gf_kernel_args *a)
{
    size_t n = GF_MAX_RANK;
    const struct gf_tview *t = a->node->op == GF_OP_GATHER ? &a->in[0] : &a->out[0];
    for (int k = 0; k < t->rank; k++)
        n += (size_t)t->dims[k];
    if (a->node->op == GF_OP_GATHER && a->n_in > 1)
        n += a->in[1].nelem;
    return n * sizeof(int64_t);
}

static enum gf_status remap_init(const struct gf_kernel_args *a, struct remap *r, int rank,
                                 const int64_t *dims)
{
    memset(r, 0, sizeof(*r));
    size_t need = 0, have = remap_ws(a) / sizeof(int64_t);
    for (int k = 0; k < rank; k++)
        need += (size_t)dims[k];
    if (!a->workspace || need + 1 > have)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "workspace missing or too small");
    int64_t *ws = a->workspace;
    r->rank = rank ? rank : 1;
    for (int k = 0; k < r->rank; k++) {
        r->dims[k] = rank ? dims[k] : 1;
        r->off[k] = ws;
        ws += r->dims[k];
    }
    if (!rank)
        r->off[0][0] = 0;
    r->es = gf_dtype_size(a->in[0].dtype);
    r->src = a->in[0].data;
    r->dst = a->out[0].data;
    return GF_OK;
}

/* off[k][i] = first + i * step */
static void remap_linear(struct remap *r, int k, int64_t first, int64_t step)
{
    for (int64_t i = 0; i < r->dims[k]; i++)
        r->off[k][i] = first + i * step;
}

/* Source element offset of the row at multi-index idx (last axis
 * excluded), or -1 when the row is all pad value. */
static int64_t remap_row_base(const struct remap *r, const int64_t *idx)
{
    int64_t base = 0;
    for (int k = 0; k < r->rank - 1; k++) {
        int64_t o = r->off[k][idx[k]];
        if (o < 0)
            return -1;
        base += o;
    }
    return base;
}

/* Rows are done TILE_ROWS at a time, column block by column block, so a
 * transpose reads whole cache lines instead of one element per line. */
#define TILE_ROWS 16
#define TILE_COLS 256

static void remap_rows(void *ctx, size_t begin, size_t end)
{
    const struct remap *r = ctx;
    int last = r->rank - 1;
    size_t n = (size_t)r->dims[last], es = r->es;
    const int64_t *inner = r->off[last];
    int64_t idx[GF_MAX_RANK], base[TILE_ROWS];
    size_t rest = begin;
    for (int k = last - 1; k >= 0; k--) {
        idx[k] = (int64_t)(rest % (size_t)r->dims[k]);
        rest /= (size_t)r->dims[k];
    }
    for (size_t row = begin; row < end;) {
        size_t t = 0;
        for (; t < TILE_ROWS && row + t < end; t++) {
            base[t] = remap_row_base(r, idx);
            for (int k = last - 1; k >= 0 && ++idx[k] == r->dims[k]; k--)
                idx[k] = 0;
        }
        char *d = r->dst + row * n * es;
        size_t cols = r->contig ? n : TILE_COLS; /* contiguous rows: one memcpy each */
        for (size_t c0 = 0; c0 < n; c0 += cols) {
            size_t c1 = c0 + cols < n ? c0 + cols : n;
            for (size_t u = 0; u < t; u++) {
                char *du = d + (u * n + c0) * es;
                if (base[u] < 0)
                    fill_elems(du, r->fill, es, c1 - c0);
                else if (r->contig)
                    memcpy(du, r->src + (size_t)(base[u] + inner[c0]) * es, (c1 - c0) * es);
                else
                    for (size_t i = c0; i < c1; i++, du += es)
                        copy_elem(du, inner[i] < 0 ? r->fill
                                                   : r->src + (size_t)(base[u] + inner[i]) * es,
                                  es);
            }
        }
        row += t;
    }
}

static void remap_run(const struct gf_kernel_args *a, struct remap *r)
{
    int last = r->rank - 1;
    size_t n = (size_t)r->dims[last], rows = gf_dims_prod(r->dims, 0, last);
    if (!n || !rows)
        return;
    const int64_t *inner = r->off[last];
    r->contig = inner[0] >= 0;
    for (size_t i = 1; r->contig && i < n; i++)
        r->contig = inner[i] == inner[0] + (int64_t)i;
    gf_parallel_for(a->n_threads, rows, max_sz(1, GRAIN / n), remap_rows, r);
}

/* ---- strided copies: Transpose, Slice, Expand ----------------------------------- */

/* out[i0, ..., iR-1] = src[i0 * sst[0] + ... + iR-1 * sst[R-1]] (byte strides, any
 * sign, 0 for a broadcast axis), the output row-major.  Before running, the
 * problem is reduced: size-1 axes dropped, neighbouring output axes that stay
 * neighbours in the source merged, and an innermost axis that reads
 * consecutive bytes folded into the element, so a kept inner block is moved
 * as one memcpy.  What is left runs one of two ways:
 *   tiles  when some outer axis q reads consecutive elements (a transpose
 *          swapping the innermost axis): tiles of XC_STRIP elements along q
 *          by XC_BLOCK along the output's last axis, moved as SSE2 blocks
 *          (4x4 for 4-byte elements, 8x8 for 2- and 1-byte ones, 2x2 for
 *          8-byte ones).  Few output rows are open at a time, so that their
 *          lines stay in L1 even at the power-of-two strides of the models
 *          (where all rows fall into the same few cache sets), and the source
 *          lines a tile leaves half used are still in L2 for the next one;
 *   rows   otherwise: runs along the output's last axis, a memcpy each
 *          when elements are large, a typed strided loop or a fill when not.
 * Both split into units (tile columns / elements) for gf_parallel_for with a
 * grain of XC_GRAIN_BYTES, so a small copy stays on the calling thread. */
#define XC_GRAIN_BYTES 65536
#define XC_STRIP 8   /* a tile's output rows: few enough to stay in L1 at 4 KiB strides */
#define XC_BLOCK 128 /* a tile's source rows, and the elements of each output row */
#define XC_TILE_MAX_ES 32  /* larger elements: rows (each is half a line or more) */

struct xcopy {
    int rank;
    int64_t dims[GF_MAX_RANK];
    int64_t sst[GF_MAX_RANK]; /* source byte stride of each output axis */
    int64_t dst[GF_MAX_RANK]; /* output byte strides (set by xc_run) */
    size_t es;                /* bytes moved as one element */
    const char *src;
    char *out;
    /* tiles */
    int q;                    /* the outer axis with sst == es */
    size_t strip;             /* elements of axis q per tile (XC_STRIP) */
    size_t block;             /* elements of the last axis per unit (XC_BLOCK) */
    size_t blocks;            /* units per outer index: ceil(dims[last] / block) */
};

static void xc_reduce(struct xcopy *c)
{
    int r = 0;
    for (int k = 0; k < c->rank; k++) {
        if (c->dims[k] == 1)
            continue;
        if (r > 0 && c->sst[r - 1] == c->sst[k] * c->dims[k]) {
            c->dims[r - 1] *= c->dims[k];
            c->sst[r - 1] = c->sst[k];
            continue;
        }
        c->dims[r] = c->dims[k];
        c->sst[r] = c->sst[k];
        r++;
    }
    while (r > 0 && c->sst[r - 1] == (int64_t)c->es) {
        c->es *= (size_t)c->dims[r - 1];
        r--;
    }
    c->rank = r;
}

/* n elements along a source stride of sp bytes into consecutive ones. */
#define XC_ROW(NAME, T)                                                                        \
    static void NAME(char *d, const char *s, int64_t sp, size_t n)                             \
    {                                                                                          \
        for (size_t i = 0; i < n; i++) {                                                       \
            T v;                                                                               \
            memcpy(&v, s + (int64_t)i * sp, sizeof(T));                                        \
            memcpy(d + i * sizeof(T), &v, sizeof(T));                                          \
        }                                                                                      \
    }
XC_ROW(xc_row1, uint8_t)
XC_ROW(xc_row2, uint16_t)
XC_ROW(xc_row4, uint32_t)
XC_ROW(xc_row8, uint64_t)

static void xc_row(char *d, const char *s, int64_t sp, size_t n, size_t es)
{
    if (sp == 0) {
        fill_elems(d, s, es, n);
        return;
    }
    switch (es) {
    case 1: xc_row1(d, s, sp, n); return;
    case 2: xc_row2(d, s, sp, n); return;
    case 4: xc_row4(d, s, sp, n); return;
    case 8: xc_row8(d, s, sp, n); return;
    default:
        for (size_t i = 0; i < n; i++)
            memcpy(d + i * es, s + (int64_t)i * sp, es);
    }
}

/* Source byte offset of the output element at flat index `flat` (axes
 * [0, rank) of c), its multi-index into idx. */
static int64_t xc_unravel(const struct xcopy *c, size_t flat, int64_t *idx)
{
    int64_t off = 0;
    for (int k = c->rank - 1; k >= 0; k--) {
        idx[k] = (int64_t)(flat % (size_t)c->dims[k]);
        flat /= (size_t)c->dims[k];
        off += idx[k] * c->sst[k];
    }
    return off;
}

/* Units are output elements; runs along the last axis. */
static void xc_rows(void *ctx, size_t begin, size_t end)
{
    const struct xcopy *c = ctx;
    int last = c->rank - 1;
    size_t n = (size_t)c->dims[last], es = c->es;
    int64_t idx[GF_MAX_RANK];
    int64_t off = xc_unravel(c, begin, idx) - idx[last] * c->sst[last];
    for (size_t i = begin; i < end;) {
        size_t j0 = (size_t)idx[last], len = n - j0 < end - i ? n - j0 : end - i;
        xc_row(c->out + i * es, c->src + off + (int64_t)j0 * c->sst[last], c->sst[last], len,
               es);
        i += len;
        idx[last] = 0;
        for (int k = last - 1; k >= 0; k--) { /* next row */
            off += c->sst[k];
            if (++idx[k] < c->dims[k])
                break;
            off -= idx[k] * c->sst[k];
            idx[k] = 0;
        }
    }
}

/* Tiles: d[a * dp + b * es] = s[b * sp + a * es] for a < na, b < nb, by K x K
 * blocks (BLOCK moves one, K source rows to K output rows), the edges one
 * element at a time.  Along b outside, a inside: the na output rows fill
 * line by line while K source rows at a time are read. */
#define XC_TILE(NAME, T, K, BLOCK)                                                             \
    static void NAME(char *d, int64_t dp, const char *s, int64_t sp, size_t na, size_t nb)     \
    {                                                                                          \
        size_t nak = na - na % (K), b = 0;                                                     \
        for (; b + (K) <= nb; b += (K)) {                                                      \
            const char *sb = s + (int64_t)b * sp;                                              \
            char *db = d + b * sizeof(T);                                                      \
            size_t a = 0;                                                                      \
            for (; a < nak; a += (K))                                                          \
                BLOCK(db + (int64_t)a * dp, dp, sb + a * sizeof(T), sp);                       \
            for (; a < na; a++)                                                                \
                for (int k = 0; k < (K); k++)                                                  \
                    memcpy(db + (int64_t)a * dp + k * (int64_t)sizeof(T),                      \
                           sb + k * sp + a * sizeof(T), sizeof(T));                            \
        }                                                                                      \
        for (; b < nb; b++)                                                                    \
            for (size_t a = 0; a < na; a++)                                                    \
                memcpy(d + (int64_t)a * dp + b * sizeof(T), s + (int64_t)b * sp + a * sizeof(T), \
                       sizeof(T));                                                             \
    }

#ifdef __SSE2__
/* The blocks go through SSE registers by pure moves and shuffles: any bit
 * pattern, NaN payloads included, comes through unchanged. */
static inline void xc_blk4(char *d, int64_t dp, const char *s, int64_t sp)
{
    __m128 r0 = _mm_loadu_ps((const float *)s);
    __m128 r1 = _mm_loadu_ps((const float *)(s + sp));
    __m128 r2 = _mm_loadu_ps((const float *)(s + 2 * sp));
    __m128 r3 = _mm_loadu_ps((const float *)(s + 3 * sp));
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps((float *)d, r0);
    _mm_storeu_ps((float *)(d + dp), r1);
    _mm_storeu_ps((float *)(d + 2 * dp), r2);
    _mm_storeu_ps((float *)(d + 3 * dp), r3);
}

#define LD(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define ST(p, v) _mm_storeu_si128((__m128i *)(void *)(p), v)

/* 8 x 8 of 2-byte elements: three rounds of interleaving. */
static inline void xc_blk2(char *d, int64_t dp, const char *s, int64_t sp)
{
    __m128i r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = LD(s + i * sp);
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);    /* cols 0-3 */
        t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]); /* cols 4-7 */
    }
    for (int h = 0; h < 2; h++) /* rows 0-3, rows 4-7 */
        for (int j = 0; j < 2; j++) { /* cols 0-3, cols 4-7 */
            u[4 * j + 2 * h] = _mm_unpacklo_epi32(t[4 * h + j], t[4 * h + 2 + j]);
            u[4 * j + 2 * h + 1] = _mm_unpackhi_epi32(t[4 * h + j], t[4 * h + 2 + j]);
        }
    /* u[4j + 2h + m]: rows 4h..4h+3 of cols 4j + 2m, 4j + 2m + 1 */
    for (int j = 0; j < 2; j++)
        for (int m = 0; m < 2; m++) {
            int c = 4 * j + 2 * m;
            ST(d + c * dp, _mm_unpacklo_epi64(u[4 * j + m], u[4 * j + 2 + m]));
            ST(d + (c + 1) * dp, _mm_unpackhi_epi64(u[4 * j + m], u[4 * j + 2 + m]));
        }
}

/* 8 x 8 bytes: 8-byte loads, three rounds of interleaving, 8-byte stores. */
static inline void xc_blk1(char *d, int64_t dp, const char *s, int64_t sp)
{
    __m128i r[8], t[4], u[4], v[4];
    for (int i = 0; i < 8; i++)
        r[i] = _mm_loadl_epi64((const __m128i *)(const void *)(s + i * sp));
    for (int i = 0; i < 4; i++)
        t[i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]); /* rows 2i, 2i+1 interleaved */
    u[0] = _mm_unpacklo_epi16(t[0], t[1]); /* rows 0-3, cols 0-3 */
    u[1] = _mm_unpackhi_epi16(t[0], t[1]); /* rows 0-3, cols 4-7 */
    u[2] = _mm_unpacklo_epi16(t[2], t[3]); /* rows 4-7, cols 0-3 */
    u[3] = _mm_unpackhi_epi16(t[2], t[3]); /* rows 4-7, cols 4-7 */
    v[0] = _mm_unpacklo_epi32(u[0], u[2]); /* cols 0, 1 */
    v[1] = _mm_unpackhi_epi32(u[0], u[2]); /* cols 2, 3 */
    v[2] = _mm_unpacklo_epi32(u[1], u[3]); /* cols 4, 5 */
    v[3] = _mm_unpackhi_epi32(u[1], u[3]); /* cols 6, 7 */
    for (int c = 0; c < 4; c++) {
        _mm_storel_epi64((__m128i *)(void *)(d + 2 * c * dp), v[c]);
        _mm_storel_epi64((__m128i *)(void *)(d + (2 * c + 1) * dp), _mm_srli_si128(v[c], 8));
    }
}

/* 2 x 2 of 8-byte elements. */
static inline void xc_blk8(char *d, int64_t dp, const char *s, int64_t sp)
{
    __m128i r0 = LD(s), r1 = LD(s + sp);
    ST(d, _mm_unpacklo_epi64(r0, r1));
    ST(d + dp, _mm_unpackhi_epi64(r0, r1));
}
#undef LD
#undef ST

XC_TILE(xc_tile1, uint8_t, 8, xc_blk1)
XC_TILE(xc_tile2, uint16_t, 8, xc_blk2)
XC_TILE(xc_tile4, uint32_t, 4, xc_blk4)
XC_TILE(xc_tile8, uint64_t, 2, xc_blk8)
#else
#define XC_BLK_NONE(d, dp, s, sp) ((void)0)
XC_TILE(xc_tile1, uint8_t, 1, XC_BLK_NONE)
XC_TILE(xc_tile2, uint16_t, 1, XC_BLK_NONE)
XC_TILE(xc_tile4, uint32_t, 1, XC_BLK_NONE)
XC_TILE(xc_tile8, uint64_t, 1, XC_BLK_NONE)
#endif

static void xc_tile(char *d, int64_t dp, const char *s, int64_t sp, size_t na, size_t nb,
                    size_t es)
{
    switch (es) {
    case 1: xc_tile1(d, dp, s, sp, na, nb); return;
    case 2: xc_tile2(d, dp, s, sp, na, nb); return;
    case 4: xc_tile4(d, dp, s, sp, na, nb); return;
    case 8: xc_tile8(d, dp, s, sp, na, nb); return;
    default:
        for (size_t b = 0; b < nb; b++)
            for (size_t a = 0; a < na; a++)
                memcpy(d + (int64_t)a * dp + b * es, s + (int64_t)b * sp + a * es, es);
    }
}

/* Units are (outer index, block of XC_BLOCK along the output's last axis);
 * each walks all of axis q in strips of XC_STRIP.  Outer: every axis but q
 * and the last. */
static void xc_tiles(void *ctx, size_t begin, size_t end)
{
    const struct xcopy *c = ctx;
    int last = c->rank - 1, q = c->q;
    size_t A = (size_t)c->dims[q], B = (size_t)c->dims[last], es = c->es;
    for (size_t u = begin; u < end; u++) {
        size_t o = u / c->blocks, b0 = u % c->blocks * c->block;
        size_t nb = B - b0 < c->block ? B - b0 : c->block;
        int64_t so = (int64_t)b0 * c->sst[last], dof = (int64_t)(b0 * es);
        for (int k = last - 1; k >= 0; k--) {
            if (k == q)
                continue;
            int64_t i = (int64_t)(o % (size_t)c->dims[k]);
            o /= (size_t)c->dims[k];
            so += i * c->sst[k];
            dof += i * c->dst[k];
        }
        for (size_t a0 = 0; a0 < A; a0 += c->strip)
            xc_tile(c->out + dof + (int64_t)a0 * c->dst[q], c->dst[q], c->src + so + a0 * es,
                    c->sst[last], A - a0 < c->strip ? A - a0 : c->strip, nb, es);
    }
}

/* Runs the copy described by rank, dims, sst, es, src, out (c is reduced in place). */
static void xc_run(const struct gf_kernel_args *a, struct xcopy *c)
{
    if (gf_dims_prod(c->dims, 0, c->rank) == 0)
        return; /* empty: the pointers may be NULL */
    xc_reduce(c);
    if (c->rank == 0) {
        copy_bytes(a, c->out, c->src, c->es);
        return;
    }
    int last = c->rank - 1;
    c->dst[last] = (int64_t)c->es;
    for (int k = last - 1; k >= 0; k--)
        c->dst[k] = c->dst[k + 1] * c->dims[k + 1];
    size_t total = gf_dims_prod(c->dims, 0, c->rank);
    c->q = -1;
    if (c->es <= XC_TILE_MAX_ES)
        for (int k = 0; k < last; k++)
            if (c->sst[k] == (int64_t)c->es)
                c->q = k;
    if (c->q < 0) {
        gf_parallel_for(a->n_threads, total, max_sz(1, XC_GRAIN_BYTES / c->es), xc_rows, c);
        return;
    }
    size_t A = (size_t)c->dims[c->q], B = (size_t)c->dims[last];
    c->strip = XC_STRIP;
    c->block = XC_BLOCK;
    c->blocks = (B + c->block - 1) / c->block;
    size_t units = total / A / B * c->blocks, unit_bytes = A * c->block * c->es;
    gf_parallel_for(a->n_threads, units, max_sz(1, XC_GRAIN_BYTES / unit_bytes), xc_tiles, c);
}

/* ---- Constant, ConstantOfShape, Shape, Size, Range ------------------------------ */

/* Constant's numeric value attributes besides the `value` tensor. */
static const struct {
    const char *name;
    enum gf_dtype dtype; /* of the output */
    bool list;           /* 1-D output; else a scalar */
} value_attrs[] = {
    {"value_float", GF_FLOAT, false},
    {"value_floats", GF_FLOAT, true},
    {"value_int", GF_INT64, false},
    {"value_ints", GF_INT64, true},
};

static bool sup_constant(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)in;
    (void)n_in;
    const struct gf_attr *v = gf_node_attr(n, "value");
    if (v) /* value_string(s) and sparse_value are not supported */
        return v->t && v->t->dtype != GF_STRING;
    for (size_t i = 0; i < sizeof(value_attrs) / sizeof(value_attrs[0]); i++)
        if (gf_node_attr(n, value_attrs[i].name))
            return true;
    return false;
}

static enum gf_status run_constant(const struct gf_kernel_args *a)
{
    const struct gf_attr *at = gf_node_attr(a->node, "value");
    enum gf_status st;
    if (at && at->t) {
        const struct gf_tensor *t = at->t;
        if ((st = gf_check_out_dims(a, 0, t->rank, t->dims)) ||
            (st = gf_check_dtype(a, "output 0", a->out[0].dtype, t->dtype)))
            return st;
        if (t->nbytes != gf_tview_bytes(&a->out[0]) || (t->nbytes && !t->data))
            return gf_kernel_error(a, GF_ERR_INVALID, "value tensor holds %zu bytes, not %zu",
                                   t->nbytes, gf_tview_bytes(&a->out[0]));
        copy_bytes(a, a->out[0].data, t->data, t->nbytes);
        return GF_OK;
    }
    for (size_t i = 0; i < sizeof(value_attrs) / sizeof(value_attrs[0]); i++) {
        if (!(at = gf_node_attr(a->node, value_attrs[i].name)))
            continue;
        bool is_float = value_attrs[i].dtype == GF_FLOAT, list = value_attrs[i].list;
        int64_t len = list ? (int64_t)at->n : 1;
        if ((st = gf_check_out_dims(a, 0, list, &len)) ||
            (st = gf_check_dtype(a, "output 0", a->out[0].dtype, value_attrs[i].dtype)))
            return st;
        const void *src = is_float ? (list ? (const void *)at->floats : &at->f)
                                   : (list ? (const void *)at->ints : &at->i);
        copy_bytes(a, a->out[0].data, src, (size_t)len * gf_dtype_size(value_attrs[i].dtype));
        return GF_OK;
    }
    return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no supported value attribute");
}

static bool sup_constant_of_shape(const struct gf_node *n, const struct gf_tview *in,
                                  size_t n_in)
{
    const struct gf_attr *v = gf_node_attr(n, "value");
    return n_in >= 1 && gf_is_index_type(in[0].dtype) && (!v || (v->t && is_movable(v->t->dtype)));
}

static enum gf_status run_constant_of_shape(const struct gf_kernel_args *a)
{
    enum gf_status st = gf_require_inputs(a, 1);
    if (st)
        return st;
    const struct gf_tview *shape = &a->in[0];
    int64_t dims[GF_MAX_RANK];
    if (shape->nelem > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "input has %zu entries; rank %d at most",
                               shape->nelem, GF_MAX_RANK);
    for (size_t i = 0; i < shape->nelem; i++)
        if ((dims[i] = ival(shape, i)) < 0)
            return gf_kernel_error(a, GF_ERR_INVALID, "input element %zu is %" PRId64
                                   ", a dimension must be >= 0", i, dims[i]);
    if ((st = gf_check_out_dims(a, 0, (int)shape->nelem, dims)))
        return st;
    static const uint8_t zero[16];
    const void *val = zero;
    const struct gf_attr *v = gf_node_attr(a->node, "value");
    if (v && v->t) {
        if (v->t->nelem != 1 || !v->t->data)
            return gf_kernel_error(a, GF_ERR_INVALID, "value must hold one element, not %zu",
                                   v->t->nelem);
        if ((st = gf_check_dtype(a, "output 0", a->out[0].dtype, v->t->dtype)))
            return st;
        val = v->t->data;
    }
    size_t es = gf_dtype_size(a->out[0].dtype);
    if (!es || es > sizeof(zero))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output type %s",
                               gf_dtype_name(a->out[0].dtype));
    fill_par(a, a->out[0].data, val, es, a->out[0].nelem);
    return GF_OK;
}

static enum gf_status run_shape(const struct gf_kernel_args *a)
{
    if (a->n_in < 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 0 is missing");
    int64_t r = a->in[0].rank;
    int64_t start = gf_node_attr_int(a->node, "start", 0);
    int64_t end = gf_node_attr_int(a->node, "end", r);
    start = clamp64(start < 0 ? start + r : start, 0, r);
    end = clamp64(end < 0 ? end + r : end, 0, r);
    int64_t n = end > start ? end - start : 0;
    enum gf_status st = gf_check_out_dims(a, 0, 1, &n);
    if (st == GF_OK)
        st = gf_check_dtype(a, "output 0", a->out[0].dtype, GF_INT64);
    if (st == GF_OK && n)
        memcpy(a->out[0].data, a->in[0].dims + start, (size_t)n * 8);
    return st;
}

static enum gf_status run_size(const struct gf_kernel_args *a)
{
    if (a->n_in < 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 0 is missing");
    int64_t n = (int64_t)a->in[0].nelem;
    enum gf_status st = gf_check_out_dims(a, 0, 0, NULL);
    if (st == GF_OK)
        st = gf_check_dtype(a, "output 0", a->out[0].dtype, GF_INT64);
    if (st == GF_OK)
        memcpy(a->out[0].data, &n, 8);
    return st;
}

static bool sup_range(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    enum gf_dtype t = n_in ? in[0].dtype : GF_UNDEFINED;
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_INT16 || t == GF_INT32 || t == GF_INT64;
}

/* Range in type T (float or double): the count is computed in T, as the
 * reference does, then out[i] = start + i * delta. */
#define RANGE_REAL(NAME, T, CEIL)                                                              \
    static enum gf_status NAME(const struct gf_kernel_args *a)                                 \
    {                                                                                          \
        T s, l, d;                                                                             \
        memcpy(&s, a->in[0].data, sizeof(T));                                                  \
        memcpy(&l, a->in[1].data, sizeof(T));                                                  \
        memcpy(&d, a->in[2].data, sizeof(T));                                                  \
        if (d == 0 || isnan(d))                                                                \
            return gf_kernel_error(a, GF_ERR_INVALID, "delta is %g", (double)d);               \
        T c = CEIL((l - s) / d);                                                               \
        if (!(c < (T)4e18))                                                                    \
            return gf_kernel_error(a, GF_ERR_INVALID, "start %g, limit %g, delta %g give "    \
                                   "no finite element count", (double)s, (double)l, (double)d);\
        int64_t n = c > 0 ? (int64_t)c : 0;                                                    \
        enum gf_status st = gf_check_out_dims(a, 0, 1, &n);                                    \
        for (int64_t i = 0; st == GF_OK && i < n; i++) {                                       \
            T v = s + (T)i * d;                                                                \
            memcpy((char *)a->out[0].data + i * (int64_t)sizeof(T), &v, sizeof(T));            \
        }                                                                                      \
        return st;                                                                             \
    }
RANGE_REAL(range_f32, float, ceilf)
RANGE_REAL(range_f64, double, ceil)

/* Integer Range, computed in int64 and stored in the input's type. */
static enum gf_status range_int(const struct gf_kernel_args *a)
{
    int64_t s = ival(&a->in[0], 0), l = ival(&a->in[1], 0), d = ival(&a->in[2], 0), diff;
    if (d == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "delta is 0");
    if (__builtin_sub_overflow(l, s, &diff) || (diff == INT64_MIN && d == -1))
        return gf_kernel_error(a, GF_ERR_INVALID, "limit - start overflows");
    int64_t n = diff / d + (diff % d != 0 && (diff > 0) == (d > 0)); /* ceil */
    n = n > 0 ? n : 0;
    enum gf_status st = gf_check_out_dims(a, 0, 1, &n);
    if (st)
        return st;
    size_t es = gf_dtype_size(a->out[0].dtype);
    for (int64_t i = 0; i < n; i++) {
        /* in range by construction; unsigned to keep UBSan quiet at the extremes */
        int64_t v = (int64_t)((uint64_t)s + (uint64_t)i * (uint64_t)d);
        int16_t v16 = (int16_t)v;
        int32_t v32 = (int32_t)v;
        const void *p = es == 2 ? (const void *)&v16 : es == 4 ? (const void *)&v32 : &v;
        memcpy((char *)a->out[0].data + (size_t)i * es, p, es);
    }
    return GF_OK;
}

static enum gf_status run_range(const struct gf_kernel_args *a)
{
    enum gf_status st = gf_require_inputs(a, 3);
    if (st)
        return st;
    for (size_t i = 0; i < 3; i++) {
        static const char *const names[] = {"start", "limit", "delta"};
        if (a->in[i].nelem != 1)
            return gf_kernel_error(a, GF_ERR_INVALID, "%s must be a scalar (it has %zu elements)",
                                   names[i], a->in[i].nelem);
        if ((st = gf_check_dtype(a, names[i], a->in[i].dtype, a->in[0].dtype)))
            return st;
    }
    if ((st = gf_check_dtype(a, "output 0", a->out[0].dtype, a->in[0].dtype)))
        return st;
    switch (a->in[0].dtype) {
    case GF_FLOAT: return range_f32(a);
    case GF_DOUBLE: return range_f64(a);
    default: return range_int(a);
    }
}

/* ---- supports for the data-movement ops ------------------------------------------ */

/* Inputs that hold indices, shapes or axes (int32/int64), as a bit mask. */
static unsigned index_slots(enum gf_op op)
{
    switch (op) {
    case GF_OP_SLICE: return 0x1e;        /* starts, ends, axes, steps */
    case GF_OP_PAD: return 0x2 | 0x8;     /* pads, axes */
    case GF_OP_TRANSPOSE: case GF_OP_FLATTEN: case GF_OP_CONCAT: return 0;
    default: return 0x2;                  /* input 1 */
    }
}

static bool sup_move(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || !is_movable(in[0].dtype))
        return false;
    unsigned slots = index_slots(n->op);
    for (size_t i = 1; i < n_in && i < 8; i++)
        if ((slots >> i & 1) && in[i].data && !gf_is_index_type(in[i].dtype))
            return false;
    return true;
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze: a copy once the shape checks ------------ */

static enum gf_status finish_copy(const struct gf_kernel_args *a, int rank, const int64_t *dims)
{
    enum gf_status st = gf_check_out_dims(a, 0, rank, dims);
    if (st == GF_OK)
        st = gf_check_dtype(a, "output 0", a->out[0].dtype, a->in[0].dtype);
    if (st == GF_OK)
        copy_bytes(a, a->out[0].data, a->in[0].data, gf_tview_bytes(&a->in[0]));
    return st;
}

/* Reshape Flatten Squeeze Unsqueeze */
static enum gf_status run_view(const struct gf_kernel_args *a)
{
    int r;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_view_dims(a, &r, dims);
    return st ? st : finish_copy(a, r, dims);
}

/* ---- Transpose, Slice, Expand: strided copies; Tile, Pad: remaps ------------------- */

/* A strided copy from input 0 to output 0 of `rank` output dims; sst is the caller's. */
static void xc_setup(struct xcopy *c, const struct gf_kernel_args *a, int rank,
                     const int64_t *dims)
{
    c->rank = rank;
    c->es = gf_dtype_size(a->in[0].dtype);
    memcpy(c->dims, dims, (size_t)rank * sizeof(int64_t));
    c->src = a->in[0].data;
    c->out = a->out[0].data;
}

static enum gf_status run_transpose(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank, perm[GF_MAX_RANK];
    int64_t dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    struct xcopy c;
    enum gf_status st = gf_transpose_perm(a, perm, dims);
    if (st || (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    xc_setup(&c, a, r, dims);
    strides_of(x, stride);
    for (int k = 0; k < r; k++)
        c.sst[k] = stride[perm[k]] * (int64_t)c.es;
    xc_run(a, &c);
    return GF_OK;
}

static enum gf_status run_slice(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    struct xcopy c;
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_slice_plan(a, 1, r, x->dims, first, step, dims)) ||
        (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    if (!a->out[0].nelem)
        return GF_OK;
    xc_setup(&c, a, r, dims);
    strides_of(x, stride);
    int64_t base = 0;
    for (int k = 0; k < r; k++) {
        base += first[k] * stride[k];
        c.sst[k] = step[k] * stride[k] * (int64_t)c.es;
    }
    c.src += base * (int64_t)c.es;
    xc_run(a, &c);
    return GF_OK;
}

static enum gf_status run_expand(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int r;
    int64_t dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    struct xcopy c;
    enum gf_status st = gf_expand_dims(a, &r, dims);
    if (st || (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    xc_setup(&c, a, r, dims);
    gf_bcast_strides(x, &a->out[0], stride);
    for (int k = 0; k < r; k++)
        c.sst[k] = stride[k] * (int64_t)c.es;
    xc_run(a, &c);
    return GF_OK;
}

static enum gf_status run_tile(const struct gf_kernel_args *a)
{
    int64_t rep[GF_MAX_INTS], dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    size_t n;
    bool given;
    enum gf_status st = gf_require_inputs(a, 2);
    if (st || (st = gf_int_list(a, 1, NULL, "repeats", rep, &n, &given)))
        return st;
    const struct gf_tview *x = &a->in[0];
    if (n != (size_t)x->rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "repeats has %zu entries for rank %d", n,
                               x->rank);
    for (int k = 0; k < x->rank; k++)
        if (rep[k] < 0 || __builtin_mul_overflow(x->dims[k], rep[k], &dims[k]))
            return gf_kernel_error(a, GF_ERR_INVALID, "repeats[%d] = %" PRId64 " is invalid", k,
                                   rep[k]);
    struct remap m;
    if ((st = gf_check_out_dims(a, 0, x->rank, dims)) || (st = remap_init(a, &m, x->rank, dims)))
        return st;
    strides_of(x, stride);
    for (int k = 0; k < m.rank && x->rank; k++)
        for (int64_t i = 0; i < dims[k]; i++)
            m.off[k][i] = i % x->dims[k] * stride[k];
    remap_run(a, &m);
    return GF_OK;
}

static bool sup_pad(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return sup_move(n, in, n_in) && gf_pad_mode_of(n) != PAD_BAD;
}

/* Source index for position x relative to the kept part [0, n) of an axis,
 * or -1 for the pad value.  Reflect and wrap repeat periodically, as
 * numpy does for pads larger than the axis. */
static int64_t pad_src(enum pad_mode mode, int64_t x, int64_t n)
{
    if (x >= 0 && x < n)
        return x;
    int64_t p = 2 * (n - 1), m;
    switch (mode) {
    case PAD_EDGE: return x < 0 ? 0 : n - 1;
    case PAD_WRAP: return (x % n + n) % n;
    case PAD_REFLECT:
        if (n == 1)
            return 0;
        m = (x % p + p) % p;
        return m < n ? m : p - m;
    default: return -1;
    }
}

/* The pads list (input 1, or attribute "pads" / opset-1 "paddings") and
 * the axes (input 3, opset 18) of a CPU Pad node. */
static enum gf_status pad_lists(const struct gf_kernel_args *a, int64_t *pads, size_t *np,
                                int64_t *axes, size_t *na, bool *has_axes)
{
    bool given;
    enum gf_status st = gf_int_list(a, 1, "pads", "pads", pads, np, &given);
    if (st == GF_OK && !given)
        st = gf_int_list(a, 0, "paddings", "paddings", pads, np, &given);
    return st ? st : gf_int_list(a, 3, NULL, "axes", axes, na, has_axes);
}

/* The pad value: input 2 (opset 11+), attribute `value` (before), or 0. */
static enum gf_status pad_value(const struct gf_kernel_args *a, void *buf)
{
    const struct gf_tview *x = &a->in[0];
    memset(buf, 0, 16);
    if (gf_has_input(a, 2) && a->in[2].nelem) {
        enum gf_status st = gf_check_dtype(a, "constant_value", a->in[2].dtype, x->dtype);
        if (st == GF_OK)
            memcpy(buf, a->in[2].data, gf_dtype_size(x->dtype));
        return st;
    }
    if (gf_node_attr(a->node, "value"))
        store_f64(x->dtype, buf, gf_node_attr_float(a->node, "value", 0));
    return GF_OK;
}

static enum gf_status run_pad(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    int mode;
    int64_t pb[GF_MAX_RANK], pe[GF_MAX_RANK], dims[GF_MAX_RANK], stride[GF_MAX_RANK];
    int64_t pads[GF_MAX_INTS], axes[GF_MAX_INTS];
    size_t np = 0, na = 0;
    bool has_axes = false;
    _Alignas(16) uint8_t fill[16];
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = pad_lists(a, pads, &np, axes, &na, &has_axes)) ||
        (st = gf_pad_plan(a, pads, np, axes, na, has_axes, &mode, pb, pe, dims)) ||
        (st = pad_value(a, fill)))
        return st;
    struct remap m;
    if ((st = gf_check_out_dims(a, 0, x->rank, dims)) || (st = remap_init(a, &m, x->rank, dims)))
        return st;
    m.fill = fill;
    strides_of(x, stride);
    for (int k = 0; k < x->rank; k++) {
        /* negative pads crop: the kept part is [crop, crop + n) of the input */
        int64_t crop = pb[k] < 0 ? -pb[k] : 0, lead = pb[k] > 0 ? pb[k] : 0;
        int64_t n = x->dims[k] - crop - (pe[k] < 0 ? -pe[k] : 0);
        for (int64_t i = 0; i < dims[k]; i++) {
            int64_t s = pad_src((enum pad_mode)mode, i - lead, n);
            m.off[k][i] = s < 0 ? -1 : (crop + s) * stride[k];
        }
    }
    remap_run(a, &m);
    return GF_OK;
}

/* ---- Concat and Split: blocks along an axis ------------------------------------- */

/* copy_blocks as a gf_copy2d_fn (layout_checks.c walks Concat and Split). */
static enum gf_status blocks_2d(const struct gf_kernel_args *a, void *dst, size_t doff,
                                size_t dpitch, const void *src, size_t soff, size_t spitch,
                                size_t width, size_t height)
{
    if (!width || !height)
        return GF_OK; /* an empty tensor's data may be NULL */
    copy_blocks(a, (char *)dst + doff, dpitch, (const char *)src + soff, spitch, width, height);
    return GF_OK;
}

static enum gf_status run_concat(const struct gf_kernel_args *a)
{
    return gf_concat_blocks(a, blocks_2d);
}

static enum gf_status run_split(const struct gf_kernel_args *a)
{
    return gf_split_blocks(a, blocks_2d);
}

/* ---- Trilu ------------------------------------------------------------------------ */

struct trilu_job {
    const char *src;
    char *dst;
    size_t es;
    int64_t n, m, k; /* matrices [n, m], diagonal offset k */
    bool upper;
};

static void trilu_rows(void *ctx, size_t begin, size_t end)
{
    const struct trilu_job *j = ctx;
    size_t rowb = (size_t)j->m * j->es;
    for (size_t row = begin; row < end; row++) {
        int64_t i = (int64_t)row % j->n;
        /* columns [c0, c1) are kept, the rest zeroed */
        int64_t c0 = j->upper ? clamp64(i + j->k, 0, j->m) : 0;
        int64_t c1 = j->upper ? j->m : clamp64(i + j->k + 1, 0, j->m);
        char *d = j->dst + row * rowb;
        const char *s = j->src + row * rowb;
        if (c1 <= c0) {
            memset(d, 0, rowb);
            continue;
        }
        memset(d, 0, (size_t)c0 * j->es);
        if (d != s)
            memcpy(d + c0 * j->es, s + c0 * j->es, (size_t)(c1 - c0) * j->es);
        memset(d + c1 * j->es, 0, (size_t)(j->m - c1) * j->es);
    }
}

static enum gf_status run_trilu(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_status st = gf_require_inputs(a, 1);
    if (st)
        return st;
    if (x->rank < 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "input has rank %d; Trilu needs 2 or more",
                               x->rank);
    int64_t k = 0;
    if (gf_has_input(a, 1)) {
        if (a->in[1].nelem != 1)
            return gf_kernel_error(a, GF_ERR_INVALID, "k must be a scalar (it has %zu elements)",
                                   a->in[1].nelem);
        k = ival(&a->in[1], 0);
    }
    if ((st = gf_check_out_dims(a, 0, x->rank, x->dims)))
        return st;
    int64_t n = x->dims[x->rank - 2], m = x->dims[x->rank - 1];
    struct trilu_job j = {x->data, a->out[0].data, gf_dtype_size(x->dtype), n, m,
                          clamp64(k, -n - m - 1, n + m + 1), /* no overflow in i + k */
                          gf_node_attr_int(a->node, "upper", 1) != 0};
    if (n && m)
        gf_parallel_for(a->n_threads, x->nelem / (size_t)m, max_sz(1, GRAIN / (size_t)m),
                        trilu_rows, &j);
    return GF_OK;
}

/* ---- Gather ------------------------------------------------------------------------- */

static enum gf_status run_gather(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    int ax, r = x->rank;
    int64_t dims[GF_MAX_RANK], view[GF_MAX_RANK], stride[GF_MAX_RANK];
    struct remap m;
    enum gf_status st = gf_gather_dims(a, &ax, dims);
    if (st)
        return st;
    memcpy(view, x->dims, sizeof(view));
    view[ax] = (int64_t)ind->nelem; /* remapped as [before, N, after] */
    if ((st = remap_init(a, &m, r, view)))
        return st;
    strides_of(x, stride);
    for (int k = 0; k < r; k++)
        remap_linear(&m, k, 0, stride[k]);
    for (size_t i = 0; i < ind->nelem; i++) {
        int64_t v = ival(ind, i);
        m.off[ax][i] = (v < 0 ? v + x->dims[ax] : v) * stride[ax];
    }
    remap_run(a, &m);
    return GF_OK;
}

/* ---- GatherElements and ScatterElements --------------------------------------------- */

/* Indices (and updates) of the same rank as data; off the axis no larger. */
static enum gf_status check_elements(const struct gf_kernel_args *a, int *ax)
{
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1];
    enum gf_status st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), x->rank, ax);
    if (st)
        return st;
    if (ind->rank != x->rank)
        return gf_kernel_error(a, GF_ERR_INVALID, "indices have rank %d, data rank %d",
                               ind->rank, x->rank);
    for (int k = 0; k < x->rank; k++)
        if (k != *ax && ind->dims[k] > x->dims[k])
            return gf_kernel_error(a, GF_ERR_INVALID, "indices dimension %d is %" PRId64
                                   ", larger than data's %" PRId64, k, ind->dims[k], x->dims[k]);
    return gf_check_indices(a, ind, x->dims[*ax], *ax);
}

/* Walks the elements of `ind`: data element offset of each. */
struct elem_walk {
    const struct gf_tview *ind;
    int axis, rank;
    int64_t dstride[GF_MAX_RANK], dim;
    int64_t idx[GF_MAX_RANK];
};

static void walk_init(struct elem_walk *w, const struct gf_tview *x, const struct gf_tview *ind,
                      int axis, size_t start)
{
    w->ind = ind;
    w->axis = axis;
    w->rank = ind->rank;
    w->dim = x->dims[axis];
    strides_of(x, w->dstride);
    for (int k = w->rank - 1; k >= 0; k--) {
        w->idx[k] = (int64_t)(start % (size_t)ind->dims[k]);
        start /= (size_t)ind->dims[k];
    }
}

/* Offset of indices element i (the walk's current position), then steps. */
static int64_t walk_next(struct elem_walk *w, size_t i)
{
    int64_t v = ival(w->ind, i), off = 0;
    for (int k = 0; k < w->rank; k++)
        off += (k == w->axis ? (v < 0 ? v + w->dim : v) : w->idx[k]) * w->dstride[k];
    for (int k = w->rank - 1; k >= 0 && ++w->idx[k] == w->ind->dims[k]; k--)
        w->idx[k] = 0;
    return off;
}

struct gather_elems_job {
    const struct gf_kernel_args *a;
    int axis;
};

static void gather_elems_range(void *ctx, size_t begin, size_t end)
{
    const struct gather_elems_job *j = ctx;
    const struct gf_tview *x = &j->a->in[0];
    size_t es = gf_dtype_size(x->dtype);
    struct elem_walk w;
    walk_init(&w, x, &j->a->in[1], j->axis, begin);
    for (size_t i = begin; i < end; i++)
        copy_elem((char *)j->a->out[0].data + i * es,
                  (const char *)x->data + (size_t)walk_next(&w, i) * es, es);
}

static enum gf_status run_gather_elements(const struct gf_kernel_args *a)
{
    enum gf_status st = gf_require_inputs(a, 2);
    int ax;
    if (st || (st = gf_check_out_dims(a, 0, a->in[1].rank, a->in[1].dims)) ||
        (st = check_elements(a, &ax)))
        return st;
    struct gather_elems_job j = {a, ax};
    gf_parallel_for(a->n_threads, a->in[1].nelem, GRAIN, gather_elems_range, &j);
    return GF_OK;
}

/* ---- Scatter reductions: typed combine loops ----------------------------------------- */

enum scatter_red { SR_NONE, SR_ADD, SR_MUL, SR_MAX, SR_MIN, SR_BAD };

static enum scatter_red reduction_of(const struct gf_node *n)
{
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    const char *s = gf_node_attr_string(n, "reduction", "none");
    for (int i = 0; i < SR_BAD; i++)
        if (strcmp(s, names[i]) == 0)
            return (enum scatter_red)i;
    return SR_BAD;
}

/* dst[i] = dst[i] (op) src[i] for n elements (unaligned memory). */
typedef void (*combine_fn)(enum scatter_red r, char *dst, const char *src, size_t n);

/* Integers: add and mul wrap (computed unsigned: signed overflow is UB). */
#define COMBINE_INT(NAME, T)                                                                  \
    static void NAME(enum scatter_red r, char *dst, const char *src, size_t n)                 \
    {                                                                                         \
        for (size_t i = 0; i < n; i++) {                                                      \
            T x, y, z;                                                                        \
            memcpy(&x, dst + i * sizeof(T), sizeof(T));                                       \
            memcpy(&y, src + i * sizeof(T), sizeof(T));                                       \
            z = r == SR_ADD   ? (T)((uint64_t)x + (uint64_t)y)                               \
                : r == SR_MUL ? (T)((uint64_t)x * (uint64_t)y)                               \
                : r == SR_MAX ? (x > y ? x : y)                                              \
                               : (x < y ? x : y);                                             \
            memcpy(dst + i * sizeof(T), &z, sizeof(T));                                       \
        }                                                                                     \
    }

/* Floating point in compute type C (storage S); max/min propagate NaN. */
#define COMBINE_REAL(NAME, S, C, TO_C, FROM_C)                                                \
    static void NAME(enum scatter_red r, char *dst, const char *src, size_t n)                 \
    {                                                                                         \
        for (size_t i = 0; i < n; i++) {                                                      \
            S xs, ys;                                                                         \
            memcpy(&xs, dst + i * sizeof(S), sizeof(S));                                      \
            memcpy(&ys, src + i * sizeof(S), sizeof(S));                                      \
            C x = TO_C(xs), y = TO_C(ys);                                                     \
            C z = r == SR_ADD   ? x + y                                                      \
                  : r == SR_MUL ? x * y                                                      \
                  : r == SR_MAX ? (isnan(x) || x > y ? x : y)                                \
                                 : (isnan(x) || x < y ? x : y);                               \
            S zs = FROM_C(z);                                                                 \
            memcpy(dst + i * sizeof(S), &zs, sizeof(S));                                      \
        }                                                                                     \
    }

#define SAME(x) (x)
COMBINE_INT(combine_i8, int8_t)
COMBINE_INT(combine_i16, int16_t)
COMBINE_INT(combine_i32, int32_t)
COMBINE_INT(combine_i64, int64_t)
COMBINE_INT(combine_u8, uint8_t)
COMBINE_INT(combine_u16, uint16_t)
COMBINE_INT(combine_u32, uint32_t)
COMBINE_INT(combine_u64, uint64_t)
COMBINE_REAL(combine_f32, float, float, SAME, SAME)
COMBINE_REAL(combine_f64, double, double, SAME, SAME)
COMBINE_REAL(combine_f16, uint16_t, float, gf_half_to_float, gf_float_to_half)
COMBINE_REAL(combine_bf16, uint16_t, float, gf_bf16_to_float, gf_float_to_bf16)

/* bool: add and max are "or", mul and min are "and". */
static void combine_bool(enum scatter_red r, char *dst, const char *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = r == SR_ADD || r == SR_MAX ? (dst[i] || src[i]) : (dst[i] && src[i]);
}

static combine_fn combine_for(enum gf_dtype t)
{
    switch (t) {
    case GF_INT8: return combine_i8;
    case GF_INT16: return combine_i16;
    case GF_INT32: return combine_i32;
    case GF_INT64: return combine_i64;
    case GF_UINT8: return combine_u8;
    case GF_UINT16: return combine_u16;
    case GF_UINT32: return combine_u32;
    case GF_UINT64: return combine_u64;
    case GF_FLOAT: return combine_f32;
    case GF_DOUBLE: return combine_f64;
    case GF_FLOAT16: return combine_f16;
    case GF_BFLOAT16: return combine_bf16;
    case GF_BOOL: return combine_bool;
    default: return NULL;
    }
}

static bool sup_scatter(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    enum scatter_red r = reduction_of(n);
    return sup_move(n, in, n_in) && r != SR_BAD && (r == SR_NONE || combine_for(in[0].dtype));
}

/* Writes n updates at dst: a copy, or the node's reduction. */
static void scatter_put(enum scatter_red r, combine_fn f, char *dst, const char *src, size_t n,
                        size_t es)
{
    if (r == SR_NONE)
        memcpy(dst, src, n * es);
    else
        f(r, dst, src, n);
}

/* Common start of the scatters: updates typed like data, output = data. */
static enum gf_status scatter_begin(const struct gf_kernel_args *a, enum scatter_red *r,
                                    combine_fn *f)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_status st = gf_require_inputs(a, 3);
    if (st || (st = gf_check_dtype(a, "updates", a->in[2].dtype, x->dtype)) ||
        (st = gf_check_out_dims(a, 0, x->rank, x->dims)) ||
        (st = gf_check_dtype(a, "output 0", a->out[0].dtype, x->dtype)))
        return st;
    *r = reduction_of(a->node);
    *f = combine_for(x->dtype);
    if (*r == SR_BAD || (*r != SR_NONE && !*f))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "reduction '%s' on %s",
                               gf_node_attr_string(a->node, "reduction", ""),
                               gf_dtype_name(x->dtype));
    return GF_OK;
}

static enum gf_status run_scatter_elements(const struct gf_kernel_args *a)
{
    enum scatter_red r;
    combine_fn f;
    int ax;
    enum gf_status st = scatter_begin(a, &r, &f);
    if (st || (st = check_elements(a, &ax)))
        return st;
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1], *upd = &a->in[2];
    if (!fu_same_shape(upd, ind->rank, ind->dims))
        return gf_kernel_error(a, GF_ERR_INVALID, "updates have shape %s, indices %s",
                               FU_SHAPE(upd), FU_SHAPE(ind));
    size_t es = gf_dtype_size(x->dtype);
    copy_bytes(a, a->out[0].data, x->data, gf_tview_bytes(x));
    /* sequential: repeated indices combine in order */
    struct elem_walk w;
    walk_init(&w, x, ind, ax, 0);
    for (size_t i = 0; i < ind->nelem; i++)
        scatter_put(r, f, (char *)a->out[0].data + (size_t)walk_next(&w, i) * es,
                    (const char *)upd->data + i * es, 1, es);
    return GF_OK;
}

/* ---- GatherND and ScatterND ------------------------------------------------------ */

/* A plan (kernels/layout_checks.c) and the data strides. */
struct nd_map {
    const struct gf_tview *x, *ind;
    struct gf_nd_plan p;
    int64_t dstride[GF_MAX_RANK];
};

static void nd_map_init(const struct gf_kernel_args *a, struct nd_map *m)
{
    m->x = &a->in[0];
    m->ind = &a->in[1];
    strides_of(m->x, m->dstride);
}

/* Data element offset of tuple t (indices already checked). */
static size_t nd_offset(const struct nd_map *m, size_t t)
{
    const struct gf_nd_plan *p = &m->p;
    size_t off = p->per_batch ? t / p->per_batch * p->batch : 0;
    for (int j = 0; j < p->k; j++) {
        int64_t v = ival(m->ind, t * (size_t)p->k + (size_t)j), d = m->x->dims[p->b + j];
        off += (size_t)((v < 0 ? v + d : v) * m->dstride[p->b + j]);
    }
    return off;
}

struct gather_nd_job {
    const struct nd_map *m;
    char *dst;
};

static void gather_nd_range(void *ctx, size_t begin, size_t end)
{
    const struct gather_nd_job *j = ctx;
    size_t es = gf_dtype_size(j->m->x->dtype), len = j->m->p.slice * es;
    for (size_t t = begin; t < end; t++)
        memcpy(j->dst + t * len, (const char *)j->m->x->data + nd_offset(j->m, t) * es, len);
}

static enum gf_status run_gather_nd(const struct gf_kernel_args *a)
{
    struct nd_map m;
    enum gf_status st = gf_gather_nd_plan(a, &m.p);
    if (st)
        return st;
    nd_map_init(a, &m);
    struct gather_nd_job j = {&m, a->out[0].data};
    if (m.p.slice)
        gf_parallel_for(a->n_threads, m.p.tuples, max_sz(1, GRAIN / m.p.slice), gather_nd_range,
                        &j);
    return GF_OK;
}

static enum gf_status run_scatter_nd(const struct gf_kernel_args *a)
{
    enum scatter_red r;
    combine_fn f;
    struct nd_map m;
    enum gf_status st = scatter_begin(a, &r, &f);
    if (st || (st = gf_nd_plan(a, 0, &m.p)))
        return st;
    nd_map_init(a, &m);
    const struct gf_tview *x = &a->in[0], *ind = &a->in[1], *upd = &a->in[2];
    /* updates: indices dims but the last, then the slice dims */
    int q = ind->rank, n = q - 1 + x->rank - m.p.k;
    bool same = upd->rank == n;
    for (int k = 0; same && k < n; k++)
        same = upd->dims[k] == (k < q - 1 ? ind->dims[k] : x->dims[m.p.k + k - (q - 1)]);
    if (!same)
        return gf_kernel_error(a, GF_ERR_INVALID, "updates have shape %s; indices and data "
                               "need rank %d", FU_SHAPE(upd), n);
    size_t es = gf_dtype_size(x->dtype), tuples = gf_dims_prod(ind->dims, 0, q - 1);
    copy_bytes(a, a->out[0].data, x->data, gf_tview_bytes(x));
    /* sequential: repeated tuples combine in order */
    for (size_t t = 0; t < tuples && m.p.slice; t++)
        scatter_put(r, f, (char *)a->out[0].data + nd_offset(&m, t) * es,
                    (const char *)upd->data + t * m.p.slice * es, m.p.slice, es);
    return GF_OK;
}

/* ---- OneHot ---------------------------------------------------------------------- */

static bool sup_one_hot(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 3 && is_movable(in[0].dtype) && is_movable(in[1].dtype) &&
           is_movable(in[2].dtype);
}

/* Index i as an integer (non-integer types are truncated, as cast to
 * int64); false when it is not finite or beyond int64. */
static bool one_hot_index(const struct gf_tview *t, size_t i, int64_t *v)
{
    enum gf_dtype d = t->dtype;
    if (d != GF_FLOAT && d != GF_DOUBLE && d != GF_FLOAT16 && d != GF_BFLOAT16) {
        *v = ival(t, i);
        return true;
    }
    double f = fval(t, i);
    if (!(f > -9.2e18 && f < 9.2e18))
        return false;
    *v = (int64_t)f;
    return true;
}

static enum gf_status run_one_hot(const struct gf_kernel_args *a)
{
    const struct gf_tview *ind = &a->in[0], *depth = &a->in[1], *vals = &a->in[2];
    enum gf_status st = gf_require_inputs(a, 3);
    if (st)
        return st;
    if (depth->nelem != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "depth must hold one element, not %zu",
                               depth->nelem);
    double dv = fval(depth, 0);
    if (!(dv >= 0 && dv < 4e18))
        return gf_kernel_error(a, GF_ERR_INVALID, "depth %g must be a non-negative integer", dv);
    int64_t D = (int64_t)dv;
    if (vals->nelem != 2)
        return gf_kernel_error(a, GF_ERR_INVALID, "values must hold [off, on], not %zu elements",
                               vals->nelem);
    int R = ind->rank + 1, ax;
    if (R > GF_MAX_RANK)
        return gf_kernel_error(a, GF_ERR_INVALID, "output rank %d is over %d", R, GF_MAX_RANK);
    if ((st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", -1), R, &ax)))
        return st;
    /* out: [outer, D, inner], indices: [outer, inner] */
    int64_t dims[GF_MAX_RANK];
    memcpy(dims, ind->dims, (size_t)ax * sizeof(int64_t));
    dims[ax] = D;
    memcpy(dims + ax + 1, ind->dims + ax, (size_t)(ind->rank - ax) * sizeof(int64_t));
    if ((st = gf_check_out_dims(a, 0, R, dims)) ||
        (st = gf_check_dtype(a, "output 0", a->out[0].dtype, vals->dtype)))
        return st;
    size_t es = gf_dtype_size(vals->dtype), inner = gf_dims_prod(ind->dims, ax, ind->rank);
    const char *off = vals->data, *on = off + es;
    char *out = a->out[0].data;
    fill_par(a, out, off, es, a->out[0].nelem);
    /* per the spec, indices outside [-depth, depth-1] give an all-off row */
    for (size_t i = 0; i < ind->nelem; i++) {
        int64_t v;
        if (!one_hot_index(ind, i, &v) || v < -D || v >= D)
            continue;
        v = v < 0 ? v + D : v;
        size_t o = i / inner, j = i % inner;
        copy_elem(out + ((o * (size_t)D + (size_t)v) * inner + j) * es, on, es);
    }
    return GF_OK;
}

/* ---- the table ------------------------------------------------------------------- */

#define KERNEL(OP, NAME, SUPPORTS, WORKSPACE)                                               \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "cpu_" #NAME,       \
     .supports = SUPPORTS, .workspace = WORKSPACE, .run = run_##NAME}
#define VIEW(OP, NAME)                                                                      \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "cpu_" #NAME,       \
     .supports = sup_move, .run = run_view}

static const struct gf_kernel kernels[] = {
    KERNEL(CONSTANT, constant, sup_constant, NULL),
    KERNEL(CONSTANT_OF_SHAPE, constant_of_shape, sup_constant_of_shape, NULL),
    KERNEL(SHAPE, shape, NULL, NULL),
    KERNEL(SIZE, size, NULL, NULL),
    KERNEL(RANGE, range, sup_range, NULL),
    KERNEL(TRANSPOSE, transpose, sup_move, NULL),
    VIEW(RESHAPE, reshape),
    VIEW(FLATTEN, flatten),
    VIEW(SQUEEZE, squeeze),
    VIEW(UNSQUEEZE, unsqueeze),
    KERNEL(CONCAT, concat, sup_move, NULL),
    KERNEL(SPLIT, split, sup_move, NULL),
    KERNEL(SLICE, slice, sup_move, NULL),
    KERNEL(GATHER, gather, sup_move, remap_ws),
    KERNEL(GATHER_ELEMENTS, gather_elements, sup_move, NULL),
    KERNEL(GATHER_ND, gather_nd, sup_move, NULL),
    KERNEL(SCATTER_ND, scatter_nd, sup_scatter, NULL),
    KERNEL(SCATTER_ELEMENTS, scatter_elements, sup_scatter, NULL),
    KERNEL(EXPAND, expand, sup_move, NULL),
    KERNEL(TILE, tile, sup_move, remap_ws),
    KERNEL(PAD, pad, sup_pad, remap_ws),
    KERNEL(TRILU, trilu, sup_move, NULL),
    KERNEL(ONE_HOT, one_hot, sup_one_hot, NULL),
};

const struct gf_kernel_table gf_cpu_layout_table = {kernels, sizeof(kernels) / sizeof(kernels[0])};

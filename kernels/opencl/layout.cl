/*
 * Layout kernels (layout.c): strided copies (Transpose, Slice, Expand,
 * Split, Concat), a tiled transpose, Pad, Gather, GatherND, GatherGrad and
 * SliceGrad.
 *
 * Data movement is by element size: kernels named _1, _2, _4, _8 move
 * uchar / ushort / uint / ulong.  N-d kernels take the shape right-aligned
 * in `dims` (rank axes used) and element strides per operand; indices are
 * int (the host declines tensors of 2^31 elements or more).  GatherGrad
 * adds: its dY and dX are store_t (storage.cl: float, half or bfloat16),
 * summed in float.
 *
 * Options: TS (tile edge, default 32) and ROWS (work-group rows, default 8)
 * for the tiled transpose.
 */
#ifndef TS
#define TS 32
#endif
#ifndef ROWS
#define ROWS 8
#endif

#define FOR_SIZES(X) X(1, uchar) X(2, ushort) X(4, uint) X(8, ulong)

/* y[ybase + offset in sy] = x[xbase + offset in sx] for each of n
 * elements of the shape dims. */
#define DEF_COPY_ND(S, T)                                                          \
    __kernel void copy_nd_##S(__global const T *x, int xbase, __global T *y,      \
                              int ybase, int n, int rank, int8 dims_v, int8 sx_v, \
                              int8 sy_v)                                          \
    {                                                                              \
        int dims[8], sx[8], sy[8];                                                 \
        vstore8(dims_v, 0, dims);                                                  \
        vstore8(sx_v, 0, sx);                                                      \
        vstore8(sy_v, 0, sy);                                                      \
        for (int i = get_global_id(0); i < n; i += get_global_size(0)) {           \
            int r = i, ox = xbase, oy = ybase;                                     \
            for (int d = 7; d >= 8 - rank; d--) {                                  \
                int c = r % dims[d];                                               \
                r /= dims[d];                                                      \
                ox += c * sx[d];                                                   \
                oy += c * sy[d];                                                   \
            }                                                                      \
            y[oy] = x[ox];                                                         \
        }                                                                          \
    }
FOR_SIZES(DEF_COPY_ND)

/* Pad: y of shape dims from x (strides sx); per axis the kept part of x
 * starts at element crop, is keep long, and lands at lead in y.  Outside
 * it mode 0 writes fill, 1 reflects, 2 repeats the edge, 3 wraps (the
 * CPU's pad_src, periodic as numpy for pads larger than the axis). */
#define DEF_PAD(S, T)                                                              \
    __kernel void pad_nd_##S(__global const T *x, __global T *y, int n, int rank, \
                             int8 dims_v, int8 lead_v, int8 crop_v, int8 keep_v,  \
                             int8 sx_v, int mode, T fill)                         \
    {                                                                              \
        int dims[8], lead[8], crop[8], keep[8], sx[8];                             \
        vstore8(dims_v, 0, dims);                                                  \
        vstore8(lead_v, 0, lead);                                                  \
        vstore8(crop_v, 0, crop);                                                  \
        vstore8(keep_v, 0, keep);                                                  \
        vstore8(sx_v, 0, sx);                                                      \
        for (int i = get_global_id(0); i < n; i += get_global_size(0)) {           \
            int r = i, ox = 0, out = 0;                                            \
            for (int d = 7; d >= 8 - rank && !out; d--) {                          \
                int c = r % dims[d] - lead[d], k = keep[d], s = c;                 \
                r /= dims[d];                                                      \
                if (c < 0 || c >= k) {                                             \
                    int p = 2 * (k - 1), m;                                        \
                    if (mode == 0)                                                 \
                        out = 1;                                                   \
                    else if (mode == 2)                                            \
                        s = c < 0 ? 0 : k - 1;                                     \
                    else if (mode == 3)                                            \
                        s = (c % k + k) % k;                                       \
                    else if (k == 1)                                               \
                        s = 0;                                                     \
                    else {                                                         \
                        m = (c % p + p) % p;                                       \
                        s = m < k ? m : p - m;                                     \
                    }                                                              \
                }                                                                  \
                ox += (crop[d] + s) * sx[d];                                       \
            }                                                                      \
            y[i] = out ? fill : x[ox];                                             \
        }                                                                          \
    }
FOR_SIZES(DEF_PAD)

/* GatherND: y[t, s] = x[off[t] + s], off (one per index tuple, checked
 * on the host) in elements, s < slice. */
#define DEF_GATHER_ND(S, T)                                                        \
    __kernel void gather_nd_##S(__global const T *x, __global const int *off,     \
                                __global T *y, int slice, int n)                  \
    {                                                                              \
        for (int o = get_global_id(0); o < n; o += get_global_size(0))             \
            y[o] = x[off[o / slice] + o % slice];                                  \
    }
FOR_SIZES(DEF_GATHER_ND)

/* y[b] = transpose of x[b]: x is [B, Q, P], y is [B, P, Q].  A work-group
 * moves one TS x TS tile through local memory (padded against bank
 * conflicts): group (i, j, b) reads x rows q0.. and columns p0.. coalesced
 * and writes y rows p0.. and columns q0.. coalesced. */
#define DEF_TRANSPOSE(S, T)                                                        \
    __kernel void transpose_tile_##S(__global const T *x, __global T *y, int P,   \
                                     int Q)                                        \
    {                                                                              \
        __local T tile[TS][TS + 1];                                                \
        int p0 = get_group_id(0) * TS, q0 = get_group_id(1) * TS;                  \
        int lx = get_local_id(0), ly = get_local_id(1);                            \
        int base = get_group_id(2) * P * Q;                                        \
        for (int k = ly; k < TS; k += ROWS) {                                      \
            int q = q0 + k, p = p0 + lx;                                           \
            if (q < Q && p < P)                                                    \
                tile[k][lx] = x[base + q * P + p];                                 \
        }                                                                          \
        barrier(CLK_LOCAL_MEM_FENCE);                                              \
        for (int k = ly; k < TS; k += ROWS) {                                      \
            int p = p0 + k, q = q0 + lx;                                           \
            if (p < P && q < Q)                                                    \
                y[base + p * Q + q] = tile[lx][k];                                 \
        }                                                                          \
    }
FOR_SIZES(DEF_TRANSPOSE)

/* Gather along an axis: x [pre, na, post], idx [ni], y [pre, ni, post].
 * A bad index writes 0 and, when `bad` is given, the smallest position of
 * a bad index into *bad (the host reports it). */
#define DEF_GATHER(S, T, I, IT)                                                    \
    __kernel void gather_##S##_##I(__global const T *x, __global const IT *idx,   \
                                   __global T *y, __global int *bad, int ni,      \
                                   int na, int post, int n)                       \
    {                                                                              \
        for (int o = get_global_id(0); o < n; o += get_global_size(0)) {           \
            int q = o % post, t = o / post, i = t % ni, p = t / ni;                \
            long k = idx[i];                                                       \
            k = k < 0 ? k + na : k;                                                \
            if (k < 0 || k >= na) {                                                \
                y[o] = 0;                                                          \
                if (bad)                                                           \
                    atomic_min(bad, i);                                            \
            } else {                                                               \
                y[o] = x[(p * na + (int)k) * post + q];                            \
            }                                                                      \
        }                                                                          \
    }
#define DEF_GATHERS(S, T) DEF_GATHER(S, T, i64, long) DEF_GATHER(S, T, i32, int)
FOR_SIZES(DEF_GATHERS)

/* GatherGrad: y [pre, na, post] = sum over i with idx[i] = k of
 * g[p, i, q], added in increasing i (the CPU's order, so the sums agree
 * bit for bit; no atomics, so runs repeat exactly).
 * csr: the i of each row k are order[start[k] .. start[k + 1]), with
 * start = csr[0 .. na], order = csr[na + 1 ..], built on the host. */
__kernel void gather_grad_csr(__global const store_t *g, __global const int *csr,
                              __global store_t *y, int ni, int na, int post, int n)
{
    __global const int *order = csr + na + 1;
    for (int o = get_global_id(0); o < n; o += get_global_size(0)) {
        int q = o % post, t = o / post, k = t % na, p = t / na;
        float s = 0.0f;
        for (int j = csr[k]; j < csr[k + 1]; j++)
            s += LD(g, (p * ni + order[j]) * post + q);
        ST(y, o, s);
    }
}

/* The same without a host copy of the indices: each output scans them all;
 * a bad index is reported through *bad as in gather. */
#define DEF_GATHER_GRAD_SCAN(I, IT)                                                \
    __kernel void gather_grad_scan_##I(__global const store_t *g,                 \
                                       __global const IT *idx,                    \
                                       __global store_t *y, __global int *bad,    \
                                       int ni, int na, int post, int n)           \
    {                                                                              \
        for (int o = get_global_id(0); o < n; o += get_global_size(0)) {           \
            int q = o % post, t = o / post, k = t % na, p = t / na;                \
            float s = 0.0f;                                                        \
            for (int i = 0; i < ni; i++) {                                         \
                long v = idx[i];                                                   \
                v = v < 0 ? v + na : v;                                            \
                if (v == k)                                                        \
                    s += LD(g, (p * ni + i) * post + q);                           \
                else if ((v < 0 || v >= na) && o == 0)                             \
                    atomic_min(bad, i);                                            \
            }                                                                      \
            ST(y, o, s);                                                           \
        }                                                                          \
    }
DEF_GATHER_GRAD_SCAN(i64, long)
DEF_GATHER_GRAD_SCAN(i32, int)

/* SliceGrad in one pass over y (the data's shape): an element on the
 * slice's grid (per axis: y index = first + q * step, 0 <= q < gdims)
 * takes g's element q, the others 0. */
#define DEF_SLICE_GRAD(S, T)                                                       \
    __kernel void slice_grad_##S(__global const T *g, __global T *y, int n,       \
                                 int rank, int8 ydims_v, int8 first_v,            \
                                 int8 step_v, int8 gdims_v)                       \
    {                                                                              \
        int yd[8], first[8], step[8], gd[8];                                       \
        vstore8(ydims_v, 0, yd);                                                   \
        vstore8(first_v, 0, first);                                                \
        vstore8(step_v, 0, step);                                                  \
        vstore8(gdims_v, 0, gd);                                                   \
        for (int o = get_global_id(0); o < n; o += get_global_size(0)) {           \
            int r = o, gi = 0, gs = 1;                                             \
            bool on = true;                                                        \
            for (int d = 7; d >= 8 - rank; d--) {                                  \
                int c = r % yd[d], t = c - first[d], q = t / step[d];              \
                r /= yd[d];                                                        \
                on = on && q * step[d] == t && q >= 0 && q < gd[d];                \
                gi += q * gs;                                                      \
                gs *= gd[d];                                                       \
            }                                                                      \
            y[o] = on ? g[gi] : (T)0;                                              \
        }                                                                          \
    }
FOR_SIZES(DEF_SLICE_GRAD)

// CUDA band attention: fused forward, and a backward in two kernels (dQ over query
// tiles, dK/dV over key tiles) so that no gradient needs atomics; with the relative-
// position term, a third backward kernel sums the table gradient over queries.
//
// Same work items as the CPU path (band_index.h): one (batch, head, residue) triple is
// an undilated window on a strided subsequence. A thread block handles kTile queries
// (or keys) of one item; four threads share a row, each holding every fourth column of
// the head dimension. Math in float (double for double inputs).
//
// Position term: for a query tile [m0, m0 + kTile) and a key tile [j0, j0 + kTile) the
// table columns j - m + window span 2 kTile - 1 values from j0 - m0 - (kTile - 1) +
// window; they are staged next to the key tile, row (j - j0) - (m - m0) + kTile - 1.
//
// Deliberately free of torch headers, so `nvcc -c` checks it in seconds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "band_index.h"
#include "band_kernels.h"

namespace lfs {
namespace {

constexpr int kTile = 32;  // queries (or keys) per block
constexpr int kLanes = 4;  // threads per row
constexpr int kThreads = kTile * kLanes;
constexpr int kMaxHeadDim = 128;
constexpr int kPerLane = kMaxHeadDim / kLanes;
constexpr int kMaxHeads = 64;
constexpr int kTableRows = 2 * kTile - 1;  // table columns one (query tile, key tile) pair reaches
constexpr int64_t kTableBlocks = 512;      // blocks the table-gradient kernel aims for

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  return static_cast<float>(x);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename In, typename Acc>
__device__ __forceinline__ Acc load_acc(const In* p) {
  return Acc(to_float(*p));
}
template <>
__device__ __forceinline__ double load_acc<double, double>(const double* p) {
  return *p;
}

struct Geometry {  // passed by value: the per-head tables live in the kernel parameters
  int64_t batch, heads, seq_len, head_dim, window;
  bool causal, relative;
  double scale;
  int64_t dilation[kMaxHeads];
  int64_t head_offset[kMaxHeads + 1];
  const uint8_t* key_ok;
  int64_t blocks_per_item;  // tiles of the longest subsequence
  int64_t table_width;      // W of the position table (band_width(window, causal))
};

// The input tensors of a call, in the input dtype.
template <typename In>
struct Operands {
  const In *q, *k, *v, *pos_query, *table;
  Strides q_s, k_s, v_s, pos_s;
};

using ItemPos = ItemGeometry;

// This block's work item and first row (query or key); false when it has none.
__device__ __forceinline__ bool block_start(const Geometry& g, ItemPos& p, int64_t& first) {
  const int64_t item = blockIdx.x / g.blocks_per_item;
  p = item_geometry(item, g.dilation, g.head_offset, g.heads, g.seq_len, g.window, g.causal);
  first = (blockIdx.x % g.blocks_per_item) * kTile;
  return first < p.n;
}

__device__ __forceinline__ int64_t offset(const Strides& s, const ItemPos& p, int64_t m) {
  return p.batch * s.b + p.head * s.h + p.t(m) * s.t;
}

__device__ __forceinline__ bool key_allowed(const Geometry& g, const ItemPos& p, int64_t m, int64_t j) {
  return j >= 0 && j < p.n && in_band(m, j, p.window, g.causal) &&
         (g.key_ok == nullptr || g.key_ok[p.batch * g.seq_len + p.t(j)]);
}

// Rows [m0, m0 + rows) of a (B, H, T, D) tensor into shared memory as Acc, row stride ld;
// rows outside [0, n) are zero.
template <typename In, typename Acc>
__device__ void load_rows(Acc* dst, int ld, const In* src, const Strides& s, const ItemPos& p, int64_t m0, int rows,
                          int dim, Acc mul) {
  for (int idx = threadIdx.x; idx < rows * dim; idx += blockDim.x) {
    const int row = idx / dim, col = idx % dim;
    const int64_t m = m0 + row;
    dst[row * ld + col] = (m >= 0 && m < p.n) ? load_acc<In, Acc>(src + offset(s, p, m) + col) * mul : Acc(0);
  }
}

template <typename In, typename Acc>
__device__ void load_tile(Acc* dst, int ld, const In* src, const Strides& s, const ItemPos& p, int64_t m0, int dim,
                          Acc mul) {
  load_rows<In, Acc>(dst, ld, src, s, p, m0, kTile, dim, mul);
}

// Table rows [c0, c0 + rows) of `head`, zero outside [0, W).
template <typename In, typename Acc>
__device__ void load_table(Acc* dst, int ld, const In* table, const Geometry& g, int64_t head, int64_t c0, int rows) {
  const int dim = static_cast<int>(g.head_dim);
  for (int idx = threadIdx.x; idx < rows * dim; idx += blockDim.x) {
    const int row = idx / dim, col = idx % dim;
    const int64_t c = c0 + row;
    dst[row * ld + col] =
        (c >= 0 && c < g.table_width) ? load_acc<In, Acc>(table + (head * g.table_width + c) * dim + col) : Acc(0);
  }
}

// First table column staged for a (query tile m0, key tile j0) pair.
__device__ __forceinline__ int64_t table_base(const Geometry& g, int64_t m0, int64_t j0) {
  return j0 - m0 - (kTile - 1) + g.window;
}

// Staged table row of query m0 + qi and key j0 + kj.
__device__ __forceinline__ int table_row(int qi, int kj) { return kj - qi + kTile - 1; }

template <typename Acc>
__device__ __forceinline__ Acc dot(const Acc* a, const Acc* b, int dim) {
  Acc s = Acc(0);
  for (int e = 0; e < dim; ++e) s += a[e] * b[e];
  return s;
}

// Sum over the kLanes threads of a row (adjacent lanes of one warp).
template <typename Acc>
__device__ __forceinline__ Acc row_sum(Acc x) {
  for (int o = kLanes / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o, kLanes);
  return x;
}

template <typename Acc>
__device__ __forceinline__ Acc row_max(Acc x) {
  for (int o = kLanes / 2; o > 0; o /= 2) x = max(x, __shfl_xor_sync(0xffffffffu, x, o, kLanes));
  return x;
}

// Shared memory of one block: `tiles` kTile x ld tiles, `scores` kTile x (kTile + 1)
// score tiles, plus the position query tile and table rows when the term is on.
template <typename Acc>
size_t smem_bytes(int64_t head_dim, int tiles, int scores, bool relative) {
  const size_t ld = head_dim + 1;
  size_t n = tiles * kTile * ld + scores * kTile * (kTile + 1);
  if (relative) n += (kTile + kTableRows) * ld;
  return sizeof(Acc) * n;
}

// ---------------------------------------------------------------------------- forward

template <typename In, typename Acc>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Geometry g, Operands<In> x, Acc* out, Strides os, Acc* lse, Strides ls) {
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int dim = static_cast<int>(g.head_dim), ld = dim + 1;
  Acc* sq = smem;                       // kTile x ld, pre-scaled
  Acc* sk = sq + kTile * ld;            // kTile x ld
  Acc* sv = sk + kTile * ld;            // kTile x ld
  Acc* sp = sv + kTile * ld;            // kTile x (kTile + 1) probabilities
  Acc* spq = sp + kTile * (kTile + 1);  // kTile x ld, pre-scaled position queries
  Acc* st = spq + kTile * ld;           // kTableRows x ld table rows

  ItemPos p;
  int64_t m0;
  if (!block_start(g, p, m0)) return;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t m = m0 + row;

  load_tile<In, Acc>(sq, ld, x.q, x.q_s, p, m0, dim, Acc(g.scale));
  if (g.relative) load_tile<In, Acc>(spq, ld, x.pos_query, x.pos_s, p, m0, dim, Acc(g.scale));
  Acc acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = Acc(0);
  Acc run_max = -INFINITY, run_sum = Acc(0);

  const KeyRange kr = key_range(m0, m0 + kTile < p.n ? m0 + kTile : p.n, p.window, g.causal, p.n);
  for (int64_t j0 = kr.lo; j0 < kr.hi; j0 += kTile) {
    __syncthreads();
    load_tile<In, Acc>(sk, ld, x.k, x.k_s, p, j0, dim, Acc(1));
    load_tile<In, Acc>(sv, ld, x.v, x.v_s, p, j0, dim, Acc(1));
    if (g.relative) load_table<In, Acc>(st, ld, x.table, g, p.head, table_base(g, m0, j0), kTableRows);
    __syncthreads();

    Acc s[kTile / kLanes];
    Acc tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kTile / kLanes; ++c) {
      const int col = lane + c * kLanes;
      Acc score = dot(sq + row * ld, sk + col * ld, dim);
      if (g.relative) score += dot(spq + row * ld, st + table_row(row, col) * ld, dim);
      s[c] = (m < p.n && key_allowed(g, p, m, j0 + col)) ? score : Acc(-INFINITY);
      tile_max = max(tile_max, s[c]);
    }
    const Acc new_max = max(run_max, row_max(tile_max));
    const Acc base = isinf(new_max) ? Acc(0) : new_max;  // nothing seen yet: keep zeros
    const Acc rescale = exp(run_max - base);
    Acc tile_sum = Acc(0);
#pragma unroll
    for (int c = 0; c < kTile / kLanes; ++c) {
      const Acc e = exp(s[c] - base);
      sp[row * (kTile + 1) + lane + c * kLanes] = e;
      tile_sum += e;
    }
    run_sum = run_sum * rescale + row_sum(tile_sum);
    run_max = new_max;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int col = lane + i * kLanes;
      if (col < dim) {
        Acc o = acc[i] * rescale;
        for (int c = 0; c < kTile; ++c) o += sp[row * (kTile + 1) + c] * sv[c * ld + col];
        acc[i] = o;
      }
    }
  }
  if (m >= p.n) return;
  const Acc inv = run_sum > Acc(0) ? Acc(1) / run_sum : Acc(0);
  Acc* o = out + offset(os, p, m);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int col = lane + i * kLanes;
    if (col < dim) o[col] = acc[i] * inv;
  }
  if (lane == 0) lse[offset(ls, p, m)] = run_sum > Acc(0) ? run_max + log(run_sum) : Acc(-INFINITY);
}

// --------------------------------------------------------------------------- backward

// The backward's recomputation for one (query, key) pair from staged rows:
// prob = exp(q.k (+ pq.t) - lse) (q, pq already scaled) and grad = prob * (dout.v - delta).
// pq and t are null without the position term.
template <typename Acc>
__device__ __forceinline__ void pair_backward(const Acc* q, const Acc* dout, const Acc* k, const Acc* v, const Acc* pq,
                                              const Acc* t, int dim, Acc lse, Acc delta, Acc& prob, Acc& grad) {
  Acc score = dot(q, k, dim);
  if (pq != nullptr) score += dot(pq, t, dim);
  prob = exp(score - lse);
  grad = prob * (dot(dout, v, dim) - delta);
}

// dQ for a tile of queries: dQ_i = scale * sum_j P_ij (dP_ij - delta_i) K_j, and with the
// position term d(pos_query)_i = scale * sum_j dS_ij table[j - i + w].
template <typename In, typename Acc>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Geometry g, Operands<In> x, const In* dout, Strides ds, const Acc* lse, const Acc* delta, Strides ss,
              Acc* dq, Strides gs, Acc* dpq, Strides ps) {
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int dim = static_cast<int>(g.head_dim), ld = dim + 1;
  Acc* sq = smem;
  Acc* sdo = sq + kTile * ld;
  Acc* sk = sdo + kTile * ld;
  Acc* sv = sk + kTile * ld;
  Acc* sds = sv + kTile * ld;  // kTile x (kTile + 1)
  Acc* spq = sds + kTile * (kTile + 1);
  Acc* st = spq + kTile * ld;

  ItemPos p;
  int64_t m0;
  if (!block_start(g, p, m0)) return;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t m = m0 + row;
  const bool live = m < p.n;
  const Acc row_lse = live ? lse[offset(ss, p, m)] : Acc(-INFINITY);
  const Acc row_delta = live ? delta[offset(ss, p, m)] : Acc(0);

  load_tile<In, Acc>(sq, ld, x.q, x.q_s, p, m0, dim, Acc(g.scale));
  load_tile<In, Acc>(sdo, ld, dout, ds, p, m0, dim, Acc(1));
  if (g.relative) load_tile<In, Acc>(spq, ld, x.pos_query, x.pos_s, p, m0, dim, Acc(g.scale));
  Acc acc[kPerLane], acc_pq[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = acc_pq[i] = Acc(0);

  const KeyRange kr = key_range(m0, m0 + kTile < p.n ? m0 + kTile : p.n, p.window, g.causal, p.n);
  for (int64_t j0 = kr.lo; j0 < kr.hi; j0 += kTile) {
    __syncthreads();
    load_tile<In, Acc>(sk, ld, x.k, x.k_s, p, j0, dim, Acc(1));
    load_tile<In, Acc>(sv, ld, x.v, x.v_s, p, j0, dim, Acc(1));
    if (g.relative) load_table<In, Acc>(st, ld, x.table, g, p.head, table_base(g, m0, j0), kTableRows);
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTile / kLanes; ++c) {
      const int col = lane + c * kLanes;
      Acc prob = Acc(0), grad = Acc(0);
      if (live && !isinf(row_lse) && key_allowed(g, p, m, j0 + col))
        pair_backward(sq + row * ld, sdo + row * ld, sk + col * ld, sv + col * ld,
                      g.relative ? spq + row * ld : nullptr, g.relative ? st + table_row(row, col) * ld : nullptr, dim,
                      row_lse, row_delta, prob, grad);
      sds[row * (kTile + 1) + col] = grad;
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int col = lane + i * kLanes;
      if (col < dim) {
        Acc a = acc[i], b = acc_pq[i];
        for (int c = 0; c < kTile; ++c) {
          const Acc dsc = sds[row * (kTile + 1) + c];
          a += dsc * sk[c * ld + col];
          if (g.relative) b += dsc * st[table_row(row, c) * ld + col];
        }
        acc[i] = a, acc_pq[i] = b;
      }
    }
  }
  if (!live) return;
  Acc* o = dq + offset(gs, p, m);
  Acc* opq = g.relative ? dpq + offset(ps, p, m) : nullptr;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int col = lane + i * kLanes;
    if (col < dim) {
      o[col] = acc[i] * Acc(g.scale);
      if (opq != nullptr) opq[col] = acc_pq[i] * Acc(g.scale);
    }
  }
}

// dK and dV for a tile of keys, over every query whose band holds them.
template <typename In, typename Acc>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Geometry g, Operands<In> x, const In* dout, Strides ds, const Acc* lse, const Acc* delta, Strides ss,
                Acc* dk, Acc* dv, Strides gs) {
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int dim = static_cast<int>(g.head_dim), ld = dim + 1;
  Acc* sk = smem;
  Acc* sv = sk + kTile * ld;
  Acc* sq = sv + kTile * ld;
  Acc* sdo = sq + kTile * ld;
  Acc* sp = sdo + kTile * ld;           // [query][key] probabilities
  Acc* sds = sp + kTile * (kTile + 1);  // [query][key] score gradients
  Acc* spq = sds + kTile * (kTile + 1);
  Acc* st = spq + kTile * ld;
  __shared__ Acc s_lse[kTile], s_delta[kTile];

  ItemPos p;
  int64_t j0;
  if (!block_start(g, p, j0)) return;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t j = j0 + row;  // this thread's key

  load_tile<In, Acc>(sk, ld, x.k, x.k_s, p, j0, dim, Acc(1));
  load_tile<In, Acc>(sv, ld, x.v, x.v_s, p, j0, dim, Acc(1));
  Acc acc_k[kPerLane], acc_v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc_k[i] = acc_v[i] = Acc(0);

  const KeyRange qr = query_range(j0, j0 + kTile < p.n ? j0 + kTile : p.n, p.window, g.causal, p.n);
  for (int64_t m0 = qr.lo; m0 < qr.hi; m0 += kTile) {
    __syncthreads();
    load_tile<In, Acc>(sq, ld, x.q, x.q_s, p, m0, dim, Acc(g.scale));
    load_tile<In, Acc>(sdo, ld, dout, ds, p, m0, dim, Acc(1));
    if (g.relative) {
      load_tile<In, Acc>(spq, ld, x.pos_query, x.pos_s, p, m0, dim, Acc(g.scale));
      load_table<In, Acc>(st, ld, x.table, g, p.head, table_base(g, m0, j0), kTableRows);
    }
    if (threadIdx.x < kTile) {
      const int64_t m = m0 + threadIdx.x;
      s_lse[threadIdx.x] = m < p.n ? lse[offset(ss, p, m)] : Acc(-INFINITY);
      s_delta[threadIdx.x] = m < p.n ? delta[offset(ss, p, m)] : Acc(0);
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTile / kLanes; ++c) {
      const int qi = lane + c * kLanes;
      const int64_t m = m0 + qi;
      Acc prob = Acc(0), grad = Acc(0);
      if (m < p.n && !isinf(s_lse[qi]) && key_allowed(g, p, m, j))
        pair_backward(sq + qi * ld, sdo + qi * ld, sk + row * ld, sv + row * ld, g.relative ? spq + qi * ld : nullptr,
                      g.relative ? st + table_row(qi, row) * ld : nullptr, dim, s_lse[qi], s_delta[qi], prob, grad);
      sp[qi * (kTile + 1) + row] = prob;
      sds[qi * (kTile + 1) + row] = grad;
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int col = lane + i * kLanes;
      if (col < dim) {
        Acc a = acc_k[i], b = acc_v[i];
        for (int qi = 0; qi < kTile; ++qi) {
          a += sds[qi * (kTile + 1) + row] * sq[qi * ld + col];  // sq is already scaled
          b += sp[qi * (kTile + 1) + row] * sdo[qi * ld + col];
        }
        acc_k[i] = a, acc_v[i] = b;
      }
    }
  }
  if (j >= p.n) return;
  Acc* ok = dk + offset(gs, p, j);
  Acc* ov = dv + offset(gs, p, j);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int col = lane + i * kLanes;
    if (col < dim) ok[col] = acc_k[i], ov[col] = acc_v[i];
  }
}

// The table gradient: dtable[h, c] = scale * sum over queries m of dS(m, m + c - w) pq_m.
// A block owns kTile columns of one head and every chunks-th query tile of that head's
// items; it writes (not adds) its sum to slot `chunk`, and the caller sums the slots.
// Threads of row r hold column c0 + r and split the head dimension, so each dot product
// is a partial sum per lane and a row_sum.
template <typename In, typename Acc>
__global__ void __launch_bounds__(kThreads)
    dtable_kernel(Geometry g, Operands<In> x, const In* dout, Strides ds, const Acc* lse, const Acc* delta, Strides ss,
                  Acc* dtable, int64_t col_tiles, int64_t chunks) {
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int dim = static_cast<int>(g.head_dim), ld = dim + 1;
  Acc* sq = smem;                  // kTile x ld query rows, pre-scaled
  Acc* spq = sq + kTile * ld;      // kTile x ld position queries, pre-scaled
  Acc* sdo = spq + kTile * ld;     // kTile x ld
  Acc* sk = sdo + kTile * ld;      // kTableRows x ld key rows
  Acc* sv = sk + kTableRows * ld;  // kTableRows x ld value rows
  Acc* st = sv + kTableRows * ld;  // kTile x ld table rows of this block's columns
  __shared__ Acc s_lse[kTile], s_delta[kTile];

  const int64_t chunk = blockIdx.x % chunks;
  const int64_t col_tile = (blockIdx.x / chunks) % col_tiles;
  const int64_t head = blockIdx.x / (chunks * col_tiles);
  const int64_t c0 = col_tile * kTile;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t c = c0 + row;
  load_table<In, Acc>(st, ld, x.table, g, head, c0, kTile);

  Acc acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = Acc(0);

  const int64_t d = g.dilation[head];
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t r = 0; r < d; ++r) {
      const int64_t item = b * g.head_offset[g.heads] + g.head_offset[head] + r;
      const ItemPos p = item_geometry(item, g.dilation, g.head_offset, g.heads, g.seq_len, g.window, g.causal);
      for (int64_t m0 = chunk * kTile; m0 < p.n; m0 += chunks * kTile) {
        // Keys m + c - w for the tile's queries and columns: kTableRows rows from jb.
        const int64_t jb = m0 + c0 - g.window;
        __syncthreads();
        load_tile<In, Acc>(sq, ld, x.q, x.q_s, p, m0, dim, Acc(g.scale));
        load_tile<In, Acc>(spq, ld, x.pos_query, x.pos_s, p, m0, dim, Acc(g.scale));
        load_tile<In, Acc>(sdo, ld, dout, ds, p, m0, dim, Acc(1));
        load_rows<In, Acc>(sk, ld, x.k, x.k_s, p, jb, kTableRows, dim, Acc(1));
        load_rows<In, Acc>(sv, ld, x.v, x.v_s, p, jb, kTableRows, dim, Acc(1));
        if (threadIdx.x < kTile) {
          const int64_t m = m0 + threadIdx.x;
          s_lse[threadIdx.x] = m < p.n ? lse[offset(ss, p, m)] : Acc(-INFINITY);
          s_delta[threadIdx.x] = m < p.n ? delta[offset(ss, p, m)] : Acc(0);
        }
        __syncthreads();
        for (int qi = 0; qi < kTile; ++qi) {
          const int64_t m = m0 + qi, j = m + c - g.window;
          const int kj = qi + row;  // staged key row of j
          Acc qk = Acc(0), pt = Acc(0), dv_dot = Acc(0);
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) {
            const int e = lane + i * kLanes;
            if (e < dim) {
              qk += sq[qi * ld + e] * sk[kj * ld + e];
              pt += spq[qi * ld + e] * st[row * ld + e];
              dv_dot += sdo[qi * ld + e] * sv[kj * ld + e];
            }
          }
          // Every lane of the warp takes part in the shuffles; the mask comes after.
          qk = row_sum(qk), pt = row_sum(pt), dv_dot = row_sum(dv_dot);
          const bool valid = m < p.n && c < g.table_width && !isinf(s_lse[qi]) && key_allowed(g, p, m, j);
          if (!valid) continue;
          const Acc grad = exp(qk + pt - s_lse[qi]) * (dv_dot - s_delta[qi]);
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) {
            const int e = lane + i * kLanes;
            if (e < dim) acc[i] += grad * spq[qi * ld + e];  // spq is already scaled
          }
        }
      }
    }
  }
  if (c >= g.table_width) return;
  Acc* o = dtable + ((chunk * g.heads + head) * g.table_width + c) * dim;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + i * kLanes;
    if (e < dim) o[e] = acc[i];
  }
}

// ----------------------------------------------------------------------------- launch

int make_geometry(const BandProblem& p, bool relative, Geometry& g) {
  if (p.heads > kMaxHeads || p.head_dim > kMaxHeadDim) return static_cast<int>(cudaErrorInvalidValue);
  g.batch = p.batch, g.heads = p.heads, g.seq_len = p.seq_len, g.head_dim = p.head_dim;
  g.window = p.window, g.causal = p.causal, g.relative = relative, g.scale = p.scale, g.key_ok = p.key_ok;
  g.table_width = band_width(p.window, p.causal);
  int64_t longest = 0;
  for (int64_t h = 0; h < p.heads; ++h) {
    g.dilation[h] = p.dilation[h];
    const int64_t n = residue_length(p.seq_len, p.dilation[h], 0);
    longest = n > longest ? n : longest;
  }
  for (int64_t h = 0; h <= p.heads; ++h) g.head_offset[h] = p.head_offset[h];
  g.blocks_per_item = (longest + kTile - 1) / kTile;
  return 0;
}

// Tiles of a 128-wide head in double exceed the default 48 KiB of shared memory.
template <typename Kernel>
int allow_smem(Kernel kernel, size_t smem) {
  return static_cast<int>(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}

template <typename In>
Operands<In> operands(const BandInputs& in) {
  return Operands<In>{static_cast<const In*>(in.q),
                      static_cast<const In*>(in.k),
                      static_cast<const In*>(in.v),
                      static_cast<const In*>(in.pos_query),
                      static_cast<const In*>(in.table),
                      in.q_s,
                      in.k_s,
                      in.v_s,
                      in.pos_s};
}

// Column tiles and query-tile chunks of the table-gradient kernel: enough blocks to fill
// the GPU when the table is narrow, one chunk (slot) when it is wide.
void dtable_grid(const BandProblem& p, int64_t& col_tiles, int64_t& chunks) {
  col_tiles = (band_width(p.window, p.causal) + kTile - 1) / kTile;
  const int64_t longest = residue_length(p.seq_len, 1, 0);
  const int64_t query_tiles = (longest + kTile - 1) / kTile;
  const int64_t want = (kTableBlocks + p.heads * col_tiles - 1) / (p.heads * col_tiles);
  chunks = want < 1 ? 1 : (want > query_tiles ? (query_tiles > 0 ? query_tiles : 1) : want);
}

template <typename In, typename Acc>
int forward_typed(const BandProblem& p, const BandInputs& in, const ForwardOutputs& o, cudaStream_t stream) {
  Geometry g;
  if (int err = make_geometry(p, in.relative(), g)) return err;
  const int64_t blocks = p.num_items() * g.blocks_per_item;
  if (blocks == 0) return 0;
  const size_t smem = smem_bytes<Acc>(p.head_dim, 3, 1, g.relative);
  auto kernel = forward_kernel<In, Acc>;
  if (int err = allow_smem(kernel, smem)) return err;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(g, operands<In>(in), static_cast<Acc*>(o.out),
                                                                    o.out_s, static_cast<Acc*>(o.lse), o.lse_s);
  return static_cast<int>(cudaGetLastError());
}

template <typename In, typename Acc>
int backward_typed(const BandProblem& p, const BandInputs& in, const BackwardArgs& a, cudaStream_t stream) {
  Geometry g;
  if (int err = make_geometry(p, in.relative(), g)) return err;
  const int64_t blocks = p.num_items() * g.blocks_per_item;
  if (blocks == 0) return 0;
  const Operands<In> x = operands<In>(in);
  const In* dout = static_cast<const In*>(a.dout);
  const Acc* lse = static_cast<const Acc*>(a.lse);
  const Acc* delta = static_cast<const Acc*>(a.delta);

  auto qk = dq_kernel<In, Acc>;
  const size_t smem_q = smem_bytes<Acc>(p.head_dim, 4, 1, g.relative);
  if (int err = allow_smem(qk, smem_q)) return err;
  qk<<<static_cast<unsigned>(blocks), kThreads, smem_q, stream>>>(g, x, dout, a.dout_s, lse, delta, a.stat_s,
                                                                  static_cast<Acc*>(a.dq), a.grad_s,
                                                                  static_cast<Acc*>(a.dpos_query), a.dpos_s);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return static_cast<int>(err);

  auto kk = dkdv_kernel<In, Acc>;
  const size_t smem_k = smem_bytes<Acc>(p.head_dim, 4, 2, g.relative);
  if (int err = allow_smem(kk, smem_k)) return err;
  kk<<<static_cast<unsigned>(blocks), kThreads, smem_k, stream>>>(
      g, x, dout, a.dout_s, lse, delta, a.stat_s, static_cast<Acc*>(a.dk), static_cast<Acc*>(a.dv), a.grad_s);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess || !g.relative) return static_cast<int>(err);

  int64_t col_tiles, chunks;
  dtable_grid(p, col_tiles, chunks);
  auto tk = dtable_kernel<In, Acc>;
  const size_t smem_t = sizeof(Acc) * (4 * kTile + 2 * kTableRows) * (p.head_dim + 1);
  if (int err = allow_smem(tk, smem_t)) return err;
  tk<<<static_cast<unsigned>(p.heads * col_tiles * chunks), kThreads, smem_t, stream>>>(
      g, x, dout, a.dout_s, lse, delta, a.stat_s, static_cast<Acc*>(a.dtable), col_tiles, chunks);
  return static_cast<int>(cudaGetLastError());
}

bool cuda_reads(DType) { return true; }

int64_t cuda_dtable_slots(const BandProblem& p, const Launch&) {
  int64_t col_tiles, chunks;
  dtable_grid(p, col_tiles, chunks);
  return chunks;
}

// f(Storage{}, Accumulator{}) for the element type t: the only place a DType becomes a type.
template <typename F>
int with_types(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(float{}, float{});
    case DType::f64:
      return f(double{}, double{});
    case DType::f16:
      return f(__half{}, float{});
    case DType::bf16:
      return f(__nv_bfloat16{}, float{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int cuda_forward(const BandProblem& p, DType t, const BandInputs& in, const ForwardOutputs& o, const Launch& l) {
  return with_types(t, [&](auto storage, auto accumulator) {
    return forward_typed<decltype(storage), decltype(accumulator)>(p, in, o, static_cast<cudaStream_t>(l.stream));
  });
}

int cuda_backward(const BandProblem& p, DType t, const BandInputs& in, const BackwardArgs& a, const Launch& l) {
  return with_types(t, [&](auto storage, auto accumulator) {
    return backward_typed<decltype(storage), decltype(accumulator)>(p, in, a, static_cast<cudaStream_t>(l.stream));
  });
}

}  // namespace

const BandKernels kCudaBandKernels{"cuda", cuda_reads, cuda_dtable_slots, cuda_forward, cuda_backward};

}  // namespace lfs

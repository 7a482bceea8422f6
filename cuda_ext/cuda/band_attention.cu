// CUDA band attention: fused forward, and a backward in two kernels (dQ over query
// tiles, dK/dV over key tiles) so that no gradient needs atomics.
//
// Same work items as the CPU path (band_index.h): one (batch, head, residue) triple is
// an undilated window on a strided subsequence. A thread block handles kTile queries
// (or keys) of one item; four threads share a row, each holding every fourth column of
// the head dimension. Math in float (double for double inputs).
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
  bool causal;
  double scale;
  int64_t dilation[kMaxHeads];
  int64_t head_offset[kMaxHeads + 1];
  const uint8_t* key_ok;
  int64_t blocks_per_item;  // tiles of the longest subsequence
};

struct Strides {
  int64_t b, h, t;
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

// Rows [m0, m0 + kTile) of a (B, H, T, D) tensor into shared memory as Acc, row stride ld.
template <typename In, typename Acc>
__device__ void load_tile(Acc* dst, int ld, const In* src, const Strides& s, const ItemPos& p, int64_t m0, int dim,
                          Acc mul) {
  for (int idx = threadIdx.x; idx < kTile * dim; idx += blockDim.x) {
    const int row = idx / dim, col = idx % dim;
    const int64_t m = m0 + row;
    dst[row * ld + col] = m < p.n ? load_acc<In, Acc>(src + offset(s, p, m) + col) * mul : Acc(0);
  }
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

// ---------------------------------------------------------------------------- forward

template <typename In, typename Acc>
__global__ void __launch_bounds__(kThreads) forward_kernel(Geometry g, const In* q, const In* k, const In* v,
                                                           Strides in, Acc* out, Strides os, Acc* lse, Strides ls) {
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int dim = static_cast<int>(g.head_dim), ld = dim + 1;
  Acc* sq = smem;             // kTile x ld, pre-scaled
  Acc* sk = sq + kTile * ld;  // kTile x ld
  Acc* sv = sk + kTile * ld;  // kTile x ld
  Acc* sp = sv + kTile * ld;  // kTile x (kTile + 1) probabilities

  ItemPos p;
  int64_t m0;
  if (!block_start(g, p, m0)) return;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t m = m0 + row;

  load_tile<In, Acc>(sq, ld, q, in, p, m0, dim, Acc(g.scale));
  Acc acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = Acc(0);
  Acc run_max = -INFINITY, run_sum = Acc(0);

  const KeyRange kr = key_range(m0, m0 + kTile < p.n ? m0 + kTile : p.n, p.window, g.causal, p.n);
  for (int64_t j0 = kr.lo; j0 < kr.hi; j0 += kTile) {
    __syncthreads();
    load_tile<In, Acc>(sk, ld, k, in, p, j0, dim, Acc(1));
    load_tile<In, Acc>(sv, ld, v, in, p, j0, dim, Acc(1));
    __syncthreads();

    Acc s[kTile / kLanes];
    Acc tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kTile / kLanes; ++c) {
      const int col = lane + c * kLanes;
      Acc dot = Acc(0);
      for (int e = 0; e < dim; ++e) dot += sq[row * ld + e] * sk[col * ld + e];
      s[c] = (m < p.n && key_allowed(g, p, m, j0 + col)) ? dot : Acc(-INFINITY);
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
// prob = exp(q.k - lse) (q already scaled) and grad = prob * (dout.v - delta).
template <typename Acc>
__device__ __forceinline__ void pair_backward(const Acc* q, const Acc* dout, const Acc* k, const Acc* v, int dim,
                                              Acc lse, Acc delta, Acc& prob, Acc& grad) {
  Acc dot = Acc(0), dp = Acc(0);
  for (int e = 0; e < dim; ++e) {
    dot += q[e] * k[e];
    dp += dout[e] * v[e];
  }
  prob = exp(dot - lse);
  grad = prob * (dp - delta);
}

// dQ for a tile of queries: dQ_i = scale * sum_j P_ij (dP_ij - delta_i) K_j.
template <typename In, typename Acc>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Geometry g, const In* q, const In* k, const In* v, Strides in, const In* dout, Strides ds, const Acc* lse,
              const Acc* delta, Strides ss, Acc* dq, Strides gs) {
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int dim = static_cast<int>(g.head_dim), ld = dim + 1;
  Acc* sq = smem;
  Acc* sdo = sq + kTile * ld;
  Acc* sk = sdo + kTile * ld;
  Acc* sv = sk + kTile * ld;
  Acc* sds = sv + kTile * ld;  // kTile x (kTile + 1)

  ItemPos p;
  int64_t m0;
  if (!block_start(g, p, m0)) return;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t m = m0 + row;
  const bool live = m < p.n;
  const Acc row_lse = live ? lse[offset(ss, p, m)] : Acc(-INFINITY);
  const Acc row_delta = live ? delta[offset(ss, p, m)] : Acc(0);

  load_tile<In, Acc>(sq, ld, q, in, p, m0, dim, Acc(g.scale));
  load_tile<In, Acc>(sdo, ld, dout, ds, p, m0, dim, Acc(1));
  Acc acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = Acc(0);

  const KeyRange kr = key_range(m0, m0 + kTile < p.n ? m0 + kTile : p.n, p.window, g.causal, p.n);
  for (int64_t j0 = kr.lo; j0 < kr.hi; j0 += kTile) {
    __syncthreads();
    load_tile<In, Acc>(sk, ld, k, in, p, j0, dim, Acc(1));
    load_tile<In, Acc>(sv, ld, v, in, p, j0, dim, Acc(1));
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTile / kLanes; ++c) {
      const int col = lane + c * kLanes;
      Acc prob = Acc(0), grad = Acc(0);
      if (live && !isinf(row_lse) && key_allowed(g, p, m, j0 + col))
        pair_backward(sq + row * ld, sdo + row * ld, sk + col * ld, sv + col * ld, dim, row_lse, row_delta, prob, grad);
      sds[row * (kTile + 1) + col] = grad;
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int col = lane + i * kLanes;
      if (col < dim) {
        Acc a = acc[i];
        for (int c = 0; c < kTile; ++c) a += sds[row * (kTile + 1) + c] * sk[c * ld + col];
        acc[i] = a;
      }
    }
  }
  if (!live) return;
  Acc* o = dq + offset(gs, p, m);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int col = lane + i * kLanes;
    if (col < dim) o[col] = acc[i] * Acc(g.scale);
  }
}

// dK and dV for a tile of keys, over every query whose band holds them.
template <typename In, typename Acc>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Geometry g, const In* q, const In* k, const In* v, Strides in, const In* dout, Strides ds,
                const Acc* lse, const Acc* delta, Strides ss, Acc* dk, Acc* dv, Strides gs) {
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int dim = static_cast<int>(g.head_dim), ld = dim + 1;
  Acc* sk = smem;
  Acc* sv = sk + kTile * ld;
  Acc* sq = sv + kTile * ld;
  Acc* sdo = sq + kTile * ld;
  Acc* sp = sdo + kTile * ld;           // [query][key] probabilities
  Acc* sds = sp + kTile * (kTile + 1);  // [query][key] score gradients
  __shared__ Acc s_lse[kTile], s_delta[kTile];

  ItemPos p;
  int64_t j0;
  if (!block_start(g, p, j0)) return;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t j = j0 + row;  // this thread's key

  load_tile<In, Acc>(sk, ld, k, in, p, j0, dim, Acc(1));
  load_tile<In, Acc>(sv, ld, v, in, p, j0, dim, Acc(1));
  Acc acc_k[kPerLane], acc_v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc_k[i] = acc_v[i] = Acc(0);

  const KeyRange qr = query_range(j0, j0 + kTile < p.n ? j0 + kTile : p.n, p.window, g.causal, p.n);
  for (int64_t m0 = qr.lo; m0 < qr.hi; m0 += kTile) {
    __syncthreads();
    load_tile<In, Acc>(sq, ld, q, in, p, m0, dim, Acc(g.scale));
    load_tile<In, Acc>(sdo, ld, dout, ds, p, m0, dim, Acc(1));
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
        pair_backward(sq + qi * ld, sdo + qi * ld, sk + row * ld, sv + row * ld, dim, s_lse[qi], s_delta[qi], prob,
                      grad);
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

// ----------------------------------------------------------------------------- launch

int make_geometry(const BandProblem& p, Geometry& g) {
  if (p.heads > kMaxHeads || p.head_dim > kMaxHeadDim) return static_cast<int>(cudaErrorInvalidValue);
  g.batch = p.batch, g.heads = p.heads, g.seq_len = p.seq_len, g.head_dim = p.head_dim;
  g.window = p.window, g.causal = p.causal, g.scale = p.scale, g.key_ok = p.key_ok;
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

Strides strides(const int64_t* s) { return Strides{s[0], s[1], s[2]}; }

template <typename In, typename Acc>
int forward_typed(const BandProblem& p, const void* q, const void* k, const void* v, const int64_t* in_s, void* out,
                  const int64_t* out_s, void* lse, const int64_t* lse_s, cudaStream_t stream) {
  Geometry g;
  if (int err = make_geometry(p, g)) return err;
  const int64_t blocks = p.num_items() * g.blocks_per_item;
  const size_t smem = sizeof(Acc) * (3 * kTile * (p.head_dim + 1) + kTile * (kTile + 1));
  if (blocks == 0) return 0;
  auto kernel = forward_kernel<In, Acc>;
  if (int err = allow_smem(kernel, smem)) return err;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(
      g, static_cast<const In*>(q), static_cast<const In*>(k), static_cast<const In*>(v), strides(in_s),
      static_cast<Acc*>(out), strides(out_s), static_cast<Acc*>(lse), strides(lse_s));
  return static_cast<int>(cudaGetLastError());
}

template <typename In, typename Acc>
int backward_typed(const BandProblem& p, const void* q, const void* k, const void* v, const int64_t* in_s,
                   const void* dout, const int64_t* dout_s, const void* lse, const void* delta, const int64_t* stat_s,
                   void* dq, void* dk, void* dv, const int64_t* grad_s, cudaStream_t stream) {
  Geometry g;
  if (int err = make_geometry(p, g)) return err;
  const int64_t blocks = p.num_items() * g.blocks_per_item;
  if (blocks == 0) return 0;
  const size_t tile = kTile * (p.head_dim + 1), scores = kTile * (kTile + 1);
  auto qk = dq_kernel<In, Acc>;
  auto kk = dkdv_kernel<In, Acc>;
  const size_t smem_q = sizeof(Acc) * (4 * tile + scores);
  const size_t smem_k = sizeof(Acc) * (4 * tile + 2 * scores);
  if (int err = allow_smem(qk, smem_q)) return err;
  if (int err = allow_smem(kk, smem_k)) return err;
  const In* qi = static_cast<const In*>(q);
  const In* ki = static_cast<const In*>(k);
  const In* vi = static_cast<const In*>(v);
  const In* di = static_cast<const In*>(dout);
  const Acc* l = static_cast<const Acc*>(lse);
  const Acc* dl = static_cast<const Acc*>(delta);
  qk<<<static_cast<unsigned>(blocks), kThreads, smem_q, stream>>>(g, qi, ki, vi, strides(in_s), di, strides(dout_s), l,
                                                                  dl, strides(stat_s), static_cast<Acc*>(dq),
                                                                  strides(grad_s));
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return static_cast<int>(err);
  kk<<<static_cast<unsigned>(blocks), kThreads, smem_k, stream>>>(g, qi, ki, vi, strides(in_s), di, strides(dout_s), l,
                                                                  dl, strides(stat_s), static_cast<Acc*>(dk),
                                                                  static_cast<Acc*>(dv), strides(grad_s));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int band_forward_cuda(const BandProblem& p, DType in, const void* q, const void* k, const void* v,
                      const int64_t* in_strides, void* out, const int64_t* out_strides, void* lse,
                      const int64_t* lse_strides, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (in) {
    case DType::f32:
      return forward_typed<float, float>(p, q, k, v, in_strides, out, out_strides, lse, lse_strides, s);
    case DType::f64:
      return forward_typed<double, double>(p, q, k, v, in_strides, out, out_strides, lse, lse_strides, s);
    case DType::f16:
      return forward_typed<__half, float>(p, q, k, v, in_strides, out, out_strides, lse, lse_strides, s);
    case DType::bf16:
      return forward_typed<__nv_bfloat16, float>(p, q, k, v, in_strides, out, out_strides, lse, lse_strides, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int band_backward_cuda(const BandProblem& p, DType in, const void* q, const void* k, const void* v,
                       const int64_t* in_strides, const void* dout, const int64_t* dout_strides, const void* lse,
                       const void* delta, const int64_t* stat_strides, void* dq, void* dk, void* dv,
                       const int64_t* grad_strides, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
#define LFS_BWD(In, Acc)                                                                                    \
  backward_typed<In, Acc>(p, q, k, v, in_strides, dout, dout_strides, lse, delta, stat_strides, dq, dk, dv, \
                          grad_strides, s)
  switch (in) {
    case DType::f32:
      return LFS_BWD(float, float);
    case DType::f64:
      return LFS_BWD(double, double);
    case DType::f16:
      return LFS_BWD(__half, float);
    case DType::bf16:
      return LFS_BWD(__nv_bfloat16, float);
  }
#undef LFS_BWD
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace lfs

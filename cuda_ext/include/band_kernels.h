// Torch-free entry points of the band-attention kernels (CPU and CUDA).
//
// All tensors are (B, H, T, D) (or (B, H, T) for row statistics) with a unit stride
// on the last dimension and arbitrary int64 strides elsewhere, so transposed views of
// (B, T, H, D) inputs need no copy. Work is split into items, one per
// (batch, head, residue class); see band_index.h.
#pragma once

#include <stdint.h>

namespace lfs {

template <typename T>
struct Strided4 {  // (B, H, T, D), stride 1 on D
  T* data;
  int64_t sb, sh, st;
  T* row(int64_t b, int64_t h, int64_t t) const { return data + b * sb + h * sh + t * st; }
};

template <typename T>
struct Strided3 {  // (B, H, T)
  T* data;
  int64_t sb, sh, st;
  T& at(int64_t b, int64_t h, int64_t t) const { return data[b * sb + h * sh + t * st]; }
};

struct BandProblem {
  int64_t batch, heads, seq_len, head_dim;
  int64_t window;  // one-sided, >= 0
  bool causal;
  double scale;
  const int64_t* dilation;     // [heads]
  const int64_t* head_offset;  // [heads + 1], prefix sums of dilation
  const uint8_t* key_ok;       // (B, T) row-major, 1 = key may be attended; nullptr = all
  int64_t num_items() const { return batch * head_offset[heads]; }
};

// Optional Transformer-XL relative-position term: the score of query i and band column c
// of head h gains scale * query[i] . table[h][c]. Column c is the same distance for every
// query, so the term is a table of W = band_width(window, causal) rows, never T x T.
template <typename T>
struct PositionTerm {
  Strided4<const T> query;  // (B, H, T, D); query.data == nullptr: no term
  const T* table;           // (H, W, D) contiguous
  bool enabled() const { return query.data != nullptr; }
};

template <typename T>
struct PositionGrads {
  Strided4<T> dquery;  // (B, H, T, D), written
  T* dtable;           // (H, W, D) contiguous, ADDED to: give every thread its own and sum them
};

// out = softmax(scale * q k^T restricted to the band (+ position term)) v, lse = its
// log-normaliser. Rows without any key get out = 0 and lse = -inf. Items [item_begin, item_end).
template <typename T>
void band_forward_cpu(const BandProblem& p, Strided4<const T> q, Strided4<const T> k, Strided4<const T> v,
                      PositionTerm<T> pos, Strided4<T> out, Strided3<T> lse, int64_t item_begin, int64_t item_end);

// Gradients given dout and delta = rowsum(dout * out) - dlse (so that dS = P * (dP - delta)).
// dpos is used only when pos is enabled.
template <typename T>
void band_backward_cpu(const BandProblem& p, Strided4<const T> q, Strided4<const T> k, Strided4<const T> v,
                       PositionTerm<T> pos, Strided4<const T> dout, Strided3<const T> lse, Strided3<const T> delta,
                       Strided4<T> dq, Strided4<T> dk, Strided4<T> dv, PositionGrads<T> dpos, int64_t item_begin,
                       int64_t item_end);

#ifdef LFS_WITH_CUDA
// CUDA versions: In is float, double, __half or __nv_bfloat16 (passed as void*), math in
// float (double for double). out/lse/grads are in the compute type. Returns a
// cudaError_t as int (0 = success).
enum class DType { f32, f64, f16, bf16 };
int band_forward_cuda(const BandProblem& p, DType in, const void* q, const void* k, const void* v,
                      const int64_t* in_strides /* sb, sh, st */, void* out, const int64_t* out_strides, void* lse,
                      const int64_t* lse_strides, void* stream);
int band_backward_cuda(const BandProblem& p, DType in, const void* q, const void* k, const void* v,
                       const int64_t* in_strides, const void* dout, const int64_t* dout_strides, const void* lse,
                       const void* delta, const int64_t* stat_strides, void* dq, void* dk, void* dv,
                       const int64_t* grad_strides, void* stream);
#endif

}  // namespace lfs

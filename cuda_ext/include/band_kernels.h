// Torch-free entry points of the band-attention kernels: one signature for CPU and CUDA.
//
// All tensors are (B, H, T, D) (or (B, H, T) for row statistics) with a unit stride on
// the last dimension and arbitrary int64 strides elsewhere, so transposed views of
// (B, T, H, D) inputs need no copy. Work is split into items, one per (batch, head,
// residue class); see band_index.h.
//
// The binding picks a BandKernels table by device and calls it the same way on both:
// inputs in their own dtype (widened first when the table does not read it), outputs in
// the compute type (float, or double for double inputs).
#pragma once

#include <stdint.h>

namespace lfs {

enum class DType { f32, f64, f16, bf16 };

struct Strides {  // element strides of the B, H and T dimensions
  int64_t b, h, t;
};

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

// The inputs of a call, in the input dtype.
//
// The optional Transformer-XL relative-position term: the score of query i and band
// column c of head h gains scale * pos_query[i] . table[h][c]. Column c is the same
// distance for every query, so the term is a table of W = band_width(window, causal)
// rows, never T x T. In an item's undilated coordinates the column of query m and key j
// is j - m + window, whatever the item's clamped window.
struct BandInputs {
  const void *q, *k, *v;  // (B, H, T, D)
  Strides q_s, k_s, v_s;
  const void* pos_query;  // (B, H, T, D), or nullptr: no position term
  Strides pos_s;
  const void* table;  // (H, W, D) contiguous
  bool relative() const { return pos_query != nullptr; }
};

// out = softmax(scale * q k^T restricted to the band (+ position term)) v, lse = its
// log-normaliser. Rows without any key get out = 0 and lse = -inf. Compute type.
struct ForwardOutputs {
  void* out;  // (B, H, T, D)
  Strides out_s;
  void* lse;  // (B, H, T)
  Strides lse_s;
};

// Gradients given dout and delta = rowsum(dout * out) - dlse, so that dS = P * (dP - delta).
struct BackwardArgs {
  const void* dout;  // (B, H, T, D), input dtype
  Strides dout_s;
  const void *lse, *delta;  // (B, H, T), compute type
  Strides stat_s;
  void *dq, *dk, *dv;  // (B, H, T, D), compute type, written
  Strides grad_s;
  void* dpos_query;  // (B, H, T, D), compute type, written when the position term is on
  Strides dpos_s;
  // (slots, H, W, D) compute type, zero on entry, ADDED to; the caller sums the slots.
  // Slots let parallel workers accumulate without atomics (dtable_slots below).
  void* dtable;
};

// How a call runs: the CUDA stream, or the caller's CPU thread pool.
struct Launch {
  void* stream;     // cudaStream_t, or nullptr on CPU
  int64_t threads;  // CPU: slots parallel_for may use (slot indices are below it)
  // CPU: runs body(ctx, begin, end, slot) over chunks of [0, n), in parallel.
  void (*parallel_for)(int64_t n, void* ctx, void (*body)(void* ctx, int64_t begin, int64_t end, int64_t slot));
};

struct BandKernels {
  const char* device;
  bool (*reads)(DType);  // dtypes the kernels read directly; the caller widens others
  int64_t (*dtable_slots)(const BandProblem&, const Launch&);
  // Both return 0 on success, else an error code (a cudaError_t on CUDA).
  int (*forward)(const BandProblem&, DType, const BandInputs&, const ForwardOutputs&, const Launch&);
  int (*backward)(const BandProblem&, DType, const BandInputs&, const BackwardArgs&, const Launch&);
};

extern const BandKernels kCpuBandKernels;
#ifdef LFS_WITH_CUDA
extern const BandKernels kCudaBandKernels;
#endif

}  // namespace lfs

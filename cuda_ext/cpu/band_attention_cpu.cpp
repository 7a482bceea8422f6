// CPU band attention: fused forward and backward, no torch dependency.
//
// One work item is a (batch, head, residue) triple: the d interleaved subsequences of a
// head with dilation d are independent undilated problems, so dilation costs nothing
// extra. Within an item, keys are packed once; queries go in blocks whose score tile
// (BQ x (BQ + W - 1)) stays in L2, and every product is the same register-tiled
// micro-GEMM. The backward walks the blocks in order, so dK and dV accumulate in
// item-private buffers: no atomics, no races.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "band_index.h"
#include "band_kernels.h"

namespace lfs {
namespace {

// The position term and its gradients as the CPU kernels see them (compute type).
template <typename T>
struct PositionTerm {
  Strided4<const T> query;  // (B, H, T, D); query.data == nullptr: no term
  const T* table;           // (H, W, D) contiguous
  bool enabled() const { return query.data != nullptr; }
};

template <typename T>
struct PositionGrads {
  Strided4<T> dquery;  // (B, H, T, D), written
  T* dtable;           // (H, W, D) contiguous, ADDED to: every thread has its own
};

constexpr int64_t kAlign = 16;          // tile columns and padded head dim are multiples of this
constexpr int64_t kRows = 6;            // micro-kernel rows
constexpr int64_t kTileFloats = 65536;  // score-tile budget per block (256 KiB in fp32)
constexpr int64_t kMaxRows = 48;        // query rows per block

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <typename T>
struct Simd;
template <>
struct Simd<float> {
  typedef float V __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
  static constexpr int kLanes = 8;
};
template <>
struct Simd<double> {
  typedef double V __attribute__((vector_size(32)));
  static constexpr int kLanes = 4;
};

template <typename V, typename T>
inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <typename V, typename T>
inline void store(T* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

// C[MR x 16] (+)= A[MR x K] * B[K x 16]; A element (i, k) at A[i*a_rs + k*a_ks].
// Portable version (GCC vector extensions); used for double and non-AVX2 targets.
template <typename T, int MR, bool kAccumulate>
struct MicroKernel {
  static inline void run(int64_t K, const T* A, int64_t a_rs, int64_t a_ks, const T* B, int64_t ldb, T* C,
                         int64_t ldc) {
    using V = typename Simd<T>::V;
    constexpr int L = Simd<T>::kLanes;
    constexpr int NV = kAlign / L;
    V acc[MR][NV];
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < NV; ++c) acc[r][c] = V{};
    for (int64_t k = 0; k < K; ++k) {
      V b[NV];
      for (int c = 0; c < NV; ++c) b[c] = load<V>(B + k * ldb + c * L);
      for (int r = 0; r < MR; ++r) {
        const V a = V{} + A[r * a_rs + k * a_ks];
        for (int c = 0; c < NV; ++c) acc[r][c] += a * b[c];
      }
    }
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < NV; ++c) {
        T* dst = C + r * ldc + c * L;
        store(dst, kAccumulate ? load<V>(dst) + acc[r][c] : acc[r][c]);
      }
  }
};

#if defined(__AVX2__) && defined(__FMA__)
// fp32 with AVX2/FMA: 6 x 16 tiles keep 12 accumulators, 2 B vectors and the broadcast
// in the 16 ymm registers: ~75 GFLOP/s with runtime shapes against a ~100 GFLOP/s FMA
// peak per core here. The accumulators are named variables, not an array: GCC kept an
// __m256 array on the stack and stored all of it on every k step (~34 GFLOP/s).
#define LFS_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
template <int MR, bool kAccumulate>
struct MicroKernel<float, MR, kAccumulate> {
  static inline void run(int64_t K, const float* A, int64_t a_rs, int64_t a_ks, const float* B, int64_t ldb, float* C,
                         int64_t ldc) {
#define LFS_DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
    LFS_ROWS(LFS_DECL)
#undef LFS_DECL
    for (int64_t k = 0; k < K; ++k) {
      const __m256 b0 = _mm256_loadu_ps(B + k * ldb);
      const __m256 b1 = _mm256_loadu_ps(B + k * ldb + 8);
      const float* a = A + k * a_ks;
#define LFS_FMA(r)                                      \
  if constexpr (r < MR) {                               \
    const __m256 x = _mm256_broadcast_ss(a + r * a_rs); \
    c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);          \
    c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);          \
  }
      LFS_ROWS(LFS_FMA)
#undef LFS_FMA
    }
#define LFS_STORE(r)                                              \
  if constexpr (r < MR) {                                         \
    float* dst = C + r * ldc;                                     \
    if (kAccumulate) {                                            \
      c##r##0 = _mm256_add_ps(c##r##0, _mm256_loadu_ps(dst));     \
      c##r##1 = _mm256_add_ps(c##r##1, _mm256_loadu_ps(dst + 8)); \
    }                                                             \
    _mm256_storeu_ps(dst, c##r##0);                               \
    _mm256_storeu_ps(dst + 8, c##r##1);                           \
  }
    LFS_ROWS(LFS_STORE)
#undef LFS_STORE
  }
};
#undef LFS_ROWS
#endif

// The last rows < kRows of a gemm: the micro-kernel of exactly that many rows, its row
// count a template argument (the compiler unrolls each), picked at run time.
template <typename T, bool kAccumulate, int R = kRows - 1>
void row_tail(int64_t rows, int64_t K, const T* a, int64_t a_rs, int64_t a_ks, const T* b, int64_t ldb, T* c,
              int64_t ldc) {
  if constexpr (R > 0) {
    if (rows == R)
      MicroKernel<T, R, kAccumulate>::run(K, a, a_rs, a_ks, b, ldb, c, ldc);
    else
      row_tail<T, kAccumulate, R - 1>(rows, K, a, a_rs, a_ks, b, ldb, c, ldc);
  }
}

// C[M x N] (+)= A[M x K] * B[K x N]; N % kAlign == 0, any M.
template <typename T, bool kAccumulate>
void gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_ks, const T* B, int64_t ldb, T* C,
          int64_t ldc) {
  for (int64_t j = 0; j < N; j += kAlign) {
    int64_t i = 0;
    for (; i + kRows <= M; i += kRows)
      MicroKernel<T, kRows, kAccumulate>::run(K, A + i * a_rs, a_rs, a_ks, B + j, ldb, C + i * ldc + j, ldc);
    const T* a = A + i * a_rs;
    T* c = C + i * ldc + j;
    row_tail<T, kAccumulate>(M - i, K, a, a_rs, a_ks, B + j, ldb, c, ldc);
  }
}

// exp(x) for x <= 0 on whole vectors, exactly 0 below -87 (so -inf, the mask value,
// gives 0). Cephes-style polynomial on [-ln2/2, ln2/2], about 1 ulp.
inline Simd<float>::V vexp(Simd<float>::V x) {
  using V = Simd<float>::V;
  using I = Simd<float>::I;
  const auto tiny = x < -87.0f;
  x = tiny ? V{} - 87.0f : x;
  const V magic = V{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  V n = (x * 1.44269504088896341f + magic) - magic;
  V r = x - n * 0.693359375f + n * 2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I e = (__builtin_convertvector(n, I) + 127) << 23;
  const V y = p * (V)e;
  return tiny ? V{} : y;
}

// row[c] = exp(row[c] - shift) over a whole padded row; returns the sum.
template <typename T>
T exp_row(T* row, int64_t len, T shift);

template <>
float exp_row<float>(float* row, int64_t len, float shift) {
  using V = Simd<float>::V;
  V sum = V{};
  for (int64_t c = 0; c < len; c += 8) {
    const V e = vexp(load<V>(row + c) - shift);
    store(row + c, e);
    sum += e;
  }
  float total = 0;
  for (int l = 0; l < 8; ++l) total += sum[l];
  return total;
}

template <>
double exp_row<double>(double* row, int64_t len, double shift) {
  double total = 0;
  for (int64_t c = 0; c < len; ++c) total += (row[c] = std::exp(row[c] - shift));
  return total;
}

template <typename T>
T max_row(const T* row, int64_t len) {  // len % kAlign == 0
  using V = typename Simd<T>::V;
  constexpr int L = Simd<T>::kLanes;
  V mx = load<V>(row);
  for (int64_t c = L; c < len; c += L) {
    const V x = load<V>(row + c);
    mx = x > mx ? x : mx;
  }
  T m = mx[0];
  for (int l = 1; l < L; ++l) m = mx[l] > m ? mx[l] : m;
  return m;
}

template <typename T>
void scale_row(T* row, int64_t len, T mul) {
  using V = typename Simd<T>::V;
  constexpr int L = Simd<T>::kLanes;
  for (int64_t c = 0; c < len; c += L) store(row + c, load<V>(row + c) * mul);
}

int64_t block_rows(int64_t span) {
  return std::max<int64_t>(kRows, std::min<int64_t>(kMaxRows, kTileFloats / span / kRows * kRows));
}

// One work item plus the sizes of its packed buffers and query blocks.
struct ItemView : ItemGeometry {
  int64_t dp;        // head dim padded to kAlign
  int64_t max_span;  // widest score tile (keys of the largest block), padded to kAlign
  int64_t block;     // query rows per block
};

ItemView make_view(const BandProblem& p, int64_t item) {
  ItemView view;
  static_cast<ItemGeometry&>(view) =
      item_geometry(item, p.dilation, p.head_offset, p.heads, p.seq_len, p.window, p.causal);
  view.dp = round_up(p.head_dim, kAlign);
  view.max_span = round_up(kMaxRows + view.window + view.right, kAlign);
  view.block = block_rows(view.max_span);
  return view;
}

// The block of queries [m0, m0 + rows): its score tile covers keys [lo, lo + span), of
// which [lo, hi) exist; its rows reach band columns [c0, c0 + cols) (cols padded).
struct Block {
  int64_t m0, rows, lo, hi, span, c0, cols;
};

Block block_at(const ItemView& iv, int64_t m0, bool causal) {
  const int64_t rows = std::min(iv.block, iv.n - m0);
  const KeyRange kr = key_range(m0, m0 + rows, iv.window, causal, iv.n);
  // Column of key j for query m is j - m + window: extremes at (lo, last row) and (hi - 1, m0).
  const int64_t c0 = std::max<int64_t>(0, kr.lo - (m0 + rows - 1) + iv.window);
  const int64_t c1 = std::min(band_width(iv.window, causal), kr.hi - m0 + iv.window);
  return Block{m0, rows, kr.lo, kr.hi, round_up(kr.hi - kr.lo, kAlign), c0, round_up(c1 - c0, kAlign)};
}

// Rows of a residue class, copied into a zero-padded (rows x dp) buffer, times `mul`.
template <typename T>
void pack_rows(const ItemView& iv, Strided4<const T> src, int64_t m0, int64_t count, int64_t head_dim, T mul, T* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const T* s = src.row(iv.batch, iv.head, iv.t(m0 + i));
    T* o = dst + i * iv.dp;
    for (int64_t c = 0; c < head_dim; ++c) o[c] = s[c] * mul;
  }
}

// The same rows transposed into (dp x ld) columns [0, count).
template <typename T>
void pack_cols(const ItemView& iv, Strided4<const T> src, int64_t count, int64_t head_dim, int64_t ld, T* dst) {
  for (int64_t j = 0; j < count; ++j) {
    const T* s = src.row(iv.batch, iv.head, iv.t(j));
    for (int64_t c = 0; c < head_dim; ++c) dst[c * ld + j] = s[c];
  }
}

// The relative-position table of one item: rows [start, start + width) of its head's
// (W, D) table, start = window - item window (a clamped window uses the middle columns),
// zero-padded so a block's padded column range never reads past it.
template <typename T>
struct PackedTable {
  int64_t width = 0, ld = 0;
  std::vector<T> cols, rows;  // (dp x ld) and (ld x dp)
};

template <typename T>
void pack_table(const BandProblem& p, const ItemView& iv, const T* table, PackedTable<T>& pt) {
  const int64_t full = band_width(p.window, p.causal), start = p.window - iv.window;
  pt.width = band_width(iv.window, p.causal);
  pt.ld = round_up(pt.width, kAlign) + kAlign;
  pt.cols.assign(iv.dp * pt.ld, T(0));
  pt.rows.assign(pt.ld * iv.dp, T(0));
  for (int64_t c = 0; c < pt.width; ++c) {
    const T* src = table + (iv.head * full + start + c) * p.head_dim;
    for (int64_t x = 0; x < p.head_dim; ++x) pt.cols[x * pt.ld + c] = pt.rows[c * iv.dp + x] = src[x];
  }
}

// Offset from a tile column (key lo + jj) to the block's column buffer for query m:
// band column jj + lo - m + window, minus the block's first column c0.
inline int64_t skew(const ItemView& iv, const Block& blk, int64_t m) { return blk.lo - m + iv.window - blk.c0; }

// tile[i][jj] += band[i][jj + skew] over each row's own keys (position scores into the tile).
template <typename T>
void add_band_to_tile(const ItemView& iv, const Block& blk, bool causal, const T* band, T* tile) {
  for (int64_t i = 0; i < blk.rows; ++i) {
    const int64_t m = blk.m0 + i, s = skew(iv, blk, m);
    const KeyRange own = key_range(m, m + 1, iv.window, causal, iv.n);
    T* row = tile + i * blk.span;
    const T* b = band + i * blk.cols + s;
    for (int64_t jj = own.lo - blk.lo; jj < own.hi - blk.lo; ++jj) row[jj] += b[jj];
  }
}

// band[i][jj + skew] = tile[i][jj] over each row's own keys, 0 elsewhere (dS into band layout).
template <typename T>
void tile_to_band(const ItemView& iv, const Block& blk, bool causal, const T* tile, int64_t rows_pad, T* band) {
  std::fill_n(band, rows_pad * blk.cols, T(0));
  for (int64_t i = 0; i < blk.rows; ++i) {
    const int64_t m = blk.m0 + i, s = skew(iv, blk, m);
    const KeyRange own = key_range(m, m + 1, iv.window, causal, iv.n);
    const T* row = tile + i * blk.span;
    T* b = band + i * blk.cols + s;
    for (int64_t jj = own.lo - blk.lo; jj < own.hi - blk.lo; ++jj) b[jj] = row[jj];
  }
}

// Scores outside [c0, c1), or whose key is not ok, are excluded from the row.
template <typename T>
void mask_row(T* row, int64_t len, int64_t c0, int64_t c1, const uint8_t* ok, T value) {
  std::fill(row, row + c0, value);
  std::fill(row + c1, row + len, value);
  if (ok)
    for (int64_t c = c0; c < c1; ++c)
      if (!ok[c]) row[c] = value;
}

// Turn a tile row of scores into probabilities; returns the log-normaliser.
// Valid columns are [c0, c1) and, when ok is given, ok[c] != 0.
template <typename T>
T softmax_row(T* row, int64_t len, int64_t c0, int64_t c1, const uint8_t* ok) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  mask_row(row, len, c0, c1, ok, neg_inf);
  const T mx = max_row(row, len);
  if (mx == neg_inf) {
    std::fill(row, row + len, T(0));
    return neg_inf;
  }
  const T sum = exp_row<T>(row, len, mx);  // masked entries become exactly 0
  scale_row(row, len, T(1) / sum);
  return mx + std::log(sum);
}

// Recompute probabilities from the saved log-normaliser (backward).
template <typename T>
void probs_row(T* row, int64_t len, int64_t c0, int64_t c1, const uint8_t* ok, T lse) {
  if (std::isinf(lse)) {
    std::fill(row, row + len, T(0));
    return;
  }
  mask_row(row, len, c0, c1, ok, -std::numeric_limits<T>::infinity());
  exp_row<T>(row, len, lse);
}

template <typename T>
struct Packed {  // one item's keys/values, zero-padded so tiles may overrun n
  int64_t ld;    // padded key count
  std::vector<T> rows_k, cols_k, rows_v, cols_v;
  std::vector<uint8_t> ok;
};

template <typename T>
void pack_item(const BandProblem& p, const ItemView& iv, Strided4<const T> k, Strided4<const T> v, bool rows_k,
               bool rows_v, bool cols_v, Packed<T>& pk) {
  pk.ld = round_up(iv.n + iv.max_span, kAlign);  // a tile starting at n - 1 still fits
  pk.cols_k.assign(iv.dp * pk.ld, T(0));
  pack_cols(iv, k, iv.n, p.head_dim, pk.ld, pk.cols_k.data());
  if (rows_k) {
    pk.rows_k.assign(pk.ld * iv.dp, T(0));
    pack_rows(iv, k, 0, iv.n, p.head_dim, T(1), pk.rows_k.data());
  }
  if (rows_v) {
    pk.rows_v.assign(pk.ld * iv.dp, T(0));
    pack_rows(iv, v, 0, iv.n, p.head_dim, T(1), pk.rows_v.data());
  }
  if (cols_v) {
    pk.cols_v.assign(iv.dp * pk.ld, T(0));
    pack_cols(iv, v, iv.n, p.head_dim, pk.ld, pk.cols_v.data());
  }
  pk.ok.assign(pk.ld, 0);
  for (int64_t j = 0; j < iv.n; ++j) pk.ok[j] = p.key_ok ? p.key_ok[iv.batch * p.seq_len + iv.t(j)] : 1;
}

// Scores of one block: tile = (scale q) k^T over its keys, plus the position term when
// `tab` is given (pqb then holds scale * position-query rows; band is scratch).
template <typename T>
void block_scores(const ItemView& iv, const Block& blk, int64_t rows_pad, bool causal, const T* qb, const Packed<T>& pk,
                  const PackedTable<T>* tab, const T* pqb, std::vector<T>& band, T* tile) {
  gemm<T, false>(rows_pad, blk.span, iv.dp, qb, iv.dp, 1, pk.cols_k.data() + blk.lo, pk.ld, tile, blk.span);
  if (!tab) return;
  band.resize(rows_pad * blk.cols);
  gemm<T, false>(rows_pad, blk.cols, iv.dp, pqb, iv.dp, 1, tab->cols.data() + blk.c0, tab->ld, band.data(), blk.cols);
  add_band_to_tile(iv, blk, causal, band.data(), tile);
}

template <typename T>
void band_forward_cpu(const BandProblem& p, Strided4<const T> q, Strided4<const T> k, Strided4<const T> v,
                      PositionTerm<T> pos, Strided4<T> out, Strided3<T> lse, int64_t item_begin, int64_t item_end) {
  Packed<T> pk;
  PackedTable<T> tab;
  std::vector<T> qb, pqb, tile, band, ob;
  const T scale = T(p.scale);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const ItemView iv = make_view(p, item);
    if (iv.n == 0) continue;
    pack_item(p, iv, k, v, /*rows_k=*/false, /*rows_v=*/true, /*cols_v=*/false, pk);
    if (pos.enabled()) pack_table(p, iv, pos.table, tab);
    const int64_t bq = iv.block;
    qb.assign(bq * iv.dp, T(0));
    pqb.assign(pos.enabled() ? bq * iv.dp : 0, T(0));
    ob.assign(bq * iv.dp, T(0));
    for (int64_t m0 = 0; m0 < iv.n; m0 += bq) {
      const Block blk = block_at(iv, m0, p.causal);
      const int64_t rows = blk.rows, span = blk.span, lo = blk.lo, rows_pad = round_up(rows, kRows);
      tile.resize(bq * span);
      if (rows < bq) std::fill(qb.begin(), qb.end(), T(0)), std::fill(pqb.begin(), pqb.end(), T(0));
      pack_rows(iv, q, m0, rows, p.head_dim, scale, qb.data());
      if (pos.enabled()) pack_rows(iv, pos.query, m0, rows, p.head_dim, scale, pqb.data());

      block_scores(iv, blk, rows_pad, p.causal, qb.data(), pk, pos.enabled() ? &tab : nullptr, pqb.data(), band,
                   tile.data());
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t m = m0 + i;
        const KeyRange own = key_range(m, m + 1, iv.window, p.causal, iv.n);
        const T l = softmax_row<T>(tile.data() + i * span, span, own.lo - lo, own.hi - lo,
                                   p.key_ok ? pk.ok.data() + lo : nullptr);
        lse.at(iv.batch, iv.head, iv.t(m)) = l;
      }
      for (int64_t i = rows; i < rows_pad; ++i) std::fill_n(tile.data() + i * span, span, T(0));
      gemm<T, false>(rows_pad, iv.dp, span, tile.data(), span, 1, pk.rows_v.data() + lo * iv.dp, iv.dp, ob.data(),
                     iv.dp);
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out.row(iv.batch, iv.head, iv.t(m0 + i)), ob.data() + i * iv.dp, p.head_dim * sizeof(T));
    }
  }
}

template <typename T>
void band_backward_cpu(const BandProblem& p, Strided4<const T> q, Strided4<const T> k, Strided4<const T> v,
                       PositionTerm<T> pos, Strided4<const T> dout, Strided3<const T> lse, Strided3<const T> delta,
                       Strided4<T> dq, Strided4<T> dk, Strided4<T> dv, PositionGrads<T> dpos, int64_t item_begin,
                       int64_t item_end) {
  Packed<T> pk;
  PackedTable<T> tab;
  std::vector<T> qb, pqb, dob, probs, dscores, band, dqb, dk_acc, dv_acc, dtab;
  const T scale = T(p.scale);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const ItemView iv = make_view(p, item);
    if (iv.n == 0) continue;
    pack_item(p, iv, k, v, /*rows_k=*/true, /*rows_v=*/false, /*cols_v=*/true, pk);
    if (pos.enabled()) {
      pack_table(p, iv, pos.table, tab);
      dtab.assign(tab.ld * iv.dp, T(0));
    }
    const int64_t bq = iv.block;
    qb.assign(bq * iv.dp, T(0));
    pqb.assign(pos.enabled() ? bq * iv.dp : 0, T(0));
    dob.assign(bq * iv.dp, T(0));
    dqb.assign(bq * iv.dp, T(0));
    dk_acc.assign(pk.ld * iv.dp, T(0));
    dv_acc.assign(pk.ld * iv.dp, T(0));
    for (int64_t m0 = 0; m0 < iv.n; m0 += bq) {
      const Block blk = block_at(iv, m0, p.causal);
      const int64_t rows = blk.rows, span = blk.span, lo = blk.lo, rows_pad = round_up(rows, kRows);
      probs.resize(bq * span);  // fully written by the gemms below
      dscores.resize(bq * span);
      if (rows < bq) {  // last block: padding rows of the operands must be 0
        std::fill(qb.begin(), qb.end(), T(0));
        std::fill(pqb.begin(), pqb.end(), T(0));
        std::fill(dob.begin(), dob.end(), T(0));
      }
      pack_rows(iv, q, m0, rows, p.head_dim, scale, qb.data());
      if (pos.enabled()) pack_rows(iv, pos.query, m0, rows, p.head_dim, scale, pqb.data());
      pack_rows(iv, dout, m0, rows, p.head_dim, T(1), dob.data());

      // P from the saved lse; dP = dO V^T; dS = P * (dP - delta).
      block_scores(iv, blk, rows_pad, p.causal, qb.data(), pk, pos.enabled() ? &tab : nullptr, pqb.data(), band,
                   probs.data());
      gemm<T, false>(rows_pad, span, iv.dp, dob.data(), iv.dp, 1, pk.cols_v.data() + lo, pk.ld, dscores.data(), span);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t m = m0 + i;
        const KeyRange own = key_range(m, m + 1, iv.window, p.causal, iv.n);
        T* pr = probs.data() + i * span;
        probs_row<T>(pr, span, own.lo - lo, own.hi - lo, p.key_ok ? pk.ok.data() + lo : nullptr,
                     lse.at(iv.batch, iv.head, iv.t(m)));
        const T dl = delta.at(iv.batch, iv.head, iv.t(m));
        T* ds = dscores.data() + i * span;
        for (int64_t c = 0; c < span; ++c) ds[c] = pr[c] * (ds[c] - dl);
      }
      for (int64_t i = rows; i < rows_pad; ++i) {
        std::fill_n(probs.data() + i * span, span, T(0));
        std::fill_n(dscores.data() + i * span, span, T(0));
      }
      // dQ = scale * dS K; dK += dS^T (scale * Q); dV += P^T dO.
      gemm<T, false>(rows_pad, iv.dp, span, dscores.data(), span, 1, pk.rows_k.data() + lo * iv.dp, iv.dp, dqb.data(),
                     iv.dp);
      for (int64_t i = 0; i < rows; ++i) {
        T* o = dq.row(iv.batch, iv.head, iv.t(m0 + i));
        for (int64_t c = 0; c < p.head_dim; ++c) o[c] = dqb[i * iv.dp + c] * scale;
      }
      gemm<T, true>(span, iv.dp, rows_pad, dscores.data(), 1, span, qb.data(), iv.dp, dk_acc.data() + lo * iv.dp,
                    iv.dp);
      gemm<T, true>(span, iv.dp, rows_pad, probs.data(), 1, span, dob.data(), iv.dp, dv_acc.data() + lo * iv.dp, iv.dp);
      if (pos.enabled()) {  // the same products against the table, with dS in band layout
        band.resize(rows_pad * blk.cols);
        tile_to_band(iv, blk, p.causal, dscores.data(), rows_pad, band.data());
        gemm<T, false>(rows_pad, iv.dp, blk.cols, band.data(), blk.cols, 1, tab.rows.data() + blk.c0 * iv.dp, iv.dp,
                       dqb.data(), iv.dp);
        for (int64_t i = 0; i < rows; ++i) {
          T* o = dpos.dquery.row(iv.batch, iv.head, iv.t(m0 + i));
          for (int64_t c = 0; c < p.head_dim; ++c) o[c] = dqb[i * iv.dp + c] * scale;
        }
        gemm<T, true>(blk.cols, iv.dp, rows_pad, band.data(), 1, blk.cols, pqb.data(), iv.dp,
                      dtab.data() + blk.c0 * iv.dp, iv.dp);
      }
    }
    for (int64_t j = 0; j < iv.n; ++j) {
      std::memcpy(dk.row(iv.batch, iv.head, iv.t(j)), dk_acc.data() + j * iv.dp, p.head_dim * sizeof(T));
      std::memcpy(dv.row(iv.batch, iv.head, iv.t(j)), dv_acc.data() + j * iv.dp, p.head_dim * sizeof(T));
    }
    if (pos.enabled()) {
      const int64_t full = band_width(p.window, p.causal), start = p.window - iv.window;
      for (int64_t c = 0; c < tab.width; ++c) {
        T* dst = dpos.dtable + (iv.head * full + start + c) * p.head_dim;
        for (int64_t x = 0; x < p.head_dim; ++x) dst[x] += dtab[c * iv.dp + x];
      }
    }
  }
}

template <typename T>
Strided4<const T> in4(const void* data, const Strides& s) {
  return {static_cast<const T*>(data), s.b, s.h, s.t};
}

template <typename T>
Strided4<T> out4(void* data, const Strides& s) {
  return {static_cast<T*>(data), s.b, s.h, s.t};
}

template <typename T>
PositionTerm<T> position(const BandInputs& in) {
  if (!in.relative()) return {{nullptr, 0, 0, 0}, nullptr};
  return {in4<T>(in.pos_query, in.pos_s), static_cast<const T*>(in.table)};
}

struct ForwardCall {
  const BandProblem* p;
  const BandInputs* in;
  const ForwardOutputs* out;
};

template <typename T>
void forward_items(void* ctx, int64_t begin, int64_t end, int64_t /*slot*/) {
  const auto& c = *static_cast<const ForwardCall*>(ctx);
  const Strided3<T> lse{static_cast<T*>(c.out->lse), c.out->lse_s.b, c.out->lse_s.h, c.out->lse_s.t};
  band_forward_cpu<T>(*c.p, in4<T>(c.in->q, c.in->q_s), in4<T>(c.in->k, c.in->k_s), in4<T>(c.in->v, c.in->v_s),
                      position<T>(*c.in), out4<T>(c.out->out, c.out->out_s), lse, begin, end);
}

struct BackwardCall {
  const BandProblem* p;
  const BandInputs* in;
  const BackwardArgs* a;
};

template <typename T>
void backward_items(void* ctx, int64_t begin, int64_t end, int64_t slot) {
  const auto& c = *static_cast<const BackwardCall*>(ctx);
  const BackwardArgs& a = *c.a;
  const auto stat = [&](const void* x) {
    return Strided3<const T>{static_cast<const T*>(x), a.stat_s.b, a.stat_s.h, a.stat_s.t};
  };
  PositionGrads<T> dpos{{nullptr, 0, 0, 0}, nullptr};
  if (c.in->relative()) {
    const int64_t slice = c.p->heads * band_width(c.p->window, c.p->causal) * c.p->head_dim;
    dpos = {out4<T>(a.dpos_query, a.dpos_s), static_cast<T*>(a.dtable) + slot * slice};
  }
  band_backward_cpu<T>(*c.p, in4<T>(c.in->q, c.in->q_s), in4<T>(c.in->k, c.in->k_s), in4<T>(c.in->v, c.in->v_s),
                       position<T>(*c.in), in4<T>(a.dout, a.dout_s), stat(a.lse), stat(a.delta),
                       out4<T>(a.dq, a.grad_s), out4<T>(a.dk, a.grad_s), out4<T>(a.dv, a.grad_s), dpos, begin, end);
}

bool cpu_reads(DType t) { return t == DType::f32 || t == DType::f64; }

int64_t cpu_dtable_slots(const BandProblem&, const Launch& launch) { return launch.threads; }

constexpr int kUnsupportedDType = 1;

int cpu_forward(const BandProblem& p, DType t, const BandInputs& in, const ForwardOutputs& out, const Launch& launch) {
  if (!cpu_reads(t)) return kUnsupportedDType;
  ForwardCall call{&p, &in, &out};
  launch.parallel_for(p.num_items(), &call, t == DType::f64 ? forward_items<double> : forward_items<float>);
  return 0;
}

int cpu_backward(const BandProblem& p, DType t, const BandInputs& in, const BackwardArgs& args, const Launch& launch) {
  if (!cpu_reads(t)) return kUnsupportedDType;
  BackwardCall call{&p, &in, &args};
  launch.parallel_for(p.num_items(), &call, t == DType::f64 ? backward_items<double> : backward_items<float>);
  return 0;
}

}  // namespace

const BandKernels kCpuBandKernels{"cpu", cpu_reads, cpu_dtable_slots, cpu_forward, cpu_backward};

}  // namespace lfs

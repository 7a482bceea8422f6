// Index math of the dilated sliding window, shared by the CPU and CUDA kernels.
//
// Mirrors longformer_fs/attention/band.py (tests compare the two). Notation as in
// docs/design.md §1: w is the one-sided window, d a head's dilation, W = 2w+1 (w+1 causal)
// band columns, column c of query i holds key i + d*(c - w).
//
// The kernels never walk the dilated band directly: a (w, d) window on a sequence is an
// undilated w-window on each of the d interleaved subsequences t = r + m*d, so a work
// item is one (batch, head, residue) triple and positions inside it are m = 0..n-1.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define LFS_HD __host__ __device__ __forceinline__
#else
#define LFS_HD inline
#endif

namespace lfs {

LFS_HD int64_t band_width(int64_t window, bool causal) { return causal ? window + 1 : 2 * window + 1; }

// Band columns to the right of the query (keys after it).
LFS_HD int64_t band_right(int64_t window, bool causal) { return causal ? 0 : window; }

LFS_HD int64_t band_key(int64_t query, int64_t column, int64_t window, int64_t dilation) {
  return query + dilation * (column - window);
}

// Column of `key` in the band of `query`, or -1 when the key is not in it.
LFS_HD int64_t band_column(int64_t query, int64_t key, int64_t window, int64_t dilation, bool causal) {
  const int64_t offset = key - query;
  if (offset % dilation != 0) return -1;
  const int64_t column = offset / dilation + window;
  return (column >= 0 && column < band_width(window, causal)) ? column : -1;
}

// Positions of residue class r (t = r, r+d, ...) below T.
LFS_HD int64_t residue_length(int64_t seq_len, int64_t dilation, int64_t residue) {
  return residue < seq_len ? (seq_len - residue + dilation - 1) / dilation : 0;
}

// The smallest window with the same pattern on a subsequence of n positions.
LFS_HD int64_t effective_window(int64_t window, int64_t n) {
  const int64_t steps = n > 0 ? n - 1 : 0;
  return window < steps ? window : steps;
}

// Keys [lo, hi) seen by queries [m0, m1) of an n-long subsequence (undilated).
struct KeyRange {
  int64_t lo, hi;
};

LFS_HD KeyRange key_range(int64_t m0, int64_t m1, int64_t window, bool causal, int64_t n) {
  int64_t lo = m0 - window;
  int64_t hi = m1 + band_right(window, causal);
  return KeyRange{lo > 0 ? lo : 0, hi < n ? hi : n};
}

// Queries [lo, hi) that see keys [j0, j1): the transpose of key_range.
LFS_HD KeyRange query_range(int64_t j0, int64_t j1, int64_t window, bool causal, int64_t n) {
  int64_t lo = j0 - band_right(window, causal);
  int64_t hi = j1 + window;
  return KeyRange{lo > 0 ? lo : 0, hi < n ? hi : n};
}

// Whether query m sees key j in the undilated window (both inside the subsequence).
LFS_HD bool in_band(int64_t m, int64_t j, int64_t window, bool causal) {
  return j >= m - window && j <= m + band_right(window, causal);
}

// Work items are (batch, head, residue) triples, heads laid out by the prefix sums of
// their dilations: item = b * total + head_offset[h] + r, total = sum_h d_h.
struct Item {
  int64_t batch, head, residue;
};

LFS_HD Item decode_item(int64_t item, const int64_t* head_offset, int64_t heads) {
  const int64_t total = head_offset[heads];
  Item it;
  it.batch = item / total;
  int64_t rest = item - it.batch * total;
  int64_t h = 0;
  while (head_offset[h + 1] <= rest) ++h;
  it.head = h;
  it.residue = rest - head_offset[h];
  return it;
}

// Everything a kernel needs to know about one work item: where it is, and the
// undilated window on its n-long subsequence (t = residue + m * dilation).
struct ItemGeometry {
  int64_t batch, head, residue, dilation, n, window, right;
  LFS_HD int64_t t(int64_t m) const { return residue + m * dilation; }
};

LFS_HD ItemGeometry item_geometry(int64_t item, const int64_t* dilation, const int64_t* head_offset, int64_t heads,
                                  int64_t seq_len, int64_t window, bool causal) {
  const Item it = decode_item(item, head_offset, heads);
  ItemGeometry g;
  g.batch = it.batch;
  g.head = it.head;
  g.residue = it.residue;
  g.dilation = dilation[it.head];
  g.n = residue_length(seq_len, g.dilation, g.residue);
  g.window = effective_window(window, g.n);
  g.right = band_right(g.window, causal);
  return g;
}

}  // namespace lfs

// Torch binding of the band kernels: argument checks, dtype/device dispatch, threading.
//
// The kernels themselves (cpu/, cuda/) see raw pointers and int64 strides only. The
// CUDA stream comes from Python as an integer handle, so this file needs no CUDA
// headers and its CUDA branch compiles (and is checked) against a CPU-only torch.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <vector>

#include "band_index.h"
#include "band_kernels.h"

namespace {

using torch::Tensor;

struct Prepared {
  lfs::BandProblem problem;
  std::vector<int64_t> dilation, head_offset;
  Tensor key_ok;  // uint8 (B, T) contiguous, or undefined
};

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const auto& [name, x] : {std::pair{"q", q}, {"k", k}, {"v", v}}) {
    TORCH_CHECK_VALUE(x.dim() == 4, name, ": expected 4 dimensions (B, H, T, D), got ", x.dim());
    TORCH_CHECK_VALUE(x.device() == q.device(), name, ": is on ", x.device(), " but q is on ", q.device(),
                      "; move all inputs to one device");
    TORCH_CHECK_VALUE(x.scalar_type() == q.scalar_type(), name, ": dtype ", x.scalar_type(), " does not match q's ",
                      q.scalar_type());
    TORCH_CHECK_VALUE(x.sizes() == q.sizes(), name, ": shape ", x.sizes(), " does not match q's ", q.sizes());
  }
  const auto t = q.scalar_type();
  const bool ok = t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
  TORCH_CHECK_VALUE(ok, "q: unsupported dtype ", t, "; the band kernels take float32, float64, float16 or bfloat16");
}

Prepared prepare(const Tensor& q, const c10::optional<Tensor>& key_ok, const std::vector<int64_t>& dilation,
                 int64_t window, bool causal, double scale) {
  Prepared p;
  const int64_t heads = q.size(1);
  TORCH_CHECK_VALUE(static_cast<int64_t>(dilation.size()) == heads, "dilation: got ", dilation.size(), " values for ",
                    heads, " heads");
  TORCH_CHECK_VALUE(window >= 0, "window: must be >= 0, got ", window);
  p.dilation = dilation;
  p.head_offset.assign(heads + 1, 0);
  for (int64_t h = 0; h < heads; ++h) {
    TORCH_CHECK_VALUE(dilation[h] >= 1, "dilation: every value must be >= 1, got ", dilation[h]);
    p.head_offset[h + 1] = p.head_offset[h] + dilation[h];
  }
  if (key_ok.has_value() && key_ok->defined()) {
    const auto& m = *key_ok;
    TORCH_CHECK_VALUE(m.dim() == 2 && m.size(0) == q.size(0) && m.size(1) == q.size(2),
                      "key_ok: expected shape (B, T) = (", q.size(0), ", ", q.size(2), "), got ", m.sizes());
    TORCH_CHECK_VALUE(m.device() == q.device(), "key_ok: is on ", m.device(), " but q is on ", q.device());
    p.key_ok = m.to(at::kByte).contiguous();
  }
  auto& b = p.problem;
  b.batch = q.size(0);
  b.heads = heads;
  b.seq_len = q.size(2);
  b.head_dim = q.size(3);
  b.window = window;
  b.causal = causal;
  b.scale = scale;
  b.dilation = p.dilation.data();
  b.head_offset = p.head_offset.data();
  b.key_ok = p.key_ok.defined() ? p.key_ok.data_ptr<uint8_t>() : nullptr;
  return p;
}

// The optional relative-position term: pos_query (B, H, T, D) like q, table (H, W, D)
// with W = band_width(window, causal), both given or neither. Returns whether it is on.
bool check_position(const Tensor& q, const c10::optional<Tensor>& pos_query, const c10::optional<Tensor>& table,
                    int64_t window, bool causal) {
  const bool has_query = pos_query.has_value() && pos_query->defined();
  const bool has_table = table.has_value() && table->defined();
  TORCH_CHECK_VALUE(has_query == has_table, "position: give pos_query and table together");
  if (!has_query) return false;
  TORCH_CHECK_VALUE(pos_query->sizes() == q.sizes(), "pos_query: shape ", pos_query->sizes(), " does not match q's ",
                    q.sizes());
  const int64_t width = lfs::band_width(window, causal);
  TORCH_CHECK_VALUE(
      table->dim() == 3 && table->size(0) == q.size(1) && table->size(1) == width && table->size(2) == q.size(3),
      "table: expected shape (H, W, D) = (", q.size(1), ", ", width, ", ", q.size(3), "), got ", table->sizes());
  for (const auto& [name, x] : {std::pair{"pos_query", *pos_query}, {"table", *table}})
    TORCH_CHECK_VALUE(x.device() == q.device(), name, ": is on ", x.device(), " but q is on ", q.device());
  TORCH_CHECK(!q.is_cuda(),
              "band kernels: the relative-position term has no CUDA kernel yet; "
              "use backend='chunks' on GPU");
  return true;
}

// Kernels need a unit stride on D; anything else is copied once.
Tensor unit_last(const Tensor& x) { return x.stride(-1) == 1 ? x : x.contiguous(); }

// The CUDA kernels take one stride set for q, k and v.
void same_layout(Tensor& q, Tensor& k, Tensor& v) {
  q = unit_last(q), k = unit_last(k), v = unit_last(v);
  if (k.strides() != q.strides() || v.strides() != q.strides())
    q = q.contiguous(), k = k.contiguous(), v = v.contiguous();
}

template <typename T>
lfs::Strided4<T> s4(const Tensor& x) {
  return {x.data_ptr<std::remove_const_t<T>>(), x.stride(0), x.stride(1), x.stride(2)};
}

template <typename T>
lfs::Strided3<T> s3(const Tensor& x) {
  return {x.data_ptr<std::remove_const_t<T>>(), x.stride(0), x.stride(1), x.stride(2)};
}

template <typename T>
lfs::PositionTerm<T> position(const Tensor& pos_query, const Tensor& table) {
  if (!pos_query.defined()) return {{nullptr, 0, 0, 0}, nullptr};
  return {s4<const T>(pos_query), table.data_ptr<T>()};
}

at::ScalarType compute_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

#ifdef LFS_WITH_CUDA
lfs::DType cuda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return lfs::DType::f32;
    case at::kDouble:
      return lfs::DType::f64;
    case at::kHalf:
      return lfs::DType::f16;
    default:
      return lfs::DType::bf16;
  }
}

void check_cuda(int err, const char* what) {
  TORCH_CHECK(err == 0, "band kernels: CUDA ", what, " failed with error ", err);
}
#endif

std::vector<Tensor> forward(Tensor q, Tensor k, Tensor v, c10::optional<Tensor> key_ok, std::vector<int64_t> dilation,
                            int64_t window, bool causal, double scale, c10::optional<Tensor> pos_query,
                            c10::optional<Tensor> table, int64_t stream) {
  check_qkv(q, k, v);
  auto prep = prepare(q, key_ok, dilation, window, causal, scale);
  const bool relative = check_position(q, pos_query, table, window, causal);
  const auto ct = compute_type(q.scalar_type());
  auto opts = q.options().dtype(ct);
  Tensor out = torch::empty(q.sizes(), opts);
  Tensor lse = torch::empty({q.size(0), q.size(1), q.size(2)}, opts);
  if (q.numel() == 0) return {out, lse.fill_(-INFINITY)};

  if (q.is_cuda()) {
#ifdef LFS_WITH_CUDA
    same_layout(q, k, v);
    const int64_t in_strides[3] = {q.stride(0), q.stride(1), q.stride(2)};
    const int64_t out_strides[3] = {out.stride(0), out.stride(1), out.stride(2)};
    const int64_t lse_strides[3] = {lse.stride(0), lse.stride(1), lse.stride(2)};
    check_cuda(lfs::band_forward_cuda(prep.problem, cuda_dtype(q.scalar_type()), q.data_ptr(), k.data_ptr(),
                                      v.data_ptr(), in_strides, out.data_ptr(), out_strides, lse.data_ptr(),
                                      lse_strides, reinterpret_cast<void*>(stream)),
               "forward");
    return {out, lse};
#else
    TORCH_CHECK(false, "band kernels: this build has no CUDA support; reinstall with a CUDA-enabled torch");
#endif
  }
  TORCH_CHECK_VALUE(q.device().is_cpu(), "q: unsupported device ", q.device());
  // CPU computes in fp32/fp64: half inputs are widened once here.
  q = unit_last(q.to(ct)), k = unit_last(k.to(ct)), v = unit_last(v.to(ct));
  Tensor pq = relative ? unit_last(pos_query->to(ct)) : Tensor();
  Tensor tab = relative ? table->to(ct).contiguous() : Tensor();
  AT_DISPATCH_FLOATING_TYPES(ct, "band_forward_cpu", [&] {
    const auto pos = position<scalar_t>(pq, tab);
    at::parallel_for(0, prep.problem.num_items(), 1, [&](int64_t begin, int64_t end) {
      lfs::band_forward_cpu<scalar_t>(prep.problem, s4<const scalar_t>(q), s4<const scalar_t>(k), s4<const scalar_t>(v),
                                      pos, s4<scalar_t>(out), s3<scalar_t>(lse), begin, end);
    });
  });
  return {out, lse};
}

std::vector<Tensor> backward(Tensor q, Tensor k, Tensor v, c10::optional<Tensor> key_ok, std::vector<int64_t> dilation,
                             int64_t window, bool causal, double scale, c10::optional<Tensor> pos_query,
                             c10::optional<Tensor> table, Tensor out, Tensor lse, Tensor dout,
                             c10::optional<Tensor> dlse, int64_t stream) {
  check_qkv(q, k, v);
  auto prep = prepare(q, key_ok, dilation, window, causal, scale);
  const bool relative = check_position(q, pos_query, table, window, causal);
  const auto ct = compute_type(q.scalar_type());
  // delta = rowsum(dO * O) - dL turns the softmax backward into dS = P * (dP - delta).
  Tensor delta = (dout.to(ct) * out.to(ct)).sum(-1);
  if (dlse.has_value() && dlse->defined()) delta = delta - dlse->to(ct);
  lse = lse.to(ct).contiguous(), delta = delta.contiguous();
  auto opts = q.options().dtype(ct);
  Tensor dq = torch::empty(q.sizes(), opts), dk = torch::empty(q.sizes(), opts), dv = torch::empty(q.sizes(), opts);
  // Items of one head run on several threads and all add to its table rows: each thread
  // gets its own dtable slice (no atomics), summed at the end.
  Tensor dpq = relative ? torch::empty(q.sizes(), opts) : Tensor();
  Tensor dtab =
      relative ? torch::zeros({at::get_num_threads(), table->size(0), table->size(1), table->size(2)}, opts) : Tensor();
  if (q.numel() == 0) return {dq, dk, dv, dpq, relative ? dtab.sum(0) : Tensor()};

  if (q.is_cuda()) {
#ifdef LFS_WITH_CUDA
    same_layout(q, k, v);
    dout = dout.to(q.scalar_type()).contiguous();
    const int64_t in_strides[3] = {q.stride(0), q.stride(1), q.stride(2)};
    const int64_t dout_strides[3] = {dout.stride(0), dout.stride(1), dout.stride(2)};
    const int64_t stat_strides[3] = {lse.stride(0), lse.stride(1), lse.stride(2)};
    const int64_t grad_strides[3] = {dq.stride(0), dq.stride(1), dq.stride(2)};
    check_cuda(lfs::band_backward_cuda(prep.problem, cuda_dtype(q.scalar_type()), q.data_ptr(), k.data_ptr(),
                                       v.data_ptr(), in_strides, dout.data_ptr(), dout_strides, lse.data_ptr(),
                                       delta.data_ptr(), stat_strides, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                                       grad_strides, reinterpret_cast<void*>(stream)),
               "backward");
    return {dq, dk, dv, Tensor(), Tensor()};
#else
    TORCH_CHECK(false, "band kernels: this build has no CUDA support; reinstall with a CUDA-enabled torch");
#endif
  }
  q = unit_last(q.to(ct)), k = unit_last(k.to(ct)), v = unit_last(v.to(ct)), dout = unit_last(dout.to(ct));
  Tensor pq = relative ? unit_last(pos_query->to(ct)) : Tensor();
  Tensor tab = relative ? table->to(ct).contiguous() : Tensor();
  AT_DISPATCH_FLOATING_TYPES(ct, "band_backward_cpu", [&] {
    const auto pos = position<scalar_t>(pq, tab);
    at::parallel_for(0, prep.problem.num_items(), 1, [&](int64_t begin, int64_t end) {
      lfs::PositionGrads<scalar_t> dpos{{nullptr, 0, 0, 0}, nullptr};
      // Pointer arithmetic, not dtab[i]: no ATen calls inside the parallel region.
      if (relative) dpos = {s4<scalar_t>(dpq), dtab.data_ptr<scalar_t>() + at::get_thread_num() * dtab.stride(0)};
      lfs::band_backward_cpu<scalar_t>(prep.problem, s4<const scalar_t>(q), s4<const scalar_t>(k),
                                       s4<const scalar_t>(v), pos, s4<const scalar_t>(dout), s3<const scalar_t>(lse),
                                       s3<const scalar_t>(delta), s4<scalar_t>(dq), s4<scalar_t>(dk), s4<scalar_t>(dv),
                                       dpos, begin, end);
    });
  });
  return {dq, dk, dv, dpq, relative ? dtab.sum(0) : Tensor()};
}

// Exposed for tests: the header's index math, so Python can compare it with band.py.
std::vector<int64_t> index_probe(int64_t query, int64_t column, int64_t key, int64_t window, int64_t dilation,
                                 bool causal, int64_t seq_len, int64_t residue) {
  const auto kr = lfs::key_range(query, query + 1, window, causal, seq_len);
  return {lfs::band_width(window, causal),
          lfs::band_key(query, column, window, dilation),
          lfs::band_column(query, key, window, dilation, causal),
          lfs::residue_length(seq_len, dilation, residue),
          lfs::effective_window(window, seq_len),
          kr.lo,
          kr.hi};
}

bool has_cuda() {
#ifdef LFS_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Band-attention kernels (CPU, and CUDA when built with it).";
  m.def("forward", &forward,
        "band attention forward -> (out, lse); pos_query/table: optional relative-position term; "
        "stream: CUDA stream handle or 0");
  m.def("backward", &backward,
        "band attention backward -> (dq, dk, dv, dpos_query, dtable); the last two are None without "
        "a position term; stream: CUDA stream handle or 0");
  m.def("index_probe", &index_probe, "band_index.h values, for tests");
  m.def("has_cuda", &has_cuda, "whether this build includes the CUDA kernels");
}

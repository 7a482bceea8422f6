// Torch binding of the band kernels: argument checks, dtype and device dispatch, threads.
//
// The kernels (cpu/, cuda/) see raw pointers and int64 strides only, through one
// signature (band_kernels.h): this file picks the table for the device and calls it the
// same way on both. The CUDA stream comes from Python as an integer, so this file needs
// no CUDA headers and its CUDA branch compiles (and is checked) against a CPU-only torch.
//
// It includes the ATen and pybind headers it uses, not <torch/extension.h> (all of torch's
// C++ API): the headers are most of its compile time, 41 s against 18 s on one CI core, paid
// by every install and by the compile check in tests/attention/test_kernels.py.
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

#include "band_index.h"
#include "band_kernels.h"

namespace {

using at::Tensor;

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
  return true;
}

const lfs::BandKernels& kernels_for(const Tensor& q) {
  if (q.is_cuda()) {
#ifdef LFS_WITH_CUDA
    return lfs::kCudaBandKernels;
#else
    TORCH_CHECK(false, "band kernels: this build has no CUDA support; reinstall with a CUDA-enabled torch");
#endif
  }
  TORCH_CHECK_VALUE(q.device().is_cpu(), "q: unsupported device ", q.device());
  return lfs::kCpuBandKernels;
}

lfs::DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kDouble:
      return lfs::DType::f64;
    case at::kHalf:
      return lfs::DType::f16;
    case at::kBFloat16:
      return lfs::DType::bf16;
    default:
      return lfs::DType::f32;
  }
}

at::ScalarType compute_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// The kernels need a unit stride on D; anything else is copied once. Inputs in a dtype
// the device's kernels do not read are widened to the compute type here.
Tensor operand(const Tensor& x, const lfs::BandKernels& kernels) {
  Tensor y = kernels.reads(dtype_of(x.scalar_type())) ? x : x.to(compute_type(x.scalar_type()));
  return y.stride(-1) == 1 ? y : y.contiguous();
}

lfs::Strides strides(const Tensor& x) { return {x.stride(0), x.stride(1), x.stride(2)}; }

// q, k, v, and the position term, as the kernels read them.
struct Operands {
  Tensor q, k, v, pos_query, table;
  lfs::BandInputs view() const {
    lfs::BandInputs in{};
    in.q = q.data_ptr(), in.k = k.data_ptr(), in.v = v.data_ptr();
    in.q_s = strides(q), in.k_s = strides(k), in.v_s = strides(v);
    if (pos_query.defined()) {
      in.pos_query = pos_query.data_ptr(), in.pos_s = strides(pos_query);
      in.table = table.data_ptr();
    }
    return in;
  }
};

Operands operands(const Tensor& q, const Tensor& k, const Tensor& v, const c10::optional<Tensor>& pos_query,
                  const c10::optional<Tensor>& table, bool relative, const lfs::BandKernels& kernels) {
  Operands o{operand(q, kernels), operand(k, kernels), operand(v, kernels), Tensor(), Tensor()};
  if (relative) {
    // The position term is read in the dtype of q (the kernels take one input type).
    o.pos_query = operand(pos_query->to(o.q.scalar_type()), kernels);
    o.table = table->to(o.q.scalar_type()).contiguous();
  }
  return o;
}

// CPU kernels run on ATen's thread pool; each worker passes its thread index as its slot.
void aten_parallel_for(int64_t n, void* ctx, void (*body)(void*, int64_t, int64_t, int64_t)) {
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) { body(ctx, begin, end, at::get_thread_num()); });
}

lfs::Launch launch_on(const Tensor& q, int64_t stream) {
  return lfs::Launch{reinterpret_cast<void*>(stream), at::get_num_threads(), aten_parallel_for};
}

void check_status(int err, const lfs::BandKernels& kernels, const char* what) {
  TORCH_CHECK(err == 0, "band kernels: ", kernels.device, " ", what, " failed with error ", err);
}

std::vector<Tensor> forward(Tensor q, Tensor k, Tensor v, c10::optional<Tensor> key_ok, std::vector<int64_t> dilation,
                            int64_t window, bool causal, double scale, c10::optional<Tensor> pos_query,
                            c10::optional<Tensor> table, int64_t stream) {
  check_qkv(q, k, v);
  auto prep = prepare(q, key_ok, dilation, window, causal, scale);
  const bool relative = check_position(q, pos_query, table, window, causal);
  const auto& kernels = kernels_for(q);
  auto opts = q.options().dtype(compute_type(q.scalar_type()));
  Tensor out = at::empty(q.sizes(), opts);
  Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, opts);
  if (q.numel() == 0) return {out, lse.fill_(-INFINITY)};

  const Operands x = operands(q, k, v, pos_query, table, relative, kernels);
  const lfs::ForwardOutputs o{out.data_ptr(), strides(out), lse.data_ptr(), strides(lse)};
  check_status(kernels.forward(prep.problem, dtype_of(x.q.scalar_type()), x.view(), o, launch_on(q, stream)), kernels,
               "forward");
  return {out, lse};
}

std::vector<Tensor> backward(Tensor q, Tensor k, Tensor v, c10::optional<Tensor> key_ok, std::vector<int64_t> dilation,
                             int64_t window, bool causal, double scale, c10::optional<Tensor> pos_query,
                             c10::optional<Tensor> table, Tensor out, Tensor lse, Tensor dout,
                             c10::optional<Tensor> dlse, int64_t stream) {
  check_qkv(q, k, v);
  auto prep = prepare(q, key_ok, dilation, window, causal, scale);
  const bool relative = check_position(q, pos_query, table, window, causal);
  const auto& kernels = kernels_for(q);
  const auto ct = compute_type(q.scalar_type());
  // delta = rowsum(dO * O) - dL turns the softmax backward into dS = P * (dP - delta).
  Tensor delta = (dout.to(ct) * out.to(ct)).sum(-1);
  if (dlse.has_value() && dlse->defined()) delta = delta - dlse->to(ct);
  lse = lse.to(ct).contiguous(), delta = delta.contiguous();
  auto opts = q.options().dtype(ct);
  Tensor dq = at::empty(q.sizes(), opts), dk = at::empty(q.sizes(), opts), dv = at::empty(q.sizes(), opts);
  Tensor dpq = relative ? at::empty(q.sizes(), opts) : Tensor();
  const lfs::Launch run = launch_on(q, stream);
  // The table gradient is summed over every query of a head: the kernels add into
  // separate slots (CPU threads, CUDA query chunks) and the slots are summed here.
  Tensor dtab =
      relative
          ? at::zeros({kernels.dtable_slots(prep.problem, run), table->size(0), table->size(1), table->size(2)}, opts)
          : Tensor();
  if (q.numel() == 0) return {dq, dk, dv, dpq, relative ? dtab.sum(0) : Tensor()};

  const Operands x = operands(q, k, v, pos_query, table, relative, kernels);
  const Tensor g = operand(dout.to(x.q.scalar_type()), kernels);
  lfs::BackwardArgs a{};
  a.dout = g.data_ptr(), a.dout_s = strides(g);
  a.lse = lse.data_ptr(), a.delta = delta.data_ptr(), a.stat_s = strides(lse);
  a.dq = dq.data_ptr(), a.dk = dk.data_ptr(), a.dv = dv.data_ptr(), a.grad_s = strides(dq);
  if (relative) a.dpos_query = dpq.data_ptr(), a.dpos_s = strides(dpq), a.dtable = dtab.data_ptr();
  check_status(kernels.backward(prep.problem, dtype_of(x.q.scalar_type()), x.view(), a, run), kernels, "backward");
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

#include "patterns/attention/kind/problem.hpp"

#include <algorithm>
#include <stdexcept>

namespace fact::attention {

namespace {

using nlohmann::json;

constexpr std::pair<MaskKind, std::string_view> kMaskNames[] = {
    {MaskKind::None, "none"},
    {MaskKind::CausalTopLeft, "causal_top_left"},
    {MaskKind::CausalBottomRight, "causal_bottom_right"},
};

int64_t int_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    throw std::invalid_argument(where + ": missing or non-integer field '" + key + "'");
  }
  return it->get<int64_t>();
}

std::vector<int64_t> dims_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) {
    throw std::invalid_argument(where + ": missing field '" + key + "'");
  }
  std::vector<int64_t> dims;
  for (const auto& d : *it) {
    if (!d.is_number_integer()) throw std::invalid_argument(where + ": '" + key + "' holds a non-integer");
    dims.push_back(d.get<int64_t>());
  }
  return dims;
}

json view_to_json(const TensorView& v) {
  return {{"value", v.value}, {"shape", v.shape}, {"stride", v.stride}, {"offset", v.offset}};
}

// A view as canonicalization writes it; rank 3 ([B, T, D]) gets a head dim of extent 1.
TensorView view_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw std::invalid_argument(where + ": expected an object");
  TensorView v;
  auto value = j.find("value");
  if (value == j.end() || !value->is_string()) throw std::invalid_argument(where + ": missing 'value'");
  v.value = value->get<std::string>();
  v.shape = dims_field(j, "shape", where);
  v.stride = dims_field(j, "stride", where);
  v.offset = j.contains("offset") ? int_field(j, "offset", where) : 0;
  if (v.shape.size() != v.stride.size()) throw std::invalid_argument(where + ": shape and stride differ in rank");
  if (v.shape.size() == 3) {
    v.shape.insert(v.shape.begin() + 1, 1);
    v.stride.insert(v.stride.begin() + 1, 0);
  }
  if (v.shape.size() != 4) {
    throw std::invalid_argument(where + ": a view of rank " + std::to_string(v.shape.size()) +
                                " (expected [batch, heads, seq, dim])");
  }
  return v;
}

}  // namespace

std::string_view mask_kind_name(MaskKind kind) {
  for (const auto& [k, name] : kMaskNames) {
    if (k == kind) return name;
  }
  return "none";
}

std::optional<MaskKind> parse_mask_kind(std::string_view name) {
  for (const auto& [k, text] : kMaskNames) {
    if (text == name) return k;
  }
  return std::nullopt;
}

double AttentionProblem::flops() const {
  const double per_pair = 2.0 * double(batch) * double(heads) * double(head_dim + v_head_dim);
  if (mask == MaskKind::None) return per_pair * double(seq) * double(kv_seq);
  if (window <= 0) return 0.5 * per_pair * double(seq) * double(kv_seq);
  const int64_t off = mask == MaskKind::CausalBottomRight ? kv_seq - seq : 0;
  double pairs = 0.0;  // keys max(0, i + off - window + 1) .. min(kv_seq - 1, i + off) per query i
  for (int64_t i = 0; i < seq; ++i) {
    pairs += double(std::max<int64_t>(0, std::min(kv_seq, i + off + 1) - std::max<int64_t>(0, i + off - window + 1)));
  }
  return per_pair * pairs;
}

double AttentionProblem::min_bytes() const {
  const double bytes = std::max(graph::dtype_bytes(dtype), 1);
  return bytes * double(batch) *
         double(heads * seq * head_dim + kv_heads * kv_seq * (head_dim + v_head_dim) +
                heads * seq * v_head_dim);
}

std::string AttentionProblem::shape_string() const {
  std::string text = std::to_string(batch) + "x" + std::to_string(heads);
  if (kv_heads != heads) text += "/" + std::to_string(kv_heads);
  text += "x" + std::to_string(seq);
  if (kv_seq != seq) text += "/" + std::to_string(kv_seq);
  text += "xd" + std::to_string(head_dim);
  return window > 0 ? text + "w" + std::to_string(window) : text;
}

std::string AttentionProblem::fusion_name() const {
  if (key_mask) return "attention_key_mask";
  return mask == MaskKind::None ? "attention" : "attention_causal";
}

json attention_problem_to_json(const AttentionProblem& p) {
  json j = {{"batch", p.batch},
            {"heads", p.heads},
            {"kv_heads", p.kv_heads},
            {"seq", p.seq},
            {"kv_seq", p.kv_seq},
            {"head_dim", p.head_dim},
            {"v_head_dim", p.v_head_dim},
            {"dtype", graph::dtype_name(p.dtype)},
            {"softmax_dtype", graph::dtype_name(p.softmax_dtype)},
            {"mask_kind", mask_kind_name(p.mask)},
            {"causal", p.mask != MaskKind::None},
            {"causal_evidence", p.mask_evidence},
            {"window", p.window},
            {"scale", p.scale},
            {"unsupported", p.unsupported},
            {"dropout", p.dropout}};
  if (!p.q.value.empty()) j["q"] = view_to_json(p.q);
  if (!p.k.value.empty()) j["k"] = view_to_json(p.k);
  if (!p.v.value.empty()) j["v"] = view_to_json(p.v);
  if (!p.o.value.empty()) j["out"] = view_to_json(p.o);
  if (p.key_mask) {
    j["key_mask"] = {{"value", p.key_mask->value}, {"keep", p.key_mask->keep},
                     {"batch_stride", p.key_mask->batch_stride}, {"key_stride", p.key_mask->key_stride},
                     {"offset", p.key_mask->offset}};
  }
  return j;
}

AttentionProblem attention_problem_from_json(const json& j) {
  const std::string where = "attention problem";
  if (!j.is_object()) throw std::invalid_argument(where + ": expected a JSON object");
  AttentionProblem p;
  p.batch = int_field(j, "batch", where);
  p.heads = int_field(j, "heads", where);
  p.kv_heads = j.contains("kv_heads") ? int_field(j, "kv_heads", where) : p.heads;
  p.seq = int_field(j, "seq", where);
  p.kv_seq = j.contains("kv_seq") ? int_field(j, "kv_seq", where) : p.seq;
  p.head_dim = int_field(j, "head_dim", where);
  p.v_head_dim = j.contains("v_head_dim") ? int_field(j, "v_head_dim", where) : p.head_dim;
  p.dtype = graph::parse_dtype(j.value("dtype", std::string()));
  p.softmax_dtype = graph::parse_dtype(j.value("softmax_dtype", std::string()));
  if (auto it = j.find("mask_kind"); it != j.end() && it->is_string()) {
    auto kind = parse_mask_kind(it->get<std::string>());
    if (!kind) throw std::invalid_argument(where + ": unknown mask_kind '" + it->get<std::string>() + "'");
    p.mask = *kind;
  } else {
    p.mask = j.value("causal", false) ? MaskKind::CausalTopLeft : MaskKind::None;
  }
  p.mask_evidence = j.value("causal_evidence", std::string());
  if (auto it = j.find("window"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      throw std::invalid_argument(where + ": 'window' must be a non-negative integer");
    }
    p.window = it->get<int64_t>();
    if (p.window > 0 && p.mask == MaskKind::None) {
      throw std::invalid_argument(where + ": a sliding window (" + std::to_string(p.window) + ") needs a causal mask");
    }
  }
  auto scale = j.find("scale");
  if (scale == j.end() || !scale->is_number()) throw std::invalid_argument(where + ": missing 'scale'");
  p.scale = scale->get<double>();
  if (auto it = j.find("unsupported"); it != j.end() && it->is_string()) p.unsupported = it->get<std::string>();
  if (auto it = j.find("dropout"); it != j.end() && it->is_number()) p.dropout = it->get<double>();
  if (j.contains("q")) p.q = view_from_json(j.at("q"), where + " q");
  if (j.contains("k")) p.k = view_from_json(j.at("k"), where + " k");
  if (j.contains("v")) p.v = view_from_json(j.at("v"), where + " v");
  if (j.contains("out")) p.o = view_from_json(j.at("out"), where + " out");
  if (auto it = j.find("key_mask"); it != j.end() && !it->is_null()) {
    const std::string at = where + " key_mask";
    if (!it->is_object() || !it->contains("value") || !it->at("value").is_string()) {
      throw std::invalid_argument(at + ": expected {\"value\", \"keep\", \"batch_stride\", \"key_stride\", \"offset\"}");
    }
    KeyMask key;
    key.value = it->at("value").get<std::string>();
    key.keep = it->value("keep", true);
    key.batch_stride = int_field(*it, "batch_stride", at);
    key.key_stride = int_field(*it, "key_stride", at);
    key.offset = it->contains("offset") ? int_field(*it, "offset", at) : 0;
    if (key.batch_stride < 0 || key.key_stride < 0 || key.offset < 0) {
      throw std::invalid_argument(at + ": strides and offset must be non-negative");
    }
    p.key_mask = std::move(key);
  }
  if (p.batch <= 0 || p.heads <= 0 || p.kv_heads <= 0 || p.seq <= 0 || p.kv_seq <= 0 ||
      p.head_dim <= 0 || p.v_head_dim <= 0) {
    throw std::invalid_argument(where + ": sizes must be positive (" + p.shape_string() + ")");
  }
  return p;
}

Problem to_problem(const AttentionProblem& p) { return Problem{kKindName, attention_problem_to_json(p)}; }

AttentionProblem attention_problem_of(const Problem& problem) {
  if (problem.kind != kKindName) {
    throw std::invalid_argument("expected an attention problem, not one of kind '" + problem.kind + "'");
  }
  return attention_problem_from_json(problem.desc);
}

void set_dense_views(AttentionProblem& p) {
  auto dense = [](const char* name, int64_t b, int64_t t, int64_t h, int64_t d) {
    // [B, T, H, D] row-major, seen as [B, H, T, D].
    return TensorView{name, {b, h, t, d}, {t * h * d, d, h * d, 1}, 0};
  };
  p.q = dense("q", p.batch, p.seq, p.heads, p.head_dim);
  p.k = dense("k", p.batch, p.kv_seq, p.kv_heads, p.head_dim);
  p.v = dense("v", p.batch, p.kv_seq, p.kv_heads, p.v_head_dim);
  p.o = dense("o", p.batch, p.seq, p.heads, p.v_head_dim);
}

std::optional<std::string> attention_decline_reason(const AttentionProblem& p,
                                                    core::PrecisionMode precision) {
  if (!p.unsupported.empty()) return p.unsupported;
  if (p.key_mask && p.mask != MaskKind::None) return "a key mask with a causal mask (no kernel takes both)";
  if (p.key_mask && p.dtype == DType::Float32) return "a key mask on float32 (the float32 kernel takes none)";
  if (p.dtype == DType::Float32) {
    if (precision == core::PrecisionMode::Native) {
      return "float32 attention in a '" + std::string(core::precision_name(precision)) +
             "' run: the float32 attention kernels are 3xTF32 (precision strict) and TF32 (precision tf32)";
    }
  } else if (p.dtype != DType::BFloat16 && p.dtype != DType::Float16) {
    return "dtype " + std::string(graph::dtype_name(p.dtype)) + ": the attention kernels are bf16/fp16 and float32";
  }
  if (p.head_dim != p.v_head_dim) {
    return "head dim of Q/K (" + std::to_string(p.head_dim) + ") differs from V's (" +
           std::to_string(p.v_head_dim) + ")";
  }
  if (p.dtype == DType::Float32) {
    if (!float32_kernel_head_dim(p.head_dim)) {
      return "head dim " + std::to_string(p.head_dim) +
             " has no float32 kernel (built for multiples of 8 from 16 to 128)";
    }
  } else if (std::find(kKernelHeadDims.begin(), kKernelHeadDims.end(), p.head_dim) == kKernelHeadDims.end()) {
    return "head dim " + std::to_string(p.head_dim) + " has no kernel (built for 64, 80, 96, 128)";
  }
  if (p.heads % p.kv_heads != 0) {
    return std::to_string(p.heads) + " query heads are not a multiple of " + std::to_string(p.kv_heads) +
           " key/value heads";
  }
  const int64_t align = 16 / std::max(graph::dtype_bytes(p.dtype), 1);  // elements in 16 bytes
  const std::pair<const char*, const TensorView*> views[] = {{"Q", &p.q}, {"K", &p.k}, {"V", &p.v}, {"O", &p.o}};
  for (const auto& [name, view] : views) {
    if (view->value.empty()) continue;  // dense views are set by the runtime
    if (view->stride[3] != 1 && view->shape[3] != 1) {
      return std::string(name) + "'s head dim is not contiguous (stride " + std::to_string(view->stride[3]) + ")";
    }
    for (int d = 0; d < 3; ++d) {
      if (view->shape[d] > 1 && view->stride[d] % align != 0) {
        return std::string(name) + " stride " + std::to_string(view->stride[d]) + " is not a multiple of " +
               std::to_string(align) + " elements (16 bytes, TMA)";
      }
    }
    if (view->offset % align != 0) {
      return std::string(name) + " starts " + std::to_string(view->offset) + " elements into '" + view->value +
             "', not a multiple of 16 bytes (TMA)";
    }
  }
  if (!p.o.value.empty() && (p.o.shape != std::vector<int64_t>{p.batch, p.heads, p.seq, p.v_head_dim})) {
    return "output view does not have the problem's shape";
  }
  return std::nullopt;
}

}  // namespace fact::attention

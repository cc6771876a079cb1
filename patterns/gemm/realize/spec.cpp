#include "patterns/gemm/realize/spec.hpp"

#include "patterns/gemm/epilogue/op_table.hpp"

#include <stdexcept>
#include <string>

#include "patterns/gemm/realize/cutlass_names.hpp"

namespace fact::gemm {
namespace {

// Alignment in elements of a 16-byte access: the default each alignment field is compared to.
int full_alignment(DType dtype) {
  const int bytes = graph::dtype_bytes(dtype);
  return bytes > 0 ? 16 / bytes : 0;
}

std::string shape_token(const Shape3& s, bool with_k) {
  std::string out = std::to_string(s.m) + "x" + std::to_string(s.n);
  if (with_k) out += "x" + std::to_string(s.k);
  return out;
}

std::string epilogue_token(const EpilogueOpSpec& op, DType d_dtype) {
  std::string token = op.kind == EpilogueStep::Kind::Activation
                          ? std::string(activation_token(op.activation))
                          : std::string(epilogue_kind_token(op.kind));
  // A step other than an activation that reads one (a gate) names it too.
  if (op.kind != EpilogueStep::Kind::Activation &&
      step_op(op.kind).constants == StepConstantsRead::ACTIVATION) {
    token += std::string(activation_token(op.activation));
  }
  const bool has_operand = reads_operand(op.kind);
  if (has_operand && op.operand_dtype != d_dtype) token += dtype_token(op.operand_dtype);
  return token;
}

nlohmann::json shape_json(const Shape3& s) { return nlohmann::json::array({s.m, s.n, s.k}); }

Shape3 parse_shape(const nlohmann::json& j, const char* field) {
  if (!j.is_array() || j.size() != 3) {
    throw std::invalid_argument(std::string("GemmSpec.") + field + ": expected [m, n, k]");
  }
  return Shape3{j.at(0).get<int>(), j.at(1).get<int>(), j.at(2).get<int>()};
}

// Reads j[field] when present; `parse` converts it. Wraps nlohmann type errors with the field.
template <class T, class Parse>
void read_field(const nlohmann::json& j, const char* field, T& out, Parse parse) {
  if (!j.contains(field)) return;
  try {
    out = parse(j.at(field));
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("GemmSpec.") + field + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("GemmSpec.") + field + ": " + e.what());
  }
}

// The staged-transpose tokens ("none", "a", "b"): GemmSpec::staged_transpose in names and JSON.
const char* staged_transpose_token(StagedTranspose staged) {
  switch (staged) {
    case StagedTranspose::A: return "a";
    case StagedTranspose::B: return "b";
    case StagedTranspose::None: break;
  }
  return "none";
}

StagedTranspose parse_staged_transpose_token(const std::string& token) {
  if (token == "none") return StagedTranspose::None;
  if (token == "a") return StagedTranspose::A;
  if (token == "b") return StagedTranspose::B;
  throw std::invalid_argument("staged_transpose: expected 'none', 'a' or 'b', got '" + token + "'");
}

auto as_string = [](const nlohmann::json& v) { return v.get<std::string>(); };
auto as_int = [](const nlohmann::json& v) { return v.get<int>(); };
auto as_dtype = [](const nlohmann::json& v) { return parse_dtype_token(v.get<std::string>()); };
auto as_layout = [](const nlohmann::json& v) { return parse_layout_json(v.get<std::string>()); };

}  // namespace

std::string GemmSpec::name() const {
  std::string out = pattern == "gemm" ? (batched ? "bgemm" : "gemm")
                                      : pattern + (batched ? "_batched" : "");
  for (const auto& op : epilogue) out += "_" + epilogue_token(op, d_dtype);

  out += "_" + std::string(dtype_token(a_dtype));
  if (b_dtype != a_dtype) out += dtype_token(b_dtype);
  if (d_dtype != a_dtype) out += "_" + std::string(dtype_token(d_dtype));
  if (accumulate != DType::Float32) out += "_acc" + std::string(dtype_token(accumulate));

  out += "_";
  out += layout_letter(a_layout);
  out += layout_letter(b_layout);
  if (d_layout != Layout::RowMajor) out += layout_letter(d_layout);
  if (align_a != full_alignment(a_dtype) || align_b != full_alignment(b_dtype) ||
      align_d != full_alignment(d_dtype)) {
    out += "_align" + std::to_string(align_a) + "x" + std::to_string(align_b) + "x" +
           std::to_string(align_d);
  }

  out += "_" + shape_token(tile, true);
  out += "_c" + shape_token(cluster, cluster.k != 1);
  out += "_" + std::string(mainloop_token(mainloop));
  if (epilogue_schedule != EpilogueSchedule::Auto) {
    out += "_e" + std::string(epilogue_schedule_token(epilogue_schedule));
  }
  out += "_" + std::string(tile_scheduler_token(scheduler));
  if (split_k != 1) out += "_splitk" + std::to_string(split_k);
  if (!ordered_reduction) out += "_unordered";
  if (raster != RasterOrder::Heuristic) out += "_raster" + std::string(raster_token(raster));
  if (swizzle != 1) out += "_sw" + std::to_string(swizzle);
  if (stages != 0) out += "_s" + std::to_string(stages);
  if (staged_transpose != StagedTranspose::None)
    out += std::string("_stage") + staged_transpose_token(staged_transpose) + "t";
  if (math != MathMode::Native) out += "_" + std::string(math_token(math));
  return out;
}

nlohmann::json GemmSpec::to_json() const {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : epilogue) {
    nlohmann::json o{{"kind", epilogue_kind_token(op.kind)}};
    if (step_op(op.kind).constants == StepConstantsRead::ACTIVATION)
      o["activation"] = activation_token(op.activation);
    if (op.operand_dtype != DType::Unknown) o["operand_dtype"] = dtype_token(op.operand_dtype);
    ops.push_back(std::move(o));
  }
  nlohmann::json out{
      {"pattern", pattern},
      {"a_dtype", dtype_token(a_dtype)},
      {"b_dtype", dtype_token(b_dtype)},
      {"d_dtype", dtype_token(d_dtype)},
      {"accumulate", dtype_token(accumulate)},
      {"a_layout", layout_json(a_layout)},
      {"b_layout", layout_json(b_layout)},
      {"d_layout", layout_json(d_layout)},
      {"align_a", align_a},
      {"align_b", align_b},
      {"align_d", align_d},
      {"batched", batched},
      {"math", math_token(math)},
      {"epilogue", std::move(ops)},
      {"tile", shape_json(tile)},
      {"cluster", shape_json(cluster)},
      {"mainloop", mainloop_token(mainloop)},
      {"epilogue_schedule", epilogue_schedule_token(epilogue_schedule)},
      {"scheduler", tile_scheduler_token(scheduler)},
      {"raster", raster_token(raster)},
      {"swizzle", swizzle},
      {"split_k", split_k},
      {"reduction", ordered_reduction ? "ordered" : "unordered"},
      {"stages", stages},
  };
  // Absent unless set, so that every other kernel's JSON (and key) stays as it was.
  if (staged_transpose != StagedTranspose::None)
    out["staged_transpose"] = staged_transpose_token(staged_transpose);
  return out;
}

GemmSpec GemmSpec::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("GemmSpec: expected a JSON object");
  GemmSpec s;
  read_field(j, "pattern", s.pattern, as_string);
  read_field(j, "a_dtype", s.a_dtype, as_dtype);
  read_field(j, "b_dtype", s.b_dtype, as_dtype);
  read_field(j, "d_dtype", s.d_dtype, as_dtype);
  read_field(j, "accumulate", s.accumulate, as_dtype);
  read_field(j, "a_layout", s.a_layout, as_layout);
  read_field(j, "b_layout", s.b_layout, as_layout);
  read_field(j, "d_layout", s.d_layout, as_layout);
  read_field(j, "align_a", s.align_a, as_int);
  read_field(j, "align_b", s.align_b, as_int);
  read_field(j, "align_d", s.align_d, as_int);
  read_field(j, "batched", s.batched, [](const nlohmann::json& v) { return v.get<bool>(); });
  read_field(j, "math", s.math,
             [](const nlohmann::json& v) { return parse_math_token(v.get<std::string>()); });
  read_field(j, "epilogue", s.epilogue, [](const nlohmann::json& v) {
    if (!v.is_array()) throw std::invalid_argument("expected an array of steps");
    std::vector<EpilogueOpSpec> ops;
    for (const auto& o : v) {
      EpilogueOpSpec op;
      op.kind = parse_epilogue_kind_token(o.at("kind").get<std::string>());
      if (o.contains("activation")) {
        op.activation = parse_activation_token(o.at("activation").get<std::string>());
      }
      if (o.contains("operand_dtype")) {
        op.operand_dtype = parse_dtype_token(o.at("operand_dtype").get<std::string>());
      }
      ops.push_back(op);
    }
    return ops;
  });
  read_field(j, "tile", s.tile, [](const nlohmann::json& v) { return parse_shape(v, "tile"); });
  read_field(j, "cluster", s.cluster,
             [](const nlohmann::json& v) { return parse_shape(v, "cluster"); });
  read_field(j, "mainloop", s.mainloop,
             [](const nlohmann::json& v) { return parse_mainloop_token(v.get<std::string>()); });
  read_field(j, "epilogue_schedule", s.epilogue_schedule, [](const nlohmann::json& v) {
    return parse_epilogue_schedule_token(v.get<std::string>());
  });
  read_field(j, "scheduler", s.scheduler, [](const nlohmann::json& v) {
    return parse_tile_scheduler_token(v.get<std::string>());
  });
  read_field(j, "raster", s.raster,
             [](const nlohmann::json& v) { return parse_raster_token(v.get<std::string>()); });
  read_field(j, "swizzle", s.swizzle, as_int);
  read_field(j, "split_k", s.split_k, as_int);
  read_field(j, "reduction", s.ordered_reduction, [](const nlohmann::json& v) {
    const std::string token = v.get<std::string>();
    if (token != "ordered" && token != "unordered")
      throw std::invalid_argument("reduction: expected 'ordered' or 'unordered', got '" + token + "'");
    return token == "ordered";
  });
  read_field(j, "stages", s.stages, as_int);
  read_field(j, "staged_transpose", s.staged_transpose, [](const nlohmann::json& v) {
    return parse_staged_transpose_token(v.get<std::string>());
  });
  return s;
}

realize::ParamSpace GemmSpace::to_param_space() const {
  realize::ParamSpace space;
  for (const auto& spec : candidates) space.candidates.push_back(spec.to_kernel_spec());
  for (const auto& entry : pruned) space.pruned.push_back({entry.spec.to_kernel_spec(), entry.reason});
  return space;
}

realize::KernelSpec GemmSpec::to_kernel_spec() const {
  return realize::KernelSpec(kKindName, pattern, name(), to_json());
}

GemmSpec GemmSpec::of(const realize::KernelSpec& spec) {
  if (spec.kind() != kKindName) {
    throw std::invalid_argument("expected a GEMM kernel spec, not one of kind '" + spec.kind() + "'");
  }
  GemmSpec s = from_json(spec.params());
  s.pattern = spec.pattern();
  return s;
}

}  // namespace fact::gemm

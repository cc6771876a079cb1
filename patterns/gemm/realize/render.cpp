#include "patterns/gemm/realize/render.hpp"

#include <sstream>

#include "fact/gemm_epilogue_step_files.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/realize/cutlass_names.hpp"
#include "fact/runtime/fact_abi.h"
#include "patterns/gemm/realize/space.hpp"

namespace fact::gemm {
namespace {
using Kind = EpilogueStep::Kind;

constexpr const char* kTemplateIdentity = "gemm-sm90/2";  // 2: ABI v2, the epilogue as data

std::string cpp(DType d) { return std::string(realize::dtype_cpp(d)); }

// The dtype of the chain's first M×N operand (read through CUTLASS's C), or Unknown.
DType source_dtype_of(const GemmSpec& spec) {
  for (const auto& op : spec.epilogue) {
    if (step_op(op.kind).operand == OperandShape::MATRIX) return op.operand_dtype;
  }
  return DType::Unknown;
}

std::string shape(int m, int n, int k) {
  return "Shape<_" + std::to_string(m) + ", _" + std::to_string(n) + ", _" + std::to_string(k) + ">";
}

int full_alignment(DType d) { return 16 / graph::dtype_bytes(d); }

// A line "  <code><padding>// <comment>" with comments aligned at one column.
std::string line(const std::string& code, const std::string& comment = {}) {
  constexpr size_t kCommentColumn = 58;
  std::string out = "  " + code;
  if (!comment.empty()) {
    out += std::string(out.size() < kCommentColumn ? kCommentColumn - out.size() : 1, ' ');
    out += "// " + comment;
  }
  return out + "\n";
}

}  // namespace

const std::vector<std::string>& gemm_epilogue_headers() {
  static const std::vector<std::string> headers = [] {
    std::vector<std::string> list = {
        "patterns/gemm/gemm_epilogue.cuh",
        "patterns/gemm/gemm_store_stages.cuh",
        "patterns/gemm/gemm_root_store.cuh",
        "patterns/gemm/gemm_direct_store.cuh",
        "patterns/gemm/gemm_padding.cuh",
        "patterns/gemm/gemm_padding.h",
        "patterns/gemm/gemm_prepared_launch.cuh",
        "include/fact/runtime/prepared_launches.h",
        "patterns/gemm/gemm_abi.h",
        "patterns/gemm/epilogue/ops.def",
        "patterns/gemm/epilogue/op_formulas.h",
        "patterns/gemm/epilogue/gelu_erf_fast.h",
    };
    for (std::string_view file : build_info::kGemmEpilogueStepFiles) list.emplace_back(file);
    return list;
  }();
  return headers;
}

const std::vector<std::string>& gemm_template_headers() {
  static const std::vector<std::string> headers = [] {
    std::vector<std::string> list = {"patterns/gemm/gemm_entry.cuh"};
    const auto& epilogue = gemm_epilogue_headers();
    list.insert(list.end(), epilogue.begin(), epilogue.end());
    list.push_back("include/fact/runtime/fact_abi.h");
    return list;
  }();
  return headers;
}

std::string epilogue_chain_type(const GemmSpec& spec) {
  const bool accurate_float = spec.d_dtype == DType::Float32;
  std::string chain = "fact::gemm::epilogue::ScaledAccumulator";
  for (const auto& op : spec.epilogue) {
    // A link's first template argument follows from what its step reads (ops.def): the
    // operand's element type, the activation functor, or none.
    const StepOp& descriptor = step_op(op.kind);
    const std::string link(descriptor.device_link);
    if (descriptor.operand != OperandShape::NONE) {
      chain = link + "<" + cpp(op.operand_dtype) + ",\n      " + chain + ">";
    } else if (descriptor.constants == StepConstantsRead::ACTIVATION) {
      chain = link + "<" + std::string(activation_cpp(op.activation, accurate_float)) +
              ",\n      " + chain + ">";
    } else {
      chain = link + "<\n      " + chain + ">";
    }
  }
  return chain;
}

realize::KernelTemplate render_gemm_template(const GemmSpec& spec) {
  if (auto error = gemm_spec_error(spec)) {
    throw realize::RenderError("cannot render " + spec.name() + ": " + *error);
  }
  const DType c_dtype = source_dtype_of(spec);
  const bool reads_c = c_dtype != DType::Unknown;
  // A chain whose last step stores D (ops.def's STORES_D) writes D itself: the collective
  // epilogue gets a void D, and its epilogue subtile is named so that link can size its shared
  // memory. D is M x N/2 when the step pairs two product columns into one, else M x N in the
  // original columns.
  const StepOp* store = nullptr;
  if (!spec.epilogue.empty() && step_op(spec.epilogue.back().kind).stores_d) {
    store = &step_op(spec.epilogue.back().kind);
  }
  const bool owns_store = store != nullptr;
  const std::string store_link = owns_store ? std::string(store->name) : std::string();
  const std::string name = spec.name();
  // The direct-store variant (an unaligned D, space.hpp) names its mainloop: the builder's Auto
  // choice is made for TMA epilogues.
  const bool direct_store = stores_d_directly(spec);
  const auto mainloop = direct_store ? resolved_mainloop(spec)
                                     : spec.mainloop;  // Auto stays Auto: the builder chooses
  const auto epilogue_schedule = resolved_epilogue_schedule(spec);

  nlohmann::json info = {
      {"kind", kKindName},
      {"abi_version", FACT_ABI_VERSION},
      {"entry", std::string(realize::kEntryPlaceholder)},
      {"key", std::string(realize::kKeyPlaceholder)},
      {"name", name},
      {"pattern", spec.pattern},
      {"template", kTemplateIdentity},
      {"arch", "sm_90a"},
      {"spec", spec.to_kernel_spec().to_json()},
  };

  std::ostringstream s;
  s << "// Generated by FACT (template " << kTemplateIdentity
    << "). Do not edit: render the GemmSpec again.\n"
    << "// Kernel: " << name << "\n"
    << "// Key:    " << realize::kKeyPlaceholder << "\n"
    << "#include \"patterns/gemm/gemm_entry.cuh\"\n\n"
    << "namespace " << realize::kEntryPlaceholder << "_kernel {\n"
    << "using namespace cute;\n\n"
    << "struct Kernel {\n"
    << line("static constexpr const char* kName = \"" + name + "\";") << "\n"
    << line("using ElementA = " + cpp(spec.a_dtype) + ";", "A: M x K")
    << line("using ElementB = " + cpp(spec.b_dtype) + ";", "B: K x N")
    << line("using ElementC = " + (reads_c ? cpp(c_dtype) : std::string("void")) + ";",
            reads_c ? "C: the first M x N epilogue operand" : "no epilogue step reads an M x N operand")
    << line("using ElementD = " + cpp(spec.d_dtype) + ";",
            !owns_store ? std::string("D: M x N")
            : store->halves_columns ? "D: M x N/2 (the " + store_link + " link writes it)"
                                    : "D: M x N (the " + store_link + " link writes it, original columns)")
    << (owns_store ? line("using ElementDCollective = void;", "the collective epilogue stores nothing itself")
              : line("using ElementDCollective = ElementD;"))
    << line("using ElementAccumulator = " + cpp(spec.accumulate) + ";",
            spec.math == MathMode::Tf32 ? "float operands: TF32 tensor-core MMA"
                                                 : "tensor-core accumulation")
    << line("using ElementCompute = float;", "epilogue arithmetic")
    << line("using LayoutA = " + std::string(layout_cpp(spec.a_layout)) + ";")
    << line("using LayoutB = " + std::string(layout_cpp(spec.b_layout)) + ";")
    << line("using LayoutC = " + std::string(layout_cpp(spec.d_layout)) + ";", "M x N operands have D's layout")
    << line("using LayoutD = " + std::string(layout_cpp(spec.d_layout)) + ";")
    << line("static constexpr int kAlignmentA = " + std::to_string(spec.align_a) + ";", "elements")
    << line("static constexpr int kAlignmentB = " + std::to_string(spec.align_b) + ";")
    << line("static constexpr int kAlignmentC = " +
            std::to_string(reads_c ? full_alignment(c_dtype) : spec.align_d) + ";")
    << line("static constexpr int kAlignmentD = " + std::to_string(spec.align_d) + ";") << "\n"
    << line("using TileShape = " + shape(spec.tile.m, spec.tile.n, spec.tile.k) + ";", "CTA tile M x N x K")
    << line("using ClusterShape = " + shape(spec.cluster.m, spec.cluster.n, spec.cluster.k) + ";",
            "CTAs per cluster")
    << line("using MainloopSchedule = " + std::string(mainloop_cpp(mainloop)) + ";")
    << line("using EpilogueSchedule = " + std::string(epilogue_schedule_cpp(epilogue_schedule)) + ";")
    << line("using TileScheduler = " + std::string(tile_scheduler_cpp(spec.scheduler)) + ";")
    << line("static constexpr int kSplitK = " + std::to_string(spec.split_k) + ";", "stream-K split-K slices")
    << line(std::string("static constexpr bool kOrderedReduction = ") + (spec.ordered_reduction ? "true" : "false") + ";",
            "partials summed in split order (false: arrival order)")
    << line("static constexpr int kMaxSwizzle = " + std::to_string(spec.swizzle) + ";")
    << line("static constexpr auto kRasterOrder = " + std::string(raster_cpp(spec.raster)) + ";")
    << (direct_store ? line("static constexpr bool kDirectStore = true;",
                            "D stored from registers without TMA (unaligned rows)")
                     : std::string())
    << "\n";
  if (direct_store) {
    // The direct store has no subtiles: Config's tile is the CTA tile.
    s << line("using EpilogueTile = Shape<_" + std::to_string(spec.tile.m) + ", _" +
              std::to_string(spec.tile.n) + ">;", "the whole tile, stored from registers");
  } else {
    s << line("using EpilogueTile = decltype(cutlass::epilogue::collective::detail::"
              "sm90_compute_tile_shape_or_override<", "the subtile EpilogueTileAuto picks")
      << "      ElementD, cutlass::epilogue::collective::EpilogueTileAuto, EpilogueSchedule, TileShape>());\n";
  }
  s << "  using Chain = " << epilogue_chain_type(spec) << ";\n"
    << "  using EpilogueConfig = fact::gemm::epilogue::Config<TileShape, ElementCompute,\n"
    << "      cutlass::FloatRoundStyle::round_to_nearest, "
    << (spec.d_layout == Layout::RowMajor ? "true" : "false") << ", false, EpilogueTile>;\n\n";
  if (direct_store) {
    // FACT's own collective (gemm_direct_store.cuh): the chain per element, stored from
    // registers, residue-predicated, under CUTLASS's warp-specialized adapter.
    s << "  using CollectiveEpilogue = fact::gemm::epilogue::DirectStoreCollective<\n"
      << "      Chain, EpilogueConfig, ElementD, LayoutD>;\n";
  } else {
    s << "  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<\n"
      << "      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,\n"
      << "      cutlass::epilogue::collective::EpilogueTileAuto,\n"
      << "      ElementAccumulator, ElementCompute,\n"
      << "      ElementC, LayoutC, kAlignmentC,\n"
      << "      ElementDCollective, LayoutD, kAlignmentD,\n"
      << "      EpilogueSchedule,\n"
      << "      Chain::Node<EpilogueConfig, ElementD>>::CollectiveOp;\n"
      << "  static_assert(cute::size<0>(typename CollectiveEpilogue::EpilogueTile{}) == cute::size<0>(EpilogueTile{}) &&\n"
      << "                cute::size<1>(typename CollectiveEpilogue::EpilogueTile{}) == cute::size<1>(EpilogueTile{}),\n"
      << "                \"the epilogue subtile the links were built for is the collective's\");\n";
  }
  if (owns_store) {
    s << "  static_assert(CollectiveEpilogue::DispatchPolicy::StagesD ==\n"
      << "                fact::gemm::epilogue::detail::store_stages<TileShape, EpilogueTile>(),\n"
      << "                \"the " << store_link
      << " store's buffers follow the collective's TMA store stages\");\n";
  }
  s << "\n"
    << "  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<\n"
    << "      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,\n"
    << "      ElementA, LayoutA, kAlignmentA,\n"
    << "      ElementB, LayoutB, kAlignmentB,\n"
    << "      ElementAccumulator, TileShape, ClusterShape,\n";
  if (spec.stages > 0) {
    s << "      cutlass::gemm::collective::StageCount<" << spec.stages << ">,\n";
  } else {
    s << "      cutlass::gemm::collective::StageCountAutoCarveout<\n"
      << "          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,\n";
  }
  s << "      MainloopSchedule>::CollectiveOp;\n\n"
    << "  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<\n"
    << "      Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, TileScheduler>;\n"
    << "  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;\n"
    << "};\n\n"
    << "}  // namespace " << realize::kEntryPlaceholder << "_kernel\n\n"
    << "extern \"C\" FACT_EXPORT int " << realize::kEntryPlaceholder
    << "(const FactCallHeader* args, void* workspace,\n"
    << "                                 size_t* workspace_size, void* stream) {\n"
    << "  return fact::gemm::run<" << realize::kEntryPlaceholder
    << "_kernel::Kernel>(args, workspace, workspace_size, static_cast<cudaStream_t>(stream));\n"
    << "}\n\n"
    << "extern \"C\" FACT_EXPORT const char* fact_kernel_info(void) {\n"
    << "  return R\"fact_json(" << info.dump() << ")fact_json\";\n"
    << "}\n\n"
    << "#ifdef FACT_STANDALONE_MAIN\n"
    << "int main(int argc, char** argv) {\n"
    << "  return fact::gemm::standalone_main<" << realize::kEntryPlaceholder
    << "_kernel::Kernel>(argc, argv, &" << realize::kEntryPlaceholder << ");\n"
    << "}\n"
    << "#endif\n";

  return realize::KernelTemplate{s.str(), gemm_template_headers(), kTemplateIdentity};
}


}  // namespace fact::gemm

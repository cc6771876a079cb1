// The glu step's kernels (patterns/gemm's template with the Glu link, glu_link.cuh and
// glu_store.cuh) compiled for sm_90a with nvcc here: SwiGLU at the Llama-3-8B MLP's shape and a
// GeGLU with a bias, as realization makes them, their C ABI checks of the gate, and, run on the
// host, the register partition the glu store relies on. Skipped (with the reason) without nvcc /
// CUTLASS; no GPU needed.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "fact/realize/build_driver.hpp"
#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "fact/runtime/fact_abi.h"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/abi_names.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"
#include "patterns/gemm/tests/host_check.hpp"

namespace fact::gemm {
namespace {

namespace fs = std::filesystem;
using graph::DType;
using realize::RenderedKernel;
using Kind = EpilogueStep::Kind;
using Entry = int (*)(const FactCallHeader*, void*, size_t*, void*);

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_glu_compile_" + name);
  fs::remove_all(dir);
  return dir;
}

// A well-formed size query for the glu kernel of `spec` (M = N = K = 128, D of 64 columns), every
// step of the spec's epilogue in place.
FactGemmArgs args_for(const GemmSpec& spec) {
  FactGemmArgs args{};
  args.header = {FACT_ABI_VERSION, fact_kind_id(FACT_GEMM_KIND_NAME), sizeof(FactGemmArgs), 0};
  args.m = args.n = args.k = 128;
  args.batch = 1;
  args.a_type = abi_dtype(spec.a_dtype);
  args.b_type = abi_dtype(spec.b_dtype);
  args.d_type = abi_dtype(spec.d_dtype);
  args.a_layout = abi_layout(spec.a_layout);
  args.b_layout = abi_layout(spec.b_layout);
  args.lda = args.ldb = 128;
  args.ldd = 64;
  args.alpha = 1.0f;
  args.num_steps = static_cast<int32_t>(spec.epilogue.size());
  for (size_t i = 0; i < spec.epilogue.size(); ++i) {
    const EpilogueOpSpec& op = spec.epilogue[i];
    FactGemmStep& step = args.steps[i];
    step.kind = abi_step_kind(op.kind);
    if (op.kind == Kind::Glu) step.activation = abi_activation(op.activation);
    if (reads_operand(op.kind)) step.operand_type = abi_dtype(op.operand_dtype);
  }
  return args;
}

class GluCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = realize::default_compile_options();
    if (auto why = realize::compile_unavailable_reason(options_)) GTEST_SKIP() << *why;
  }

  // Compiles `spec` (no wgmma serialization, no spills) and checks the entry's argument checks
  // of the gate: a well-formed size query passes, another step kind or gate is refused.
  realize::CompileResult compile_checked(const GemmSpec& spec, const std::string& name) {
    const RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options_);
    const realize::CompileResult r = realize::compile_kernel(kernel, scratch(name), options_);
    EXPECT_TRUE(r.ok) << spec.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
    if (!r.ok) return r;
    EXPECT_EQ(r.log.find("C7510"), std::string::npos) << "wgmma serialized:\n" << r.log;
    EXPECT_EQ(r.log.find("Potential Performance Loss"), std::string::npos) << r.log;
    EXPECT_EQ(r.usage.spill_store_bytes, 0) << "register spills in " << spec.name();
    void* handle = dlopen(r.output.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle, nullptr) << dlerror();
    if (handle == nullptr) return r;
    auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
    EXPECT_NE(entry, nullptr);
    if (entry != nullptr) {
      size_t workspace = 0;
      auto query = [&](const FactGemmArgs& a) { return entry(&a.header, nullptr, &workspace, nullptr); };
      const FactGemmArgs good = args_for(spec);
      EXPECT_NE(query(good), FACT_ERR_INVALID_ARGS);  // FACT_OK, or a launch error without a GPU
      const int last = good.num_steps - 1;
      FactGemmArgs bad = good;
      bad.steps[last].kind = FACT_STEP_SCALE;
      EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "step kind";
      bad = good;
      bad.steps[last].activation = good.steps[last].activation == FACT_ACT_SILU ? FACT_ACT_RELU : FACT_ACT_SILU;
      EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "gate";
    }
    dlclose(handle);
    std::cout << "[ compiled ] " << spec.name() << " in " << r.seconds << " s, "
              << r.usage.registers << " registers\n";
    return r;
  }

  realize::CompileOptions options_;
};

// SwiGLU as one GEMM at the Llama-3-8B MLP's shape: x [8192, 4096] times the gate
// and up weights interleaved column by column ([4096, 2·14336]), the glu(silu) step writing the
// half-width D [8192, 14336] through its own TMA store (the collective epilogue has a void D).
// The spec is the one realization makes from the problem (default configuration); beyond the
// checks every library gets, a call whose D rows are not 16-byte multiples is padded (it asks
// for staging in the workspace) and a call with an odd N is refused.
TEST_F(GluCompile, Bf16SwiGluLlamaShape) {
  const GemmProblem problem =
      make_gemm_problem({8192, 2 * 14336, 4096}, DType::BFloat16, "glu_silu");
  ASSERT_EQ(problem.d_cols(), 14336);
  const GemmSpec s = spec_from_problem(problem, core::PrecisionMode::Native);
  ASSERT_EQ(gemm_spec_error(s), std::nullopt);
  ASSERT_EQ(s.epilogue.size(), 1u);
  ASSERT_EQ(s.epilogue.back().kind, Kind::Glu);
  const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
  EXPECT_NE(kernel.source.find("using ElementDCollective = void;"), std::string::npos) << kernel.source;
  EXPECT_NE(kernel.source.find("fact::gemm::epilogue::Glu<cutlass::epilogue::thread::SiLu"),
            std::string::npos) << kernel.source;
  const realize::CompileResult r = compile_checked(s, "swiglu_llama");
  ASSERT_TRUE(r.ok);
  void* handle = dlopen(r.output.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
  ASSERT_NE(entry, nullptr);
  FactGemmArgs call = args_for(s);
  call.n = 2 * 72;  // D: 72 columns, 144 bytes a row
  call.ldb = call.n;
  call.ldd = 72;
  alignas(16) static unsigned char fake[64];  // aligned addresses, never dereferenced
  call.a = call.b = call.d = fake;
  FactGemmArgs odd = call;
  odd.n = 2 * 68;   // D rows of 136 bytes: TMA cannot store them, so D is staged padded
  odd.ldb = odd.n;
  odd.ldd = 68;
  size_t aligned_bytes = 0, padded_bytes = 0;
  const int aligned_status = entry(&call.header, nullptr, &aligned_bytes, nullptr);
  const int padded_status = entry(&odd.header, nullptr, &padded_bytes, nullptr);
  EXPECT_EQ(padded_status, aligned_status);  // FACT_OK, or the same launch-side error without a GPU
  if (padded_status == FACT_OK) EXPECT_GT(padded_bytes, aligned_bytes) << "the padded call stages D";
  EXPECT_EQ(entry(&odd.header, nullptr, nullptr, nullptr), FACT_ERR_WORKSPACE);
  odd = call;
  odd.n = 2 * 72 + 1;  // an odd N pairs no columns
  odd.ldb = odd.n;
  EXPECT_EQ(entry(&odd.header, nullptr, nullptr, nullptr), FACT_ERR_INVALID_ARGS);
  odd = call;
  odd.ldd = 64;  // shorter than D's 72 columns
  EXPECT_EQ(entry(&odd.header, nullptr, nullptr, nullptr), FACT_ERR_INVALID_ARGS);
  dlclose(handle);
}

// The premise of the glu store (glu_store.cuh): in the register partition the collective hands
// its visitors (sm90_partition_for_epilogue over make_tiled_copy_S(R2S atom, C atom of the
// TiledMma)), every even element i of every thread's subtile fragment is a column n (n even) and
// element i + 1 is column n + 1 of the same row, so each thread holds whole (gate, up) pairs.
// Checked on the host for every thread of the kernels the SwiGLU default configurations build
// (ping-pong 128x128, cooperative 128x256 and 256x128): the rendered kernels' types and a check
// that walks the partition, one program compiled with nvcc and run here.
TEST_F(GluCompile, GluPartitionHoldsWholeColumnPairsInEveryThread) {
  const char* kCheck = R"cpp(
template <class K>
int check() {
  using CE = typename K::CollectiveEpilogue;
  using TiledMma = typename K::CollectiveMainloop::TiledMma;
  auto atom_c = cute::make_tiled_copy_C_atom(typename CE::CopyAtomC{}, TiledMma{});
  auto r2s = cute::make_tiled_copy_S(cute::Copy_Atom<typename CE::CopyOpR2S, typename K::ElementD>{}, atom_c);  // the collective's SmemElementD
  auto tile = cute::make_identity_tensor(cute::take<0, 2>(typename K::TileShape{}));
  long checked = 0, unpaired = 0;
  for (int t = 0; t < int(cute::size(TiledMma{})); ++t) {
    auto coords = cutlass::epilogue::fusion::sm90_partition_for_epilogue<true>(
        tile, typename K::EpilogueTile{}, r2s, t);  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    for (int em = 0; em < int(cute::size<3>(coords)); ++em) {
      for (int en = 0; en < int(cute::size<4>(coords)); ++en) {
        auto sub = coords(cute::_, cute::_, cute::_, em, en);
        for (int i = 0; i + 1 < int(cute::size(sub)); i += 2) {
          auto gate = sub(i), up = sub(i + 1);
          ++checked;
          if (int(cute::get<0>(gate)) != int(cute::get<0>(up)) || int(cute::get<1>(gate)) % 2 != 0 ||
              int(cute::get<1>(up)) != int(cute::get<1>(gate)) + 1) ++unpaired;
        }
      }
    }
  }
  std::printf("checked %ld pairs, %ld unpaired\n", checked, unpaired);
  return checked > 0 && unpaired == 0 ? 0 : 1;
}
)cpp";
  struct Config { int m, n; MainloopSchedule schedule; };
  std::vector<GemmSpec> specs;
  for (const Config c : {Config{128, 128, MainloopSchedule::Pingpong}, Config{128, 256, MainloopSchedule::Cooperative},
                         Config{256, 128, MainloopSchedule::Cooperative}}) {
    GemmSpec s = spec_from_problem(make_gemm_problem({8192, 2 * 14336, 4096}, DType::BFloat16, "glu_silu"), core::PrecisionMode::Native);
    s.tile = {c.m, c.n, 64};
    s.mainloop = c.schedule;
    ASSERT_EQ(gemm_spec_error(s), std::nullopt);
    specs.push_back(s);
  }
  const test::HostCheckResult r = test::run_host_checks(specs, kCheck, scratch("glu_pairs"), options_);
  ASSERT_TRUE(r.built) << r.printed;
  EXPECT_EQ(r.status, 0) << r.printed;
  EXPECT_EQ(std::count(r.printed.begin(), r.printed.end(), '\n'), 3) << r.printed;
  std::cout << "[ pairs ]\n" << r.printed;
}

// The kernel a fused gate/up projection with a bias makes (GeGLU as diffusers writes it): a bias
// over the 2I interleaved columns, then glu(gelu_erf).
TEST_F(GluCompile, Bf16BiasGeGlu) {
  const GemmProblem problem =
      make_gemm_problem({8192, 2 * 5120, 2048}, DType::BFloat16, "bias,glu_gelu_erf");
  const GemmSpec s = spec_from_problem(problem, core::PrecisionMode::Native);
  ASSERT_EQ(gemm_spec_error(s), std::nullopt);
  ASSERT_EQ(s.epilogue.size(), 2u);
  EXPECT_TRUE(compile_checked(s, "bias_geglu").ok);
}

}  // namespace
}  // namespace fact::gemm

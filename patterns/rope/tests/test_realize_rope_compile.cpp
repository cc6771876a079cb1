// The rope kernel (patterns/gemm's template with the Rope link of rope_link.cuh) compiled for
// sm_90a with nvcc here: the Llama-3-8B q_proj at full size as realization makes it, its C ABI
// checks, and, run on the host, the rope store's placement for every thread of the kernels the
// default configurations build. Skipped (with the reason) without nvcc / CUTLASS; no GPU needed.
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
#include "fact/util/atomic_file.hpp"
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
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_rope_compile_" + name);
  fs::remove_all(dir);
  return dir;
}

// The Llama q_proj (x [B·T, 4096] · Wqᵀ, 32 heads of 128, T = 2048) with a rope step.
GemmProblem q_proj_problem(int64_t m = 8192, int64_t n = 4096, int64_t k = 4096) {
  GemmProblem p = make_gemm_problem({m, n, k, 1}, DType::BFloat16, "", "tn");
  EpilogueStep rope;
  rope.kind = Kind::Rope;
  rope.operand = "cos";
  rope.operand2 = "sin";
  rope.operand_dtype = DType::BFloat16;
  rope.operand_ld = 128;
  rope.period = 2048;
  rope.group = 128;
  p.epilogue = {rope};
  return p;
}

// A well-formed size query for the rope kernel of `spec` (M = N = K = 128, one head of 128).
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
  args.lda = args.ldb = args.ldd = 128;
  args.alpha = 1.0f;
  args.num_steps = 1;
  FactGemmStep& rope = args.steps[0];
  rope.kind = FACT_STEP_ROPE;
  rope.operand_type = FACT_DTYPE_BF16;
  rope.ld = 128;
  rope.period = 128;
  rope.group = 128;
  return args;
}

class RopeCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = realize::default_compile_options();
    if (auto why = realize::compile_unavailable_reason(options_)) GTEST_SKIP() << *why;
  }
  realize::CompileOptions options_;
};

// The q_proj with its rotary embedding as realization makes it (default configuration): the
// rendered source names the Rope link and a void collective D; the library compiles without
// wgmma serialization or spills; its entry checks the rope step's fields.
TEST_F(RopeCompile, Bf16LlamaQProjWithRope) {
  const GemmProblem problem = q_proj_problem();
  const GemmSpec s = spec_from_problem(problem, core::PrecisionMode::Native);
  ASSERT_EQ(gemm_spec_error(s), std::nullopt);
  ASSERT_EQ(s.epilogue.size(), 1u);
  ASSERT_EQ(s.epilogue[0].kind, Kind::Rope);
  const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
  EXPECT_NE(kernel.source.find("using ElementDCollective = void;"), std::string::npos) << kernel.source;
  EXPECT_NE(kernel.source.find("fact::gemm::epilogue::Rope<cutlass::bfloat16_t"), std::string::npos)
      << kernel.source;
  const realize::CompileResult r = realize::compile_kernel(kernel, scratch("q_proj"), options_);
  ASSERT_TRUE(r.ok) << s.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
  EXPECT_EQ(r.log.find("C7510"), std::string::npos) << "wgmma serialized:\n" << r.log;
  EXPECT_EQ(r.log.find("Potential Performance Loss"), std::string::npos) << r.log;
  EXPECT_EQ(r.usage.spill_store_bytes, 0) << "register spills in " << s.name();
  std::cout << "[ compiled ] " << s.name() << " in " << r.seconds << " s, " << r.usage.registers
            << " registers\n";

  void* handle = dlopen(r.output.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
  ASSERT_NE(entry, nullptr);
  size_t workspace = 0;
  auto query = [&](const FactGemmArgs& a) { return entry(&a.header, nullptr, &workspace, nullptr); };
  const FactGemmArgs good = args_for(s);
  EXPECT_NE(query(good), FACT_ERR_INVALID_ARGS);  // FACT_OK, or a launch error without a GPU
  FactGemmArgs bad = good;
  bad.steps[0].kind = FACT_STEP_SCALE;
  EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "step kind";
  bad = good;
  bad.steps[0].operand_type = FACT_DTYPE_F16;
  EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "table dtype";
  bad = good;
  bad.steps[0].group = 48;  // 128 columns are not whole heads of 48
  EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "heads";
  bad = good;
  bad.steps[0].period = 96;  // 128 rows are not whole sequences of 96
  EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "sequences";
  bad = good;
  bad.n = bad.ldb = bad.ldd = 160;
  bad.steps[0].group = 80;  // rotate-half heads of 80: a 32-column subtile would straddle a head
  EXPECT_EQ(query(bad), FACT_ERR_CANNOT_IMPLEMENT) << "rotate-half head of 80";
  bad.steps[0].interleaved = 1;  // interleaved pairs never leave their subtile
  EXPECT_NE(query(bad), FACT_ERR_INVALID_ARGS);
  EXPECT_NE(query(bad), FACT_ERR_CANNOT_IMPLEMENT);
  // Not a size query: both tables are needed.
  alignas(16) static unsigned char fake[64];  // aligned addresses, never dereferenced
  FactGemmArgs call = good;
  call.a = call.b = call.d = fake;
  call.steps[0].operand = fake;
  EXPECT_EQ(entry(&call.header, nullptr, nullptr, nullptr), FACT_ERR_INVALID_ARGS) << "no sin table";
  dlclose(handle);
}

// The rope store's placement (rope_store.cuh's original_columns, staged_at, half_first_column,
// the rules its postreduce and tma_store apply) checked for every thread of the ping-pong
// 128x128 and cooperative 128x256 / 256x128 kernels, both pairings and heads of 64, 128 and 256:
// walking the register partition the collective hands its visitors, every pair's two results
// must land (through their staging slot and the TMA box of their half) on their original
// columns of their own row, and every element of each CTA tile exactly once. The kernels' types
// and the check, one program compiled with nvcc and run here.
TEST_F(RopeCompile, RopeStorePlacesEveryPairInItsOriginalColumns) {
  const char* kCheck = R"cpp(
#include <vector>
template <class K>
int check() {
  using CE = typename K::CollectiveEpilogue;
  using Store = typename K::Chain::template Store<typename K::EpilogueConfig, typename K::ElementD>;
  using TiledMma = typename K::CollectiveMainloop::TiledMma;
  auto atom_c = cute::make_tiled_copy_C_atom(typename CE::CopyAtomC{}, TiledMma{});
  auto r2s = cute::make_tiled_copy_S(cute::Copy_Atom<typename CE::CopyOpR2S, typename K::ElementD>{}, atom_c);
  auto tile = cute::make_identity_tensor(cute::take<0, 2>(typename K::TileShape{}));
  constexpr int kTileM = Store::kTileM, kTileN = Store::kTileN, kEpiM = Store::kEpiM, kEpiN = Store::kEpiN;
  constexpr int kHalfN = Store::kHalfN;
  long pairs = 0, misplaced = 0, repeated = 0, missing = 0;
  for (int interleaved = 0; interleaved < 2; ++interleaved) {
    for (int group : {64, 128, 256}) {
      if (!interleaved && group % kEpiN != 0) continue;
      const int n_total = 4 * (kTileN > group ? kTileN : group);  // whole tiles and whole heads
      for (int n_tile = 0; n_tile * kTileN < n_total; ++n_tile) {
        const long col0 = long(n_tile) * kTileN;
        std::vector<int> written(size_t(kTileM) * n_total, 0);
        for (int t = 0; t < int(cute::size(TiledMma{})); ++t) {
          auto coords = cutlass::epilogue::fusion::sm90_partition_for_epilogue<true>(
              tile, typename K::EpilogueTile{}, r2s, t);  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
          for (int em = 0; em < int(cute::size<3>(coords)); ++em) {
            for (int en = 0; en < int(cute::size<4>(coords)); ++en) {
              auto sub = coords(cute::_, cute::_, cute::_, em, en);
              const long n0 = col0 + long(en) * kEpiN;
              const int c0 = int(n0 % group);
              for (int i = 0; i + 1 < int(cute::size(sub)); i += 2) {
                const int row = int(cute::get<0>(sub(i))), column = int(cute::get<1>(sub(i)));
                ++pairs;
                if (row / kEpiM != em || column / kEpiN != en || int(cute::get<0>(sub(i + 1))) != row ||
                    int(cute::get<1>(sub(i + 1))) != column + 1 || column % 2 != 0) {
                  ++misplaced;  // the pair is not (n, n + 1) of one row of this subtile
                  continue;
                }
                const long n = col0 + column;
                const int c = int(n % group);
                const long head = n - c;
                int a = 0, b = 0, half_a = 0, col_a = 0, half_b = 0, col_b = 0;
                Store::original_columns(c, group / 2, interleaved != 0, a, b);
                Store::staged_at(column % kEpiN, interleaved != 0, half_a, col_a, half_b, col_b);
                const int halves[2] = {half_a, half_b}, cols[2] = {col_a, col_b};
                const long wanted[2] = {head + a, head + b};
                for (int r = 0; r < 2; ++r) {
                  if (cols[r] < 0 || cols[r] >= kHalfN || halves[r] < 0 || halves[r] > 1) {
                    ++misplaced;
                    continue;
                  }
                  const long landed = Store::half_first_column(n0, c0, group / 2, interleaved != 0, halves[r]) + cols[r];
                  if (landed != wanted[r] || landed < 0 || landed >= n_total) {
                    ++misplaced;
                    continue;
                  }
                  if (++written[size_t(row) * n_total + landed] > 1) ++repeated;
                }
              }
            }
          }
        }
        long count = 0;
        for (int v : written) count += v > 0;
        missing += long(kTileM) * kTileN - count;
      }
    }
  }
  std::printf("%d x %d tile, %d x %d subtiles: %ld pairs, %ld misplaced, %ld written twice, %ld missing\n",
              kTileM, kTileN, kEpiM, kEpiN, pairs, misplaced, repeated, missing);
  return pairs > 0 && misplaced == 0 && repeated == 0 && missing == 0 ? 0 : 1;
}
)cpp";
  struct Config { int m, n; MainloopSchedule schedule; };
  std::vector<GemmSpec> specs;
  for (const Config c : {Config{128, 128, MainloopSchedule::Pingpong}, Config{128, 256, MainloopSchedule::Cooperative},
                         Config{256, 128, MainloopSchedule::Cooperative}}) {
    GemmSpec s = spec_from_problem(q_proj_problem(), core::PrecisionMode::Native);
    s.tile = {c.m, c.n, 64};
    s.mainloop = c.schedule;
    ASSERT_EQ(gemm_spec_error(s), std::nullopt);
    specs.push_back(s);
  }
  const test::HostCheckResult r = test::run_host_checks(specs, kCheck, scratch("rope_place"), options_);
  ASSERT_TRUE(r.built) << r.printed;
  EXPECT_EQ(r.status, 0) << r.printed;
  EXPECT_EQ(std::count(r.printed.begin(), r.printed.end(), '\n'), 3) << r.printed;
  std::cout << "[ placement ]\n" << r.printed;
}

}  // namespace
}  // namespace fact::gemm

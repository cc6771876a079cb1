// The GEMM parameter space for a kernel ending in the glu step (its link owns D's store), and
// the glu step's spellings in kernel specs.
#include <set>

#include <gtest/gtest.h>

#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm/realize/space.hpp"

namespace fact::gemm {
namespace {

TEST(GluSpace, KernelTokenAndLink) {
  EXPECT_EQ(epilogue_kind_token(EpilogueStep::Kind::Glu), "glu");
  EXPECT_EQ(epilogue_link_cpp(EpilogueStep::Kind::Glu), "fact::gemm::epilogue::Glu");
  GemmSpec s;
  s.epilogue = {{EpilogueStep::Kind::Glu, Activation::SiLU, DType::Unknown}};
  EXPECT_NE(s.name().find("glusilu"), std::string::npos) << s.name();
  s.epilogue = {{EpilogueStep::Kind::Glu, Activation::LeakyReLU, DType::Unknown}};
  ASSERT_TRUE(gemm_spec_error(s).has_value());
  EXPECT_NE(gemm_spec_error(s)->find("a gate takes"), std::string::npos) << *gemm_spec_error(s);
  s.epilogue = {{EpilogueStep::Kind::Glu, Activation::SiLU, DType::Unknown},
                {EpilogueStep::Kind::Scale, Activation::Identity, DType::Unknown}};
  ASSERT_TRUE(gemm_spec_error(s).has_value());
  EXPECT_EQ(*gemm_spec_error(s), "a glu step must be the epilogue's last");
}

// A glu class (SwiGLU at the Llama-3-8B MLP size): every candidate is one the glu
// kernel can be built as (no stream-K or split-K: its fix-up would need the void D), and the
// space still has candidates to tune over, ping-pong and cooperative.
TEST(GluSpace, AGluClassKeepsOnlyPersistentCandidates) {
  GemmSpec glu;
  glu.epilogue = {{EpilogueStep::Kind::Glu, Activation::SiLU, DType::Unknown}};
  SpaceOptions options;
  options.m = 8192;
  options.n = 2 * 14336;
  options.k = 4096;
  const GemmSpace space = gemm_space(glu, options);
  ASSERT_GE(space.candidates.size(), 4u);
  std::set<MainloopSchedule> schedules;
  for (const auto& s : space.candidates) {
    EXPECT_EQ(gemm_spec_error(s), std::nullopt) << s.name();
    EXPECT_NE(s.scheduler, TileScheduler::StreamK) << s.name();
    EXPECT_LE(s.split_k, 1) << s.name();
    schedules.insert(s.mainloop);
  }
  EXPECT_GE(schedules.size(), 2u);
  // Deep K over few output tiles would pick split-K for a plain GEMM; a glu class does not.
  SpaceOptions deep = options;
  deep.m = deep.n = 256;
  deep.k = 524288;
  for (const auto& s : gemm_space(glu, deep).candidates) EXPECT_NE(s.scheduler, TileScheduler::StreamK) << s.name();
}

}  // namespace
}  // namespace fact::gemm

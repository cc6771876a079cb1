// The attention realizer: which problems it takes (the discovery's reasons otherwise), the
// default configuration per head dim (KERNEL.md's measured best), the parameter space, and the
// rendered instance (type choices only, content-keyed entry, fact_kernel_info with the spec).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/realize/realize_matches.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/realize/render.hpp"
#include "patterns/attention/realize/spec.hpp"

namespace fact::attention {
namespace {

// The attention problem discovery finds in the captured minGPT block (bf16, d96, causal).
Problem mingpt_attention(const char* file = "mingpt_block_bf16.json") {
  const auto g = graph::load_graph(std::string(FACT_SOURCE_DIR) + "/tests/data/graphs/" + file);
  const auto d = discover::discover(g);
  for (const auto& m : d.matches) {
    if (m.pattern == "attention") return m.problems.at(0);
  }
  throw std::runtime_error("no attention match");
}

const realize::Realizer& realizer() {
  const realize::Realizer* r = realize::RealizerRegistry::global().find("attention");
  if (r == nullptr) throw std::runtime_error("no attention realizer");
  return *r;
}

TEST(AttentionRealizer, TakesTheMinGptAttentionWithTheMeasuredBestConfiguration) {
  const Problem problem = mingpt_attention();
  EXPECT_EQ(realizer().declines(problem, core::PrecisionMode::Native), std::nullopt);
  EXPECT_EQ(&realize::RealizerRegistry::global().for_problem(problem, core::PrecisionMode::Native), &realizer());
  const realize::KernelSpec spec = realizer().problem_class(problem, core::PrecisionMode::Native);
  EXPECT_EQ(spec.kind(), "attention");
  EXPECT_EQ(spec.pattern(), "attention");
  // patterns/attention/instances/attn_bf16_d96_causal_m128n128s2_coop_dyn_q2_o1_t128.cu: tiles
  // padded to 128 columns (128-byte swizzle), the faster on an H200.
  EXPECT_EQ(spec.name(), "attn_bf16_d96_causal_m128n128s2_coop_dyn_q2_o1_t128");
  EXPECT_EQ(AttentionSpec::of(spec).tile_head_dim, 128);
  EXPECT_EQ(realizer().class_token(spec), "bf16|d96|causal");
  EXPECT_EQ(realizer().family(spec), "cooperative/dynamic/persistent/n128");
}

TEST(AttentionRealizer, DefaultsPerHeadDimFollowKernelMd) {
  AttentionProblem p;
  p.dtype = DType::BFloat16;
  p.mask = MaskKind::CausalTopLeft;
  p.head_dim = p.v_head_dim = 128;
  EXPECT_EQ(default_spec(p).name(), "attn_bf16_d128_causal_m128n128s2_coop_dyn_q1_o0");
  p.mask = MaskKind::None;
  EXPECT_EQ(default_spec(p).name(), "attn_bf16_d128_noncausal_m128n128s2_coop_dyn_q2_o1");
  p.mask = MaskKind::CausalBottomRight;
  p.head_dim = p.v_head_dim = 64;
  EXPECT_EQ(default_spec(p).name(), "attn_bf16_d64_causal_m64n128s2_coop_dyn_q2_o1");
  // Chosen for two CTAs per SM: both fit in the SM's 228 KiB (1 KiB reserved per CTA).
  EXPECT_LE(2 * (shared_memory_bytes(default_spec(p)) + 1024), 228 * 1024);
  p.dtype = DType::Float16;
  p.head_dim = p.v_head_dim = 128;
  EXPECT_EQ(default_spec(p).name(), "attn_fp16_d128_causal_m128n128s2_coop_dyn_q1_o0");
  // The kernels' own sizes (their infos on an H200, bench/results/attention-nvidia-h200-2026-11-27-padded2.json):
  // O in the Q stages still leaves its empty, 1024-byte aligned member.
  AttentionSpec oq = default_spec(p);  // fp16 d128 causal: 2 stages, one Q stage
  oq.q_stages = 2;
  oq.o_alias_q = true;
  EXPECT_EQ(shared_memory_bytes(oq), 199680);
  p.dtype = DType::BFloat16;
  p.head_dim = p.v_head_dim = 96;
  EXPECT_EQ(shared_memory_bytes(default_spec(p)), 231424);  // the padded d96 default
  p.dtype = DType::Float16;
  for (int d : {64, 80, 96, 128}) {
    p.head_dim = p.v_head_dim = d;
    EXPECT_EQ(attention_spec_error(default_spec(p)), std::nullopt) << d;
    EXPECT_LE(shared_memory_bytes(default_spec(p)), kSharedMemoryLimit) << d;
  }
}

TEST(AttentionRealizer, DeclinesWithTheDiscoveryReasons) {
  Problem f32 = mingpt_attention("mingpt_block_fp32.json");
  auto why = realizer().declines(f32, core::PrecisionMode::Native);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("float32 attention in a 'native' run"), std::string::npos);
  Problem odd = mingpt_attention();
  odd.desc["head_dim"] = odd.desc["v_head_dim"] = 48;
  why = realizer().declines(odd, core::PrecisionMode::Native);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("head dim 48"), std::string::npos);
  EXPECT_THROW(realizer().problem_class(odd, core::PrecisionMode::Native), std::invalid_argument);
}

TEST(AttentionRealizer, SpaceStartsWithTheDefaultAndPrunesWithReasons) {
  const Problem problem = mingpt_attention();
  const realize::KernelSpec cls = realizer().problem_class(problem, core::PrecisionMode::Native);
  const realize::ParamSpace space = realizer().space(cls, problem, {});
  ASSERT_GE(space.candidates.size(), 5u);
  EXPECT_EQ(space.candidates.front(), cls);
  std::set<std::string> names, families;
  for (const auto& c : space.candidates) {
    EXPECT_TRUE(names.insert(c.name()).second) << c.name();
    families.insert(realizer().family(c));
    const AttentionSpec s = AttentionSpec::of(c);
    EXPECT_EQ(attention_spec_error(s), std::nullopt) << c.name();
    EXPECT_EQ(s.head_dim, 96);
    EXPECT_TRUE(s.causal);
  }
  EXPECT_GE(families.size(), 3u);  // dynamic / static, persistent or not, key block size
  for (const auto& p : space.pruned) EXPECT_FALSE(p.reason.empty()) << p.spec.name();
  // d96 with 4 stages does not fit: pruned for shared memory.
  bool smem = false;
  for (const auto& p : space.pruned) smem = smem || p.reason.find("shared memory") != std::string::npos;
  EXPECT_TRUE(smem);
  realize::SpaceOptions all;
  all.exhaustive = true;
  EXPECT_GT(realizer().space(cls, problem, all).candidates.size(), space.candidates.size());
}

// Every candidate takes a sliding window: a window leaves the space as it is.
TEST(AttentionRealizer, ASlidingWindowKeepsTheWholeSpace) {
  Problem problem = mingpt_attention();
  const realize::KernelSpec cls = realizer().problem_class(problem, core::PrecisionMode::Native);
  const realize::ParamSpace plain = realizer().space(cls, problem, {});
  problem.desc["window"] = 100;
  const realize::ParamSpace windowed = realizer().space(cls, problem, {});
  EXPECT_EQ(windowed.candidates, plain.candidates);
  EXPECT_EQ(windowed.candidates.front(), cls);
}

// The removed variants (ping-pong, deferred PV wait) are gone from every space and from the names;
// a spec written before their removal still reads back when it names the kept kernel.
TEST(AttentionRealizer, NoSpaceHasThePingPongOrDeferredPvVariants) {
  realize::SpaceOptions all;
  all.exhaustive = true;
  for (const int d : {64, 80, 96, 128}) {
    for (const bool causal : {true, false}) {
      AttentionSpec cls;
      cls.head_dim = d;
      cls.causal = causal;
      for (const auto& c : attention_space(cls, all).candidates) {
        EXPECT_EQ(c.name().find("_pp"), std::string::npos) << c.name();
        EXPECT_EQ(c.name().find("_defer"), std::string::npos) << c.name();
        EXPECT_FALSE(c.params().contains("schedule")) << c.name();
        EXPECT_FALSE(c.params().contains("defer_pv_wait")) << c.name();
      }
    }
  }
  AttentionSpec s;
  nlohmann::json old = s.to_json();
  old["schedule"] = "cooperative";
  old["defer_pv_wait"] = false;
  EXPECT_EQ(AttentionSpec::from_json(old), s);
  old["schedule"] = "pingpong";
  EXPECT_THROW(AttentionSpec::from_json(old), std::invalid_argument);
  old["schedule"] = "cooperative";
  old["defer_pv_wait"] = true;
  EXPECT_THROW(AttentionSpec::from_json(old), std::invalid_argument);
}

TEST(AttentionRealizer, SpecJsonRoundTripAndErrors) {
  AttentionSpec s;
  s.head_dim = 80;
  s.tile_order = 0;
  s.q_stages = 1;
  EXPECT_EQ(AttentionSpec::from_json(s.to_json()), s);
  EXPECT_EQ(AttentionSpec::of(s.to_kernel_spec()), s);
  AttentionSpec bad = s;
  bad.o_alias_q = true;
  bad.q_stages = 3;  // O in the tile's Q stage: any number of Q stages
  EXPECT_EQ(attention_spec_error(bad), std::nullopt);
  bad.q_stages = 4;
  EXPECT_NE(attention_spec_error(bad), std::nullopt);
  bad = s;
  bad.tile_head_dim = 100;  // not a multiple of 64
  EXPECT_NE(attention_spec_error(bad), std::nullopt);
  bad.tile_head_dim = 64;  // narrower than the head dim
  EXPECT_NE(attention_spec_error(bad), std::nullopt);
  bad.tile_head_dim = 128;
  EXPECT_EQ(attention_spec_error(bad), std::nullopt);
  EXPECT_EQ(AttentionSpec::from_json(bad.to_json()), bad);
  EXPECT_NE(bad.name().find("_t128"), std::string::npos);
  bad = s;
  bad.dynamic_schedule = true;
  bad.persistent = false;
  EXPECT_NE(attention_spec_error(bad), std::nullopt);
  nlohmann::json j = s.to_json();
  j.erase("stages");
  EXPECT_THROW(AttentionSpec::from_json(j), std::invalid_argument);
}

TEST(AttentionRealizer, RendersTypeChoicesWithAContentKey) {
  const Problem problem = mingpt_attention();
  const realize::KernelSpec spec = realizer().problem_class(problem, core::PrecisionMode::Native);
  realize::CompileOptions options = realize::default_compile_options();
  options.fact_root = FACT_SOURCE_DIR;
  const realize::RenderedKernel kernel = realize::render_kernel(spec, options);
  EXPECT_EQ(kernel.entry_symbol, "fact_" + kernel.key.substr(0, 16));
  EXPECT_NE(kernel.source.find("#include \"patterns/attention/attention_entry.cuh\""), std::string::npos);
  EXPECT_NE(kernel.source.find("fact::attention::Config<\n    cutlass::bfloat16_t"), std::string::npos) << kernel.source;
  EXPECT_NE(kernel.source.find("/*head_dim=*/96"), std::string::npos);
  EXPECT_NE(kernel.source.find("extern \"C\" FACT_EXPORT int " + kernel.entry_symbol + "("), std::string::npos);
  EXPECT_EQ(kernel.source.find("FACT_ENTRY_SYMBOL"), std::string::npos);
  // fact_kernel_info: kind, ABI version, entry, key and the KernelSpec a loader reads back.
  const size_t open = kernel.source.find("R\"fact_json(") + 12;
  const size_t close = kernel.source.find(")fact_json\"");
  const nlohmann::json info = nlohmann::json::parse(kernel.source.substr(open, close - open));
  EXPECT_EQ(info["kind"], "attention");
  EXPECT_EQ(info["abi_version"], 2);
  EXPECT_EQ(info["entry"], kernel.entry_symbol);
  EXPECT_EQ(info["key"], kernel.key);
  EXPECT_EQ(realize::KernelSpec::from_json(info["spec"]), spec);
  // Same spec, same key; another configuration, another key.
  EXPECT_EQ(realize::render_kernel(spec, options).key, kernel.key);
  AttentionSpec other = AttentionSpec::of(spec);
  other.tile_order = 1 - other.tile_order;
  EXPECT_NE(realize::render_kernel(other.to_kernel_spec(), options).key, kernel.key);
  AttentionSpec broken = other;
  broken.stages = 6;  // 6 stages of 128 keys at d96 do not fit
  EXPECT_THROW(realize::render_kernel(broken.to_kernel_spec(), options), realize::RenderError);
}

// float32: the 3xTF32 kernel in strict, the TF32 one in tf32, 64-row tiles below d128; the space
// varies the tile and prunes the 128-row tile where it would spill; the rendered instance names
// F32Config and the kernel info its products.
TEST(AttentionRealizer, Float32AttentionRunsTheSplitKernelInStrictAndTheTf32OneInTf32) {
  const Problem problem = mingpt_attention("mingpt_block_fp32.json");
  EXPECT_EQ(realizer().declines(problem, core::PrecisionMode::Strict), std::nullopt);
  const realize::KernelSpec strict = realizer().problem_class(problem, core::PrecisionMode::Strict);
  EXPECT_EQ(strict.name(), "attn_f32_d96_causal_m64n64_3xtf32");
  EXPECT_EQ(realizer().class_token(strict), "f32|d96|causal|3xtf32");
  EXPECT_EQ(realizer().family(strict), "f32/m64/n64");
  EXPECT_EQ(strict.params().at("products"), "3xtf32");
  const realize::KernelSpec tf32 = realizer().problem_class(problem, core::PrecisionMode::Tf32);
  EXPECT_EQ(tf32.name(), "attn_f32_d96_causal_m64n64_tf32");
  EXPECT_NE(realizer().class_token(tf32), realizer().class_token(strict));

  const realize::ParamSpace space = realizer().space(strict, problem, {});
  EXPECT_EQ(space.candidates.front(), strict);
  std::set<std::string> names;
  for (const auto& c : space.candidates) {
    names.insert(c.name());
    EXPECT_EQ(AttentionSpec::of(c).products, 3) << c.name();
  }
  EXPECT_TRUE(names.count("attn_f32_d96_causal_m64n32_3xtf32")) << space.candidates.size();
  EXPECT_TRUE(std::any_of(space.pruned.begin(), space.pruned.end(), [](const realize::PrunedConfig& p) {
    return p.spec.name() == "attn_f32_d96_causal_m128n64_3xtf32" && p.reason.find("spills") != std::string::npos;
  }));

  AttentionSpec d128 = AttentionSpec::of(strict);
  d128.head_dim = 128;
  d128.block_m = 128;
  EXPECT_EQ(attention_spec_error(d128), std::nullopt);  // one CTA per SM: 255 registers
  AttentionSpec bad = d128;
  bad.products = 2;
  EXPECT_NE(attention_spec_error(bad), std::nullopt);
  bad = d128;
  bad.stages = 2;
  EXPECT_NE(attention_spec_error(bad)->find("one K/V stage"), std::string::npos);
  bad = AttentionSpec::of(strict);
  bad.products = 3;
  bad.dtype = DType::BFloat16;
  EXPECT_NE(attention_spec_error(bad), std::nullopt);  // products belong to the float32 kernel
  EXPECT_EQ(AttentionSpec::from_json(AttentionSpec::of(tf32).to_json()), AttentionSpec::of(tf32));

  realize::CompileOptions options = realize::default_compile_options();
  options.fact_root = FACT_SOURCE_DIR;
  const realize::RenderedKernel kernel = realize::render_kernel(strict, options);
  EXPECT_NE(kernel.source.find("fact::attention::F32Config<\n    /*head_dim=*/96"), std::string::npos) << kernel.source;
  EXPECT_NE(kernel.source.find("/*products=*/3"), std::string::npos);
  EXPECT_NE(realize::render_kernel(tf32, options).key, kernel.key);
}

TEST(AttentionRealizer, RealizeMatchesRendersTheMinGptAttention) {
  const auto g = graph::load_graph(std::string(FACT_SOURCE_DIR) + "/tests/data/graphs/mingpt_block_bf16.json");
  discover::DiscoverOptions options;
  options.precision = core::PrecisionMode::Native;
  const auto d = discover::discover(g, options);
  realize::RealizeOptions realize_options;
  realize_options.precision = core::PrecisionMode::Native;
  realize_options.out_dir = std::filesystem::path(::testing::TempDir()) / "fact_attention_realize";
  realize_options.show_progress = false;
  realize_options.compile_options.fact_root = FACT_SOURCE_DIR;
  const auto result = realize::realize_matches(d.matches, realize_options);
  bool found = false;
  for (const auto& k : result.kernels) {
    if (k.kernel.spec.kind() != "attention") continue;
    found = true;
    EXPECT_EQ(k.status, "rendered");
    EXPECT_TRUE(std::filesystem::exists(k.source_file));
  }
  EXPECT_TRUE(found);
  for (const auto& call : result.calls) EXPECT_TRUE(call.error.empty()) << call.error;
}

}  // namespace
}  // namespace fact::attention

namespace fact::attention {
namespace {

// A key mask is part of the problem class: its kernels are their own class and name, every
// candidate of its space reads the mask (instances/attn_bf16_d64_noncausal_..._km.cu: BERT's).
TEST(AttentionRealizer, KeyMaskKernelsAreTheirOwnClass) {
  AttentionProblem p;
  p.dtype = DType::BFloat16;
  p.mask = MaskKind::None;
  p.head_dim = p.v_head_dim = 64;
  p.key_mask = KeyMask{"mask", true, 512, 1, 0};
  const AttentionSpec spec = default_spec(p);
  EXPECT_EQ(spec.name(), "attn_bf16_d64_noncausal_m64n128s2_coop_dyn_q2_o1_km");
  EXPECT_EQ(AttentionSpec::from_json(spec.to_json()), spec);
  const realize::ParamSpace space = attention_space(spec, realize::SpaceOptions{});
  ASSERT_FALSE(space.candidates.empty());
  for (const auto& candidate : space.candidates) EXPECT_TRUE(AttentionSpec::of(candidate).key_mask) << candidate.name();
  AttentionSpec causal = spec;
  causal.causal = true;
  EXPECT_TRUE(attention_spec_error(causal).has_value());
  AttentionSpec f32 = default_spec(p, core::PrecisionMode::Strict);
  f32.dtype = DType::Float32;
  f32.key_mask = true;
  EXPECT_TRUE(attention_spec_error(f32).has_value());
}

}  // namespace
}  // namespace fact::attention

// fact.gemm canonicalization: matmul-family ops, their view chains, layouts, batching, and the
// operands that cannot be read in place.
#include <gtest/gtest.h>

#include "fact/discover/canonicalize.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using testing::gemms;

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::OpOptions;
using graph::T;
using graph::TL;
using testing::count_target;
using testing::find_target;
using V = std::vector<int64_t>;
using Ids = std::vector<std::string>;

const graph::Node& only_gemm(const graph::Graph& g) {
  EXPECT_EQ(count_target(g, "fact.gemm"), 1u);
  const graph::Node* gemm = find_target(g, "fact.gemm");
  if (gemm == nullptr) throw std::runtime_error("no fact.gemm");
  return *gemm;
}

TEST(CanonicalizeGemm, LinearOnThreeDimActivationsFoldsBatchIntoM) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {4, 8, 64});
  auto w = b.parameter("w", {128, 64});
  auto bias = b.parameter("bias", {128});
  auto y = testing::linear(b, x, w, bias);
  auto g = canonicalize(b.finish({y}));
  const auto& gemm = only_gemm(g);
  const auto& a = gemm.attrs;
  EXPECT_EQ(a["m"], 32);
  EXPECT_EQ(a["n"], 128);
  EXPECT_EQ(a["k"], 64);
  EXPECT_EQ(a["batch"], 1);
  EXPECT_TRUE(a["folded_m"].get<bool>());
  EXPECT_EQ(a["a"]["value"], x);
  EXPECT_EQ(a["a"]["layout"], "row");
  EXPECT_EQ(a["a"]["ld"], 64);
  EXPECT_EQ(a["b"]["value"], w);
  EXPECT_EQ(a["b"]["layout"], "col");  // weight [N, K] read as B (K x N): K contiguous
  EXPECT_EQ(a["b"]["ld"], 64);
  EXPECT_EQ(a["bias"]["value"], bias);
  EXPECT_EQ(a["bias"]["broadcast"], "row");
  EXPECT_EQ(a["dtype"], "bfloat16");
  EXPECT_FALSE(a.contains("unsupported"));
  EXPECT_EQ(gemm.origin, Ids{"linear"});
  EXPECT_EQ(gemm.outputs, Ids{y});
}

// A pooler's head on the first token, x[:, 0] of [B, S, H]: one row at B = 1 keeps the view's
// row stride S·H as its leading dimension, as at every other B (a plan over a range of B fits
// one polynomial through B = 1); a contiguous single row keeps ld = K.
TEST(CanonicalizeGemm, OneRowOfAStridedViewKeepsItsRowStride) {
  for (int64_t batch : {1, 3}) {
    GraphBuilder b(DType::BFloat16);
    auto x = b.input("x", {batch, 16, 64});
    OpOptions first_token;
    first_token.stride = V{16 * 64, 1};
    auto cls = b.op("aten.select.int", {T(x), C(1), C(0)}, {batch, 64}, first_token);
    auto w = b.parameter("w", {128, 64});
    auto bias = b.parameter("bias", {128});
    auto y = testing::linear(b, cls, w, bias);
    const auto g = canonicalize(b.finish({y}));
    const auto& a = only_gemm(g).attrs;
    EXPECT_EQ(a["m"], batch);
    EXPECT_EQ(a["a"]["layout"], "row");
    EXPECT_EQ(a["a"]["ld"], 16 * 64) << "batch " << batch;
  }
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {1, 64});
  auto y = testing::linear(b, x, b.parameter("w", {128, 64}), b.parameter("bias", {128}));
  const auto g = canonicalize(b.finish({y}));
  EXPECT_EQ(only_gemm(g).attrs["a"]["ld"], 64);
}

TEST(CanonicalizeGemm, DecomposedAddmmAbsorbsViewsAndWeightPermute) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {4, 8, 64});
  auto w = b.parameter("w", {128, 64});
  auto bias = b.parameter("bias", {128});
  auto flat = b.op("aten.view.default", {T(x), C(V{32, 64})}, {32, 64});
  auto wt = b.op("aten.permute.default", {T(w), C(V{1, 0})}, {64, 128},
                 OpOptions{.stride = V{1, 64}});
  auto mm = b.op("aten.addmm.default", {T(bias), T(flat), T(wt)}, {32, 128});
  auto out = b.op("aten.view.default", {T(mm), C(V{4, 8, 128})}, {4, 8, 128});
  auto g = canonicalize(b.finish({out}));
  const auto& gemm = only_gemm(g);
  EXPECT_EQ(gemm.args.size(), 3u);
  EXPECT_EQ(gemm.args[0].tensor, x);
  EXPECT_EQ(gemm.args[1].tensor, w);
  EXPECT_EQ(gemm.args[2].tensor, bias);
  EXPECT_EQ(gemm.outputs, Ids{out});
  EXPECT_EQ(gemm.origin, (Ids{flat, wt, mm, out}));
  EXPECT_EQ(gemm.attrs["m"], 32);
  EXPECT_EQ(gemm.attrs["b"]["layout"], "col");
  EXPECT_EQ(g.nodes().size(), 1u);
}

TEST(CanonicalizeGemm, AddmmWithFullMatrixKeepsBetaAndAlpha) {
  GraphBuilder b(DType::Float32);
  auto c = b.input("c", {32, 16});
  auto a = b.input("a", {32, 64});
  auto w = b.input("w", {64, 16});
  OpOptions scaled;
  scaled.kwargs["beta"] = C(0.5);
  scaled.kwargs["alpha"] = C(2.0);
  auto y = b.op("aten.addmm.default", {T(c), T(a), T(w)}, {32, 16}, scaled);
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_EQ(attrs["bias"]["broadcast"], "full");
  EXPECT_DOUBLE_EQ(attrs["bias"]["beta"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(attrs["alpha"].get<double>(), 2.0);
  EXPECT_EQ(attrs["b"]["layout"], "row");
  EXPECT_EQ(attrs["b"]["ld"], 16);
}

TEST(CanonicalizeGemm, TransposedOperandsBecomeLayouts) {
  GraphBuilder b(DType::Float16);
  auto xt = b.input("xt", {64, 32});  // x stored as [K, M]
  auto w = b.input("w", {16, 64});    // w stored as [N, K]
  auto x = b.op("aten.t.default", {T(xt)}, {32, 64}, OpOptions{.stride = V{1, 32}});
  auto wt = b.op("aten.transpose.int", {T(w), C(0), C(1)}, {64, 16}, OpOptions{.stride = V{1, 64}});
  auto y = b.op("aten.mm.default", {T(x), T(wt)}, {32, 16});
  auto g = canonicalize(b.finish({y}));
  const auto& gemm = only_gemm(g);
  EXPECT_EQ(gemm.attrs["a"]["value"], xt);
  EXPECT_EQ(gemm.attrs["a"]["layout"], "col");
  EXPECT_EQ(gemm.attrs["a"]["ld"], 32);
  EXPECT_EQ(gemm.attrs["b"]["value"], w);
  EXPECT_EQ(gemm.attrs["b"]["layout"], "col");
  EXPECT_EQ(gemm.attrs["b"]["ld"], 64);
  EXPECT_EQ(gemm.origin, (Ids{x, wt, y}));
}

TEST(CanonicalizeGemm, BmmHasBatchStrides) {
  GraphBuilder b(DType::Float32);
  auto a = b.input("a", {8, 128, 64});
  auto c = b.input("c", {8, 64, 32});
  auto y = b.op("aten.bmm.default", {T(a), T(c)}, {8, 128, 32});
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_EQ(attrs["batch"], 8);
  EXPECT_EQ(attrs["m"], 128);
  EXPECT_EQ(attrs["a"]["batch_stride"], 128 * 64);
  EXPECT_EQ(attrs["b"]["batch_stride"], 64 * 32);
  EXPECT_EQ(attrs["d"]["batch_stride"], 128 * 32);
  EXPECT_EQ(attrs["batch_shape"], V{8});
}

TEST(CanonicalizeGemm, MatmulBroadcastsBatchDims) {
  GraphBuilder b(DType::Float32);
  auto q = b.input("q", {2, 4, 16, 32});
  auto k = b.input("k", {1, 4, 32, 16});  // broadcast over the first dim
  auto y = b.op("aten.matmul.default", {T(q), T(k)}, {2, 4, 16, 16});
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  // Batch dims [2, 4]: k's stride over the first is 0 and over the second 512, which do not
  // collapse into one stride: two batch modes, the kernel's the larger (4), the outer one 2.
  EXPECT_EQ(attrs["batch"], 4);
  EXPECT_EQ(attrs["outer_batch"], 2);
  EXPECT_EQ(attrs["batch_shape"], (V{2, 4}));
  EXPECT_FALSE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["a"]["batch_stride"], 512);
  EXPECT_EQ(attrs["a"]["outer_batch_stride"], 2048);
  EXPECT_EQ(attrs["b"]["batch_stride"], 512);
  EXPECT_EQ(attrs["b"]["outer_batch_stride"], 0);  // k is broadcast over the first dim
  EXPECT_EQ(attrs["d"]["batch_stride"], 256);
  EXPECT_EQ(attrs["d"]["outer_batch_stride"], 1024);
  EXPECT_EQ(attrs["batch_dims"]["modes"], (std::vector<int>{1, 0}));
}

TEST(CanonicalizeGemm, MatmulWithSharedWeightFoldsWhenRowsCollapse) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {2, 4, 16, 32});
  auto w = b.input("w", {32, 8});
  auto y = b.op("aten.matmul.default", {T(x), T(w)}, {2, 4, 16, 8});
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_EQ(attrs["m"], 2 * 4 * 16);
  EXPECT_EQ(attrs["batch"], 1);
}

TEST(CanonicalizeGemm, SharedWeightWithStridedRowsBecomesBatched) {
  GraphBuilder b(DType::Float32);
  // [B, T, K] whose batches are padded apart (batch stride 1024 > T*K = 512).
  auto x = b.input("x", {4, 16, 32}, V{1024, 32, 1});
  auto w = b.parameter("w", {8, 32});
  auto y = testing::linear(b, x, w);
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_EQ(attrs["m"], 16);
  EXPECT_EQ(attrs["batch"], 4);
  EXPECT_EQ(attrs["a"]["batch_stride"], 1024);
  EXPECT_EQ(attrs["b"]["batch_stride"], 0);  // the weight is shared by every batch
  EXPECT_FALSE(attrs.contains("unsupported"));
}

TEST(CanonicalizeGemm, HeadSplitOperandsBecomeTwoBatchModes) {
  // q = qkv[..., :C].view(B, T, H, D).transpose(1, 2): batch dims (B, H) with strides
  // (T*3C, D) that do not collapse into one stride; k is contiguous. H (4) is the kernel's batch
  // mode, B (2) the outer one its entry loops over.
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 4, 16, 16}, V{3072, 16, 192, 1});
  auto k = b.input("k", {2, 4, 16, 16});
  auto y = b.op("aten.matmul.default", {T(q), T(k)}, {2, 4, 16, 16});
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_FALSE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["batch"], 4);
  EXPECT_EQ(attrs["outer_batch"], 2);
  EXPECT_EQ(attrs["a"]["ld"], 192);
  EXPECT_EQ(attrs["a"]["batch_stride"], 16);
  EXPECT_EQ(attrs["a"]["outer_batch_stride"], 3072);
  EXPECT_EQ(attrs["b"]["batch_stride"], 256);
  EXPECT_EQ(attrs["b"]["outer_batch_stride"], 1024);
  EXPECT_EQ(attrs["d"]["batch_stride"], 256);
  EXPECT_EQ(attrs["d"]["outer_batch_stride"], 1024);
  EXPECT_EQ(attrs["batch_shape"], (V{2, 4}));
}

TEST(CanonicalizeGemm, TheLargerRunIsTheKernelsBatchMode) {
  // [8, 2] batch dims whose strides do not chain: the first dim (8) becomes the kernel's mode.
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {8, 2, 16, 32}, V{32, 8 * 32 * 16, 8 * 32, 1});  // [H, B] of [B, T, H, K]
  auto w = b.input("w", {8, 2, 32, 16});
  auto y = b.op("aten.matmul.default", {T(x), T(w)}, {8, 2, 16, 16});
  const auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_EQ(attrs["batch"], 8);
  EXPECT_EQ(attrs["outer_batch"], 2);
  EXPECT_EQ(attrs["a"]["batch_stride"], 32);
  EXPECT_EQ(attrs["a"]["outer_batch_stride"], 8 * 32 * 16);
  EXPECT_EQ(attrs["b"]["batch_stride"], 2 * 32 * 16);
  EXPECT_EQ(attrs["b"]["outer_batch_stride"], 32 * 16);
  EXPECT_EQ(attrs["d"]["batch_stride"], 2 * 16 * 16);  // D stays [8, 2, 16, 16]
  EXPECT_EQ(attrs["d"]["outer_batch_stride"], 16 * 16);
  EXPECT_EQ(attrs["batch_dims"]["modes"], (std::vector<int>{0, 1}));
}

TEST(CanonicalizeGemm, GqaExpandedValuesAreASecondBatchMode) {
  // v = kv.expand(B, H, T, D) from [B, 1, T, D] (repeat_kv with one KV head): stride 0 over H.
  GraphBuilder b(DType::BFloat16);
  auto p = b.input("p", {2, 4, 32, 32});
  auto v = b.input("v", {2, 4, 32, 16}, V{512, 0, 16, 1});
  auto y = b.op("aten.matmul.default", {T(p), T(v)}, {2, 4, 32, 16});
  const auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_FALSE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["batch"], 4);
  EXPECT_EQ(attrs["outer_batch"], 2);
  EXPECT_EQ(attrs["b"]["batch_stride"], 0);
  EXPECT_EQ(attrs["b"]["outer_batch_stride"], 512);
  EXPECT_EQ(attrs["a"]["batch_stride"], 1024);
  EXPECT_EQ(attrs["a"]["outer_batch_stride"], 4096);
}

TEST(CanonicalizeGemm, BatchDimsNeedingThreeStridesAreUnsupported) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 3, 4, 16, 16}, V{16, 32 * 16 * 2, 16 * 2 * 3, 2 * 3 * 4 * 16, 1});
  auto k = b.input("k", {2, 3, 4, 16, 16});
  auto y = b.op("aten.matmul.default", {T(q), T(k)}, {2, 3, 4, 16, 16});
  const auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  ASSERT_TRUE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["unsupported"],
            "operands A [2, 3, 4, 16, 16] with strides [16, 1024, 96, 384, 1] and B [2, 3, 4, 16, "
            "16] with strides [3072, 1024, 256, 16, 1]: batch dims [2, 3, 4] need more than two "
            "batch strides (a kernel takes two batch modes)");
}

TEST(CanonicalizeGemm, EinsumWithBatchDimsAndATransposedOperand) {
  // Attention scores as einsum: "bhqd,bhkd->bhqk" reads k as a column-major B.
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 4, 16, 32});
  auto k = b.input("k", {2, 4, 24, 32});
  auto y = b.op("aten.einsum.default", {C("bhqd,bhkd->bhqk"), TL({q, k})}, {2, 4, 16, 24});
  const auto g = canonicalize(b.finish({y}));
  const auto& gemm = only_gemm(g);
  const auto& attrs = gemm.attrs;
  EXPECT_FALSE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["equation"], "bhqd,bhkd->bhqk");
  EXPECT_EQ(attrs["m"], 16);
  EXPECT_EQ(attrs["n"], 24);
  EXPECT_EQ(attrs["k"], 32);
  EXPECT_EQ(attrs["batch"], 8);
  EXPECT_EQ(attrs["a"]["value"], q);
  EXPECT_EQ(attrs["a"]["layout"], "row");
  EXPECT_EQ(attrs["b"]["value"], k);
  EXPECT_EQ(attrs["b"]["layout"], "col");
  EXPECT_EQ(attrs["b"]["ld"], 32);
  EXPECT_EQ(attrs["b"]["batch_stride"], 24 * 32);
  EXPECT_EQ(gemm.args[0].tensor, q);
  EXPECT_EQ(gemm.args[1].tensor, k);
}

TEST(CanonicalizeGemm, EinsumProjectionToHeadsIsTwoBatchModes) {
  // "btd,dhk->bhtk": per-head projection weights [d, h, k]; x is broadcast over h, the weight
  // over b, so batch dims (b, h) need two strides.
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {2, 16, 64});
  auto w = b.parameter("w", {64, 2, 16});
  auto y = b.op("aten.einsum.default", {C("btd,dhk->bhtk"), TL({x, w})}, {2, 2, 16, 16});
  const auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_FALSE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["m"], 16);
  EXPECT_EQ(attrs["n"], 16);
  EXPECT_EQ(attrs["k"], 64);
  EXPECT_EQ(attrs["batch"] .get<int64_t>() * attrs["outer_batch"].get<int64_t>(), 4);
  EXPECT_EQ(attrs["b"]["layout"], "row");
  EXPECT_EQ(attrs["b"]["ld"], 32);
  // x: 1024 apart over b, shared over h; w: shared over b, 16 apart over h.
  EXPECT_EQ(attrs["a"]["batch_stride"], 0);
  EXPECT_EQ(attrs["a"]["outer_batch_stride"], 1024);
  EXPECT_EQ(attrs["b"]["batch_stride"], 16);
  EXPECT_EQ(attrs["b"]["outer_batch_stride"], 0);
}

TEST(CanonicalizeGemm, EinsumContractionThatNeedsACopyIsUnsupportedWithTheReason) {
  // "bhtk,hkd->btd" contracts (h, k), which are not adjacent in h's layout [b, h, t, k].
  GraphBuilder b(DType::Float32);
  auto h = b.input("h", {2, 2, 16, 16});
  auto w = b.parameter("w", {2, 16, 64});
  auto y = b.op("aten.einsum.default", {C("bhtk,hkd->btd"), TL({h, w})}, {2, 16, 64});
  const auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  ASSERT_TRUE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["unsupported"],
            "einsum 'bhtk,hkd->btd': dims [bt] of [2, 2, 16, 16] with strides [512, 256, 16, 1] "
            "do not collapse into one row stride (the product needs a copy)");
}

TEST(CanonicalizeGemm, EinsumsThatAreNoMatrixProductStayAsCaptured) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {16, 32});
  auto z = b.input("z", {16, 32});
  auto prod = b.op("aten.einsum.default", {C("ij,ij->ij"), TL({x, z})}, {16, 32});  // no K
  auto sum = b.op("aten.einsum.default", {C("ij,jk->i"), TL({x, b.input("w", {32, 8})})}, {16});
  auto ell = b.op("aten.einsum.default", {C("...ij,...jk->...ik"), TL({x, b.input("v", {32, 8})})},
                  {16, 8});
  auto g = canonicalize(b.finish({prod, sum, ell}));
  EXPECT_EQ(count_target(g, "fact.gemm"), 0u);
  EXPECT_EQ(count_target(g, "aten.einsum.default"), 3u);
}

TEST(CanonicalizeGemm, BaddbmmWithAPerBatchBiasVector) {
  // BLOOM's ALiBi: baddbmm(alibi [B*H, 1, T], q, kᵀ): one bias row per batch.
  GraphBuilder b(DType::Float32);
  auto alibi = b.input("alibi", {8, 1, 32});
  auto q = b.input("q", {8, 32, 16});
  auto k = b.input("k", {8, 32, 16});
  auto kt = b.op("aten.transpose.int", {T(k), C(1), C(2)}, {8, 16, 32}, OpOptions{.stride = V{512, 1, 16}});
  OpOptions scaled;
  scaled.kwargs["alpha"] = C(0.25);
  auto y = b.op("aten.baddbmm.default", {T(alibi), T(q), T(kt)}, {8, 32, 32}, scaled);
  const auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  EXPECT_FALSE(attrs.contains("unsupported"));
  EXPECT_EQ(attrs["bias"]["broadcast"], "row");
  EXPECT_EQ(attrs["bias"]["batch_stride"], 32);
  EXPECT_EQ(attrs["bias"]["outer_batch_stride"], 0);
  // A bias shared by the batches reads with batch stride 0.
  GraphBuilder shared(DType::Float32);
  auto one = shared.input("one", {1, 1, 32});
  auto q2 = shared.input("q", {8, 32, 16});
  auto k2 = shared.input("k", {8, 16, 32});
  auto y2 = shared.op("aten.baddbmm.default", {T(one), T(q2), T(k2)}, {8, 32, 32});
  const auto g2 = canonicalize(shared.finish({y2}));
  EXPECT_EQ(only_gemm(g2).attrs["bias"]["batch_stride"], 0);
}

TEST(CanonicalizeGemm, OperandWithoutUnitStrideIsUnsupported) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {64, 64}, V{128, 2});  // every other column
  auto w = b.input("w", {64, 32});
  auto y = b.op("aten.mm.default", {T(x), T(w)}, {64, 32});
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  ASSERT_TRUE(attrs.contains("unsupported"));
  EXPECT_NE(attrs["unsupported"].get<std::string>().find("no unit stride"), std::string::npos);
}

TEST(CanonicalizeGemm, DecomposedBatchedMatmulKeepsTheCopyItNeeds) {
  GraphBuilder b(DType::Float32);
  auto qkv = b.input("qkv", {2, 16, 64}, V{3072, 192, 1});
  auto v = b.op("aten.view.default", {T(qkv), C(V{2, 16, 4, 16})}, {2, 16, 4, 16},
                OpOptions{.stride = V{3072, 192, 16, 1}});
  auto p = b.op("aten.permute.default", {T(v), C(V{0, 2, 1, 3})}, {2, 4, 16, 16},
                OpOptions{.stride = V{3072, 16, 192, 1}});
  auto c = b.op("aten.clone.default", {T(p)}, {2, 4, 16, 16});
  auto flat = b.op("aten.view.default", {T(c), C(V{8, 16, 16})}, {8, 16, 16});
  auto other = b.input("other", {8, 16, 16});
  auto mm = b.op("aten.bmm.default", {T(flat), T(other)}, {8, 16, 16});
  auto out = b.op("aten.view.default", {T(mm), C(V{2, 4, 16, 16})}, {2, 4, 16, 16});
  auto g = canonicalize(b.finish({out}));
  const auto& gemm = only_gemm(g);
  EXPECT_EQ(gemm.args[0].tensor, c);
  EXPECT_EQ(gemm.origin, (Ids{flat, mm, out}));
  EXPECT_EQ(gemm.attrs["batch_shape"], (V{2, 4}));  // from the output view
  EXPECT_NE(g.node("clone"), nullptr);
  EXPECT_FALSE(gemm.attrs.contains("unsupported"));
}

TEST(CanonicalizeGemm, HeadSplittingOutputViewsStayOutside) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {1, 16, 64});
  auto w = b.parameter("w", {64, 64});
  auto y = testing::linear(b, x, w);
  auto heads = b.op("aten.view.default", {T(y), C(V{1, 16, 4, 16})}, {1, 16, 4, 16});
  auto g = canonicalize(b.finish({heads}));
  EXPECT_EQ(only_gemm(g).outputs, Ids{y});
  EXPECT_NE(g.node("view"), nullptr);
}

TEST(CanonicalizeGemm, MatrixVectorProductsStayAsCaptured) {
  GraphBuilder b(DType::Float32);
  auto a = b.input("a", {16, 32});
  auto v = b.input("v", {32});
  auto y = b.op("aten.matmul.default", {T(a), T(v)}, {16});
  auto g = canonicalize(b.finish({y}));
  EXPECT_EQ(count_target(g, "fact.gemm"), 0u);
  EXPECT_EQ(g.nodes().front().target, "aten.matmul.default");
}

TEST(CanonicalizeGemm, BiasThatIsNeitherVectorNorMatrixIsUnsupported) {
  GraphBuilder b(DType::Float32);
  auto c = b.input("c", {32, 1});  // a per-row bias
  auto a = b.input("a", {32, 64});
  auto w = b.input("w", {64, 16});
  auto y = b.op("aten.addmm.default", {T(c), T(a), T(w)}, {32, 16});
  auto g = canonicalize(b.finish({y}));
  const auto& attrs = only_gemm(g).attrs;
  ASSERT_TRUE(attrs.contains("unsupported"));
  EXPECT_NE(attrs["unsupported"].get<std::string>().find("bias [32, 1]"), std::string::npos);
}

}  // namespace
}  // namespace fact::discover

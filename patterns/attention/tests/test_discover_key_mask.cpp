// Key masks (padding masks) for fact.attention: a boolean mask computed from a model input that
// is the same for every query and head is read in place as a key mask (its row 0 per batch
// entry); one that varies along queries, an additive one, or one the proof cannot follow stays
// declined with the reason.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "fact/discover/canonicalize.hpp"
#include "fact/discover/discover.hpp"
#include "patterns/attention/kind/problem.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::OpOptions;
using graph::T;
using graph::ValueId;
using testing::find_target;
using V = std::vector<int64_t>;

constexpr int64_t kBatch = 4, kSeq = 32;

OpOptions named(const std::string& id, std::optional<V> stride = std::nullopt,
                std::optional<DType> dtype = std::nullopt) {
  OpOptions o;
  o.id = id;
  o.stride = stride;
  if (dtype) o.dtype = *dtype;
  return o;
}

// SDPA over [B, 2, S, 64] inputs with the `attn_mask` `mask_of` builds; the attention's attrs
// and the discovered match.
struct Found {
  nlohmann::json attrs;
  Match match;
};
Found sdpa_with_mask(const std::function<ValueId(GraphBuilder&)>& mask_of) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {kBatch, 2, kSeq, 64});
  auto k = b.input("k", {kBatch, 2, kSeq, 64});
  auto v = b.input("v", {kBatch, 2, kSeq, 64});
  OpOptions options;
  options.kwargs["attn_mask"] = T(mask_of(b));
  auto y = b.op("aten.scaled_dot_product_attention.default", {T(q), T(k), T(v)}, {kBatch, 2, kSeq, 64}, options);
  const graph::Graph captured = b.finish({y});
  const graph::Graph g = canonicalize(captured);
  const auto* node = find_target(g, "fact.attention");
  if (node == nullptr) throw std::runtime_error("no fact.attention");
  for (const auto& m : discover(captured).matches) {
    if (m.pattern == "attention") return {node->attrs, m};
  }
  throw std::runtime_error("no attention match");
}

// The padding row [B, 1, 1, S] (bool) of an int64 `attention_mask` input, as transformers
// indexes it.
ValueId padding_row(GraphBuilder& b) {
  auto mask = b.input("attention_mask", {kBatch, kSeq}, std::nullopt, DType::Int64);
  auto as_bool = b.op("aten.to.dtype", {T(mask), C("torch.bool")}, {kBatch, kSeq}, named("as_bool", std::nullopt, DType::Bool));
  return b.op("aten.view.default", {T(as_bool), C(V{kBatch, 1, 1, kSeq})}, {kBatch, 1, 1, kSeq},
              named("row", V{kSeq, kSeq, kSeq, 1}, DType::Bool));
}

// arange(S) and its [1, 1, S, 1] view (the query index, as transformers' mask functions see it).
std::pair<ValueId, ValueId> query_positions(GraphBuilder& b) {
  OpOptions int64;
  int64.dtype = DType::Int64;
  auto positions = b.op("aten.arange.default", {C(kSeq)}, {kSeq}, int64);
  auto q_idx = b.op("aten.view.default", {T(positions), C(V{1, 1, kSeq, 1})}, {1, 1, kSeq, 1},
                    named("q_idx", V{kSeq, kSeq, 1, 1}, DType::Int64));
  return {positions, q_idx};
}

// transformers' bidirectional mask while exported: an all-true [1, 1, S, 1] from an arange
// (q_idx >= 0) and-ed with the padding row, then expanded over the batch.
TEST(AttentionKeyMask, TransformersBidirectionalPaddingMaskIsReadInPlace) {
  const Found found = sdpa_with_mask([](GraphBuilder& b) {
    auto q_idx = query_positions(b).second;
    auto every_query = b.op("aten.ge.Scalar", {T(q_idx), C(0)}, {1, 1, kSeq, 1}, named("every_query", V{kSeq, kSeq, 1, 1}, DType::Bool));
    auto both = b.op("aten.__and__.Tensor", {T(every_query), T(padding_row(b))}, {kBatch, 1, kSeq, kSeq},
                     named("both", std::nullopt, DType::Bool));
    return b.op("aten.expand.default", {T(both), C(V{kBatch, -1, kSeq, kSeq})}, {kBatch, 1, kSeq, kSeq},
                named("expanded", std::nullopt, DType::Bool));
  });
  const auto& a = found.attrs;
  EXPECT_EQ(a["unsupported"], "") << a.dump();
  EXPECT_EQ(a["mask_kind"], "none");
  ASSERT_TRUE(a["key_mask"].is_object()) << a.dump();
  EXPECT_EQ(a["key_mask"]["value"], "both");  // the expand aliases it: read in place
  EXPECT_EQ(a["key_mask"]["keep"], true);
  EXPECT_EQ(a["key_mask"]["batch_stride"], kSeq * kSeq);
  EXPECT_EQ(a["key_mask"]["key_stride"], 1);
  EXPECT_EQ(a["key_mask"]["offset"], 0);
  EXPECT_EQ(found.match.status, MatchStatus::Accepted) << found.match.reason;
  EXPECT_EQ(found.match.roles.at("mask"), "both");
  const auto problem = attention::attention_problem_from_json(found.match.problems.front().desc);
  ASSERT_TRUE(problem.key_mask.has_value());
  EXPECT_EQ(problem.fusion_name(), "attention_key_mask");
}

// A [B, 1, 1, S] boolean row straight from the input: broadcast by SDPA itself.
TEST(AttentionKeyMask, ABroadcastRowIsAKeyMaskWithItsOwnStrides) {
  const Found found = sdpa_with_mask([](GraphBuilder& b) { return padding_row(b); });
  ASSERT_TRUE(found.attrs["key_mask"].is_object()) << found.attrs.dump();
  EXPECT_EQ(found.attrs["key_mask"]["batch_stride"], kSeq);
  EXPECT_EQ(found.match.status, MatchStatus::Accepted) << found.match.reason;
}

// A causal pattern and-ed with the padding row differs between queries: not a key mask.
TEST(AttentionKeyMask, CausalAndPaddingIsNotAKeyMask) {
  const Found found = sdpa_with_mask([](GraphBuilder& b) {
    auto [positions, q_idx] = query_positions(b);
    auto kv_idx = b.op("aten.view.default", {T(positions), C(V{1, 1, 1, kSeq})}, {1, 1, 1, kSeq},
                       named("kv_idx", V{kSeq, kSeq, kSeq, 1}, DType::Int64));
    auto causal = b.op("aten.le.Tensor", {T(kv_idx), T(q_idx)}, {1, 1, kSeq, kSeq}, named("causal", std::nullopt, DType::Bool));
    return b.op("aten.__and__.Tensor", {T(causal), T(padding_row(b))}, {kBatch, 1, kSeq, kSeq},
                named("both", std::nullopt, DType::Bool));
  });
  EXPECT_TRUE(found.attrs["key_mask"].is_null());
  EXPECT_EQ(found.match.status, MatchStatus::Declined);
  EXPECT_NE(found.match.reason.find("not a key mask"), std::string::npos) << found.match.reason;
  EXPECT_NE(found.match.reason.find("differs between queries or heads"), std::string::npos) << found.match.reason;
}

// A full [B, 1, S, S] mask given as an input may differ between queries: not a key mask.
TEST(AttentionKeyMask, AFullMaskInputIsNotAKeyMask) {
  const Found found = sdpa_with_mask([](GraphBuilder& b) {
    return b.input("mask4d", {kBatch, 1, kSeq, kSeq}, std::nullopt, DType::Bool);
  });
  EXPECT_EQ(found.match.status, MatchStatus::Declined);
  EXPECT_NE(found.match.reason.find("mask4d"), std::string::npos) << found.match.reason;
}

// An additive (float) key mask: the kernel reads boolean ones only.
TEST(AttentionKeyMask, AnAdditiveKeyMaskIsDeclined) {
  const Found found = sdpa_with_mask([](GraphBuilder& b) {
    return b.input("bias", {kBatch, 1, 1, kSeq}, std::nullopt, DType::BFloat16);
  });
  EXPECT_EQ(found.match.status, MatchStatus::Declined);
  EXPECT_NE(found.match.reason.find("an additive key mask"), std::string::npos) << found.match.reason;
}

// The written-out form: q·kᵀ, masked_fill(scores, padded, -inf) with a [B, 1, 1, S] boolean
// "padded" row (hidden where true), softmax, ·v: a key mask of the other polarity.
TEST(AttentionKeyMask, MaskedFillOfAPaddedRowIsAKeyMaskHiddenWhereTrue) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {kBatch, 2, kSeq, 64});
  auto k = b.input("k", {kBatch, 2, kSeq, 64});
  auto v = b.input("v", {kBatch, 2, kSeq, 64});
  auto kt = b.op("aten.transpose.int", {T(k), C(-2), C(-1)}, {kBatch, 2, 64, kSeq},
                 named("kt", V{2 * kSeq * 64, kSeq * 64, 1, 64}));
  auto s = b.op("aten.matmul.default", {T(q), T(kt)}, {kBatch, 2, kSeq, kSeq});
  auto scaled = b.op("aten.mul.Tensor", {T(s), C(0.125)}, {kBatch, 2, kSeq, kSeq});
  auto padded = b.op("aten.logical_not.default", {T(padding_row(b))}, {kBatch, 1, 1, kSeq},
                     named("padded", V{kSeq, kSeq, kSeq, 1}, DType::Bool));
  auto masked = b.op("aten.masked_fill.Scalar",
                     {T(scaled), T(padded), C(-std::numeric_limits<double>::infinity())}, {kBatch, 2, kSeq, kSeq});
  auto probs = b.op("aten.softmax.int", {T(masked), C(-1)}, {kBatch, 2, kSeq, kSeq});
  auto y = b.op("aten.matmul.default", {T(probs), T(v)}, {kBatch, 2, kSeq, 64});
  const graph::Graph g = canonicalize(b.finish({y}));
  const auto* node = find_target(g, "fact.attention");
  ASSERT_NE(node, nullptr);
  const auto& a = node->attrs;
  ASSERT_TRUE(a["key_mask"].is_object()) << a.dump();
  EXPECT_EQ(a["key_mask"]["value"], "padded");
  EXPECT_EQ(a["key_mask"]["keep"], false);
  EXPECT_EQ(a["key_mask"]["batch_stride"], kSeq);
  EXPECT_EQ(a["unsupported"], "");
}

}  // namespace
}  // namespace fact::discover

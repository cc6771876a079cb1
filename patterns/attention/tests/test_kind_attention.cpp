// The attention kind: its argument image (pack) and its float64 host reference, which together
// are what the CPU path of a composed module runs, checked against a direct float64 attention
// (scores matrix, masked with -inf, softmax, weighted sum) on fused-QKV operands, GQA, causal
// masks of both alignments, tails and merged-head output strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "fact/graph/graph_builder.hpp"
#include "fact/problem/problem.hpp"
#include "patterns/attention/attention_abi.h"
#include "patterns/attention/kind/pack.hpp"
#include "patterns/attention/kind/problem.hpp"
#include "patterns/attention/kind/reference_host.hpp"

namespace fact::attention {
namespace {

using graph::DType;

struct Case {
  int64_t batch = 2, heads = 4, kv_heads = 4, seq = 5, kv_seq = 5, dim = 8;
  MaskKind mask = MaskKind::CausalTopLeft;
  bool fused = true;
  int64_t window = 0;  // a causal sliding window (0: none)  // Q, K, V pieces of one [B, T, (H + 2 Hkv) D] projection (seq == kv_seq)
  bool key_mask = false;  // a boolean key mask "pad" [B, Tk] (needs mask None)
  bool keep = true;       // the key mask's polarity: visible where true (else hidden where true)
};

// The key mask's bytes: batch entry b hides its last b + 1 keys (entry kv_seq - 1 and later:
// every key), as a padding mask; written with the polarity `keep`.
std::vector<uint8_t> padding_bytes(const Case& c) {
  std::vector<uint8_t> bytes(size_t(c.batch * c.kv_seq));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < c.kv_seq; ++j) {
      const bool visible = j < c.kv_seq - (b + 1);
      bytes[size_t(b * c.kv_seq + j)] = visible == c.keep ? 1 : 0;
    }
  }
  return bytes;
}

// The problem's views and a graph holding its values: "qkv" (fused) or "q", "k", "v"
// ([B, T, H, D] row-major, or for K/V [B, Tk, Hkv, D]), and "o" [B, T, H·D] (merged heads).
struct Built {
  AttentionProblem problem;
  graph::Graph graph;
};

Built build(const Case& c, DType dtype) {
  Built out;
  AttentionProblem& p = out.problem;
  p.batch = c.batch;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.seq = c.seq;
  p.kv_seq = c.kv_seq;
  p.head_dim = p.v_head_dim = c.dim;
  p.dtype = p.softmax_dtype = dtype;
  p.mask = c.mask;
  p.window = c.window;
  p.scale = 1.0 / std::sqrt(double(c.dim));
  graph::GraphBuilder b(dtype);
  const int64_t d = c.dim;
  if (c.fused) {
    const int64_t width = (c.heads + 2 * c.kv_heads) * d;
    b.input("qkv", {c.batch, c.seq, width});
    p.q = {"qkv", {c.batch, c.heads, c.seq, d}, {c.seq * width, d, width, 1}, 0};
    p.k = {"qkv", {c.batch, c.kv_heads, c.seq, d}, {c.seq * width, d, width, 1}, c.heads * d};
    p.v = {"qkv", {c.batch, c.kv_heads, c.seq, d}, {c.seq * width, d, width, 1}, (c.heads + c.kv_heads) * d};
  } else {
    b.input("q", {c.batch, c.seq, c.heads, d});
    b.input("k", {c.batch, c.kv_seq, c.kv_heads, d});
    b.input("v", {c.batch, c.kv_seq, c.kv_heads, d});
    p.q = {"q", {c.batch, c.heads, c.seq, d}, {c.seq * c.heads * d, d, c.heads * d, 1}, 0};
    p.k = {"k", {c.batch, c.kv_heads, c.kv_seq, d}, {c.kv_seq * c.kv_heads * d, d, c.kv_heads * d, 1}, 0};
    p.v = {"v", {c.batch, c.kv_heads, c.kv_seq, d}, {c.kv_seq * c.kv_heads * d, d, c.kv_heads * d, 1}, 0};
  }
  if (c.key_mask) {
    b.input("pad", {c.batch, c.kv_seq}, std::nullopt, DType::Bool);
    p.key_mask = KeyMask{"pad", c.keep, c.kv_seq, 1, 0};
  }
  const auto o = b.op("aten.attention_stand_in", {graph::T(p.q.value)}, {c.batch, c.seq, c.heads * d},
                      graph::OpOptions{.id = "o"});
  p.o = {o, {c.batch, c.heads, c.seq, d}, {c.seq * c.heads * d, d, c.heads * d, 1}, 0};
  out.graph = b.finish({o});
  return out;
}

// Reads a view element [b, h, t, e] of a float64 buffer.
double at(const std::vector<double>& data, const TensorView& v, int64_t b, int64_t h, int64_t t, int64_t e) {
  return data[v.offset + b * v.stride[0] + h * v.stride[1] + t * v.stride[2] + e * v.stride[3]];
}

// softmax(scale · q kᵀ masked with -inf) v, written as [B, T, H, D].
std::vector<double> direct(const AttentionProblem& p, const std::vector<double>& qd, const std::vector<double>& kd,
                           const std::vector<double>& vd, const std::vector<uint8_t>& pad = {}) {
  std::vector<double> out(p.batch * p.seq * p.heads * p.head_dim, 0.0);
  const int64_t group = p.heads / p.kv_heads;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.seq; ++i) {
        std::vector<double> s(p.kv_seq);
        for (int64_t j = 0; j < p.kv_seq; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < p.head_dim; ++e) dot += at(qd, p.q, b, h, i, e) * at(kd, p.k, b, h / group, j, e);
          s[j] = dot * double(static_cast<float>(p.scale));  // the ABI carries the scale as a float
          const int64_t off = p.mask == MaskKind::CausalBottomRight ? p.kv_seq - p.seq : 0;
          const bool hidden = (p.mask != MaskKind::None && j > i + off) ||
                              (p.window > 0 && j <= i + off - p.window);
          const bool padded = p.key_mask && (pad[size_t(b * p.kv_seq + j)] != 0) != p.key_mask->keep;
          if (hidden || padded) s[j] = -std::numeric_limits<double>::infinity();
        }
        double m = -std::numeric_limits<double>::infinity();
        for (double x : s) m = std::max(m, x);
        if (std::isinf(m)) continue;  // no visible key: O = 0
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int64_t e = 0; e < p.head_dim; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < p.kv_seq; ++j) acc += s[j] / sum * at(vd, p.v, b, h / group, j, e);
          out[((b * p.seq + i) * p.heads + h) * p.head_dim + e] = acc;
        }
      }
    }
  }
  return out;
}

std::vector<double> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

size_t numel(const graph::Graph& g, const std::string& value) { return static_cast<size_t>(g.value(value).desc.numel()); }

// Packs the problem, runs the host reference on float64 buffers, compares with direct().
void check_case(const Case& c) {
  Built built = build(c, DType::Float64);
  const AttentionProblem& p = built.problem;
  const ArgImage image = pack_attention(p, built.graph);
  std::map<std::string, std::vector<double>> data;
  const std::vector<uint8_t> pad = c.key_mask ? padding_bytes(c) : std::vector<uint8_t>{};
  for (const auto& operand : image.operands) {
    if (operand.value != "pad") data[operand.value] = random_values(numel(built.graph, operand.value), 7);
  }
  std::vector<const void*> operands;
  std::vector<int> bytes;
  for (const auto& operand : image.operands) {
    const bool is_pad = operand.value == "pad";
    operands.push_back(is_pad ? static_cast<const void*>(pad.data()) : data[operand.value].data());
    bytes.push_back(is_pad ? 1 : 8);
  }
  ASSERT_EQ(image.results.size(), 1u);
  std::vector<double> o(numel(built.graph, "o"), std::nan(""));
  const std::vector<uint8_t> args = bind_addresses(image, operands, {o.data()}, bytes, {8});
  ASSERT_EQ(reference_call(reinterpret_cast<const FactCallHeader*>(args.data())), FACT_OK);
  const std::vector<double> want = direct(p, data[p.q.value], data[p.k.value], data[p.v.value], pad);
  ASSERT_EQ(o.size(), want.size());
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], want[i], 1e-12) << "element " << i;
}

TEST(AttentionKind, FusedQkvCausalMergedHeads) { check_case({}); }

TEST(AttentionKind, NoMask) { check_case({.mask = MaskKind::None}); }

TEST(AttentionKind, GroupedQueryHeadsFused) { check_case({.heads = 8, .kv_heads = 2}); }

TEST(AttentionKind, TailsAndBothCausalAlignments) {
  for (MaskKind mask : {MaskKind::CausalTopLeft, MaskKind::CausalBottomRight, MaskKind::None}) {
    check_case({.batch = 1, .heads = 2, .kv_heads = 1, .seq = 7, .kv_seq = 11, .dim = 5, .mask = mask, .fused = false});
    // More queries than keys: bottom-right leaves the first rows without a visible key (O = 0).
    check_case({.batch = 1, .heads = 2, .kv_heads = 2, .seq = 9, .kv_seq = 4, .dim = 3, .mask = mask, .fused = false});
  }
}

TEST(AttentionKind, SlidingWindowsOfBothAlignments) {
  for (MaskKind mask : {MaskKind::CausalTopLeft, MaskKind::CausalBottomRight}) {
    for (int64_t window : {1, 2, 3, 6, 40}) {
      check_case({.heads = 4, .kv_heads = 2, .seq = 9, .kv_seq = 9, .dim = 4, .mask = mask, .window = window});
      check_case({.batch = 1, .heads = 2, .kv_heads = 1, .seq = 5, .kv_seq = 11, .dim = 3, .mask = mask,
                  .fused = false, .window = window});
      check_case({.batch = 1, .heads = 2, .kv_heads = 2, .seq = 9, .kv_seq = 4, .dim = 3, .mask = mask,
                  .fused = false, .window = window});
    }
  }
}

// A boolean key mask of either polarity, rows that see every key, some and none (O = 0).
TEST(AttentionKind, KeyMaskHidesPaddedKeysOfEachBatchEntry) {
  for (bool keep : {true, false}) {
    check_case({.batch = 6, .heads = 2, .kv_heads = 1, .seq = 3, .kv_seq = 5, .dim = 4, .mask = MaskKind::None,
                .fused = false, .key_mask = true, .keep = keep});
  }
  Built built = build({.mask = MaskKind::None, .key_mask = true}, DType::BFloat16);
  const ArgImage image = pack_attention(built.problem, built.graph);
  FactAttentionArgs a;
  std::memcpy(&a, image.bytes.data(), sizeof(a));
  EXPECT_EQ(a.key_mask_batch_stride, 5);
  EXPECT_EQ(a.key_mask_seq_stride, 1);
  EXPECT_EQ(a.key_mask_keep, 1);
  const auto slot = std::find_if(image.pointers.begin(), image.pointers.end(), [](const PointerSlot& s) {
    return s.offset == offsetof(FactAttentionArgs, key_mask);
  });
  ASSERT_NE(slot, image.pointers.end());
  EXPECT_EQ(image.operands.at(slot->index).value, "pad");
  // A key mask with a causal mask is refused; so is one reaching past its value.
  Built causal = build({.key_mask = true}, DType::BFloat16);
  EXPECT_THROW(pack_attention(causal.problem, causal.graph), std::invalid_argument);
  built.problem.key_mask->batch_stride = 6;
  EXPECT_THROW(pack_attention(built.problem, built.graph), std::invalid_argument);
  // Decline reasons and the JSON round trip.
  AttentionProblem p = build({.dim = 64, .mask = MaskKind::None, .key_mask = true}, DType::BFloat16).problem;
  EXPECT_FALSE(attention_decline_reason(p, core::PrecisionMode::Native).has_value());
  EXPECT_EQ(attention_problem_from_json(attention_problem_to_json(p)).key_mask, p.key_mask);
  p.mask = MaskKind::CausalTopLeft;
  EXPECT_NE(attention_decline_reason(p, core::PrecisionMode::Native).value_or("").find("causal"), std::string::npos);
}

// Every integer of the struct is written through ArgImage::put (a dynamic range fits them).
TEST(AttentionKind, ImageRecordsEveryIntegerField) {
  Case c;
  Built built = build(c, DType::BFloat16);
  const ArgImage image = pack_attention(built.problem, built.graph);
  auto has = [&](size_t offset, size_t bytes) {
    return std::find(image.int_fields.begin(), image.int_fields.end(), IntField{offset, bytes}) != image.int_fields.end();
  };
  for (size_t offset : {offsetof(FactAttentionArgs, batch), offsetof(FactAttentionArgs, seq_q),
                        offsetof(FactAttentionArgs, seq_k), offsetof(FactAttentionArgs, causal),
                        offsetof(FactAttentionArgs, sm_count)})
    EXPECT_TRUE(has(offset, 4)) << offset;
  for (size_t offset : {offsetof(FactAttentionArgs, q_batch_stride), offsetof(FactAttentionArgs, q_seq_stride),
                        offsetof(FactAttentionArgs, o_head_stride), offsetof(FactAttentionArgs, lse_head_stride)})
    EXPECT_TRUE(has(offset, 8)) << offset;
  for (const IntField& f : image.int_fields) EXPECT_NE(f.offset, offsetof(FactAttentionArgs, scale));
}

TEST(AttentionKind, ImageLayout) {
  Case c;
  c.heads = 8;
  c.kv_heads = 2;
  Built built = build(c, DType::BFloat16);
  const ArgImage image = pack_attention(built.problem, built.graph);
  ASSERT_EQ(image.bytes.size(), sizeof(FactAttentionArgs));
  FactAttentionArgs a;
  std::memcpy(&a, image.bytes.data(), sizeof(a));
  EXPECT_EQ(a.header.kind, fact_kind_id("attention"));
  EXPECT_EQ(a.heads, 8);
  EXPECT_EQ(a.kv_heads, 2);
  EXPECT_EQ(a.causal, FACT_ATTN_MASK_CAUSAL_TOP_LEFT);
  EXPECT_EQ(a.dtype, FACT_DTYPE_BF16);
  EXPECT_EQ(a.window, 0);
  c.window = 3;
  FactAttentionArgs w;
  std::memcpy(&w, pack_attention(build(c, DType::BFloat16).problem, build(c, DType::BFloat16).graph).bytes.data(),
              sizeof(w));
  EXPECT_EQ(w.window, 3);
  const int64_t width = (8 + 2 * 2) * 8;
  EXPECT_EQ(a.q_seq_stride, width);
  EXPECT_EQ(a.q_head_stride, 8);
  EXPECT_EQ(a.q_batch_stride, 5 * width);
  // Merged heads: O is [B, T, H·D]: seq stride H·D, head stride D.
  EXPECT_EQ(a.o_batch_stride, 5 * 8 * 8);
  EXPECT_EQ(a.o_seq_stride, 8 * 8);
  EXPECT_EQ(a.o_head_stride, 8);
  // One operand (the fused projection) addressed three times at the pieces' offsets.
  ASSERT_EQ(image.operands.size(), 1u);
  ASSERT_EQ(image.pointers.size(), 4u);
  EXPECT_EQ(image.pointers[0].offset, offsetof(FactAttentionArgs, q));
  EXPECT_EQ(image.pointers[1].element_offset, 8 * 8);
  EXPECT_EQ(image.pointers[2].element_offset, (8 + 2) * 8);
  EXPECT_EQ(image.pointers[3].from, PointerSlot::From::Result);
  EXPECT_EQ(image.results[0].shape, (std::vector<int64_t>{2, 5, 64}));
}

TEST(AttentionKind, RefusesViewsOutsideTheirValue) {
  Built built = build({}, DType::BFloat16);
  built.problem.v.offset += 8;  // past the end of the fused projection
  EXPECT_THROW(pack_attention(built.problem, built.graph), std::invalid_argument);
}

TEST(AttentionKind, RoundsOnceToTheOutputType) {
  // bf16 operands: the reference reads them as stored and rounds the float64 result once.
  Case c;
  c.fused = false;
  Built built = build(c, DType::BFloat16);
  const ArgImage image = pack_attention(built.problem, built.graph);
  std::map<std::string, std::vector<uint16_t>> data;
  std::map<std::string, std::vector<double>> wide;
  for (const auto& operand : image.operands) {
    const auto values = random_values(numel(built.graph, operand.value), 3);
    for (double v : values) {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits &= 0xFFFF0000u;  // exactly representable in bf16
      std::memcpy(&f, &bits, 4);
      data[operand.value].push_back(static_cast<uint16_t>(bits >> 16));
      wide[operand.value].push_back(f);
    }
  }
  std::vector<const void*> operands;
  for (const auto& operand : image.operands) operands.push_back(data[operand.value].data());
  std::vector<uint16_t> o(numel(built.graph, "o"), 0x7FC5);
  const auto args = bind_addresses(image, operands, {o.data()}, {2, 2, 2}, {2});
  ASSERT_EQ(reference_call(reinterpret_cast<const FactCallHeader*>(args.data())), FACT_OK);
  const auto want = direct(built.problem, wide["q"], wide["k"], wide["v"]);
  for (size_t i = 0; i < o.size(); ++i) {
    const uint32_t bits = uint32_t(o[i]) << 16;
    float got;
    std::memcpy(&got, &bits, 4);
    ASSERT_NEAR(got, want[i], std::abs(want[i]) * (1.0 / 256) + 1e-30) << i;
  }
}

TEST(AttentionKind, ReferenceRefusesMalformedArguments) {
  Built built = build({}, DType::Float32);
  FactAttentionArgs a = attention_args(built.problem);
  EXPECT_EQ(reference_attention_host(a), FACT_ERR_INVALID_ARGS);  // null pointers
  std::vector<float> buffer(4096);
  a.q = a.k = a.v = buffer.data();
  a.o = buffer.data();
  EXPECT_EQ(reference_attention_host(a), FACT_OK);
  FactAttentionArgs bad = a;
  bad.kv_heads = 3;
  EXPECT_EQ(reference_attention_host(bad), FACT_ERR_INVALID_ARGS);
  bad = a;
  bad.dtype = FACT_DTYPE_NONE;
  EXPECT_EQ(reference_attention_host(bad), FACT_ERR_INVALID_ARGS);
  bad = a;
  bad.causal = 7;
  EXPECT_EQ(reference_attention_host(bad), FACT_ERR_INVALID_ARGS);
  bad = a;
  bad.window = -1;
  EXPECT_EQ(reference_attention_host(bad), FACT_ERR_INVALID_ARGS);
  bad = a;
  bad.causal = FACT_ATTN_MASK_NONE;
  bad.window = 4;  // a window is causal
  EXPECT_EQ(reference_attention_host(bad), FACT_ERR_INVALID_ARGS);
  bad = a;
  bad.header.size = 208;
  EXPECT_EQ(reference_attention_host(bad), FACT_ERR_INVALID_ARGS);
}

TEST(AttentionKind, DeclineReasons) {
  Built built = build({}, DType::BFloat16);
  AttentionProblem p = built.problem;
  p.head_dim = p.v_head_dim = 64;
  p.q.shape[3] = p.k.shape[3] = p.v.shape[3] = p.o.shape[3] = 64;
  EXPECT_EQ(attention_decline_reason(p, core::PrecisionMode::Native), std::nullopt);
  AttentionProblem f = p;
  f.dtype = DType::Float32;
  EXPECT_EQ(attention_decline_reason(f, core::PrecisionMode::Strict), std::nullopt);  // the 3xTF32 kernel
  EXPECT_EQ(attention_decline_reason(f, core::PrecisionMode::Tf32), std::nullopt);    // the TF32 kernel
  EXPECT_NE(attention_decline_reason(f, core::PrecisionMode::Native)->find("float32 attention in a 'native' run"), std::string::npos);
  AttentionProblem i8 = p;
  i8.dtype = DType::Int8;
  EXPECT_NE(attention_decline_reason(i8, core::PrecisionMode::Native)->find("bf16/fp16 and float32"), std::string::npos);
  AttentionProblem d = p;
  d.head_dim = d.v_head_dim = 48;
  EXPECT_NE(attention_decline_reason(d, core::PrecisionMode::Native)->find("head dim 48"), std::string::npos);
  AttentionProblem s = p;
  s.q.stride[2] = 100;  // 200 bytes: not a multiple of 16
  EXPECT_NE(attention_decline_reason(s, core::PrecisionMode::Native)->find("16 bytes"), std::string::npos);
  AttentionProblem u = p;
  u.unsupported = "mask: a sliding window";
  EXPECT_EQ(*attention_decline_reason(u, core::PrecisionMode::Native), "mask: a sliding window");
}

TEST(AttentionKind, JsonRoundTripAndKindQueries) {
  Built built = build({.heads = 8, .kv_heads = 2}, DType::BFloat16);
  const Problem problem = to_problem(built.problem);
  const AttentionProblem back = attention_problem_of(problem);
  EXPECT_EQ(back.q, built.problem.q);
  EXPECT_EQ(back.k, built.problem.k);
  EXPECT_EQ(back.o, built.problem.o);
  EXPECT_EQ(back.mask, MaskKind::CausalTopLeft);
  const ProblemKind& kind = kind_of(problem);
  EXPECT_EQ(kind.fusion(problem.desc), "attention_causal");
  EXPECT_EQ(kind.shape(problem.desc), "2x8/2x5xd8");
  EXPECT_DOUBLE_EQ(kind.flops(problem.desc), 0.5 * 2 * 2 * 8 * 5 * 5 * 16);
  EXPECT_DOUBLE_EQ(kind.tolerance(problem.desc, core::PrecisionMode::Native), 2e-2);
  const auto words = kind.from_command_line({{"problem", "b=4,h=32,kvh=8,s=2048,d=128,causal"}, {"dtype", "bf16"}});
  ASSERT_TRUE(words.has_value());
  const AttentionProblem cli = attention_problem_from_json(*words);
  EXPECT_EQ(cli.kv_heads, 8);
  EXPECT_EQ(cli.mask, MaskKind::CausalTopLeft);
  EXPECT_FALSE(kind.from_command_line({{"problem", "m=128,n=128,k=64"}}).has_value());
}

TEST(AttentionKind, SlidingWindowInJsonFlopsAndCommandLine) {
  Built built = build({.heads = 2, .kv_heads = 2, .seq = 6, .kv_seq = 6, .dim = 8, .window = 2}, DType::BFloat16);
  const Problem problem = to_problem(built.problem);
  EXPECT_EQ(attention_problem_of(problem).window, 2);
  const ProblemKind& kind = kind_of(problem);
  EXPECT_EQ(kind.shape(problem.desc), "2x2x6xd8w2");
  // Visible pairs: 1 + 2 * 5 = 11 of the 36 (query 0 sees one key, the others two).
  EXPECT_DOUBLE_EQ(kind.flops(problem.desc), 2.0 * 2 * 2 * 16 * 11);
  nlohmann::json no_mask = problem.desc;
  no_mask["mask_kind"] = "none";
  EXPECT_THROW(attention_problem_from_json(no_mask), std::invalid_argument);
  nlohmann::json negative = problem.desc;
  negative["window"] = -1;
  EXPECT_THROW(attention_problem_from_json(negative), std::invalid_argument);
  const auto words = kind.from_command_line({{"problem", "b=4,h=32,s=2048,d=96,causal,window=2047"}});
  ASSERT_TRUE(words.has_value());
  EXPECT_EQ(attention_problem_from_json(*words).window, 2047);
  EXPECT_THROW(kind.from_command_line({{"problem", "h=4,s=64,d=64,window=8"}}), std::invalid_argument);
}

}  // namespace
}  // namespace fact::attention

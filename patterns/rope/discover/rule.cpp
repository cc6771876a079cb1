// patterns/rope: rotary position embedding applied to a projection's output,
//   add(mul(X, cos), mul(rot(X), sin))   (either operand order of the add and of each mul)
// where X is a head split (view / reshape, then transpose / permute) of a fact.gemm output
// [M = B·T, N = H·hd], rot(X) is `transformers`' rotate_half, cat(-X[..., h:], X[..., :h]), or
// GPT-J's rotate_every_two, flatten(stack(-X[..., 1::2], X[..., ::2]), -2), and cos / sin are
// tables broadcast over the heads and indexed by position ([T, hd], [1, 1, T, hd], [B, 1, T, hd],
// [1, T, 1, hd], ...). It is realized as the same GEMM with a Rope epilogue step (gemm_abi.h's
// FACT_STEP_ROPE, rope_store.cuh): for rotate-half the weight's rows (and the bias) are permuted
// per head at plan time (a derived operand) so that each rotation pair is adjacent in the
// accumulator, and the rope store writes every result to its original column, so the output
// tensor keeps the captured layout. See README.md.
#include <algorithm>
#include <array>
#include <cmath>

#include "fact/discover/graph_rewrite.hpp"
#include "fact/discover/rule.hpp"
#include "fact/discover/strided_view.hpp"
#include "fact/problem/operand_transform.hpp"
#include "patterns/gemm/discover/chain.hpp"

namespace fact::discover {
using namespace fact::gemm;  // NOLINT: the GEMM pattern's chain and problem types
namespace {

using graph::Graph;
using graph::Node;
using graph::ValueId;

const Node* producer_of(const Graph& g, const ValueId& v, std::string_view target) {
  const Node* n = g.producer(v);
  return n != nullptr && target_is(*n, target) ? n : nullptr;
}

std::optional<int64_t> int_arg(const Node& node, size_t index, const char* name) {
  const graph::Arg* a = detail::argument(node, index, name);
  if (a == nullptr) return std::nullopt;
  const auto v = detail::number_constant(*a);
  if (!v || std::floor(*v) != *v) return std::nullopt;
  if (*v >= 9.0e18) return INT64_MAX;
  return static_cast<int64_t>(*v);
}

// x[..., start:end:step] on the last dim of x (`node` an aten.slice), with end clamped to the
// dim's size.
struct LastDimSlice {
  ValueId input;
  int64_t start = 0, end = 0, step = 1;
};
std::optional<LastDimSlice> last_dim_slice(const Graph& g, const ValueId& v) {
  const Node* n = producer_of(g, v, "aten.slice");
  if (n == nullptr) return std::nullopt;
  const auto inputs = tensor_args(*n);
  if (inputs.size() != 1) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(g.value(inputs[0]).desc.rank());
  const int64_t size = rank > 0 ? g.value(inputs[0]).desc.shape.back() : 0;
  const int64_t dim = int_arg(*n, 1, "dim").value_or(0);
  if (rank == 0 || (dim != -1 && dim != rank - 1)) return std::nullopt;
  LastDimSlice s;
  s.input = inputs[0];
  s.start = int_arg(*n, 2, "start").value_or(0);
  s.end = std::min(int_arg(*n, 3, "end").value_or(INT64_MAX), size);
  s.step = int_arg(*n, 4, "step").value_or(1);
  if (s.start < 0 || s.step < 1) return std::nullopt;
  return s;
}

// The dim argument of a cat / stack / flatten, made non-negative for `rank`.
std::optional<int64_t> dim_arg(const Node& n, size_t index, const char* name, int64_t rank, int64_t fallback) {
  const graph::Arg* a = detail::argument(n, index, name);
  int64_t dim = fallback;
  if (a != nullptr) {
    const auto v = detail::number_constant(*a);
    if (!v) return std::nullopt;
    dim = static_cast<int64_t>(*v);
  }
  return dim < 0 ? dim + rank : dim;
}

// The two entries of a tensor-list argument (cat / stack), or nullopt.
std::optional<std::array<ValueId, 2>> two_tensors(const Node& n) {
  if (n.args.empty() || n.args[0].kind != graph::Arg::Kind::TensorList || n.args[0].tensors.size() != 2)
    return std::nullopt;
  if (!n.args[0].tensors[0] || !n.args[0].tensors[1]) return std::nullopt;
  return std::array<ValueId, 2>{*n.args[0].tensors[0], *n.args[0].tensors[1]};
}

// rot(x) recognized: the rotated value, its form and the nodes computing it from x.
struct Rotation {
  ValueId x;
  bool interleaved = false;
  std::vector<graph::NodeId> nodes;
};

// cat((-x[..., h:], x[..., :h]), dim=-1) with h = hd / 2.
std::optional<Rotation> rotate_half_of(const Graph& g, const ValueId& r) {
  const Node* cat = producer_of(g, r, "aten.cat");
  if (cat == nullptr) return std::nullopt;
  const auto parts = two_tensors(*cat);
  const int64_t rank = static_cast<int64_t>(g.value(r).desc.rank());
  if (!parts || rank == 0 || dim_arg(*cat, 1, "dim", rank, 0) != rank - 1) return std::nullopt;
  const Node* neg = producer_of(g, (*parts)[0], "aten.neg");
  if (neg == nullptr || tensor_args(*neg).size() != 1) return std::nullopt;
  const auto hi = last_dim_slice(g, tensor_args(*neg)[0]);
  const auto lo = last_dim_slice(g, (*parts)[1]);
  if (!hi || !lo || hi->input != lo->input) return std::nullopt;
  const int64_t hd = g.value(hi->input).desc.shape.back();
  const int64_t h = hd / 2;
  if (hd % 2 != 0 || hi->start != h || hi->end != hd || hi->step != 1 || lo->start != 0 ||
      lo->end != h || lo->step != 1)
    return std::nullopt;
  return Rotation{hi->input, false,
                  {g.producer(tensor_args(*neg)[0])->id, neg->id, g.producer((*parts)[1])->id, cat->id}};
}

// flatten(stack((-x[..., 1::2], x[..., ::2]), dim=-1), -2): GPT-J's rotate_every_two.
std::optional<Rotation> rotate_every_two_of(const Graph& g, const ValueId& r) {
  const Node* flat = g.producer(r);
  if (flat == nullptr || tensor_args(*flat).size() != 1) return std::nullopt;
  const ValueId stacked = tensor_args(*flat)[0];
  const int64_t rank = static_cast<int64_t>(g.value(r).desc.rank());
  if (target_is(*flat, "aten.flatten")) {
    if (dim_arg(*flat, 1, "start_dim", rank + 1, 0) != rank - 1 ||
        dim_arg(*flat, 2, "end_dim", rank + 1, -1) != rank)
      return std::nullopt;
  } else if (!is_reshape(*flat)) {
    return std::nullopt;
  }
  const Node* stack = producer_of(g, stacked, "aten.stack");
  if (stack == nullptr) return std::nullopt;
  const auto parts = two_tensors(*stack);
  if (!parts || dim_arg(*stack, 1, "dim", rank + 1, 0) != rank) return std::nullopt;
  const Node* neg = producer_of(g, (*parts)[0], "aten.neg");
  if (neg == nullptr || tensor_args(*neg).size() != 1) return std::nullopt;
  const auto odd = last_dim_slice(g, tensor_args(*neg)[0]);
  const auto even = last_dim_slice(g, (*parts)[1]);
  if (!odd || !even || odd->input != even->input) return std::nullopt;
  const graph::TensorDesc& x = g.value(odd->input).desc;
  const int64_t hd = x.shape.back();
  if (hd % 2 != 0 || odd->start != 1 || odd->step != 2 || odd->end < hd - 1 || even->start != 0 ||
      even->step != 2 || even->end < hd - 1 || g.value(r).desc.shape != x.shape)
    return std::nullopt;
  return Rotation{odd->input, true,
                  {g.producer(tensor_args(*neg)[0])->id, neg->id, g.producer((*parts)[1])->id,
                   stack->id, flat->id}};
}

// X as a head split of a fact.gemm's output G (contiguous, M×N): the view nodes between them
// and which of X's four dims is the batch, head, position and head-dim one.
struct HeadSplit {
  const Node* gemm = nullptr;
  std::vector<graph::NodeId> views;  // graph order
  int b = 0, h = 0, t = 0, d = 3;    // X's dims
  int64_t batches = 1, heads = 1, positions = 1, head_dim = 1;
};

bool splitting_view(const Node& n) {
  return is_reshape(n) || target_in(n, {"aten.transpose", "aten.permute", "aten.unsqueeze",
                                         "aten.squeeze", "aten.alias", "aten.detach"});
}

std::optional<HeadSplit> head_split(const Graph& g, const ValueId& x) {
  HeadSplit s;
  std::vector<const Node*> chain;  // X's producer first
  ValueId current = x;
  while (true) {
    const Node* p = g.producer(current);
    if (p == nullptr) return std::nullopt;
    if (p->target == "fact.gemm") {
      s.gemm = p;
      break;
    }
    if (!splitting_view(*p) || tensor_args(*p).empty()) return std::nullopt;
    if (current != x && !single_use(g, current)) return std::nullopt;
    chain.push_back(p);
    current = tensor_args(*p).front();
  }
  if (s.gemm->outputs.size() != 1 || !single_use(g, current)) return std::nullopt;
  const graph::TensorDesc& out = g.value(current).desc;
  if (!out.is_contiguous() || out.rank() < 2) return std::nullopt;
  const int64_t n = out.shape.back();
  const int64_t m = out.numel() / std::max<int64_t>(n, 1);
  std::optional<StridedView> view = view_of(out);
  for (auto it = chain.rbegin(); it != chain.rend() && view; ++it) view = apply_view_like(**it, *view);
  const graph::TensorDesc& xd = g.value(x).desc;
  if (!view || view->shape != xd.shape || xd.rank() != 4) return std::nullopt;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) s.views.push_back((*it)->id);
  // The head dim: the last, unit stride. The others by their strides over G's memory.
  s.head_dim = xd.shape[3];
  if (view->stride[3] != 1 || s.head_dim < 2 || n % s.head_dim != 0) return std::nullopt;
  s.heads = n / s.head_dim;
  const std::array<std::array<int, 3>, 6> orders{{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}};
  for (const auto& o : orders) {  // (b, h, t)
    const int64_t heads = xd.shape[o[1]], positions = xd.shape[o[2]], batches = xd.shape[o[0]];
    if (heads != s.heads || batches * positions != m) continue;
    auto fits = [&](int dim, int64_t stride) { return xd.shape[dim] == 1 || view->stride[dim] == stride; };
    if (!fits(o[1], s.head_dim) || !fits(o[2], n) || !fits(o[0], positions * n)) continue;
    s.b = o[0];
    s.h = o[1];
    s.t = o[2];
    s.batches = batches;
    s.positions = positions;
    return s;
  }
  return std::nullopt;
}

// A cos / sin table read by X's element (b, h, t, c) at period_stride·b + ld·t + c.
struct Table {
  ValueId value;
  graph::DType dtype = graph::DType::Unknown;
  int64_t ld = 0, period_stride = 0;
};

std::optional<Table> table_of(const Graph& g, const ValueId& v, const HeadSplit& s, std::string& why) {
  const graph::TensorDesc& t = g.value(v).desc;
  if (t.rank() > 4) {
    why = "table '" + v + "' has more dims than the rotated tensor";
    return std::nullopt;
  }
  // Right-aligned to X's four dims; missing dims are size 1.
  auto size = [&](int dim) { const int off = 4 - int(t.rank()); return dim < off ? int64_t{1} : t.shape[dim - off]; };
  auto stride = [&](int dim) { const int off = 4 - int(t.rank()); return dim < off ? int64_t{0} : t.stride[dim - off]; };
  Table table{v, t.dtype, 0, 0};
  if (size(s.d) != s.head_dim || (s.head_dim > 1 && stride(s.d) != 1)) {
    why = "table '" + v + "' " + t.to_string() + " is not a unit-stride row of head_dim " +
          std::to_string(s.head_dim) + " per position";
    return std::nullopt;
  }
  if (size(s.h) != 1 && stride(s.h) != 0) {
    why = "table '" + v + "' " + t.to_string() + " differs between heads";
    return std::nullopt;
  }
  if (size(s.t) != 1 && size(s.t) != s.positions) return std::nullopt;  // no broadcast: not ours
  if (size(s.b) != 1 && size(s.b) != s.batches) return std::nullopt;
  table.ld = size(s.t) == 1 ? 0 : stride(s.t);
  table.period_stride = size(s.b) == 1 ? 0 : stride(s.b);
  if (table.ld < 0 || table.period_stride < 0) {
    why = "table '" + v + "' has negative strides";
    return std::nullopt;
  }
  return table;
}

Pattern rope_pattern() {
  return Pattern::op({"aten.add"}, {Pattern::op({"aten.mul"}).as("mul_a"), Pattern::op({"aten.mul"}).as("mul_b")})
      .as("rope");
}

// The rows of each head of a [N, ...] operand permuted so that rows (2p, 2p+1) of a head are
// its rows (p, p + hd/2): reshape [H, 2, hd/2, ...], swap dims 1 and 2, reshape back.
DerivedOperand rotate_half_rows(const Graph& g, const std::string& id, const std::string& what,
                                const ValueId& source, int64_t heads, int64_t head_dim) {
  const graph::TensorDesc& desc = g.value(source).desc;
  DerivedOperand d;
  d.value = std::string(kDerivedPrefix) + id + "." + what;
  d.from = {source};
  std::vector<int64_t> split{heads, 2, head_dim / 2};
  std::vector<int64_t> dims{0, 2, 1};
  for (size_t i = 1; i < desc.shape.size(); ++i) {
    split.push_back(desc.shape[i]);
    dims.push_back(static_cast<int64_t>(i) + 2);
  }
  ProgramBuilder program;
  const std::string split_ref = program.reshape(source_ref(0), split);
  const std::string swapped = program.permute(split_ref, dims);
  program.reshape(swapped, desc.shape);
  d.ops = std::move(program.ops);
  d.dtype = desc.dtype;
  d.shape = desc.shape;
  d.purpose = "rows of each head permuted (p, p + hd/2) -> (2p, 2p+1) for the rope epilogue";
  return d;
}

bool is_stored(const graph::Value& v) {
  return v.kind == graph::ValueKind::Parameter || v.kind == graph::ValueKind::Buffer ||
         v.kind == graph::ValueKind::Constant;
}

// A declined match that claims nothing (a report: the GEMM rule still takes the projection);
// `nodes` (canonical) are the ones it recognized.
RuleResult report(const Graph& g, const std::string& rule, const std::string& reason, const ValueId& output,
                  graph::DType dtype, const std::vector<graph::NodeId>& nodes) {
  RuleResult result;
  Match& m = result.match;
  m.rule = rule;
  m.pattern = "rope";
  m.status = MatchStatus::Declined;
  m.reason = reason;
  m.dtype = dtype;
  m.roles["output"] = output;
  m.nodes = detail::origin_of(g, nodes);
  result.outputs = {output};
  return result;
}

std::optional<RuleResult> match_rope(const RuleContext& context, const graph::Node& anchor,
                                     const Binding& binding) {
  const Graph& g = context.graph;
  const ValueId output = binding.values.at("rope");
  if (const graph::Arg* alpha = detail::argument(anchor, 2, "alpha")) {
    if (detail::number_constant(*alpha).value_or(0.0) != 1.0) return std::nullopt;
  }
  const Node& mul_a = *g.node(binding.nodes.at("mul_a"));
  const Node& mul_b = *g.node(binding.nodes.at("mul_b"));
  // One mul reads x and cos, the other rot(x) and sin: try both orders of the add and each mul.
  struct Found {
    Rotation rotation;
    ValueId cos, sin;
    const Node* plain = nullptr;
    const Node* rotated = nullptr;
  };
  std::optional<Found> found;
  for (const auto& [plain, rotated] : {std::pair{&mul_a, &mul_b}, std::pair{&mul_b, &mul_a}}) {
    const auto pa = tensor_args(*plain), ra = tensor_args(*rotated);
    if (pa.size() != 2 || ra.size() != 2) continue;
    for (int r = 0; r < 2 && !found; ++r) {
      std::optional<Rotation> rotation = rotate_half_of(g, ra[r]);
      if (!rotation) rotation = rotate_every_two_of(g, ra[r]);
      if (!rotation) continue;
      for (int p = 0; p < 2 && !found; ++p) {
        if (pa[p] != rotation->x) continue;
        found = Found{*rotation, pa[1 - p], ra[1 - r], plain, rotated};
      }
    }
    if (found) break;
  }
  if (!found) return std::nullopt;
  const std::string form = found->rotation.interleaved ? "interleaved" : "rotate_half";
  const std::string rule = "gemm_rope_" + form;
  const graph::DType out_dtype = g.value(output).desc.dtype;
  std::vector<graph::NodeId> rope_nodes = found->rotation.nodes;
  rope_nodes.insert(rope_nodes.end(), {found->plain->id, found->rotated->id, anchor.id});

  std::optional<HeadSplit> split = head_split(g, found->rotation.x);
  auto recognized = [&](const std::vector<graph::NodeId>& more) {
    std::vector<graph::NodeId> nodes = more;
    nodes.insert(nodes.end(), rope_nodes.begin(), rope_nodes.end());
    return nodes;
  };
  if (!split) {
    // NeoX / Phi partial rotary: x = y[..., :rd] of a head split y of a projection.
    const auto part = last_dim_slice(g, found->rotation.x);
    if (part && part->start == 0 && part->step == 1) {
      if (auto whole = head_split(g, part->input)) {
        return report(g, rule, "partial rotary (the first " + std::to_string(part->end) + " of " +
                                std::to_string(g.value(part->input).desc.shape.back()) +
                                " columns of each head rotated) is not fused: the rope epilogue "
                                "rotates whole heads",
                      output, out_dtype, recognized({})); 
      }
    }
    return std::nullopt;  // not the rotation of a projection's heads
  }
  std::string why;
  const auto cos = table_of(g, found->cos, *split, why);
  const auto sin = cos ? table_of(g, found->sin, *split, why) : std::nullopt;
  if (!cos || !sin) {
    if (why.empty()) return std::nullopt;
    return report(g, rule, "the cos / sin tables: " + why, output, out_dtype,
                  recognized({split->gemm->id}));
  }

  GemmChain c = gemm_chain_from_node(g, *split->gemm);
  GemmProblem& p = c.problem;
  const int64_t hd = split->head_dim;
  std::optional<std::string> declined;
  const graph::TensorDesc& out = g.value(output).desc;
  // D is the rotated tensor itself: its memory must be the projection's rows, [B·T, H·hd].
  std::array<int64_t, 4> expected{};
  expected[split->b] = split->positions * p.n;
  expected[split->t] = p.n;
  expected[split->h] = hd;
  expected[split->d] = 1;
  bool same_memory = out.rank() == 4 && out.numel() == p.m * p.n &&
                     ((split->b == 0 && split->h == 1 && split->t == 2) ||
                      (split->b == 0 && split->t == 1 && split->h == 2));
  for (int i = 0; i < 4 && same_memory; ++i) {
    if (out.shape[i] != 1 && out.stride[i] != expected[i]) same_memory = false;
  }
  if (cos->dtype != sin->dtype || cos->ld != sin->ld || cos->period_stride != sin->period_stride) {
    declined = "the cos and sin tables differ in dtype or strides";
  } else if (p.a.dtype != graph::DType::BFloat16 && p.a.dtype != graph::DType::Float16) {
    declined = "dtype " + std::string(graph::dtype_name(p.a.dtype)) +
               ": the rope store writes bf16/fp16 (the float32 strict kernels have no rope epilogue)";
  } else if (out_dtype != p.a.dtype) {
    declined = "the rotation computes in " + std::string(graph::dtype_name(out_dtype)) +
               " (tables of another dtype), not the projection's " + std::string(graph::dtype_name(p.a.dtype));
  } else if (p.batch != 1 || p.outer_batch != 1) {
    declined = std::string("a batched projection");
  } else if (!same_memory) {
    declined = "the rotated tensor " + out.to_string() +
               " is not laid out as the projection's rows (the rope store writes [B*T, H*hd])";
  } else if (p.epilogue.size() > 1 ||
             (p.epilogue.size() == 1 && (p.epilogue[0].kind != EpilogueStep::Kind::Bias ||
                                         p.epilogue[0].value != 1.0 || p.epilogue[0].operand_batch_stride != 0))) {
    declined = std::string("the projection has more than a bias");
  }
  std::vector<DerivedOperand> derived;
  if (!declined && !found->rotation.interleaved) {
    // Rotate-half pairs (p, p + hd/2) become adjacent: the weight's rows (and the bias) permuted.
    const graph::Value& w = g.value(p.b.value);
    if (!is_stored(w)) {
      declined = "weight '" + p.b.value + "' is computed by the graph (the row permutation needs a parameter)";
    } else if (p.b.layout != Layout::ColumnMajor || p.b.ld != p.k || !w.desc.is_contiguous() ||
               w.desc.shape != std::vector<int64_t>{p.n, p.k}) {
      declined = "weight '" + p.b.value + "' is not a contiguous [N, K] nn.Linear weight";
    } else if (!p.epilogue.empty() && (!is_stored(g.value(p.epilogue[0].operand)) ||
                                       !g.value(p.epilogue[0].operand).desc.is_contiguous() ||
                                       g.value(p.epilogue[0].operand).desc.shape != std::vector<int64_t>{p.n})) {
      declined = "bias '" + p.epilogue[0].operand + "' is not a contiguous length-N parameter";
    } else {
      derived.push_back(rotate_half_rows(g, output, "rope_weight", p.b.value, split->heads, hd));
      p.b.value = derived.back().value;
      if (!p.epilogue.empty()) {
        derived.push_back(rotate_half_rows(g, output, "rope_bias", p.epilogue[0].operand, split->heads, hd));
        p.epilogue[0].operand = derived.back().value;
      }
    }
  }
  if (declined) return report(g, rule, *declined, output, out_dtype, recognized({split->gemm->id}));

  EpilogueStep rope;
  rope.kind = EpilogueStep::Kind::Rope;
  rope.operand = cos->value;
  rope.operand2 = sin->value;
  rope.operand_dtype = cos->dtype;
  rope.operand_ld = cos->ld;
  rope.period = split->positions;
  rope.period_stride = cos->period_stride;
  rope.group = hd;
  rope.interleaved = found->rotation.interleaved;
  p.epilogue.push_back(rope);
  p.d.value = output;
  p.d.dtype = out_dtype;
  p.d.ld = p.n;
  p.d.batch_stride = 0;
  p.d.outer_batch_stride = 0;
  c.nodes.insert(c.nodes.end(), split->views.begin(), split->views.end());
  c.nodes.insert(c.nodes.end(), rope_nodes.begin(), rope_nodes.end());
  c.output = output;

  std::map<std::string, ValueId> roles{{"input", c.roles.at("input")},
                                       {"weight", c.roles.at("weight")},
                                       {"cos", cos->value},
                                       {"sin", sin->value},
                                       {"output", output}};
  if (c.roles.count("bias")) roles["bias"] = c.roles.at("bias");
  for (const auto& d : derived) roles[d.value.substr(d.value.rfind('.') + 1)] = d.value;
  auto result = gemm_rule_result(context, {c}, rule, "rope", roles);
  if (result.match.status != MatchStatus::Accepted) {
    return report(g, rule, result.match.reason, output, out_dtype, recognized({split->gemm->id}));
  }
  result.match.derived.insert(result.match.derived.begin(), derived.begin(), derived.end());
  result.match.extra["rope"] = form;
  result.match.extra["heads"] = split->heads;
  result.match.extra["head_dim"] = hd;
  result.match.extra["positions"] = split->positions;
  return result;
}

// Opt-in (README.md, "Status"): on an H100 the rope store is slower than what it replaces (its
// epilogue reads cos / sin as scalar 2-byte global loads), so by default each match this rule
// would accept is declined with this reason and the projection stays a plain GEMM
// (gemm_epilogue); naming "rope" (or gemm_rope, gemm_rope_rotate_half, gemm_rope_interleaved)
// in the pattern selection fuses it.
constexpr const char* kOptInReason =
    "fused rope is opt-in (name it: fact.optimize(..., patterns=['rope', ...]) / fact plan --patterns rope,... ; "
    "a selection composes only the patterns it names, so list the others too, e.g. "
    "['rope', 'gemm', 'attention', 'swiglu', 'mlp']): measured slower than the plain projection + Inductor's "
    "rotary on an H100 (0.713 vs 0.51 ms for the Llama q/k projections, "
    "bench/results/blocks-nvidia-h100-80gb-hbm3-2026-11-25-llama-rope.json)";

const RuleRegistrar kRopeRule{Rule{
    .name = "gemm_rope",
    .pattern = "rope",
    .priority = 85,
    .has_template = true,
    .root = rope_pattern(),
    .check = match_rope,
    .opt_in = true,
    .opt_in_reason = kOptInReason,
}};

}  // namespace
}  // namespace fact::discover

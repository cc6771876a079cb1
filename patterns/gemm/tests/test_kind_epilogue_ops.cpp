// The GEMM epilogue's op table (patterns/gemm/epilogue/ops.def): every table the engine keeps
// agrees with it, entry by entry (iterating the table, so a new op is checked without a new
// test): JSON names, ABI ids, CLI tokens, problem JSON and argument packing, and the float64
// host reference.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "fact/gemm_epilogue_step_files.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/abi_names.hpp"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/reference_host.hpp"
#include "patterns/gemm/kind/step_hooks.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

// The ABI's numbers never change (gemm_abi.h: a binary interface). The steps pattern folders
// register assert theirs in their own tests.
static_assert(FACT_STEP_SCALE == 1 && FACT_STEP_ADD_SCALAR == 2 && FACT_STEP_BIAS == 3 &&
              FACT_STEP_ACTIVATION == 4 && FACT_STEP_RESIDUAL == 5 && FACT_STEP_MULTIPLY == 6 &&
              FACT_STEP_GELU_TANH_GRAD == 10);
static_assert(FACT_ACT_IDENTITY == 0 && FACT_ACT_RELU == 1 && FACT_ACT_GELU_ERF == 2 &&
              FACT_ACT_GELU_TANH == 3 && FACT_ACT_SILU == 4 && FACT_ACT_SIGMOID == 5 &&
              FACT_ACT_LEAKY_RELU == 6 && FACT_ACT_HARDTANH == 7 && FACT_ACT_TANH == 8);

// A 4x6x5 problem in float32 (compact, row-major) with `steps`, each step's operand filled in
// as its OPERAND column says.
GemmProblem problem_with(std::vector<EpilogueStep> steps) {
  GemmProblem p = make_gemm_problem(parse_gemm_sizes("m=4,n=6,k=5"), graph::DType::Float32, "none", "tn");
  p.a.value = "a";
  p.b.value = "b";
  p.d.value = "d";
  for (size_t i = 0; i < steps.size(); ++i) {
    EpilogueStep& step = steps[i];
    const OperandShape shape = step_op(step.kind).operand;
    if (shape == OperandShape::NONE) continue;
    step.operand = "e" + std::to_string(i);
    step.operand_dtype = graph::DType::Float32;
    if (shape == OperandShape::MATRIX) step.operand_ld = p.n;
    if (shape == OperandShape::TABLES) {
      step.operand2 = "s" + std::to_string(i);
      step.operand_ld = 2;
      step.group = 2;
      step.period = p.m;
    }
  }
  p.epilogue = std::move(steps);
  return p;
}

// One step of every kind ops.def lists (an activation step with `activation`).
EpilogueStep step_of(const StepOp& op, Activation activation = Activation::ReLU) {
  EpilogueStep step;
  step.kind = op.kind;
  if (op.constants == StepConstantsRead::ACTIVATION) step.activation = activation;
  if (op.constants == StepConstantsRead::VALUE || op.constants == StepConstantsRead::VALUE_DEFAULT_ONE)
    step.value = 0.75;
  return step;
}

TEST(EpilogueOpTable, StepNamesIdsAndOrdinalsAgree) {
  std::set<std::string_view> names;
  std::set<int32_t> ids;
  for (size_t row = 0; row < kStepOps.size(); ++row) {
    const StepOp& op = kStepOps[row];
    SCOPED_TRACE(std::string(op.name));
    EXPECT_EQ(static_cast<size_t>(op.kind), row) << "enumerators are declared in the table's order";
    EXPECT_EQ(&step_op(op.kind), &op);
    EXPECT_TRUE(names.insert(op.name).second) << "a name used twice";
    EXPECT_TRUE(ids.insert(op.abi_id).second) << "an ABI id used twice";
    EXPECT_EQ(epilogue_kind_name(op.kind), op.name);
    EXPECT_EQ(parse_epilogue_kind(op.name), op.kind);
    EXPECT_EQ(abi_step_kind(op.kind), op.abi_id);
    EXPECT_EQ(find_step_op_by_abi_id(op.abi_id), &op);
    EXPECT_EQ(reads_operand(op.kind), op.operand != OperandShape::NONE);
    EXPECT_FALSE(op.kernel_token.empty());
    EXPECT_NE(op.device_link.find("fact::gemm::epilogue::"), std::string_view::npos);
    ASSERT_NE(op.reference, nullptr);
    EXPECT_FALSE(op.stores_d && op.constants == StepConstantsRead::VALUE) << "a store step carries no value";
    if (!op.derivative.empty()) {
      EXPECT_TRUE(find_step_op(op.derivative) || find_activation_op(op.derivative))
          << "derivative '" << op.derivative << "' is no op";
    }
  }
  EXPECT_FALSE(parse_epilogue_kind("no_such_step"));
  EXPECT_EQ(find_step_op_by_abi_id(0), nullptr);
}

TEST(EpilogueOpTable, ActivationNamesIdsAndReferencesAgree) {
  std::set<std::string_view> names;
  std::set<int32_t> ids;
  for (size_t row = 0; row < kActivationOps.size(); ++row) {
    const ActivationOp& op = kActivationOps[row];
    SCOPED_TRACE(std::string(op.name));
    EXPECT_EQ(static_cast<size_t>(op.activation), row);
    EXPECT_EQ(&activation_op(op.activation), &op);
    EXPECT_TRUE(names.insert(op.name).second);
    EXPECT_TRUE(ids.insert(op.abi_id).second);
    EXPECT_FALSE(find_step_op(op.name)) << "an activation's name is also a step's (CLI tokens clash)";
    EXPECT_EQ(activation_name(op.activation), op.name);
    EXPECT_EQ(parse_activation(op.name), op.activation);
    EXPECT_EQ(abi_activation(op.activation), op.abi_id);
    EXPECT_EQ(find_activation_op_by_abi_id(op.abi_id), &op);
    EXPECT_FALSE(op.functor_16bit.empty());
    EXPECT_FALSE(op.functor_f32.empty());
    ASSERT_NE(op.reference, nullptr);
    for (double x : {-3.0, -0.5, 0.0, 0.25, 2.0}) {
      EXPECT_EQ(op.reference(x, op.cli_p0, op.cli_p1), ops::activate<double>(op.abi_id, x, op.cli_p0, op.cli_p1));
    }
    if (!op.derivative.empty()) {
      EXPECT_TRUE(find_step_op(op.derivative) || find_activation_op(op.derivative))
          << "derivative '" << op.derivative << "' is no op";
    }
  }
  EXPECT_TRUE(std::isnan(ops::activate<double>(1000, 1.0, 0.0, 0.0)));
}

// Every step (and every activation step) survives the problem's JSON and packs its ABI id,
// its activation and the constants its CONSTANTS column names.
TEST(EpilogueOpTable, ProblemJsonAndPackingFollowTheTable) {
  std::vector<EpilogueStep> cases;
  for (const StepOp& op : kStepOps) cases.push_back(step_of(op));
  for (const ActivationOp& a : kActivationOps) cases.push_back(step_of(step_op(Kind::Activation), a.activation));
  for (const EpilogueStep& step : cases) {
    const StepOp& op = step_op(step.kind);
    SCOPED_TRACE(std::string(op.name) + " " + std::string(activation_name(step.activation)));
    // A leading scale folds into alpha: put a bias before every step.
    const GemmProblem p = problem_with({step_of(step_op(Kind::Bias)), step});
    const GemmProblem back = gemm_problem_from_json(gemm_problem_to_json(p));
    ASSERT_EQ(back.epilogue.size(), 2u);
    EXPECT_EQ(back.epilogue[1].kind, step.kind);
    EXPECT_EQ(back.epilogue[1].activation, step.activation);
    EXPECT_EQ(back.epilogue[1].value, step.value);
    EXPECT_EQ(back.epilogue[1].operand, p.epilogue[1].operand);
    if (step.kind == Kind::Activation && step.activation == Activation::Identity) continue;  // dropped
    const FactGemmArgs args = gemm_args(p);
    ASSERT_EQ(args.num_steps, 2);
    EXPECT_EQ(args.steps[1].kind, op.abi_id);
    EXPECT_EQ(args.steps[1].activation,
              op.constants == StepConstantsRead::ACTIVATION ? activation_op(step.activation).abi_id : 0);
    EXPECT_EQ(args.steps[1].value, op.constants == StepConstantsRead::NONE ||
                                           op.constants == StepConstantsRead::ACTIVATION
                                       ? 0.0f
                                       : 0.75f);
    EXPECT_EQ(args.steps[1].operand_type, op.operand == OperandShape::NONE ? FACT_DTYPE_NONE : FACT_DTYPE_F32);
  }
}

// `fact tune --epilogue` tokens: every step without an activation or tables by its name, every
// activation by its name with its CLI defaults.
TEST(EpilogueOpTable, CliTokensFollowTheTable) {
  const GemmSizes sizes = parse_gemm_sizes("m=128,n=256,k=64");
  for (const StepOp& op : kStepOps) {
    if (op.constants == StepConstantsRead::ACTIVATION || op.operand == OperandShape::TABLES) continue;
    SCOPED_TRACE(std::string(op.name));
    const GemmProblem p = make_gemm_problem(sizes, graph::DType::BFloat16, "bias," + std::string(op.name), "tn");
    ASSERT_EQ(p.epilogue.size(), 2u);
    EXPECT_EQ(p.epilogue[1].kind, op.kind);
    EXPECT_EQ(p.epilogue[1].value, op.cli_value);
    EXPECT_EQ(p.epilogue[1].operand_dtype == graph::DType::Unknown, op.operand == OperandShape::NONE);
  }
  for (const ActivationOp& a : kActivationOps) {
    SCOPED_TRACE(std::string(a.name));
    const GemmProblem p = make_gemm_problem(sizes, graph::DType::BFloat16, a.name, "tn");
    ASSERT_EQ(p.epilogue.size(), 1u);
    EXPECT_EQ(p.epilogue[0].kind, Kind::Activation);
    EXPECT_EQ(p.epilogue[0].activation, a.activation);
    EXPECT_EQ(p.epilogue[0].p0, a.cli_p0);
    EXPECT_EQ(p.epilogue[0].p1, a.cli_p1);
  }
  EXPECT_THROW(make_gemm_problem(sizes, graph::DType::BFloat16, "no_such_step", "tn"), std::invalid_argument);
}

// The host reference applies every elementwise step as its formula says, the operand read at
// (i, j) as its OPERAND column says: D = step(A·B) against the formula by hand.
TEST(EpilogueOpTable, HostReferenceAppliesEveryStepsFormula) {
  for (const StepOp& op : kStepOps) {
    if (op.stores_d) continue;  // their stores have tests of their own (their patterns' folders)
    SCOPED_TRACE(std::string(op.name));
    // A leading scale folds into alpha: an add of 0 goes first, the step is steps[1].
    EpilogueStep add_zero;
    add_zero.kind = Kind::AddScalar;
    add_zero.value = 0.0;
    GemmProblem p = problem_with({add_zero, step_of(op, Activation::GeluTanh)});
    const int64_t m = p.m, n = p.n, k = p.k;
    std::vector<float> a(m * k), b(k * n), d(m * n, 0.0f), operand(m * n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3) / 4.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) / 8.0f;
    for (size_t i = 0; i < operand.size(); ++i) operand[i] = float(int(i % 9) - 4) / 4.0f;
    FactGemmArgs args = gemm_args(p);
    args.a = a.data();
    args.b = b.data();
    args.d = d.data();
    ASSERT_EQ(args.num_steps, 2);
    if (op.operand != OperandShape::NONE) args.steps[1].operand = operand.data();
    ASSERT_EQ(reference_gemm_host(args), FACT_OK);
    const ops::StepConstants<double> constants{double(args.steps[1].value), 0.0, 0.0,
                                               args.steps[1].activation};
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double x = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) x += double(a[i * k + kk]) * double(b[j * k + kk]);
        const double e = op.operand == OperandShape::COLUMN_VECTOR ? operand[j]
                         : op.operand == OperandShape::ROW_VECTOR  ? operand[i]
                         : op.operand == OperandShape::MATRIX      ? operand[i * n + j]
                                                                   : 0.0;
        EXPECT_NEAR(d[i * n + j], float(op.reference(x, e, constants)), 1e-6) << i << "," << j;
      }
    }
  }
}

// The FACT_GEMM_STEP rows of a table file (relative to the source root): {name, abi id, token}.
struct Row {
  std::string name;
  int abi_id;
  std::string token;
};
std::vector<Row> rows_of(std::string_view file) {
  const std::regex row(R"re(^FACT_GEMM_STEP\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\d+)\s*,\s*"(\w+)"\s*,\s*"(\w+)")re");
  std::ifstream in(std::string(FACT_SOURCE_DIR) + "/" + std::string(file));
  EXPECT_TRUE(in) << "cannot read " << file;
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) rows.push_back({m[4].str(), std::stoi(m[3].str()), m[5].str()});
  }
  return rows;
}

// The one table is ops.def's own rows, then the rows pattern folders register
// (patterns/<name>/epilogue_steps.def, which the build lists in fact/gemm_epilogue_steps.def),
// in that order: every row of every file, read from its text, is in the table at its place with
// its ABI id and kernel token.
TEST(EpilogueOpTable, TheTableIsOpsDefThenEveryFragment) {
  std::vector<Row> expected = rows_of("patterns/gemm/epilogue/ops.def");
  ASSERT_FALSE(expected.empty());
  size_t fragments = 0;
  for (std::string_view file : build_info::kGemmEpilogueStepFiles) {
    if (!file.ends_with("/epilogue_steps.def")) continue;
    ++fragments;
    const std::vector<Row> rows = rows_of(file);
    EXPECT_FALSE(rows.empty()) << file << " has no FACT_GEMM_STEP row";
    expected.insert(expected.end(), rows.begin(), rows.end());
  }
  EXPECT_GT(fragments, 0u);
  ASSERT_EQ(kStepOps.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(kStepOps[i].name, expected[i].name);
    EXPECT_EQ(kStepOps[i].abi_id, expected[i].abi_id);
    EXPECT_EQ(kStepOps[i].kernel_token, expected[i].token);
  }
}

// A step that stores D has its store registered by its pattern (step_hooks.hpp), or the host
// reference refuses every call with it.
TEST(EpilogueOpTable, EveryStepThatStoresDHasItsHostStore) {
  for (const StepOp& op : kStepOps) {
    if (!op.stores_d) continue;
    SCOPED_TRACE(std::string(op.name));
    const StepKindHooks* hooks = step_kind_hooks(op.kind);
    ASSERT_NE(hooks, nullptr);
    EXPECT_NE(hooks->store_row, nullptr);
    EXPECT_EQ(step_kind_hooks_by_abi_id(op.abi_id), hooks);
  }
}

}  // namespace
}  // namespace fact::gemm

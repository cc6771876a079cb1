// The GEMM pattern's benchmark suite (`fact bench gemm`): square, batched and large-K shapes in
// float32 strict, float32 tf32 and bf16 against cuBLAS, and the minGPT block's GEMM + epilogue
// shapes in bf16 against cuBLASLt's fused epilogues. Layout tn (an nn.Linear) throughout.
#include "fact/realize/bench_suite.hpp"
#include "patterns/gemm/kind/problem_args.hpp"

namespace fact::gemm {
namespace {

realize::BenchSuiteCase make_case(const std::string& name, const GemmSizes& sizes, const std::string& dtype,
                                  const std::string& precision, const std::string& epilogue) {
  realize::BenchSuiteCase c;
  c.name = name;
  c.precision = precision;
  c.problem = to_problem(make_gemm_problem(sizes, parse_operand_dtype(dtype), epilogue, "tn"));
  c.baselines = epilogue.empty() ? std::vector<std::string>{"cublas"}
                                 : std::vector<std::string>{"cublas", "cublaslt"};
  c.words = {{"problem", "m=" + std::to_string(sizes.m) + ",n=" + std::to_string(sizes.n) + ",k=" +
                             std::to_string(sizes.k) + ",batch=" + std::to_string(sizes.batch)},
             {"dtype", dtype},
             {"epilogue", epilogue},
             {"layout", "tn"}};
  return c;
}

realize::BenchSuite gemm_suite() {
  realize::BenchSuite suite;
  suite.name = "gemm";
  suite.description =
      "square, batched, large-K and minGPT GEMM+epilogue shapes in fp32 strict, fp32 tf32 and bf16, "
      "against cuBLAS/cuBLASLt";
  struct Shape {
    std::string name;
    GemmSizes sizes;
  };
  const std::vector<Shape> shapes = {
      {"square_4096", {4096, 4096, 4096, 1}},
      {"batched_128x512x2048x1024", {512, 2048, 1024, 128}},  // 128 x (512x1024 . 1024x2048)
      {"large_k_256x256x524288", {256, 256, 524288, 1}},      // 256x524288 . 524288x256
  };
  for (const Shape& shape : shapes) {
    suite.cases.push_back(make_case(shape.name + "_fp32", shape.sizes, "fp32", "strict", ""));
    suite.cases.push_back(make_case(shape.name + "_fp32_tf32", shape.sizes, "fp32", "tf32", ""));
    suite.cases.push_back(make_case(shape.name + "_bf16", shape.sizes, "bf16", "native", ""));
  }
  // The GEMM + epilogue shapes of the minGPT block (batch 128 x sequence 512 = 65536 rows).
  suite.cases.push_back(make_case("mingpt_qkv_65536x2304x768_bias_bf16", {65536, 2304, 768, 1}, "bf16",
                                  "native", "bias"));
  suite.cases.push_back(make_case("mingpt_fc_65536x3072x768_bias_gelu_tanh_bf16", {65536, 3072, 768, 1},
                                  "bf16", "native", "bias,gelu_tanh"));
  suite.cases.push_back(make_case("mingpt_proj_65536x768x3072_bias_residual_bf16", {65536, 768, 3072, 1},
                                  "bf16", "native", "bias,residual"));
  suite.preflight = make_case("preflight", {256, 256, 256, 1}, "bf16", "native", "");
  suite.tuning_cost_case = "mingpt_fc_65536x3072x768_bias_gelu_tanh_bf16";
  return suite;
}

const realize::BenchSuiteRegistrar kGemmSuite{"gemm", &gemm_suite};

}  // namespace
}  // namespace fact::gemm

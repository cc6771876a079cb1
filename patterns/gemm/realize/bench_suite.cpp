// The GEMM pattern's benchmark suites. `fact bench gemm`: square, batched and large-K shapes in
// float32 strict, float32 tf32 and bf16 against cuBLAS, and the minGPT block's GEMM + epilogue
// shapes in bf16 against cuBLASLt's fused epilogues. `fact bench gemm-models`: the GEMM calls of
// the whole models of bench/whole_models/ at their benchmark sizes (bf16), the ones the never-
// slower check weighs against cuBLAS. Layout tn (an nn.Linear) throughout.
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

// The GEMM calls of the whole models (bench/whole_models/README.md) at their benchmark sizes,
// bf16, each with the epilogue FACT fuses into it: GPT-2 LM at 8 x 1024 tokens, the 4-layer Llama
// LM at 4 x 2048, BERT-base at 32 x 512, ViT-B/16 at batch 64 (64 x 197 tokens). Per call: FACT
// tuned against cuBLAS (and cuBLASLt's fused epilogue where there is one).
realize::BenchSuite gemm_models_suite() {
  realize::BenchSuite suite;
  suite.name = "gemm-models";
  suite.description =
      "the GEMM + epilogue calls of the whole-model benchmark (GPT-2, Llama, BERT, ViT-B/16 at their "
      "benchmark sizes) in bf16, against cuBLAS/cuBLASLt";
  struct Call {
    std::string name;
    GemmSizes sizes;
    std::string epilogue;
  };
  const std::vector<Call> calls = {
      {"gpt2_qkv_8192x2304x768_bias", {8192, 2304, 768, 1}, "bias"},
      {"gpt2_proj_8192x768x768_bias", {8192, 768, 768, 1}, "bias"},
      {"gpt2_fc_8192x3072x768_bias_gelu_tanh", {8192, 3072, 768, 1}, "bias,gelu_tanh"},
      {"gpt2_fc2_8192x768x3072_bias", {8192, 768, 3072, 1}, "bias"},
      {"gpt2_lm_head_8192x50257x768", {8192, 50257, 768, 1}, ""},
      {"llama_q_8192x2048x2048", {8192, 2048, 2048, 1}, ""},
      {"llama_kv_8192x512x2048", {8192, 512, 2048, 1}, ""},
      {"llama_o_8192x2048x2048_residual", {8192, 2048, 2048, 1}, "residual"},
      {"llama_down_8192x2048x5632_residual", {8192, 2048, 5632, 1}, "residual"},
      {"llama_lm_head_8192x32000x2048", {8192, 32000, 2048, 1}, ""},
      {"bert_qkv_16384x768x768_bias", {16384, 768, 768, 1}, "bias"},
      {"bert_fc_16384x3072x768_bias_gelu_erf", {16384, 3072, 768, 1}, "bias,gelu_erf"},
      {"bert_fc2_16384x768x3072_bias", {16384, 768, 3072, 1}, "bias"},
      {"vit_qkv_12608x2304x768_bias", {12608, 2304, 768, 1}, "bias"},
      {"vit_proj_12608x768x768_bias", {12608, 768, 768, 1}, "bias"},
      {"vit_fc_12608x3072x768_bias_gelu_erf", {12608, 3072, 768, 1}, "bias,gelu_erf"},
      {"vit_fc2_12608x768x3072_bias", {12608, 768, 3072, 1}, "bias"},
  };
  for (const Call& call : calls) {
    suite.cases.push_back(make_case(call.name + "_bf16", call.sizes, "bf16", "native", call.epilogue));
  }
  suite.preflight = make_case("preflight", {256, 256, 256, 1}, "bf16", "native", "");
  suite.tuning_cost_case = "none";
  return suite;
}

const realize::BenchSuiteRegistrar kGemmSuite{"gemm", &gemm_suite};
const realize::BenchSuiteRegistrar kGemmModelsSuite{"gemm-models", &gemm_models_suite};

}  // namespace
}  // namespace fact::gemm

// A real sm_90a compile of one rendered attention kernel with nvcc and the installed CUTLASS
// headers (skipped, with the reason, when either is missing), like the GEMM compile tests:
// about 90 s of nvcc on one core. The library is then loaded to check its exports and the
// entry's argument checks (no GPU needed: size queries and refusals never touch the device).
#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <iostream>

#include <gtest/gtest.h>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "patterns/attention/attention_abi.h"
#include "patterns/attention/realize/spec.hpp"

namespace fact::attention {
namespace {

namespace fs = std::filesystem;
using Entry = int (*)(const FactCallHeader*, void*, size_t*, void*);

FactAttentionArgs args_for(const AttentionSpec& spec, void* memory) {
  FactAttentionArgs a;
  std::memset(&a, 0, sizeof(a));
  a.header.abi_version = FACT_ABI_VERSION;
  a.header.kind = fact_kind_id(FACT_ATTENTION_KIND_NAME);
  a.header.size = sizeof(FactAttentionArgs);
  a.batch = 2;
  a.heads = 8;
  a.kv_heads = 2;
  a.seq_q = a.seq_k = 256;
  a.head_dim = a.v_head_dim = spec.head_dim;
  a.causal = spec.causal ? FACT_ATTN_MASK_CAUSAL_TOP_LEFT : FACT_ATTN_MASK_NONE;
  a.dtype = spec.dtype == DType::BFloat16 ? FACT_DTYPE_BF16 : spec.dtype == DType::Float32 ? FACT_DTYPE_F32 : FACT_DTYPE_F16;
  const int64_t d = spec.head_dim;
  a.q = a.k = a.v = a.o = memory;  // never dereferenced: every call below is refused or a size query
  a.q_batch_stride = a.o_batch_stride = 256 * 8 * d;
  a.q_seq_stride = a.o_seq_stride = 8 * d;
  a.q_head_stride = a.o_head_stride = d;
  a.k_batch_stride = a.v_batch_stride = 256 * 2 * d;
  a.k_seq_stride = a.v_seq_stride = 2 * d;
  a.k_head_stride = a.v_head_stride = d;
  a.scale = 0.125f;
  if (spec.key_mask) {
    a.key_mask = memory;
    a.key_mask_batch_stride = 256;
    a.key_mask_seq_stride = 1;
    a.key_mask_keep = 1;
  }
  return a;
}

// The calling convention without a GPU: returns "" or what is wrong.
std::string check_abi(Entry entry, const AttentionSpec& spec) {
  alignas(16) static unsigned char memory[64];
  const FactAttentionArgs good = args_for(spec, memory);
  size_t workspace = 123;
  if (entry(&good.header, nullptr, &workspace, nullptr) != FACT_OK) return "the size query of a good call failed";
  if (workspace != (spec.dynamic_schedule ? 16u : 0u)) return "workspace size " + std::to_string(workspace);
  FactAttentionArgs query = good;
  query.q = nullptr;  // a size query may carry null pointers
  if (entry(&query.header, nullptr, &workspace, nullptr) != FACT_OK) return "a size query with null pointers refused";
  if (entry(nullptr, nullptr, &workspace, nullptr) != FACT_ERR_INVALID_ARGS) return "null args not refused";
  struct Corruption {
    const char* what;
    int expected;
    void (*apply)(FactAttentionArgs&);
  };
  const Corruption corruptions[] = {
      {"ABI version", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.header.abi_version += 1; }},
      {"kind", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.header.kind = fact_kind_id("gemm"); }},
      {"size", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.header.size -= 8; }},
      {"dtype", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.dtype = a.dtype == FACT_DTYPE_BF16 ? FACT_DTYPE_F16 : FACT_DTYPE_BF16; }},
      {"negative window", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.window = -1; }},
      {"window without a causal mask", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) {
         a.causal = FACT_ATTN_MASK_NONE;
         a.window = 16;
       }},
      {"GQA group", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.kv_heads = 3; }},
      {"mask kind", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.causal = 7; }},
      {"empty problem", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.seq_q = 0; }},
      {"null O", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) { a.o = nullptr; }},
      {"head dim", FACT_ERR_CANNOT_IMPLEMENT, [](FactAttentionArgs& a) { a.head_dim = a.v_head_dim = a.head_dim + 16; }},
      {"the other mask", spec.key_mask ? FACT_ERR_INVALID_ARGS : FACT_ERR_CANNOT_IMPLEMENT,  // a key mask is not causal
       [](FactAttentionArgs& a) { a.causal = a.causal == FACT_ATTN_MASK_NONE ? FACT_ATTN_MASK_CAUSAL_TOP_LEFT : FACT_ATTN_MASK_NONE; }},
      {"a key mask or none, against the build", FACT_ERR_CANNOT_IMPLEMENT, [](FactAttentionArgs& a) {
         a.causal = FACT_ATTN_MASK_NONE;
         a.window = 0;
         a.key_mask = a.key_mask == nullptr ? a.q : nullptr;
       }},
      {"key mask polarity", FACT_ERR_INVALID_ARGS, [](FactAttentionArgs& a) {
         a.causal = FACT_ATTN_MASK_NONE;
         a.window = 0;
         a.key_mask = a.q;
         a.key_mask_keep = 2;
       }},
      {"a stride not a multiple of 16 bytes", FACT_ERR_CANNOT_IMPLEMENT, [](FactAttentionArgs& a) { a.q_seq_stride += 1; }},
  };
  for (const Corruption& c : corruptions) {
    FactAttentionArgs bad = good;
    c.apply(bad);
    const int status = entry(&bad.header, memory, nullptr, nullptr);
    if (status != c.expected) return std::string(c.what) + ": status " + std::to_string(status);
  }
  return "";
}

// Renders, compiles and loads the minGPT attention's kernel for `dtype` in `precision`, checks the
// build (no C75xx warning, no spill, no stack), the exports and the calling convention.
void compile_and_check(DType dtype, const std::string& precision, int head_dim = 96, bool key_mask = false) {
  realize::CompileOptions options = realize::default_compile_options();
  if (auto why = realize::compile_unavailable_reason(options)) GTEST_SKIP() << *why;
  AttentionProblem p;
  p.dtype = dtype;
  p.head_dim = p.v_head_dim = head_dim;
  p.mask = key_mask ? MaskKind::None : MaskKind::CausalTopLeft;
  if (key_mask) p.key_mask = KeyMask{};
  const AttentionSpec spec = default_spec(p, core::parse_precision(precision));
  const realize::RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options);
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_attention_compile_" + spec.name());
  fs::remove_all(dir);
  const realize::CompileResult r = realize::compile_kernel(kernel, dir, options);
  ASSERT_TRUE(r.ok) << spec.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
  EXPECT_EQ(r.log.find("C75"), std::string::npos) << "ptxas warned:\n" << r.log;
  EXPECT_EQ(r.log.find("Potential Performance Loss"), std::string::npos) << r.log;
  EXPECT_EQ(r.usage.spill_store_bytes, 0) << "register spills in " << spec.name();
  EXPECT_EQ(r.usage.stack_frame_bytes, 0);
  EXPECT_GT(r.usage.registers, 0) << "no ptxas -v report in the log";
  void* handle = dlopen(r.output.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
  auto info = reinterpret_cast<FactKernelInfo>(dlsym(handle, "fact_kernel_info"));
  ASSERT_NE(entry, nullptr);
  ASSERT_NE(info, nullptr);
  const nlohmann::json j = nlohmann::json::parse(info());
  EXPECT_EQ(j.at("kind"), "attention");
  EXPECT_EQ(j.at("abi_version"), FACT_ABI_VERSION);
  EXPECT_EQ(j.at("entry"), kernel.entry_symbol);
  EXPECT_EQ(j.at("key"), kernel.key);
  EXPECT_EQ(j.at("args_size"), sizeof(FactAttentionArgs));
  EXPECT_EQ(realize::KernelSpec::from_json(j.at("spec")), kernel.spec);
  EXPECT_EQ(check_abi(entry, spec), "");
  dlclose(handle);
  std::cout << "[ compiled ] " << spec.name() << " in " << r.seconds << " s, " << r.usage.registers << " registers\n";
}

TEST(AttentionCompile, RenderedMinGptKernelBuildsWithoutSpillsAndChecksItsArguments) {
  compile_and_check(DType::BFloat16, "native");
}

// BERT-base's attention: head dim 64, no causal mask, a boolean key mask (padding).
TEST(AttentionCompile, RenderedKeyMaskKernelBuildsWithoutSpillsAndChecksItsArguments) {
  compile_and_check(DType::BFloat16, "native", 64, /*key_mask=*/true);
}

// The float32 (3xTF32) kernel of the same attention: F32Config through the same entry.
TEST(AttentionCompile, RenderedFloat32StrictKernelBuildsWithoutSpillsAndChecksItsArguments) {
  compile_and_check(DType::Float32, "strict");
}

}  // namespace
}  // namespace fact::attention

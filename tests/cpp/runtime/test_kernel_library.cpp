#include <gtest/gtest.h>

#include "fact/runtime/kernel_library.hpp"
#include "runtime_test_support.hpp"

namespace fact::runtime {
namespace {

using test::ScratchDir;

KernelSpec sample_spec() {
  return KernelSpec("gemm", "gemm", "gemm_bf16_tn_128x256x64_c2x1_coop_persistent",
                             {{"tile", {128, 256, 64}}, {"cluster", {2, 1, 1}}});
}

// What a kernel library's fact_kernel_info() returns (docs/abi.md), with `entry`.
nlohmann::json info_of(const std::string& entry) {
  return {{"kind", "gemm"},
          {"abi_version", FACT_ABI_VERSION},
          {"entry", entry},
          {"key", "k"},
          {"name", sample_spec().name()},
          {"spec", sample_spec().to_json()}};
}

// C++ source of a fake kernel library: `info` returned by fact_kernel_info (omitted when
// empty), and an entry named `entry` (omitted when empty) that answers size queries with 256
// bytes and otherwise returns FACT_ERR_CANNOT_IMPLEMENT.
std::string library_source(const std::string& info, const std::string& entry) {
  std::string source = "#include <stddef.h>\n";
  if (!info.empty()) {
    source += "extern \"C\" const char* fact_kernel_info(void) { return R\"FACTJSON(" + info +
              ")FACTJSON\"; }\n";
  }
  if (!entry.empty()) {
    source += "extern \"C\" int " + entry +
              "(const void*, void*, size_t* size, void*) {\n"
              "  if (size) { *size = 256; return 0; }\n"
              "  return 2;\n"
              "}\n";
  }
  return source;
}

class KernelLibraryTest : public ::testing::Test {
 protected:
  std::filesystem::path build(const std::string& name, const std::string& source) {
    const auto src = dir / (name + ".cpp");
    const auto lib = dir / (name + ".so");
    test::write_text(src, source);
    const std::string error = test::compile_shared_library(src, lib);
    if (!error.empty()) ADD_FAILURE() << error;
    return lib;
  }
  ScratchDir dir;
};

TEST_F(KernelLibraryTest, LoadsSpecAndEntry) {
  const auto path = build("good", library_source(info_of("fact_gemm_test").dump(), "fact_gemm_test"));
  KernelLibrary library(path.string());
  EXPECT_EQ(library.entry_name(), "fact_gemm_test");
  EXPECT_EQ(library.spec(), sample_spec());
  EXPECT_EQ(library.kind(), "gemm");
  ASSERT_NE(library.entry(), nullptr);
  size_t workspace = 0;
  EXPECT_EQ(library.entry()(nullptr, nullptr, &workspace, nullptr), FACT_OK);
  EXPECT_EQ(workspace, 256u);
  EXPECT_EQ(library.entry()(nullptr, nullptr, nullptr, nullptr), FACT_ERR_CANNOT_IMPLEMENT);

  KernelLibrary moved = std::move(library);
  EXPECT_EQ(moved.entry_name(), "fact_gemm_test");
  EXPECT_EQ(library.entry(), nullptr);
}


void expect_load_error(const std::filesystem::path& path, const std::string& fragment) {
  try {
    KernelLibrary library(path.string());
    ADD_FAILURE() << "loaded " << path;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(KernelLibraryTest, ExplainsEveryFailure) {
  expect_load_error(dir / "absent.so", "cannot load kernel library");

  expect_load_error(build("no_info", library_source("", "fact_x")), "no fact_kernel_info");

  expect_load_error(build("not_json", library_source("{not json", "fact_x")), "is not JSON");

  expect_load_error(build("array", library_source("[1, 2]", "fact_x")), "not a JSON object");

  nlohmann::json no_entry = info_of("fact_x");
  no_entry.erase("entry");
  expect_load_error(build("no_entry_name", library_source(no_entry.dump(), "fact_x")),
                    "names no \"entry\"");

  expect_load_error(build("missing_symbol", library_source(info_of("fact_missing").dump(), "fact_other")),
                    "does not export its entry 'fact_missing'");

  nlohmann::json old_abi = info_of("fact_x");
  old_abi["abi_version"] = 1;
  expect_load_error(build("old_abi", library_source(old_abi.dump(), "fact_x")), "ABI version 1");

  nlohmann::json bad_spec = info_of("fact_x");
  bad_spec["spec"] = {{"a_dtype", 42}};
  expect_load_error(build("bad_spec", library_source(bad_spec.dump(), "fact_x")),
                    "kernel spec in");
}

TEST(FactStatusName, NamesEveryStatus) {
  EXPECT_EQ(fact_status_name(FACT_OK), "FACT_OK");
  EXPECT_EQ(fact_status_name(FACT_ERR_CANNOT_IMPLEMENT), "FACT_ERR_CANNOT_IMPLEMENT");
  EXPECT_EQ(fact_status_name(FACT_ERR_INTERNAL), "FACT_ERR_INTERNAL");
  EXPECT_EQ(fact_status_name(77), "FACT_STATUS_77");
}

}  // namespace
}  // namespace fact::runtime

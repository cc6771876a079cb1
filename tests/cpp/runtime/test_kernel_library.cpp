#include <gtest/gtest.h>

#include "fact/runtime/kernel_library.hpp"
#include "runtime_test_support.hpp"

namespace fact::runtime {
namespace {

using test::ScratchDir;

realize::KernelSpec sample_spec() {
  realize::KernelSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = graph::DType::BFloat16;
  spec.tile = {128, 256, 64};
  spec.cluster = {2, 1, 1};
  return spec;
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
  nlohmann::json info = sample_spec().to_json();
  info["entry"] = "fact_gemm_test";
  const auto path = build("good", library_source(info.dump(), "fact_gemm_test"));
  KernelLibrary library(path.string());
  EXPECT_EQ(library.entry_name(), "fact_gemm_test");
  EXPECT_EQ(library.spec(), sample_spec());
  ASSERT_NE(library.entry(), nullptr);
  size_t workspace = 0;
  EXPECT_EQ(library.entry()(nullptr, nullptr, &workspace, nullptr), FACT_OK);
  EXPECT_EQ(workspace, 256u);
  EXPECT_EQ(library.entry()(nullptr, nullptr, nullptr, nullptr), FACT_ERR_CANNOT_IMPLEMENT);

  KernelLibrary moved = std::move(library);
  EXPECT_EQ(moved.entry_name(), "fact_gemm_test");
  EXPECT_EQ(library.entry(), nullptr);
}

TEST_F(KernelLibraryTest, SpecMayBeNestedUnderSpec) {
  const nlohmann::json info = {{"entry", "fact_nested"}, {"spec", sample_spec().to_json()}};
  const auto path = build("nested", library_source(info.dump(), "fact_nested"));
  EXPECT_EQ(KernelLibrary(path.string()).spec(), sample_spec());
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

  expect_load_error(build("no_entry_name", library_source(sample_spec().to_json().dump(), "fact_x")),
                    "names no \"entry\"");

  nlohmann::json missing = sample_spec().to_json();
  missing["entry"] = "fact_missing";
  expect_load_error(build("missing_symbol", library_source(missing.dump(), "fact_other")),
                    "does not export its entry 'fact_missing'");

  nlohmann::json bad_spec = {{"entry", "fact_x"}, {"spec", {{"a_dtype", 42}}}};
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

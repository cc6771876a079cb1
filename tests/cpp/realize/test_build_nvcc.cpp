// One real nvcc build through the build driver's ninja job graph: a trivial .cu (no CUTLASS,
// seconds to compile) becomes a shared library in the kernel cache, which is then loaded and
// called. Needs nvcc, not a GPU; skipped with the reason when nvcc is absent.
#include <dlfcn.h>

#include <gtest/gtest.h>

#include "build_test_support.hpp"
#include "fact/build_info.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::realize {
namespace {

std::optional<std::string> find_nvcc() {
  if (const char* env = std::getenv("FACT_NVCC"); env && *env) return std::string(env);
  if (*build_info::kNvcc) return std::string(build_info::kNvcc);
  if (auto found = util::find_executable("nvcc")) return found->string();
  return std::nullopt;
}

constexpr const char* kTrivialKernel = R"(
#include <cuda_runtime.h>
__global__ void scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}
extern "C" int fact_test_answer(void) { return 42; }
extern "C" int fact_test_launch(float* x, int n) {
  scale<<<(n + 255) / 256, 256>>>(x, 2.0f, n);
  return static_cast<int>(cudaGetLastError());
}
)";

TEST(BuildNvcc, TrivialKernelThroughNinjaIntoTheCache) {
  auto nvcc = find_nvcc();
  if (!nvcc || !util::find_executable(*nvcc)) GTEST_SKIP() << "nvcc not found (set FACT_NVCC)";
  if (!util::find_executable("ninja")) GTEST_SKIP() << "ninja not found";
  test::ScratchDir scratch;
  KernelCache cache(scratch / "kernels");
  BuildOptions options;
  options.jobs = 1;
  options.show_progress = false;
  BuildJob job;
  job.key = "trivial_nvcc_test";
  job.source = kTrivialKernel;
  job.entry_symbol = "fact_test_launch";
  job.label = "trivial";
  job.command = {*nvcc, "-O3", "-DNDEBUG", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static",
                 "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-o", "{output}", "{source}"};

  BuildDriver driver(cache, options);
  BuildOutcome outcome = driver.build({job}).at(0);
  ASSERT_EQ(outcome.status, BuildStatus::Built) << outcome.reason << "\n"
                                                << util::tail_of_file(cache.entry_dir(job.key) / "build.log");
  EXPECT_EQ(driver.last_runner(), "ninja");
  EXPECT_GT(outcome.compile_seconds, 0.0);
  std::string log = util::read_file(outcome.log);
  EXPECT_NE(log.find("ptxas info"), std::string::npos) << log;

  auto found = cache.lookup(job.key);
  ASSERT_EQ(found.state, EntryState::Built);
  EXPECT_NE(found.kernel->meta.value("compiler", std::string()).find("Cuda compilation tools"), std::string::npos);

  void* library = ::dlopen(outcome.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << ::dlerror();
  auto answer = reinterpret_cast<int (*)()>(::dlsym(library, "fact_test_answer"));
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer(), 42);
  EXPECT_NE(::dlsym(library, "fact_test_launch"), nullptr);
  ::dlclose(library);

  EXPECT_EQ(BuildDriver(cache, options).build({job}).at(0).status, BuildStatus::Cached);
}

}  // namespace
}  // namespace fact::realize

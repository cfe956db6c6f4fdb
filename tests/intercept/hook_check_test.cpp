// The hook check: every launch, copy, memset and graph-launch entry point of the installed cuda.h
// is hooked or deliberately excluded (intercept/check_hooks.py does the parsing).
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "gpuqos/testing/temp_dir.h"

namespace {

const std::string kIntercept = std::string(GPUQOS_SOURCE_DIR) + "/intercept";

struct CheckRun {
  int exit_code = -1;
  std::string output;
};

CheckRun run_check(const std::string& hooks_def, const std::string& exclusions) {
  const std::string command = "python3 -B '" + kIntercept + "/check_hooks.py' --cuda-h '" GPUQOS_CUDA_INCLUDE_DIR
                              "/cuda.h' --typedefs '" GPUQOS_CUDA_INCLUDE_DIR "/cudaTypedefs.h' --hooks '" +
                              hooks_def + "' --exclusions '" + exclusions + "' 2>&1";
  CheckRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) run.output.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string read_file(const std::string& path) {
  std::ostringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// `text` without the lines that mention any of `symbols` as a whole hook entry.
std::string without_hooks(std::string text, std::initializer_list<std::string> symbols) {
  for (const auto& symbol : symbols) {
    const std::string line = ", " + symbol + ")\n";
    const auto at = text.find(line);
    if (at == std::string::npos) continue;
    const auto start = text.rfind('\n', at) + 1;
    text.erase(start, at + line.size() - start);
  }
  return text;
}

TEST(HookCheck, EveryEntryPointOfTheInstalledCudaHeaderIsCovered) {
  const CheckRun run = run_check(kIntercept + "/hooks.def", kIntercept + "/hook_exclusions.txt");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(" 0 not covered"), std::string::npos) << run.output;
}

TEST(HookCheck, NamesEachEntryPointThatEscapes) {
  gpuqos::testing::TempDir dir("hook-check-test");
  const std::string all = read_file(kIntercept + "/hooks.def");
  const auto hooks = dir.write("hooks.def", without_hooks(all, {"cuLaunchKernel_ptsz", "cuMemcpyBatchAsync_v2", "cuMemsetD8"}));
  ASSERT_NE(read_file(hooks.string()).size(), all.size());
  const CheckRun run = run_check(hooks.string(), kIntercept + "/hook_exclusions.txt");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  for (const char* symbol : {"cuLaunchKernel_ptsz (", "cuMemcpyBatchAsync_v2 (", "cuMemsetD8 ("}) {
    EXPECT_NE(run.output.find(std::string("NOT HOOKED: ") + symbol), std::string::npos) << symbol << "\n" << run.output;
  }
  EXPECT_NE(run.output.find(" 3 not covered"), std::string::npos) << run.output;
}

TEST(HookCheck, AnExclusionCoversAnEntryPoint) {
  gpuqos::testing::TempDir dir("hook-check-test");
  const auto hooks = dir.write("hooks.def", without_hooks(read_file(kIntercept + "/hooks.def"), {"cuGraphLaunch_ptsz"}));
  const auto exclusions = dir.write("exclusions.txt", read_file(kIntercept + "/hook_exclusions.txt") +
                                                          "cuGraphLaunch_ptsz a test exclusion\n");
  const CheckRun run = run_check(hooks.string(), exclusions.string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

// cuda.h defines cuGraphInstantiate as cuGraphInstantiateWithFlags (CUDA 12): a hook of the old
// 5-parameter ABI would be what the shim answers for a name the driver answers with the new one.
TEST(HookCheck, AHookOfAnApiThatCudaHRenamesIsRefused) {
  gpuqos::testing::TempDir dir("hook-check-test");
  const auto hooks = dir.write("hooks.def", read_file(kIntercept + "/hooks.def") +
                                                "GPUQOS_HOOK(naming, cuGraphInstantiate_v2)\n");
  const CheckRun run = run_check(hooks.string(), kIntercept + "/hook_exclusions.txt");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("RENAMED API HOOKED: cuGraphInstantiate_v2: cuda.h defines cuGraphInstantiate as "
                            "cuGraphInstantiateWithFlags"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find(" 0 not covered"), std::string::npos) << run.output;
}

TEST(HookCheck, AnExclusionWithoutAReasonIsRefused) {
  gpuqos::testing::TempDir dir("hook-check-test");
  const auto exclusions = dir.write("exclusions.txt", "cuLaunchHostFunc\n");
  const CheckRun run = run_check(kIntercept + "/hooks.def", exclusions.string());
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("needs a reason"), std::string::npos) << run.output;
}

}  // namespace

// tests/common's gpuqos_programs.h as gpuqos-bench uses it: what of the user's environment its
// children must not inherit.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gpuqos/testing/gpuqos_programs.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::testing {
namespace {

TEST(GpuqosPrograms, TheUsersShimProfileFaultsAndDeviceChoiceDoNotReachTheChildren) {
  // A review: an exported LD_PRELOAD of an installed libgpuqos.so, a GPUQOS_PROFILE, SIMGPU_FAIL_*
  // fault injection or CUDA_VISIBLE_DEVICES reached simgpud, gpuqosd and every replayer.
  ::setenv("LD_PRELOAD", "/usr/local/lib/libgpuqos.so", 1);
  ::setenv("GPUQOS_PROFILE", "/tmp/profile.jsonl", 1);
  ::setenv("SIMGPU_FAIL_LAUNCH", "1", 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  ::setenv("MY_GPUQOS_NOTE", "kept: not a prefix", 1);
  const std::vector<std::string> removed = remove_inherited_gpu_env();
  for (const char* name : {"LD_PRELOAD", "GPUQOS_PROFILE", "SIMGPU_FAIL_LAUNCH", "CUDA_VISIBLE_DEVICES"}) {
    EXPECT_NE(std::find(removed.begin(), removed.end(), name), removed.end()) << name << " not reported";
    EXPECT_EQ(::getenv(name), nullptr) << name << " still set";
  }
  EXPECT_TRUE(std::is_sorted(removed.begin(), removed.end()));
  EXPECT_STREQ(::getenv("MY_GPUQOS_NOTE"), "kept: not a prefix");
  EXPECT_TRUE(remove_inherited_gpu_env().empty()) << "nothing left to remove";

  // A child started after it sees none of them, and what the bench sets for it.
  TempDir dir("gpuqos-programs-test");
  ChildProcess env({"/usr/bin/env"}, simgpu_client_env("/tmp/simgpu.sock"), dir.path() / "env.log");
  ASSERT_EQ(env.wait(std::chrono::seconds(10)), 0);
  const std::string seen = env.output();
  EXPECT_EQ(seen.find("LD_PRELOAD="), std::string::npos) << seen;
  EXPECT_EQ(seen.find("\nGPUQOS_"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("SIMGPU_FAIL_"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("CUDA_VISIBLE_DEVICES="), std::string::npos) << seen;
  EXPECT_NE(seen.find("SIMGPU_SOCKET=/tmp/simgpu.sock"), std::string::npos) << seen;
  ::unsetenv("MY_GPUQOS_NOTE");
}

}  // namespace
}  // namespace gpuqos::testing

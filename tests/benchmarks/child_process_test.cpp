// tests/common's ChildProcess as gpuqos-bench starts its children: a child tied to its parent dies
// when the parent is killed without stopping it, and one that cannot start still throws.
#include <gtest/gtest.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::testing {
namespace {

using namespace std::chrono_literals;

// Makes this test process the reaper of its orphaned descendants while it lives, so that a
// grandchild whose parent died can be waited for here.
class Subreaper {
 public:
  Subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~Subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
};

// Forks a stand-in for gpuqos-bench that starts `sleep 60` with `lifetime`, writes its pid to
// `pid_file` and waits to be killed. Returns the stand-in's pid.
pid_t start_parent(const std::filesystem::path& dir, const std::filesystem::path& pid_file, Lifetime lifetime) {
  const pid_t parent = ::fork();
  if (parent != 0) return parent;
  try {
    ChildProcess sleeper({"/bin/sleep", "60"}, {}, dir / "sleep.log", OutputMode::truncate, lifetime);
    std::ofstream(dir / "pid.tmp") << sleeper.pid();
    std::filesystem::rename(dir / "pid.tmp", pid_file);
    ::pause();
  } catch (...) {
  }
  ::_exit(1);
}

pid_t read_pid(const std::filesystem::path& pid_file) {
  for (int i = 0; i < 500 && !std::filesystem::exists(pid_file); ++i) std::this_thread::sleep_for(10ms);
  pid_t pid = -1;
  std::ifstream(pid_file) >> pid;
  return pid;
}

// Whether `pid` (an orphan this process reaps) ended within `timeout`; kills it when it did not.
bool reaped_within(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(10ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return false;
}

TEST(ChildProcess, AChildTiedToItsParentDiesWhenTheParentIsKilled) {
  // A review: a gpuqos-bench killed with SIGKILL (or by a SIGHUP it did not handle) left gpuqosd,
  // which blocks SIGHUP, running as an orphan for ever.
  const Subreaper subreaper;
  TempDir dir("child-process-test");
  const pid_t parent = start_parent(dir.path(), dir.path() / "pid", Lifetime::dies_with_parent);
  const pid_t child = read_pid(dir.path() / "pid");
  ASSERT_GT(child, 0) << "the stand-in did not start its child";
  ::kill(parent, SIGKILL);
  ::waitpid(parent, nullptr, 0);
  EXPECT_TRUE(reaped_within(child, 5s)) << "the child outlived its killed parent";
}

TEST(ChildProcess, AnIndependentChildOutlivesItsParent) {
  const Subreaper subreaper;
  TempDir dir("child-process-test");
  const pid_t parent = start_parent(dir.path(), dir.path() / "pid", Lifetime::independent);
  const pid_t child = read_pid(dir.path() / "pid");
  ASSERT_GT(child, 0);
  ::kill(parent, SIGKILL);
  ::waitpid(parent, nullptr, 0);
  EXPECT_FALSE(reaped_within(child, 300ms)) << "the tests' default must not change";
}

TEST(ChildProcess, AProgramThatCannotStartThrowsWithEitherLifetime) {
  TempDir dir("child-process-test");
  for (const Lifetime lifetime : {Lifetime::independent, Lifetime::dies_with_parent}) {
    try {
      ChildProcess missing({(dir.path() / "no-such-program").string()}, {}, dir.path() / "out.log",
                           OutputMode::truncate, lifetime);
      ADD_FAILURE() << "a missing program started";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no-such-program"), std::string::npos) << e.what();
    }
  }
  ChildProcess echo({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, {}, dir.path() / "echo.log",
                    OutputMode::truncate, Lifetime::dies_with_parent);
  EXPECT_EQ(echo.wait(10s), 3);
  EXPECT_EQ(echo.output(), "out\nerr\n") << "stdout and stderr both go to the output file";
}

}  // namespace
}  // namespace gpuqos::testing

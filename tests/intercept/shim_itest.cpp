// libgpuqos.so under real CUDA programs on simgpu: every call is seen by the shim whether the
// program calls the driver by name, through cuGetProcAddress or through dlopen + dlsym; with no
// driver at all the hooks fail cleanly; a stderr nobody reads never ends the program.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/simgpud_process.h"
#include "gpuqos/testing/temp_dir.h"
#include "gpuqos/testing/text.h"

namespace {

using gpuqos::testing::ChildProcess;
using gpuqos::testing::SimgpudProcess;
using gpuqos::testing::TempDir;
using gpuqos::testing::occurrences;
using namespace std::chrono_literals;

const std::string kBuild = GPUQOS_BUILD_DIR;
const std::string kShim = kBuild + "/lib/libgpuqos.so";

constexpr const char* kCatalog = R"({
  "kernels": [{"match": "^spin$", "model": "from_arg", "arg": 0, "unit": "us"}],
  "default_us": 10,
  "noise_cv": 0
})";

// "category launch 3", "hook cuLaunchKernel 2", "captured 1" -> {"launch": 3, "cuLaunchKernel": 2, "captured": 1}
std::map<std::string, long> read_counts(const std::filesystem::path& path) {
  std::map<std::string, long> counts;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind, name;
    long n = 0;
    fields >> kind >> name;
    if (kind == "category" || kind == "hook") {
      fields >> n;
      counts[name] = n;
    } else {
      counts[kind] = std::stol(name);
    }
  }
  return counts;
}

// Runs `argv` with the current environment plus `env`, stdout to `output` and stderr a pipe whose
// reader has gone, SIGPIPE at its default action (whatever this test's is): what a job run as
// `job 2>&1 >/dev/null | head` meets once head has exited. Its exit code, 128 + signal when a
// signal ended it (-1: it could not be started, or did not finish in 60 s and was killed).
int run_with_stderr_a_broken_pipe(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                  const std::filesystem::path& output) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!env.contains(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
  }
  for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int pipe_ends[2];
  if (::pipe2(pipe_ends, O_CLOEXEC) != 0) return -1;
  ::close(pipe_ends[0]);  // no reader from the start: every write to the pipe fails with EPIPE
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDERR_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t sigpipe_only, none;
  sigemptyset(&sigpipe_only);
  sigaddset(&sigpipe_only, SIGPIPE);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &sigpipe_only);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_ends[1]);
  if (spawned != 0) return -1;

  const auto deadline = std::chrono::steady_clock::now() + 60s;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    simgpud_.start();
    counts_path_ = dir_.path() / "counts.txt";
  }

  // Runs tests/programs/<program> <mode> under the shim; its exit code (-1: did not finish in time).
  int run(const std::string& program, const std::string& mode, std::map<std::string, std::string> env = {},
          bool with_driver = true) {
    env["LD_PRELOAD"] = env.contains("LD_PRELOAD") ? kShim + ":" + env["LD_PRELOAD"] : kShim;  // ours first
    env["GPUQOS_DEBUG_COUNTS"] = counts_path_.string();
    env["SIMGPU_SOCKET"] = simgpud_.socket();
    env["LD_LIBRARY_PATH"] = with_driver ? kBuild + "/lib/simgpu" : dir_.path().string();
    ChildProcess child({kBuild + "/tests/programs/" + program, mode}, env, dir_.path() / "output.txt");
    const int code = child.wait(60s).value_or(-1);
    output_ = child.output();
    return code;
  }

  std::map<std::string, long> counts() const { return read_counts(counts_path_); }

  TempDir dir_{"shim-itest"};
  SimgpudProcess simgpud_{{.profile_toml = "name = \"itest gpu\"\nsms = 8\ncompute_mode = \"fifo\"\n",
                           .catalog_json = kCatalog,
                           .dir_prefix = "shim-itest-simgpud"}};
  std::filesystem::path counts_path_;
  std::string output_;
};

TEST_F(ShimTest, DirectCallsAreAllSeen) {
  ASSERT_EQ(run("intercept_linked_client", "direct"), 0) << output_;
  EXPECT_NE(output_.find("direct ok"), std::string::npos) << output_;
  const auto c = counts();
  EXPECT_EQ(c.at("launch"), 4);  // two on the legacy stream, one on a stream, one captured
  EXPECT_EQ(c.at("captured"), 1);
  EXPECT_EQ(c.at("graph_launch"), 1);
  EXPECT_EQ(c.at("copy"), 3);
  EXPECT_EQ(c.at("memset"), 1);
  EXPECT_EQ(c.at("sync"), 3);
  EXPECT_EQ(c.at("naming"), 2);  // cuModuleGetFunction, and the graph's instantiation (its number)
  EXPECT_EQ(c.at("cuGraphInstantiateWithFlags"), 1);
  EXPECT_EQ(c.at("alloc"), 2);
  EXPECT_EQ(c.at("failed"), 0);
  EXPECT_EQ(c.at("cuLaunchKernel"), 4);
  EXPECT_EQ(c.at("cuMemcpyHtoD_v2"), 1);
  EXPECT_EQ(c.at("cuMemcpyHtoDAsync_v2"), 1);
  EXPECT_EQ(c.at("cuMemcpyDtoH_v2"), 1);
  EXPECT_EQ(c.at("cuMemsetD32_v2"), 1);
  EXPECT_EQ(c.at("cuGraphLaunch"), 1);
  EXPECT_EQ(c.at("cuCtxSynchronize"), 1);
  EXPECT_EQ(c.at("cuStreamSynchronize"), 2);
  EXPECT_EQ(c.at("cuModuleGetFunction"), 1);
  EXPECT_EQ(c.at("cuMemAlloc_v2"), 1);
  EXPECT_EQ(c.at("cuMemFree_v2"), 1);
}

TEST_F(ShimTest, CuGetProcAddressAnswersHooks) {
  ASSERT_EQ(run("intercept_linked_client", "proc"), 0) << output_;
  EXPECT_NE(output_.find("proc ok"), std::string::npos) << output_;
  const auto c = counts();
  EXPECT_EQ(c.at("cuLaunchKernel"), 1);
  EXPECT_EQ(c.at("cuLaunchKernel_ptsz"), 1);  // the per-thread flag got the per-thread hook
  EXPECT_EQ(c.at("cuMemcpyHtoD_v2"), 1);
  EXPECT_EQ(c.at("cuStreamSynchronize_ptsz"), 1);  // through a cuGetProcAddress found by cuGetProcAddress
  EXPECT_EQ(c.at("cuMemcpyDtoH_v2"), 1);
  EXPECT_EQ(c.at("launch"), 2);
  EXPECT_EQ(c.at("copy"), 2);
  EXPECT_EQ(c.at("failed"), 0);
}

// A driver newer than the shim may answer a hooked name, asked for at its newer version, with an
// ABI we have no hook for; our hook in its place would be called with arguments it cannot read.
// The driver's answer is kept and the shim says so once; answers it recognises are still hooked.
TEST_F(ShimTest, CuGetProcAddressKeepsAnAnswerOfAnAbiNewerThanTheShim) {
  ASSERT_EQ(run("intercept_linked_client", "future", {{"LD_PRELOAD", kBuild + "/tests/programs/libintercept_future_driver.so"}}), 0)
      << output_;
  EXPECT_NE(output_.find("future ok"), std::string::npos) << output_;
  EXPECT_EQ(occurrences(output_, "asks for a CUDA newer than the"), 1u) << output_;
  EXPECT_NE(output_.find("cuGetProcAddress(\"cuLaunchKernel\", 90000)"), std::string::npos) << output_;
  EXPECT_EQ(counts().at("failed"), 0);
  EXPECT_EQ(counts().at("cuMemsetD32_v2"), 1) << "the driver's own function of a known ABI: hooked";
}

TEST_F(ShimTest, DlopenAndDlsymAnswerHooks) {
  ASSERT_EQ(run("intercept_dlopen_client", "dlsym"), 0) << output_;
  EXPECT_NE(output_.find("dlsym ok"), std::string::npos) << output_;
  const auto c = counts();
  EXPECT_EQ(c.at("cuLaunchKernel"), 1);
  EXPECT_EQ(c.at("cuModuleGetFunction"), 1);
  EXPECT_EQ(c.at("cuMemcpyHtoD_v2"), 1);
  EXPECT_EQ(c.at("cuMemcpyDtoH_v2"), 1);
  EXPECT_EQ(c.at("cuCtxSynchronize"), 1);
  EXPECT_EQ(c.at("alloc"), 2);
  EXPECT_EQ(c.at("failed"), 0);
}

TEST_F(ShimTest, AHookedDlsymFromAProgramStartedByABareNameLeavesNoError) {
  ASSERT_EQ(run("intercept_dlopen_client", "dlerror"), 0) << output_;
  EXPECT_NE(output_.find("dlerror ok"), std::string::npos) << output_;
}

// dlsym on another library's handle: the hook only where that handle's search finds the driver's
// definition (a library linking libcuda); a library's own definition of the name (a wrapper it
// opened) is answered as it is, and calling it never reaches the shim.
TEST_F(ShimTest, DlsymOnAnotherLibrarysHandleAnswersItsOwnDefinition) {
  ASSERT_EQ(run("intercept_dlopen_client", "handles"), 0) << output_;
  EXPECT_NE(output_.find("handles ok"), std::string::npos) << output_;
  const auto c = counts();
  EXPECT_EQ(c.count("cuLaunchKernel") ? c.at("cuLaunchKernel") : 0, 0) << "the wrapper's call is not ours";
}

TEST_F(ShimTest, WithoutADriverHooksFailCleanlyAndSayItOnce) {
  ASSERT_EQ(run("intercept_dlopen_client", "absent", {}, /*with_driver=*/false), 0) << output_;
  EXPECT_NE(output_.find("absent ok"), std::string::npos) << output_;
  EXPECT_EQ(occurrences(output_, "no CUDA driver is loaded, and libcuda.so.1 cannot be loaded"), 1u) << output_;
  EXPECT_EQ(occurrences(output_, "the driver has no"), 0u) << "there is no driver to lack them\n" << output_;
  const auto c = counts();
  EXPECT_EQ(c.at("launch"), 0);  // never reached the gate: there was nothing to call
}

// A lookup made before the driver was loaded is not kept as missing: the driver may come later by
// a path its soname does not find. Kept, the hook failed for the life of the process (801) where
// the driver's own function, without the shim, worked.
TEST_F(ShimTest, AHookReachedBeforeTheDriverWasLoadedWorksOnceItIs) {
  ASSERT_EQ(run("intercept_dlopen_client", "late", {{"DRIVER_PATH", kBuild + "/lib/simgpu/libcuda.so.1"}},
                /*with_driver=*/false),
            0)
      << output_;
  EXPECT_NE(output_.find("late ok"), std::string::npos) << output_;
  EXPECT_EQ(counts().at("memset"), 2) << "both memsets went through the shim to the driver";
  EXPECT_EQ(counts().at("failed"), 0);
}

TEST_F(ShimTest, ABadSettingIsReportedOnceAndTheProgramStillRuns) {
  ASSERT_EQ(run("intercept_linked_client", "direct", {{"GPUQOS_PRIORITY", "urgent"}}), 0) << output_;
  EXPECT_EQ(occurrences(output_, "GPUQOS_PRIORITY=\"urgent\" is not valid (allowed: high, low)"), 1u) << output_;
  EXPECT_EQ(counts().at("launch"), 4);
}

// A socket path too long for a Unix socket names a daemon that cannot be reached: the job runs
// unmanaged and asks no other daemon (the default socket's may not be the one it was meant for).
TEST_F(ShimTest, ABadSocketRunsTheJobUnmanagedWithoutAskingTheDefaultSocket) {
  const std::string bad = "/tmp/" + std::string(200, 's');
  ASSERT_EQ(run("intercept_linked_client", "direct", {{"GPUQOS_SOCKET", bad}, {"GPUQOS_LOG", "info"}}), 0) << output_;
  EXPECT_EQ(occurrences(output_, "GPUQOS_SOCKET=\"" + bad + "\" is not valid"), 1u) << output_;
  EXPECT_EQ(occurrences(output_, "this job runs unmanaged (no gpuqosd is asked)"), 1u) << output_;
  EXPECT_EQ(occurrences(output_, "gpuqosd at"), 0u) << "asked a daemon: " << output_;
  EXPECT_EQ(counts().at("launch"), 4);
}

TEST_F(ShimTest, ABadLogLevelIsSaidOnceAndOffSilencesEvenBadSettings) {
  ASSERT_EQ(run("intercept_linked_client", "direct", {{"GPUQOS_LOG", "verbose"}}), 0) << output_;
  EXPECT_EQ(occurrences(output_, "GPUQOS_LOG=\"verbose\" is not valid"), 1u) << output_;
  EXPECT_EQ(occurrences(output_, "logging at warn"), 1u) << output_;
  ASSERT_EQ(run("intercept_linked_client", "direct", {{"GPUQOS_LOG", "off"}, {"GPUQOS_PRIORITY", "urgent"}}), 0)
      << output_;
  EXPECT_EQ(occurrences(output_, "gpuqos["), 0u) << output_;
  EXPECT_EQ(counts().at("launch"), 4);
}

// The shim's warnings go to the job's stderr from the job's own threads. Where nobody reads that
// stderr any more (`job 2>&1 >/dev/null | head`), writing one raised SIGPIPE and its default
// action killed a job that runs to the end without gpuqos (a user's exit 141). Here the first
// CUDA call finds no gpuqosd and says so, and its word fails with EPIPE: the job runs on.
TEST_F(ShimTest, AWarningToAStderrNobodyReadsNeverKillsTheProgram) {
  const std::vector<std::string> argv = {kBuild + "/tests/programs/intercept_linked_client", "direct"};
  std::map<std::string, std::string> env = {{"SIMGPU_SOCKET", simgpud_.socket()},
                                            {"LD_LIBRARY_PATH", kBuild + "/lib/simgpu"},
                                            {"GPUQOS_SOCKET", (dir_.path() / "no-gpuqosd.sock").string()},
                                            {"GPUQOS_DEBUG_COUNTS", counts_path_.string()}};
  const auto output = dir_.path() / "output.txt";
  ASSERT_EQ(run_with_stderr_a_broken_pipe(argv, env, output), 0) << "the program alone, without the shim";
  env["LD_PRELOAD"] = kShim;
  EXPECT_EQ(run_with_stderr_a_broken_pipe(argv, env, output), 0) << "141: killed by SIGPIPE";
  std::ostringstream stdout_text;
  stdout_text << std::ifstream(output).rdbuf();
  EXPECT_NE(stdout_text.str().find("direct ok"), std::string::npos) << stdout_text.str();
  const auto c = counts();  // written as the shim unloads: none when the program was killed
  EXPECT_EQ(c.contains("launch") ? c.at("launch") : -1, 4) << "the shim saw the job's work and passed it through";
}

}  // namespace

// End-to-end rig: the real simgpud, the real gpuqosd and CUDA programs under libgpuqos.so, all in
// one temp dir with sockets of their own; every process is killed and every file (sockets, logs,
// gpuqosd's shared-memory segments) removed by the destructors, even when a test fails.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpuqos/scheduler/status.h"
#include "gpuqos/scheduler/unix_socket.h"
#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/simgpud_process.h"
#include "gpuqos/testing/temp_dir.h"
#include "gpuqos/testing/text.h"
#include "scheduler/daemon_harness.h"  // eventually(), bin(), FakeClient

namespace gpuqos::testing {

inline std::string build_path(const std::string& relative) { return std::string(GPUQOS_BUILD_DIR) + "/" + relative; }

// gpuqosd on a fixed socket path, so that it can be killed and started again there.
class GpuqosdProcess {
 public:
  GpuqosdProcess(std::filesystem::path dir, std::vector<std::string> extra_args)
      : dir_(std::move(dir)), socket_((dir_ / "gpuqosd.sock").string()), extra_args_(std::move(extra_args)) {}
  ~GpuqosdProcess() { stop(); }
  GpuqosdProcess(const GpuqosdProcess&) = delete;
  GpuqosdProcess& operator=(const GpuqosdProcess&) = delete;

  // Starts it (appending to gpuqosd.log) and waits until it answers a status request.
  void start() {
    std::vector<std::string> argv = {bin("gpuqosd"), "--socket", socket_, "--log-level", "debug"};
    argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
    process_.emplace(argv, std::map<std::string, std::string>{}, dir_ / "gpuqosd.log", OutputMode::append);
    const bool up = eventually([&] { return static_cast<bool>(scheduler::request_status(socket_)) || !process_->running(); }, 10s);
    if (!up || !process_->running()) throw std::runtime_error("gpuqosd did not come up:\n" + log());
    pids_.push_back(status()["daemon"]["pid"].get<pid_t>());
  }
  // SIGKILL, as if it crashed: its socket file and segments stay behind, as they would.
  void kill() {
    if (process_) process_->kill();
    process_.reset();
  }
  // SIGTERM (it drains and cleans up), then whatever any run of it left behind is removed.
  void stop() {
    process_.reset();
    std::error_code ignored;
    std::filesystem::remove(socket_, ignored);
    for (const pid_t pid : pids_) {
      const std::string prefix = "gpuqos-" + std::to_string(pid) + "-";
      for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ignored)) {
        if (entry.path().filename().string().starts_with(prefix)) std::filesystem::remove(entry.path(), ignored);
      }
    }
  }

  bool process_alive() { return process_ && process_->running(); }
  const std::string& socket() const { return socket_; }
  std::string log() const {
    std::ifstream in(dir_ / "gpuqosd.log");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  nlohmann::json status() const {
    auto text = scheduler::request_status(socket_);
    if (!text) throw std::runtime_error("status: " + text.error());
    return nlohmann::json::parse(text.value());
  }
  // The status entry of the client running as `job`, or null (also when gpuqosd does not answer).
  nlohmann::json client(const std::string& job) const {
    auto text = scheduler::request_status(socket_);
    if (!text) return nullptr;
    const nlohmann::json status = nlohmann::json::parse(text.value());
    for (const auto& c : status["clients"]) {
      if (c["job"] == job) return c;
    }
    return nullptr;
  }

 private:
  std::filesystem::path dir_;
  std::string socket_;
  std::vector<std::string> extra_args_;
  std::optional<ChildProcess> process_;
  std::vector<pid_t> pids_;  // of every run, for the segments they may leave
};

// How a program is put under the shim.
enum class Launch { gpuqos_run, ld_preload };

struct ProgramOptions {
  std::string job;
  std::string priority = "low";
  Launch launch = Launch::gpuqos_run;
  bool hold = false;  // kept alive in cuDevicePrimaryCtxRelease until release(job)
  std::map<std::string, std::string> env = {};  // more of the program's environment
};

class PipelineRig {
 public:
  static constexpr const char* kOneDevice = "name = \"e2e gpu\"\nsms = 8\n";
  explicit PipelineRig(std::vector<std::string> gpuqosd_args = {}, const std::string& profile_toml = kOneDevice)
      : simgpud_({.profile_toml = profile_toml,
                  .catalog_json = kCatalog,
                  .dir_prefix = "e2e-pipeline-simgpud"}),
        gpuqosd_(dir_.path(), std::move(gpuqosd_args)) {
    simgpud_.start();
  }
  ~PipelineRig() { programs_.clear(); }  // programs first, then gpuqosd, then simgpud

  GpuqosdProcess& gpuqosd() { return gpuqosd_; }
  const std::string& simgpud_socket() const { return simgpud_.socket(); }
  const TempDir& dir() const { return dir_; }

  // Starts `command` under libgpuqos.so; its output goes to <dir>/<job>.log.
  ChildProcess& start(const ProgramOptions& options, const std::vector<std::string>& command) {
    std::map<std::string, std::string> env = {{"SIMGPU_SOCKET", simgpud_.socket()},
                                              {"LD_LIBRARY_PATH", build_path("lib/simgpu")},
                                              {"GPUQOS_LOG", "info"}};
    std::string preload = options.hold ? build_path("tests/programs/libe2e_hold_at_release.so") : "";
    if (options.hold) env["E2E_HOLD_UNTIL"] = release_file(options.job).string();
    std::vector<std::string> argv;
    if (options.launch == Launch::gpuqos_run) {
      argv = {bin("gpuqos"), "run", "--priority", options.priority, "--job", options.job, "--socket", gpuqosd_.socket(), "--"};
    } else {
      env["GPUQOS_PRIORITY"] = options.priority;
      env["GPUQOS_JOB"] = options.job;
      env["GPUQOS_SOCKET"] = gpuqosd_.socket();
      preload = build_path("lib/libgpuqos.so") + (preload.empty() ? "" : ":" + preload);
    }
    if (!preload.empty()) env["LD_PRELOAD"] = preload;
    for (const auto& [key, value] : options.env) env[key] = value;
    argv.insert(argv.end(), command.begin(), command.end());
    programs_.push_back(std::make_unique<ChildProcess>(argv, env, dir_.path() / (options.job + ".log")));
    return *programs_.back();
  }

  // Lets a held program finish.
  void release(const std::string& job) { dir_.write(job + ".release.flag", ""); }
  std::filesystem::path release_file(const std::string& job) const { return dir_.path() / (job + ".release.flag"); }

  static std::vector<std::string> client(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {build_path("tests/programs/e2e_pipeline_client")};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  // gpuqos-replay of <dir>/<workload>.json.
  std::vector<std::string> replay(const std::string& workload, const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {bin("gpuqos-replay"), "--workload", (dir_.path() / (workload + ".json")).string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  std::string logs() const {
    return "gpuqosd log:\n" + gpuqosd_.log() + "\nsimgpud log:\n" + simgpud_.log_text();
  }

 private:
  // spin (pipeline_client) takes microseconds, the replay module's gq_* kernels nanoseconds.
  static constexpr const char* kCatalog = R"({
  "kernels": [{"match": "^spin$", "model": "from_arg", "arg": 0, "unit": "us"},
              {"match": "^gq_", "model": "from_arg", "arg": 0, "unit": "ns"}],
  "default_us": 10,
  "noise_cv": 0
})";

  TempDir dir_{"e2e-pipeline"};
  SimgpudProcess simgpud_;
  GpuqosdProcess gpuqosd_;
  std::vector<std::unique_ptr<ChildProcess>> programs_;
};

}  // namespace gpuqos::testing

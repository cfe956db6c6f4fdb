// The processes of one `gpuqos-bench qos` run: trace conversion, one simgpud per device mode, one
// gpuqosd per cell, and the replayers of a run started together and waited for. Sockets live in a
// private temp dir; every child's output goes to a log file in <out>/logs.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cell_math.h"
#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/temp_dir.h"
#include "output_dir.h"
#include "plan.h"
#include "results.h"

namespace gpuqos::qos {

// The time slice of the benchmark's device (simgpu/profiles/h100.toml's timeslice_us), in ms of
// the unscaled device: what an operator sets as [policy.baymax] timeslice_ms for their GPU.
double device_timeslice_ms();

// One replayer of a run.
struct JobSpec {
  std::string name;                      // the job name, also the log's
  std::string priority;                  // "high" or "low", under gpuqosd
  std::vector<std::string> replay_args;  // gpuqos-replay's options, without --duration and --out
};

// What one job of a run left: its replay result when it succeeded.
struct JobOutcome {
  std::string name;
  nlohmann::json result;  // gpuqos-replay --out; null when the job failed
};

struct RunOutcome {
  Status status;
  std::vector<JobOutcome> jobs;   // in JobSpec order
  DeviceSample window_begin, window_end;  // simgpu-stat while every job ran
};

// Contract: one thread. The destructor stops every process still running (gpuqosd, simgpud) and
// removes the socket dir, also when a run threw.
class QosRig {
 public:
  // Holds out_dir's OutDirLock while it lives: throws when another bench writes there.
  QosRig(const std::filesystem::path& out_dir, double time_scale);
  ~QosRig();
  QosRig(const QosRig&) = delete;
  QosRig& operator=(const QosRig&) = delete;

  // Converts `workload`'s trace into <out>/workloads/<key>.json and its catalog; throws with the
  // converter's log when it fails.
  void convert(const Workload& workload, const std::filesystem::path& traces_dir);
  std::filesystem::path workload_file(const Workload& workload) const;

  // Stops the simgpud of the previous mode, writes <out>/profiles/simgpu-<mode>.toml and starts
  // simgpud with it and every converted catalog; throws with its log when it does not come up.
  void start_device(const std::string& compute_mode);

  // Runs `jobs` concurrently, each for duration_s, directly on simgpu or, with `gpuqosd_config`,
  // each under `gpuqos run` and a gpuqosd started for this run only. Samples simgpu-stat once every
  // job is going and again just before the first can stop. Never throws for a failed process: the
  // outcome's status says which failed and why.
  RunOutcome run(const std::string& run_name, const std::vector<JobSpec>& jobs,
                 const std::optional<std::filesystem::path>& gpuqosd_config, double duration_s);

  // Runs `jobs` together on simgpu without gpuqosd, each under `gpuqos run` with CUPTI profiling
  // (GPUQOS_PROFILE), then `gpuqos train`s a predictor store from the profiles into `store`: what a
  // user does before deploying (README, "Training the predictor"). The status says why not.
  Status train_predictor(const std::string& run_name, const std::vector<JobSpec>& jobs, double duration_s,
                         const std::filesystem::path& store);
  // The store every later gpuqosd starts from (`--profile-store` on a fresh copy, so runs do not
  // learn from each other); none: gpuqosd starts untrained.
  void use_predictor_store(std::optional<std::filesystem::path> store) { predictor_store_ = std::move(store); }
  // Whether the replayers' device memory keeps its contents (SIMGPU_DEVICE_DATA). By default it
  // does not: simgpu would move those bytes with the host's CPU, which the replayers share with
  // gpuqosd and each other, where a GPU's copy engines and SMs move them (benchmarks/README.md).
  void keep_device_data(bool keep) { keep_device_data_ = keep; }
  // gpuqosd's --log-level for the runs from here on ("": its config's).
  void daemon_log_level(std::string level) { daemon_log_level_ = std::move(level); }

  const std::filesystem::path& out_dir() const { return out_; }
  double time_scale() const { return time_scale_; }

 private:
  std::filesystem::path log_file(const std::string& name) const { return out_ / "logs" / (name + ".log"); }
  // run(), or with `profile_dir` each job profiled into <profile_dir>/<run>-<job>.jsonl.
  RunOutcome run_jobs(const std::string& run_name, const std::vector<JobSpec>& jobs,
                      const std::optional<std::filesystem::path>& gpuqosd_config,
                      const std::optional<std::filesystem::path>& profile_dir, double duration_s);
  // Starts gpuqosd with `config` on `socket`; false (with `status` saying why) when it does not serve.
  bool start_gpuqosd(const std::string& run_name, const std::filesystem::path& config, const std::string& socket,
                     std::optional<testing::ChildProcess>& daemon, Status& status);
  // Starts simgpud for compute_mode_; its log restarts or, after a crash, goes on.
  void launch_device(testing::OutputMode log_mode);
  DeviceSample sample_device(const std::string& name) const;
  // gpuqosd's `gpuqos status --json` at the end of the window (logs/<run>-gpuqosd-status.json): what
  // held best-effort work, the latencies it measured. Best effort: a failure is only reported.
  void keep_predictor_store(const std::string& run_name) const;
  void save_daemon_status(const std::string& run_name, const std::string& socket) const;
  void stop_device();

  std::filesystem::path out_;
  double time_scale_;
  OutDirLock out_lock_;
  testing::TempDir sockets_;  // short paths: a Unix socket path has at most 107 bytes
  std::vector<std::filesystem::path> catalogs_;
  std::string compute_mode_;
  std::string simgpu_socket_;
  std::optional<testing::ChildProcess> simgpud_;
  std::optional<std::filesystem::path> predictor_store_;
  bool keep_device_data_ = false;
  std::string daemon_log_level_;
};

// Failed status for `what` with the tail of its log.
Status failed(const std::string& reason, const std::filesystem::path& log);

}  // namespace gpuqos::qos

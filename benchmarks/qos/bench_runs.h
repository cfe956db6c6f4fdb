// What `gpuqos-bench qos` and `gpuqos-bench weights` share: the replayers' command lines and the
// numbered progress of their runs ("gpuqos-bench: [3/12] name ... ok"), each run's result read or
// its failure said with its log's last lines.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "plan.h"
#include "qos_rig.h"
#include "results.h"

namespace gpuqos::qos {

// A number as a command-line argument: up to 10 significant digits.
std::string number(double value);

// The LC replayer: Poisson arrivals at rate_per_s, or closed loop without one; with mark_queries it
// marks its queries (gpuqos/query.h).
JobSpec lc_job_spec(const QosRig& rig, double time_scale, std::uint64_t seed, std::optional<double> rate_per_s,
                    bool mark_queries);
// A best-effort replayer of `workload`, running as job `job`.
JobSpec be_job_spec(const QosRig& rig, const Workload& workload, const std::string& job, double time_scale,
                    bool thread_per_stream);

// What BenchRuns::begin throws once the user asked to stop: the runs made so far are reported.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

// A failed status from what the rig threw: its first line the reason, the rest (a log's tail,
// as QosRig's messages end) the tail.
Status status_of(const std::exception& error);

// Contract: one thread; `interrupted` is set by a signal handler.
class BenchRuns {
 public:
  BenchRuns(QosRig& rig, const std::atomic<bool>& interrupted, std::size_t total)
      : rig_(rig), interrupted_(interrupted), total_(total) {}

  // Prints the next run's progress line; throws Interrupted once interrupted.
  void begin(const std::string& name) {
    if (interrupted_) throw Interrupted();
    ++done_;
    std::cerr << "gpuqos-bench: [" << done_ << "/" << total_ << "] " << name << " ..." << std::flush;
  }
  // Ends the line begin() started with "ok" or the failure, its log and its last lines.
  static void end(const Status& status) {
    if (status.ok) {
      std::cerr << " ok\n";
      return;
    }
    std::cerr << " FAILED: " << status.reason;
    if (!status.log_path.empty()) std::cerr << " (" << status.log_path << ")";
    if (!status.log_tail.empty()) std::cerr << ", its last lines:\n" << status.log_tail;
    std::cerr << "\n";
  }
  // A run that is not made (a reference is missing): counted, not run.
  void skip() { ++done_; }

  // Profiles `jobs` together and trains the predictor store every later gpuqosd of the rig starts
  // from, as a user would before deploying; when that fails they start untrained, and the status
  // says so (the caller keeps it: the runs after it are caveated).
  Status train(const std::string& name, const std::vector<JobSpec>& jobs, double duration_s,
               const std::filesystem::path& store) {
    begin(name);
    Status status;
    try {
      status = rig_.train_predictor(name, jobs, duration_s, store);
    } catch (const std::exception& e) {  // as in measure()
      status = status_of(e);
    }
    rig_.use_predictor_store(status.ok ? std::optional(store) : std::nullopt);
    if (!status.ok) status.reason += "; the runs after it start from an untrained predictor";
    end(status);
    return status;
  }

  // Runs the jobs and hands the outcome to `use`, which may throw on a result it cannot read; the
  // returned status says whether both went well. Throws only Interrupted.
  template <typename Use>
  Status measure(const std::string& name, const std::vector<JobSpec>& jobs,
                 const std::optional<std::filesystem::path>& config, double duration_s, Use use) {
    begin(name);
    RunOutcome outcome;
    try {
      outcome = rig_.run(name, jobs, config, duration_s);
    } catch (const std::exception& e) {
      // simgpud did not come back after a crash, or a process could not be started: this run
      // failed, and with it only this run (the next may restart the device), not every result.
      outcome.status = status_of(e);
    }
    if (outcome.status.ok) {
      try {
        use(outcome);
      } catch (const std::exception& e) {
        outcome.status = {false, std::string("unreadable result: ") + e.what(), "", ""};
      }
    }
    end(outcome.status);
    return outcome.status;
  }

 private:
  QosRig& rig_;
  const std::atomic<bool>& interrupted_;
  std::size_t total_, done_ = 0;
};

}  // namespace gpuqos::qos

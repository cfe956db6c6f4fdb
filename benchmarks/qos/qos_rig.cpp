// QosRig: conversion, simgpud per device mode, gpuqosd per run, and the replayers of a run.
#include "qos_rig.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "gpuqos/simgpu/profile.h"
#include "gpuqos/testing/gpuqos_programs.h"
#include "gpuqos/testing/text.h"
#include "report.h"

namespace gpuqos::qos {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::build_program;
using testing::ChildProcess;
using testing::OutputMode;

// Every child dies with the bench, also when the bench is killed without cleaning up (SIGKILL, a
// crash): otherwise gpuqosd, which blocks SIGHUP for its reload, would run on as an orphan. The rig
// runs on the bench's main thread, as Lifetime::dies_with_parent needs.
constexpr auto kWithBench = testing::Lifetime::dies_with_parent;

constexpr std::size_t kTailLines = 15;
constexpr auto kDaemonStartTimeout = 10s;
// How long past its duration a run may take before its jobs are stopped: a BE job finishes the
// iteration it is in, which a contended device may stretch to seconds.
constexpr auto kRunGrace = 120s;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string number(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

// simgpu/profiles/h100.toml with compute_mode and time_scale set: the repository's H100, so the
// benchmark's device follows that file when it changes.
std::string device_profile(const std::string& compute_mode, double time_scale) {
  const fs::path base = fs::path(GPUQOS_SOURCE_DIR) / "simgpu" / "profiles" / "h100.toml";
  std::istringstream in(read_file(base));
  if (in.str().empty()) throw std::runtime_error("cannot read " + base.string());
  std::string out = "# Written by gpuqos-bench qos: " + base.filename().string() + " with compute_mode = \"" +
                    compute_mode + "\" and time_scale = " + number(time_scale) + ".\n";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("compute_mode", 0) == 0) line = "compute_mode = \"" + compute_mode + "\"";
    if (line.rfind("time_scale", 0) == 0) line = "time_scale = " + number(time_scale);
    out += line + "\n";
  }
  return out;
}

// That same file's first device, as simgpud reads it (simgpu::ProfileError names what is wrong).
simgpu::DeviceProfile bench_device() {
  return simgpu::load_profile_file(fs::path(GPUQOS_SOURCE_DIR) / "simgpu" / "profiles" / "h100.toml").at(0);
}

// Its `sms`: what `gpuqos train` is told, so the predictor's waves match the device.
std::string device_sms() { return std::to_string(bench_device().sms); }

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

void sleep_until(Clock::time_point t) { std::this_thread::sleep_until(t); }

Clock::time_point after(Clock::time_point t, double seconds) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

double device_timeslice_ms() { return bench_device().timeslice_us / 1000.0; }

Status failed(const std::string& reason, const fs::path& log) {
  return {false, reason, log.string(), tail_lines(read_file(log), kTailLines)};
}

QosRig::QosRig(const fs::path& out_dir, double time_scale)
    : out_(out_dir), time_scale_(time_scale), out_lock_(out_dir), sockets_("gpuqos-bench") {
  for (const char* sub : {"workloads", "logs", "runs", "configs", "profiles"}) fs::create_directories(out_ / sub);
}

QosRig::~QosRig() { stop_device(); }

fs::path QosRig::workload_file(const Workload& workload) const { return out_ / "workloads" / (workload.key + ".json"); }

void QosRig::convert(const Workload& workload, const fs::path& traces_dir) {
  const fs::path catalog = out_ / "workloads" / (workload.key + "-catalog.json");
  const fs::path log = log_file("convert-" + workload.key);
  ChildProcess converter({build_program("gpuqos-trace2workload").string(), "--trace", (traces_dir / workload.trace).string(),
                          "--out", workload_file(workload).string(), "--catalog", catalog.string(), "--iteration",
                          workload.iteration},
                         {}, log, OutputMode::truncate, kWithBench);
  if (converter.wait(300s) != 0) {
    throw std::runtime_error("gpuqos-trace2workload failed on " + workload.trace + " (" + log.string() + "):\n" +
                             tail_lines(read_file(log), kTailLines));
  }
  catalogs_.push_back(catalog);
}

void QosRig::start_device(const std::string& compute_mode) {
  stop_device();
  compute_mode_ = compute_mode;
  launch_device(OutputMode::truncate);
}

void QosRig::launch_device(OutputMode log_mode) {
  const fs::path profile = out_ / "profiles" / ("simgpu-" + compute_mode_ + ".toml");
  std::ofstream(profile) << device_profile(compute_mode_, time_scale_);
  simgpu_socket_ = (sockets_.path() / ("simgpu-" + compute_mode_ + ".sock")).string();
  std::error_code ignored;
  fs::remove(simgpu_socket_, ignored);  // left by a simgpud that crashed
  std::vector<std::string> argv{build_program("simgpud").string(), "--socket", simgpu_socket_, "--profile",
                                profile.string(), "--time-scale", number(time_scale_), "--log-level", "warn"};
  for (const fs::path& catalog : catalogs_) argv.insert(argv.end(), {"--catalog", catalog.string()});
  const fs::path log = log_file("simgpud-" + compute_mode_);
  simgpud_.emplace(argv, std::map<std::string, std::string>{}, log, log_mode, kWithBench);
  if (testing::wait_until_serving(*simgpud_, simgpu_socket_, kDaemonStartTimeout) != testing::DaemonStartup::serving) {
    throw std::runtime_error("simgpud (" + compute_mode_ + ") did not come up (" + log.string() + "):\n" +
                             tail_lines(read_file(log), kTailLines));
  }
}

void QosRig::stop_device() {
  if (simgpud_) simgpud_->stop();
  simgpud_.reset();
}

DeviceSample QosRig::sample_device(const std::string& name) const {
  const fs::path answer = out_ / "logs" / (name + ".json");
  ChildProcess stat({build_program("simgpu-stat").string(), "--socket", simgpu_socket_}, {}, answer, OutputMode::truncate,
                    kWithBench);
  if (stat.wait(10s) != 0) throw std::runtime_error("simgpu-stat failed: " + tail_lines(read_file(answer), kTailLines));
  return parse_device_sample(nlohmann::json::parse(read_file(answer)));
}

void QosRig::save_daemon_status(const std::string& run_name, const std::string& socket) const {
  const fs::path answer = out_ / "logs" / (run_name + "-gpuqosd-status.json");
  ChildProcess status({build_program("gpuqos").string(), "status", "--json", "--socket", socket}, {}, answer,
                      OutputMode::truncate, kWithBench);
  if (status.wait(10s) != 0) std::cerr << "gpuqos-bench: " << run_name << ": no gpuqosd status (" << answer.string() << ")\n";
}

// What this run's gpuqosd learned (it saves at exit), kept beside its logs: which durations it
// learned online is what explains a cell whose holds differ from another run's.
void QosRig::keep_predictor_store(const std::string& run_name) const {
  if (!predictor_store_) return;
  std::error_code error;
  fs::copy_file(sockets_.path() / "predictor.gqp", out_ / "logs" / (run_name + "-predictor.gqp"),
                fs::copy_options::overwrite_existing, error);
  if (error) std::cerr << "gpuqos-bench: " << run_name << ": predictor store not kept: " << error.message() << "\n";
}

bool QosRig::start_gpuqosd(const std::string& run_name, const fs::path& config, const std::string& socket,
                           std::optional<ChildProcess>& daemon, Status& status) {
  const fs::path log = log_file(run_name + "-gpuqosd");
  std::vector<std::string> argv{build_program("gpuqosd").string(), "--config", config.string(), "--socket", socket};
  if (!daemon_log_level_.empty()) argv.insert(argv.end(), {"--log-level", daemon_log_level_});
  if (predictor_store_) {
    const fs::path copy = sockets_.path() / "predictor.gqp";  // this run's: what it learns dies with it
    std::error_code error;
    fs::copy_file(*predictor_store_, copy, fs::copy_options::overwrite_existing, error);
    if (error) {
      status = {false, "cannot copy the predictor store " + predictor_store_->string() + ": " + error.message(), "", ""};
      return false;
    }
    argv.insert(argv.end(), {"--profile-store", copy.string()});
  }
  daemon.emplace(argv, std::map<std::string, std::string>{}, log, OutputMode::truncate, kWithBench);
  switch (testing::wait_until_serving(*daemon, socket, kDaemonStartTimeout)) {
    case testing::DaemonStartup::serving: return true;
    case testing::DaemonStartup::exited: status = failed("gpuqosd exited at startup", log); break;
    case testing::DaemonStartup::timed_out: status = failed("gpuqosd did not come up", log); break;
  }
  daemon.reset();
  return false;
}

Status QosRig::train_predictor(const std::string& run_name, const std::vector<JobSpec>& jobs, double duration_s,
                               const fs::path& store) {
  const fs::path profiles = out_ / "profiles" / run_name;
  std::error_code ignored;
  fs::remove_all(profiles, ignored);  // an earlier run's profiles must not train this one
  fs::create_directories(profiles);
  const RunOutcome outcome = run_jobs(run_name, jobs, std::nullopt, profiles, duration_s);
  if (!outcome.status.ok) return outcome.status;
  std::vector<std::string> argv{build_program("gpuqos").string(), "train", "--out", store.string(), "--sms",
                                device_sms(), "--from"};
  for (const JobSpec& job : jobs) argv.push_back((profiles / (run_name + "-" + job.name + ".jsonl")).string());
  const fs::path log = log_file(run_name + "-train");
  ChildProcess train(argv, {}, log, OutputMode::truncate, kWithBench);
  if (train.wait(300s) != 0) return failed("gpuqos train failed", log);
  return {};
}

RunOutcome QosRig::run(const std::string& run_name, const std::vector<JobSpec>& jobs,
                       const std::optional<fs::path>& gpuqosd_config, double duration_s) {
  return run_jobs(run_name, jobs, gpuqosd_config, std::nullopt, duration_s);
}

RunOutcome QosRig::run_jobs(const std::string& run_name, const std::vector<JobSpec>& jobs,
                            const std::optional<fs::path>& gpuqosd_config, const std::optional<fs::path>& profile_dir,
                            double duration_s) {
  RunOutcome outcome;
  if (simgpud_ && !simgpud_->running()) {  // a crashed device must not fail every later run too
    std::cerr << "gpuqos-bench: simgpud (" << compute_mode_ << ") had exited; restarting it (see "
              << log_file("simgpud-" + compute_mode_).string() << ")\n";
    launch_device(OutputMode::append);
  }
  const bool managed = gpuqosd_config.has_value();
  const std::string gpuqosd_socket = (sockets_.path() / "gpuqosd.sock").string();
  std::optional<ChildProcess> daemon;
  if (managed && !start_gpuqosd(run_name, *gpuqosd_config, gpuqosd_socket, daemon, outcome.status)) return outcome;

  std::vector<std::unique_ptr<ChildProcess>> children;  // ChildProcess cannot move
  std::vector<fs::path> results, logs;
  const Clock::time_point begin = Clock::now();
  for (const JobSpec& job : jobs) {
    results.push_back(out_ / "runs" / (run_name + "-" + job.name + ".json"));
    logs.push_back(log_file(run_name + "-" + job.name));
    std::vector<std::string> argv{build_program("gpuqos-replay").string()};
    argv.insert(argv.end(), job.replay_args.begin(), job.replay_args.end());
    argv.insert(argv.end(), {"--duration", number(duration_s), "--out", results.back().string()});
    auto env = testing::simgpu_client_env(simgpu_socket_);
    env["SIMGPU_DEVICE_DATA"] = keep_device_data_ ? "keep" : "none";
    if (managed) {
      argv = testing::under_gpuqos_run(std::move(argv), job.priority, gpuqosd_socket, job.name);
      env["GPUQOS_LOG"] = "info";
    } else if (profile_dir) {  // no gpuqosd at that socket: the shim only profiles
      argv = testing::under_gpuqos_run(std::move(argv), job.priority, gpuqosd_socket, job.name);
      env["GPUQOS_PROFILE"] = (*profile_dir / (run_name + "-" + job.name + ".jsonl")).string();
    }
    std::error_code ignored;
    fs::remove(results.back(), ignored);  // a result left by an earlier run must not pass for this one's
    children.push_back(std::make_unique<ChildProcess>(argv, env, logs.back(), OutputMode::truncate, kWithBench));
  }

  // The window: after every replayer has set up (module load, buffers), before the first stops.
  try {
    sleep_until(after(begin, std::min(1.0, 0.15 * duration_s)));
    outcome.window_begin = sample_device(run_name + "-stat-begin");
    sleep_until(after(begin, 0.95 * duration_s));
    outcome.window_end = sample_device(run_name + "-stat-end");
  } catch (const std::exception& e) {
    outcome.status = {false, e.what(), "", ""};
  }
  if (managed) save_daemon_status(run_name, gpuqosd_socket);

  const Clock::time_point deadline = after(begin, duration_s) + kRunGrace;
  std::vector<std::optional<int>> codes;
  for (auto& child : children) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    codes.push_back(child->wait(std::max(left, std::chrono::milliseconds(1))));
  }
  if (daemon) {
    if (!daemon->running() && outcome.status.ok) outcome.status = failed("gpuqosd died during the run", log_file(run_name + "-gpuqosd"));
    daemon->stop();
    keep_predictor_store(run_name);
    if (const std::size_t stalls = testing::occurrences(read_file(log_file(run_name + "-gpuqosd")), testing::kDaemonStalledMark)) {
      add_caveat(outcome.status, "gpuqosd's loop stalled past the heartbeat limit " + std::to_string(stalls) + " time(s)");
    }
  }

  for (std::size_t i = 0; i < jobs.size(); ++i) {
    JobOutcome job{jobs[i].name, nullptr};
    Status status;
    if (codes[i] != 0) {
      status = failed(jobs[i].name + (codes[i] ? " exited with " + std::to_string(*codes[i]) : " did not finish in time"),
                      logs[i]);
    } else if (managed && !contains(read_file(logs[i]), testing::kShimRegisteredMark)) {
      status = failed(jobs[i].name + " ran unmanaged (no gpuqosd registration)", logs[i]);
    } else {
      job.result = nlohmann::json::parse(read_file(results[i]), nullptr, false);
      if (job.result.is_discarded()) status = failed(jobs[i].name + " wrote no readable result", logs[i]);
      const std::size_t fell_open = managed ? testing::occurrences(read_file(logs[i]), testing::kShimUnmanagedMark) : 0;
      if (fell_open > 0) add_caveat(outcome.status, jobs[i].name + " ran unmanaged " + std::to_string(fell_open) + " time(s)");
    }
    if (!status.ok) job.result = nullptr;
    if (!status.ok && outcome.status.ok) outcome.status = status;
    outcome.jobs.push_back(std::move(job));
  }
  return outcome;
}

}  // namespace gpuqos::qos

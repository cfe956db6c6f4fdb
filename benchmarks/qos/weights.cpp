// gpuqos-bench weights (weights.h).
#include "weights.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "bench_runs.h"
#include "cell_math.h"
#include "qos_rig.h"

namespace gpuqos::qos {
namespace {

namespace fs = std::filesystem;

constexpr const char* kJobA = "resnet-a";
constexpr const char* kJobB = "resnet-b";

const Workload& resnet() {
  for (const Workload& w : be_workloads()) {
    if (w.key == "resnet") return w;
  }
  throw std::logic_error("no resnet workload");
}

class WeightsBench {
 public:
  WeightsBench(QosRig& rig, const WeightsOptions& o, const std::atomic<bool>& interrupted)
      : rig_(rig), o_(o), runs_(rig, interrupted, o.device_modes.size() * 6) {}

  // Interrupted (SIGINT, SIGTERM, SIGHUP): the runs made until then. A mode that cannot go on (its
  // simgpud does not come up) has its runs not made yet recorded as failed, and the next mode runs.
  WeightsResults run() {
    for (const std::string& mode : o_.device_modes) {
      try {
        run_mode(mode, results_.runs);
      } catch (const Interrupted&) {
        break;
      } catch (const std::exception& e) {
        fail_rest_of_mode(mode, status_of(e), results_.runs);
      }
    }
    return results_;
  }

 private:
  // The mode's four runs, in the order run_mode makes them.
  std::vector<WeightsRun> mode_runs(const std::string& mode, double target) const {
    std::vector<WeightsRun> runs;
    for (const bool with_lc : {true, false}) {
      for (const double weight_b : {1.0, o_.weight}) {
        runs.push_back({mode, with_lc, weight_b, with_lc ? target : 0, std::nullopt, {}, {}, 0, {}});
      }
    }
    return runs;
  }

  void fail_rest_of_mode(const std::string& mode, Status error, std::vector<WeightsRun>& runs) {
    error.reason = "device mode " + mode + " stopped: " + error.reason;
    std::cerr << "\ngpuqos-bench: " << error.reason << (error.log_tail.empty() ? "" : "\n" + error.log_tail) << "\n";
    const auto trained = [&](const Training& t) { return t.device_mode == mode; };
    if (std::none_of(results_.trainings.begin(), results_.trainings.end(), trained)) {
      results_.trainings.push_back({mode, error});
    }
    std::size_t made = 0;
    for (const WeightsRun& r : runs) made += r.device_mode == mode ? 1 : 0;
    std::vector<WeightsRun> planned = mode_runs(mode, 0);
    for (std::size_t i = made; i < planned.size(); ++i) {
      runs_.skip();
      planned[i].status = error;
      runs.push_back(std::move(planned[i]));
    }
  }

  void run_mode(const std::string& mode, std::vector<WeightsRun>& runs) {
    rig_.start_device(mode);
    LcStats closed;
    const Status calibrated = runs_.measure("calibrate-" + mode, {lc_job(std::nullopt)}, std::nullopt, o_.calibration_s,
                                            [&](const RunOutcome& out) { closed = lc_stats(out.jobs.at(0).result); });
    // The predictor store every run of the mode starts from, as in the grid: the LC and one copy
    // together, profiled.
    const Status trained = runs_.train("weights-train-" + mode, {lc_job(std::nullopt), be_job(kJobA)}, o_.duration_s / 2,
                                       rig_.out_dir() / "profiles" / ("weights-predictor-" + mode + ".gqp"));
    results_.trainings.push_back({mode, trained});
    const bool lc = calibrated.ok && closed.mean_ms > 0;
    const double rate = lc ? arrival_rate_per_s(o_.lc_load, closed.mean_ms) : 0;
    const double target = lc ? target_ms(o_.target_factor, closed.p50_ms) : 0;
    for (WeightsRun& r : mode_runs(mode, target)) {
      if (r.with_lc && !lc) {
        runs_.skip();
        r.status = {false, "no closed-loop calibration in this mode", calibrated.log_path, calibrated.log_tail};
        runs.push_back(std::move(r));
        continue;
      }
      runs.push_back(pair_run(std::move(r), rate));
    }
  }

  WeightsRun pair_run(WeightsRun r, double rate) {
    char name[128];
    std::snprintf(name, sizeof name, "weights-%s-%s-1-%g", r.device_mode.c_str(), r.with_lc ? "lc" : "nolc", r.weight_b);
    std::vector<JobSpec> jobs;
    if (r.with_lc) jobs.push_back(lc_job(rate));
    jobs.push_back(be_job(kJobA));
    jobs.push_back(be_job(kJobB));
    const fs::path config = rig_.out_dir() / "configs" / (std::string(name) + ".toml");
    fs::create_directories(config.parent_path());
    std::ofstream(config) << gpuqosd_config_toml(name, "baymax", r.device_mode,
                                                 r.with_lc ? std::optional(r.target_ms) : std::nullopt,
                                                 {{kJobA, 1.0}, {kJobB, r.weight_b}}, o_.time_scale, o_.baymax,
                                                 o_.baymax_source);
    r.status = runs_.measure(name, jobs, config, o_.duration_s, [&](const RunOutcome& out) {
      const std::size_t first_be = r.with_lc ? 1 : 0;
      if (r.with_lc) r.lc = lc_stats(out.jobs.at(0).result);
      r.a = be_run(kJobA, out.jobs.at(first_be).result);
      r.b = be_run(kJobB, out.jobs.at(first_be + 1).result);
      r.gpu_busy_fraction = compute_busy_fraction(out.window_begin, out.window_end);
    });
    for (const Training& t : results_.trainings) {
      if (r.status.ok && t.device_mode == r.device_mode && !t.status.ok) {
        add_caveat(r.status, "gpuqosd started from an untrained predictor (weights-train-" + r.device_mode + " failed)");
      }
    }
    return r;
  }

  JobSpec lc_job(std::optional<double> rate_per_s) const {
    return lc_job_spec(rig_, o_.time_scale, o_.seed, rate_per_s, false);
  }
  JobSpec be_job(const std::string& job) const { return be_job_spec(rig_, resnet(), job, o_.time_scale, false); }

  QosRig& rig_;
  const WeightsOptions& o_;
  BenchRuns runs_;
  WeightsResults results_;
};

}  // namespace

WeightsResults run_weights(QosRig& rig, const WeightsOptions& options, const std::atomic<bool>& interrupted) {
  return WeightsBench(rig, options, interrupted).run();
}

}  // namespace gpuqos::qos

// gpuqos-bench weights (weights.h).
#include "weights.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "cell_math.h"
#include "qos_rig.h"

namespace gpuqos::qos {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kJobA = "resnet-a";
constexpr const char* kJobB = "resnet-b";

std::string number(double value) {
  std::ostringstream s;
  s.precision(10);
  s << value;
  return s.str();
}

const Workload& resnet() {
  for (const Workload& w : be_workloads()) {
    if (w.key == "resnet") return w;
  }
  throw std::logic_error("no resnet workload");
}

class WeightsBench {
 public:
  WeightsBench(QosRig& rig, const WeightsOptions& o, const std::atomic<bool>& interrupted)
      : rig_(rig), o_(o), interrupted_(interrupted), total_(o.device_modes.size() * 6) {}

  std::vector<WeightsRun> run() {
    std::vector<WeightsRun> runs;
    for (const std::string& mode : o_.device_modes) {
      rig_.start_device(mode);
      LcStats closed;
      const Status calibrated = measure("calibrate-" + mode, {lc_job(std::nullopt)}, std::nullopt, o_.calibration_s,
                                        [&](const RunOutcome& out) { closed = lc_stats(out.jobs.at(0).result); });
      train(mode);
      const bool lc = calibrated.ok && closed.mean_ms > 0;
      const double rate = lc ? arrival_rate_per_s(o_.lc_load, closed.mean_ms) : 0;
      const double target = lc ? target_ms(o_.target_factor, closed.p50_ms) : 0;
      for (const bool with_lc : {true, false}) {
        for (const double weight_b : {1.0, o_.weight}) {
          WeightsRun r{mode, with_lc, weight_b, with_lc ? target : 0, std::nullopt, {}, {}, 0, {}};
          if (with_lc && !lc) {
            ++done_;
            r.status = {false, "no closed-loop calibration in this mode", calibrated.log_path, calibrated.log_tail};
            runs.push_back(std::move(r));
            continue;
          }
          runs.push_back(pair_run(std::move(r), rate));
        }
      }
    }
    return runs;
  }

 private:
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
    r.status = measure(name, jobs, config, o_.duration_s, [&](const RunOutcome& out) {
      const std::size_t first_be = r.with_lc ? 1 : 0;
      if (r.with_lc) r.lc = lc_stats(out.jobs.at(0).result);
      r.a = be_run(kJobA, out.jobs.at(first_be).result);
      r.b = be_run(kJobB, out.jobs.at(first_be + 1).result);
      r.gpu_busy_fraction = compute_busy_fraction(out.window_begin, out.window_end);
    });
    return r;
  }

  // The predictor store every run of the mode starts from, as in the grid: the LC and one copy
  // together, profiled.
  void train(const std::string& mode) {
    if (interrupted_) throw std::runtime_error("interrupted");
    ++done_;
    const std::string name = "weights-train-" + mode;
    std::cerr << "gpuqos-bench: [" << done_ << "/" << total_ << "] " << name << " ..." << std::flush;
    const fs::path store = rig_.out_dir() / "profiles" / ("weights-predictor-" + mode + ".gqp");
    const Status status = rig_.train_predictor(name, {lc_job(std::nullopt), be_job(kJobA)}, o_.duration_s / 2, store);
    rig_.use_predictor_store(status.ok ? std::optional<fs::path>(store) : std::nullopt);
    std::cerr << (status.ok ? " ok\n" : " FAILED: " + status.reason + " (untrained predictor)\n");
  }

  template <typename Use>
  Status measure(const std::string& name, const std::vector<JobSpec>& jobs, const std::optional<fs::path>& config,
                 double duration_s, Use use) {
    if (interrupted_) throw std::runtime_error("interrupted");
    ++done_;
    std::cerr << "gpuqos-bench: [" << done_ << "/" << total_ << "] " << name << " ..." << std::flush;
    RunOutcome outcome = rig_.run(name, jobs, config, duration_s);
    if (outcome.status.ok) {
      try {
        use(outcome);
      } catch (const std::exception& e) {
        outcome.status = {false, std::string("unreadable result: ") + e.what(), "", ""};
      }
    }
    std::cerr << (outcome.status.ok ? " ok\n" : " FAILED: " + outcome.status.reason + " (" + outcome.status.log_path + ")\n");
    return outcome.status;
  }

  JobSpec lc_job(std::optional<double> rate_per_s) const {
    std::vector<std::string> args{"--workload", rig_.workload_file(lc_workload()).string(), "--mode", "lc", "--gaps", "keep",
                                  "--pace-scale", number(o_.time_scale), "--seed", std::to_string(o_.seed)};
    if (rate_per_s) {
      args.insert(args.end(), {"--rate", number(*rate_per_s)});
    } else {
      args.push_back("--closed-loop");
    }
    return {lc_workload().job, "high", args};
  }

  JobSpec be_job(const std::string& job) const {
    return {job, "low", {"--workload", rig_.workload_file(resnet()).string(), "--mode", "be", "--pace-scale", number(o_.time_scale)}};
  }

  QosRig& rig_;
  const WeightsOptions& o_;
  const std::atomic<bool>& interrupted_;
  std::size_t total_, done_ = 0;
};

}  // namespace

std::vector<WeightsRun> run_weights(QosRig& rig, const WeightsOptions& options, const std::atomic<bool>& interrupted) {
  std::vector<WeightsRun> runs = WeightsBench(rig, options, interrupted).run();
  const fs::path out(options.out_dir);
  const std::string md = weights_markdown(runs, options.weight);
  std::ofstream(out / "weights.json") << weights_json(runs, options).dump(2) << "\n";
  std::ofstream(out / "weights.md") << md;
  std::cout << "\n" << md << std::flush;
  return runs;
}

}  // namespace gpuqos::qos

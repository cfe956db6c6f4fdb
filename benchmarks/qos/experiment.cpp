// run_experiment: the standalone references and the cells, one device mode at a time (experiment.h).
#include "experiment.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "bench_runs.h"
#include "cell_math.h"
#include "report.h"

namespace gpuqos::qos {
namespace {

namespace fs = std::filesystem;

class Experiment {
 public:
  Experiment(QosRig& rig, const Options& o, const std::atomic<bool>& interrupted)
      : rig_(rig),
        o_(o),
        cells_(plan_cells(o)),
        be_used_(be_workloads_used(o)),
        shared_mixes_(shared_mixes(o)),
        runs_(rig, interrupted,
              o.device_modes.size() * (2 + o.loads.size() + be_used_.size() + shared_mixes_.size()) + cells_.size()) {}

  // Interrupted (SIGINT, SIGTERM, SIGHUP): what was measured up to then. A mode that cannot go on
  // (its simgpud does not come up) has its runs not yet made recorded as failed with the reason,
  // and the next mode runs: one error must not lose every result.
  Results run() {
    for (const std::string& mode : o_.device_modes) {
      try {
        run_mode(mode);
      } catch (const Interrupted&) {
        results_.interrupted = true;
        break;
      } catch (const std::exception& e) {
        fail_rest_of_mode(mode, status_of(e));
      }
    }
    return results_;
  }

 private:
  void run_mode(const std::string& mode) {
    rig_.start_device(mode);
    const Calibration& calibration = results_.calibrations.emplace_back(calibrate(mode));
    for (double load : o_.loads) results_.standalone_lc.push_back(standalone_lc(mode, load, calibration));
    for (const Workload& be : be_used_) results_.standalone_be.push_back(standalone_be(mode, be));
    for (const std::string& mix : shared_mixes_) results_.standalone_mixes.push_back(standalone_mix(mode, mix));
    train_predictor(mode);
    for (const Cell& cell : cells_) {
      if (cell.device_mode == mode) results_.cells.push_back(run_cell(cell));
    }
  }

  // Records every run of `mode` not recorded yet as failed with `error`, so the report shows the
  // whole grid and the exit code counts them.
  void fail_rest_of_mode(const std::string& mode, Status error) {
    error.reason = "device mode " + mode + " stopped: " + error.reason;
    std::cerr << "\ngpuqos-bench: " << error.reason << (error.log_tail.empty() ? "" : "\n" + error.log_tail) << "\n";
    const auto missing = [&](const auto& records, const auto& same) {
      return std::none_of(records.begin(), records.end(),
                          [&](const auto& r) { return r.device_mode == mode && same(r); });
    };
    const auto any = [](const auto&) { return true; };
    if (missing(results_.calibrations, any)) {
      runs_.skip();
      results_.calibrations.push_back({mode, {}, error});
    }
    // A failed record of the mode for each value of `field` it has none of.
    const auto fail_each = [&]<typename Record, typename Field>(std::vector<Record>& records, Field Record::*field,
                                                              const auto& values) {
      for (const auto& value : values) {
        if (!missing(records, [&](const Record& r) { return r.*field == value; })) continue;
        runs_.skip();
        Record record;
        record.device_mode = mode;
        record.*field = value;
        record.status = error;
        records.push_back(record);
      }
    };
    fail_each(results_.standalone_lc, &StandaloneLc::lc_load, o_.loads);
    std::vector<std::string> be_jobs;
    for (const Workload& w : be_used_) be_jobs.push_back(w.job);
    fail_each(results_.standalone_be, &StandaloneBe::job, be_jobs);
    fail_each(results_.standalone_mixes, &StandaloneMix::be_mix, shared_mixes_);
    if (missing(results_.trainings, any)) {
      runs_.skip();
      results_.trainings.push_back({mode, error});
    }
    for (const Cell& cell : cells_) {
      const auto recorded = [&](const CellResult& c) { return same_cell(c.cell, cell); };
      if (cell.device_mode != mode || std::any_of(results_.cells.begin(), results_.cells.end(), recorded)) continue;
      runs_.skip();
      results_.cells.push_back(failed_cell(cell, lc_reference_or_none(cell), error));
    }
  }

  static bool same_cell(const Cell& a, const Cell& b) {
    return a.policy == b.policy && a.device_mode == b.device_mode && a.lc_load == b.lc_load && a.be_mix == b.be_mix;
  }

  // The LC replayer: Poisson arrivals at `rate_per_s`, or closed loop without one. With
  // --daemon-target end-to-end it marks its queries (gpuqos/query.h) as a server that queues
  // requests would: gpuqosd then measures and protects the latency the cells are judged by.
  JobSpec lc_job(std::optional<double> rate_per_s) const {
    return lc_job_spec(rig_, o_.time_scale, o_.seed, rate_per_s, end_to_end());
  }

  JobSpec be_job(const Workload& w) const { return be_job_spec(rig_, w, w.job, o_.time_scale, o_.be_thread_per_stream); }

  template <typename Use>
  Status measure(const std::string& name, const std::vector<JobSpec>& jobs, const std::optional<fs::path>& config,
                 double duration_s, Use use) {
    return runs_.measure(name, jobs, config, duration_s, use);
  }

  Calibration calibrate(const std::string& mode) {
    Calibration c{mode, {}, {}};
    c.status = measure("calibrate-" + mode, {lc_job(std::nullopt)}, std::nullopt, o_.calibration_s,
                       [&](const RunOutcome& out) { c.lc = lc_stats(out.jobs.at(0).result); });
    return c;
  }

  // Profiles the LC (closed loop) and every BE job together with CUPTI and trains the predictor
  // store the mode's cells start from, as a user would before deploying; without it the cells run
  // on an untrained predictor (baymax then holds best-effort work on wild upper estimates).
  void train_predictor(const std::string& mode) {
    std::vector<JobSpec> jobs{lc_job(std::nullopt)};
    for (const Workload& w : be_used_) jobs.push_back(be_job(w));
    const Status status =
        runs_.train("train-" + mode, jobs, o_.duration_s, rig_.out_dir() / "profiles" / ("predictor-" + mode + ".gqp"));
    results_.trainings.push_back({mode, status});
  }

  StandaloneLc standalone_lc(const std::string& mode, double load, const Calibration& calibration) {
    StandaloneLc s;
    s.device_mode = mode;
    s.lc_load = load;
    if (!calibration.status.ok || calibration.lc.mean_ms <= 0) {
      s.status = {false, "no closed-loop calibration in this mode", calibration.status.log_path, calibration.status.log_tail};
      return s;
    }
    s.rate_per_s = arrival_rate_per_s(load, calibration.lc.mean_ms);
    s.status = measure("alone-" + mode + "-lc-" + fixed(load, 2), {lc_job(s.rate_per_s)}, std::nullopt,
                       lc_run_duration_s(o_.duration_s, s.rate_per_s, o_.min_queries),
                       [&](const RunOutcome& out) {
                         s.lc = lc_stats(out.jobs.at(0).result);
                         s.lc_load_measured = lc_load_of(s.rate_per_s, s.lc.mean_ms);
                         s.gpu_busy_fraction = compute_busy_fraction(out.window_begin, out.window_end);
                         s.target_ms = target_ms(o_.target_factor, s.lc.p99_ms);
                       });
    return s;
  }

  StandaloneBe standalone_be(const std::string& mode, const Workload& w) {
    StandaloneBe s;
    s.device_mode = mode;
    s.job = w.job;
    s.status = measure("alone-" + mode + "-" + w.key, {be_job(w)}, std::nullopt, o_.duration_s, [&](const RunOutcome& out) {
      s.run = be_run(w.job, out.jobs.at(0).result);
      s.gpu_busy_fraction = compute_busy_fraction(out.window_begin, out.window_end);
    });
    return s;
  }

  StandaloneMix standalone_mix(const std::string& mode, const std::string& mix) {
    StandaloneMix s;
    s.device_mode = mode;
    s.be_mix = mix;
    const std::vector<Workload> jobs = mix_workloads(mix);
    std::vector<JobSpec> specs;
    for (const Workload& w : jobs) specs.push_back(be_job(w));
    s.status = measure("alone-" + mode + "-" + mix, specs, std::nullopt, o_.duration_s, [&](const RunOutcome& out) {
      for (std::size_t i = 0; i < jobs.size(); ++i) s.runs.push_back(be_run(jobs[i].job, out.jobs.at(i).result));
      s.gpu_busy_fraction = compute_busy_fraction(out.window_begin, out.window_end);
    });
    return s;
  }

  bool end_to_end() const { return o_.daemon_target == "end-to-end"; }

  // The target gpuqosd enforces. end-to-end: the cell's own. service: the same factor on the
  // query's service time (closed loop, alone; its median, as a 1.5-s calibration's p99 is one
  // outlier away from 1.6x it): gpuqosd then sees a query from its first op to the sync that drains
  // it, and the replayer's own queue of arrivals is invisible to it.
  double daemon_target_ms(const StandaloneLc& reference) const {
    if (end_to_end()) return reference.target_ms;
    for (const Calibration& c : results_.calibrations) {
      if (c.device_mode == reference.device_mode && c.status.ok) return target_ms(o_.target_factor, c.lc.p50_ms);
    }
    throw std::runtime_error("no closed-loop calibration in mode " + reference.device_mode);
  }

  const StandaloneLc* lc_reference(const Cell& cell) const {
    for (const StandaloneLc& s : results_.standalone_lc) {
      if (s.device_mode == cell.device_mode && s.lc_load == cell.lc_load) return &s;
    }
    return nullptr;
  }

  // The cell's standalone LC run, or a failed one when it was not made: its zeros are no target.
  StandaloneLc lc_reference_or_none(const Cell& cell) const {
    if (const StandaloneLc* reference = lc_reference(cell)) return *reference;
    StandaloneLc none;
    none.status = {false, "not run", "", ""};
    return none;
  }

  CellResult run_cell(const Cell& cell) {
    const StandaloneLc* reference = lc_reference(cell);
    if (reference == nullptr || !reference->status.ok) {
      runs_.skip();
      const std::string why = reference ? ": it failed: " + reference->status.reason : "";
      return failed_cell(cell, lc_reference_or_none(cell),
                         {false, "no standalone LC reference at this load and mode" + why, "", ""});
    }
    const std::string name = cell_name(cell);
    std::vector<JobSpec> jobs{lc_job(reference->rate_per_s)};
    const std::vector<Workload> mix = mix_workloads(cell.be_mix);
    for (const Workload& w : mix) jobs.push_back(be_job(w));
    std::optional<fs::path> config;
    if (cell.policy != "none") {
      config = rig_.out_dir() / "configs" / (name + ".toml");
      std::ofstream(*config) << gpuqosd_config_toml(cell, daemon_target_ms(*reference), o_.time_scale, o_.baymax,
                                                    o_.baymax_source, lc_margin_ms(o_));
    }
    CellMeasurement m;
    const double duration_s = lc_run_duration_s(o_.duration_s, reference->rate_per_s, o_.min_queries);
    const Status status = measure(name, jobs, config, duration_s, [&](const RunOutcome& out) {
      m.lc = lc_stats(out.jobs.at(0).result);
      for (std::size_t i = 0; i < mix.size(); ++i) m.be.push_back(be_run(mix[i].job, out.jobs.at(i + 1).result));
      m.gpu_busy_fraction = compute_busy_fraction(out.window_begin, out.window_end);
    });
    if (!status.ok) return failed_cell(cell, *reference, status);
    CellResult result = evaluate_cell(cell, m, *reference, results_.standalone_be, results_.standalone_mixes);
    const std::string missing_references = result.status.caveat;
    result.status = status;  // ok, with its caveat if any
    add_caveat(result.status, missing_references);
    add_caveat(result.status, untrained_caveat(cell, results_.trainings));
    return result;
  }

  QosRig& rig_;
  const Options& o_;
  std::vector<Cell> cells_;
  std::vector<Workload> be_used_;
  std::vector<std::string> shared_mixes_;
  BenchRuns runs_;
  Results results_;
};

}  // namespace

Results run_experiment(QosRig& rig, const Options& options, const std::atomic<bool>& interrupted) {
  return Experiment(rig, options, interrupted).run();
}

}  // namespace gpuqos::qos

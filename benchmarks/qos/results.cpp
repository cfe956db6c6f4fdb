// A cell's figures against the standalone references (results.h).
#include "results.h"

#include <algorithm>

#include "cell_math.h"

namespace gpuqos::qos {

void add_caveat(Status& status, const std::string& text) {
  if (text.empty()) return;
  status.caveat += (status.caveat.empty() ? "" : "; ") + text;
}

std::string untrained_caveat(const Cell& cell, const std::vector<Training>& trainings) {
  if (cell.policy == "none") return "";
  for (const Training& t : trainings) {
    if (t.device_mode == cell.device_mode && !t.status.ok) {
      return "gpuqosd started from an untrained predictor (train-" + cell.device_mode + " failed)";
    }
  }
  return "";
}

CellResult evaluate_cell(const Cell& cell, const CellMeasurement& measured, const StandaloneLc& lc_reference,
                         const std::vector<StandaloneBe>& be_references,
                         const std::vector<StandaloneMix>& mix_references) {
  CellResult r = failed_cell(cell, lc_reference, Status{});
  r.lc = measured.lc;
  r.violation_fraction = violation_fraction(measured.lc.latency_ms, r.target_ms);
  if (!measured.lc.latency_ms.empty()) r.lc_p99_ci95 = quantile_interval(measured.lc.latency_ms, 0.99, 0.95);
  r.gpu_busy_fraction = measured.gpu_busy_fraction;
  const auto mix_alone = std::find_if(mix_references.begin(), mix_references.end(), [&](const StandaloneMix& s) {
    return s.be_mix == cell.be_mix && s.device_mode == cell.device_mode && s.status.ok;
  });
  std::vector<double> fractions, together;
  bool every_reference = true;
  for (const BeRun& run : measured.be) {
    const auto ref = std::find_if(be_references.begin(), be_references.end(), [&](const StandaloneBe& s) {
      return s.job == run.job && s.device_mode == cell.device_mode && s.status.ok;
    });
    const double standalone = ref == be_references.end() ? 0.0 : ref->run.iterations_per_s;
    double beside_others = measured.be.size() == 1 ? standalone : 0.0;
    if (measured.be.size() > 1 && mix_alone != mix_references.end()) {
      const auto mine = std::find_if(mix_alone->runs.begin(), mix_alone->runs.end(),
                                     [&](const BeRun& alone) { return alone.job == run.job; });
      if (mine != mix_alone->runs.end()) beside_others = mine->iterations_per_s;
    }
    const double fraction = fraction_of_standalone(run.iterations_per_s, standalone);
    const double of_mix = fraction_of_standalone(run.iterations_per_s, beside_others);
    every_reference = every_reference && beside_others > 0;
    r.be.push_back({run, standalone, fraction, beside_others, of_mix});
    fractions.push_back(fraction);
    together.push_back(of_mix);
  }
  r.be_fraction_of_ideal = be_fraction_of_ideal(fractions, r.lc_gpu_busy_standalone);
  if (every_reference) r.be_fraction_of_ideal_together = be_fraction_of_ideal(together, r.lc_gpu_busy_standalone);
  return r;
}

CellResult failed_cell(const Cell& cell, const StandaloneLc& lc_reference, Status status) {
  CellResult r;
  r.cell = cell;
  r.rate_per_s = lc_reference.rate_per_s;
  r.target_ms = lc_reference.target_ms;
  r.lc_gpu_busy_standalone = lc_reference.gpu_busy_fraction;
  r.status = std::move(status);
  return r;
}

LcStats lc_stats(const nlohmann::json& result) {
  const nlohmann::json& summary = result.at("summary");
  LcStats s;
  s.queries = summary.at("count").get<std::uint64_t>();
  s.mean_ms = summary.at("mean_ms").get<double>();
  s.p50_ms = summary.at("p50_ms").get<double>();
  s.p99_ms = summary.at("p99_ms").get<double>();
  s.latency_ms = result.at("latency_ms").get<std::vector<double>>();
  // Requests that arrived in the run and were never served count with their wait (a lower bound):
  // the summary's count and percentiles take them too.
  for (double ms : result.value("unserved_ms", std::vector<double>{})) s.latency_ms.push_back(ms);
  s.unserved = summary.value("unserved", std::uint64_t{0});
  return s;
}

BeRun be_run(const std::string& job, const nlohmann::json& result) {
  const nlohmann::json& summary = result.at("summary");
  return {job, summary.at("count").get<std::uint64_t>(), summary.at("iterations_per_s").get<double>()};
}

std::size_t failed_runs(const Results& results) {
  std::size_t failed = 0;
  const auto count = [&failed](const auto& runs) {
    for (const auto& run : runs) failed += run.status.ok ? 0 : 1;
  };
  count(results.calibrations);
  count(results.standalone_lc);
  count(results.standalone_be);
  count(results.standalone_mixes);
  count(results.trainings);
  count(results.cells);
  return failed;
}

}  // namespace gpuqos::qos

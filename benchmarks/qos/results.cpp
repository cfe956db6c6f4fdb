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

namespace {

// The record `matches` picks, one that went first: a failed one only says why there is none.
template <typename Reference, typename Matches>
const Reference* find_reference(const std::vector<Reference>& records, Matches matches) {
  const Reference* found = nullptr;
  for (const Reference& r : records) {
    if (matches(r) && (found == nullptr || (r.status.ok && !found->status.ok))) found = &r;
  }
  return found;
}

// Why a reference gives no throughput to divide by: "" when it does.
template <typename Reference>
std::string unusable(const Reference* reference, const std::string& run, double iterations_per_s) {
  if (reference == nullptr) return run + " was not run";
  if (!reference->status.ok) return run + " failed: " + reference->status.reason;
  if (!(iterations_per_s > 0)) return run + " made no iteration";
  return "";
}

}  // namespace

CellResult evaluate_cell(const Cell& cell, const CellMeasurement& measured, const StandaloneLc& lc_reference,
                         const std::vector<StandaloneBe>& be_references,
                         const std::vector<StandaloneMix>& mix_references) {
  CellResult r = failed_cell(cell, lc_reference, Status{});
  r.lc = measured.lc;
  r.violation_fraction = violation_fraction(measured.lc.latency_ms, r.target_ms);
  if (!measured.lc.latency_ms.empty()) r.lc_p99_ci95 = quantile_interval(measured.lc.latency_ms, 0.99, 0.95);
  r.gpu_busy_fraction = measured.gpu_busy_fraction;
  const bool mixed = measured.be.size() > 1;
  const StandaloneMix* mix = find_reference(mix_references, [&](const StandaloneMix& s) {
    return s.be_mix == cell.be_mix && s.device_mode == cell.device_mode;
  });
  const std::vector<BeRun> no_runs;
  std::vector<double> fractions, together;
  for (const BeRun& run : measured.be) {
    const StandaloneBe* alone = find_reference(be_references, [&](const StandaloneBe& s) {
      return s.job == run.job && s.device_mode == cell.device_mode;
    });
    BeJobResult result{run, {}, {}, {}, {}};
    const double standalone = alone ? alone->run.iterations_per_s : 0.0;
    if (const std::string why = unusable(alone, run.job + " alone", standalone); why.empty()) {
      result.standalone_iterations_per_s = standalone;
      result.fraction_of_standalone = fraction_of_standalone(run.iterations_per_s, standalone);
    } else {
      add_caveat(r.status, "no BE % of standalone or of ideal: " + why);
    }
    // Beside the mix's other jobs, no LC: a one-job mix's is its standalone run.
    std::optional<double> beside_others = result.standalone_iterations_per_s;
    if (mixed) {
      double rate = 0;  // 0: no record of it in the mix alone
      for (const BeRun& a : mix ? mix->runs : no_runs) {
        if (a.job == run.job) rate = a.iterations_per_s;
      }
      const std::string why = unusable(mix, cell.be_mix + " alone together", rate);
      beside_others = why.empty() ? std::optional(rate) : std::nullopt;
      if (!why.empty()) add_caveat(r.status, "no BE % of ideal (mix alone) for " + run.job + ": " + why);
    }
    result.mix_alone_iterations_per_s = beside_others;
    if (beside_others) result.fraction_of_mix_alone = fraction_of_standalone(run.iterations_per_s, *beside_others);
    if (result.fraction_of_standalone) fractions.push_back(*result.fraction_of_standalone);
    if (result.fraction_of_mix_alone) together.push_back(*result.fraction_of_mix_alone);
    r.be.push_back(result);
  }
  // Only when every job has its reference: a mean over some of them is not the mix's figure.
  const std::size_t jobs = measured.be.size();
  if (fractions.size() == jobs) r.be_fraction_of_ideal = be_fraction_of_ideal(fractions, r.lc_gpu_busy_standalone);
  if (together.size() == jobs) r.be_fraction_of_ideal_together = be_fraction_of_ideal(together, r.lc_gpu_busy_standalone);
  if (!measured.be.empty() && !(r.lc_gpu_busy_standalone < 1.0)) {
    add_caveat(r.status, "no BE % of ideal: the LC alone left the GPU no idle time");
  }
  return r;
}

CellResult failed_cell(const Cell& cell, const StandaloneLc& lc_reference, Status status) {
  CellResult r;
  r.cell = cell;
  r.lc_reference = lc_reference.status.ok;
  if (r.lc_reference) {
    r.rate_per_s = lc_reference.rate_per_s;
    r.target_ms = lc_reference.target_ms;
    r.lc_gpu_busy_standalone = lc_reference.gpu_busy_fraction;
  }
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

// qos.json and qos.md from the results (report.h).
#include "report.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "output_dir.h"

namespace gpuqos::qos {

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

namespace {

using nlohmann::json;

std::string percent(double fraction) { return fixed(100.0 * fraction, 0) + " %"; }

// A figure that may have no reference to rest on: null, never 0, when it has none.
json or_null(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }
std::string percent_or_na(const std::optional<double>& fraction) { return fraction ? percent(*fraction) : "n/a"; }

// The LC's p99 over the cell's target; none without a target (its reference gave none).
std::optional<double> p99_over_target(const CellResult& c) {
  if (!(c.target_ms > 0)) return std::nullopt;
  return c.lc.p99_ms / c.target_ms;
}

json status_json(const Status& s) {
  json j = {{"status", s.ok ? "ok" : "failed"}};
  if (!s.ok) j.update({{"reason", s.reason}, {"log", s.log_path}, {"log_tail", s.log_tail}});
  if (s.ok && !s.caveat.empty()) j["caveat"] = s.caveat;
  return j;
}

// A run that went: "ok", or "ok, but " what makes its figures not entirely the policy's.
std::string run_text(const Status& s) { return s.caveat.empty() ? std::string("ok") : "ok, but " + s.caveat; }

// A figure a run measured: null when the run failed, whose figures are not zeros but none.
json measured(const Status& s, json value) { return s.ok ? std::move(value) : json(nullptr); }
std::string measured_text(const Status& s, const std::string& text) { return s.ok ? text : ""; }

json lc_json(const LcStats& lc, const Status& s) {
  return {{"lc_queries", measured(s, lc.queries)}, {"lc_unserved", measured(s, lc.unserved)},
          {"lc_mean_ms", measured(s, lc.mean_ms)},  {"lc_p50_ms", measured(s, lc.p50_ms)},
          {"lc_p99_ms", measured(s, lc.p99_ms)}};
}

// A figure fixed before the run (an arrival rate): null when there is none (0: its calibration failed).
json planned(double value) { return value > 0 ? json(value) : json(nullptr); }

json cell_json(const CellResult& c) {
  // The figures of its standalone LC reference: null when that failed or was not made.
  const Status reference = c.lc_reference ? Status{} : Status{false, "", "", ""};
  json j = {{"policy", c.cell.policy},
            {"device_mode", c.cell.device_mode},
            {"lc_load", c.cell.lc_load},
            {"be_mix", c.cell.be_mix},
            {"rate_per_s", measured(reference, c.rate_per_s)},
            {"target_ms", measured(reference, c.target_ms)},
            {"lc_gpu_busy_fraction_standalone", measured(reference, c.lc_gpu_busy_standalone)}};
  j.update(status_json(c.status));
  if (!c.status.ok) {
    for (const char* key : {"lc_p50_ms", "lc_p99_ms", "lc_p99_ci95_ms", "violation_fraction", "be_fraction_of_ideal",
                            "be_fraction_of_ideal_together", "gpu_busy_fraction"})
      j[key] = nullptr;
    return j;
  }
  j.update(lc_json(c.lc, c.status));
  j["p99_over_target"] = or_null(p99_over_target(c));
  j["lc_p99_ci95_ms"] = json::array({or_null(c.lc_p99_ci95.low), or_null(c.lc_p99_ci95.high)});
  j["violation_fraction"] = c.violation_fraction;
  j["be"] = json::array();
  for (const BeJobResult& be : c.be) {
    j["be"].push_back({{"job", be.run.job},
                       {"iterations", be.run.iterations},
                       {"iterations_per_s", be.run.iterations_per_s},
                       {"standalone_iterations_per_s", or_null(be.standalone_iterations_per_s)},
                       {"fraction_of_standalone", or_null(be.fraction_of_standalone)},
                       {"mix_alone_iterations_per_s", or_null(be.mix_alone_iterations_per_s)},
                       {"fraction_of_mix_alone", or_null(be.fraction_of_mix_alone)}});
  }
  j["be_fraction_of_ideal"] = or_null(c.be_fraction_of_ideal);
  j["be_fraction_of_ideal_together"] = or_null(c.be_fraction_of_ideal_together);
  j["gpu_busy_fraction"] = c.gpu_busy_fraction;
  return j;
}

json standalone_json(const Results& r) {
  json all = json::array();
  for (const Calibration& c : r.calibrations) {
    json j = {{"kind", "lc_calibration"}, {"device_mode", c.device_mode}, {"closed_loop", true}};
    j.update(lc_json(c.lc, c.status));
    j.update(status_json(c.status));
    all.push_back(j);
  }
  for (const StandaloneLc& s : r.standalone_lc) {
    json j = {{"kind", "lc"},
              {"device_mode", s.device_mode},
              {"lc_load", s.lc_load},
              {"rate_per_s", planned(s.rate_per_s)},
              {"lc_load_measured", measured(s.status, s.lc_load_measured)},
              {"lc_gpu_busy_fraction", measured(s.status, s.gpu_busy_fraction)},
              {"target_ms", measured(s.status, s.target_ms)}};
    j.update(lc_json(s.lc, s.status));
    j.update(status_json(s.status));
    all.push_back(j);
  }
  for (const StandaloneBe& s : r.standalone_be) {
    json j = {{"kind", "be"},
              {"device_mode", s.device_mode},
              {"job", s.job},
              {"iterations", measured(s.status, s.run.iterations)},
              {"iterations_per_s", measured(s.status, s.run.iterations_per_s)},
              {"gpu_busy_fraction", measured(s.status, s.gpu_busy_fraction)}};
    j.update(status_json(s.status));
    all.push_back(j);
  }
  for (const StandaloneMix& s : r.standalone_mixes) {
    json jobs = json::array();
    for (const BeRun& run : s.runs) {
      jobs.push_back({{"job", run.job},
                      {"iterations", measured(s.status, run.iterations)},
                      {"iterations_per_s", measured(s.status, run.iterations_per_s)}});
    }
    json j = {{"kind", "be_mix"},
              {"device_mode", s.device_mode},
              {"be_mix", s.be_mix},
              {"be", jobs},
              {"gpu_busy_fraction", measured(s.status, s.gpu_busy_fraction)}};
    j.update(status_json(s.status));
    all.push_back(j);
  }
  return all;
}

// One table row; an empty cell shows as "| |".
std::string row_of(const std::vector<std::string>& cells) {
  std::string row = "|";
  for (const std::string& cell : cells) row += cell.empty() ? " |" : " " + cell + " |";
  return row + "\n";
}

std::string standalone_table(const Results& r) {
  std::string md =
      "| device mode | run | lc_load | rate (/s) | LC p50 (ms) | LC p99 (ms) | LC mean (ms) | lc_load measured | "
      "LC GPU busy | target (ms) | BE it/s | run |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  const auto status = [](const Status& s) { return s.ok ? run_text(s) : "failed: " + s.reason; };
  // A failed run's figures are blank: it measured nothing, not zeros.
  for (const Calibration& c : r.calibrations) {
    const Status& s = c.status;
    md += row_of({c.device_mode, "LC closed loop", "", "", measured_text(s, fixed(c.lc.p50_ms, 2)),
                  measured_text(s, fixed(c.lc.p99_ms, 2)), measured_text(s, fixed(c.lc.mean_ms, 2)), "", "", "", "",
                  status(s)});
  }
  for (const StandaloneLc& l : r.standalone_lc) {
    const Status& s = l.status;
    md += row_of({l.device_mode, "LC alone", fixed(l.lc_load, 2), l.rate_per_s > 0 ? fixed(l.rate_per_s, 1) : "",
                  measured_text(s, fixed(l.lc.p50_ms, 2)), measured_text(s, fixed(l.lc.p99_ms, 2)),
                  measured_text(s, fixed(l.lc.mean_ms, 2)), measured_text(s, fixed(l.lc_load_measured, 2)),
                  measured_text(s, percent(l.gpu_busy_fraction)), measured_text(s, fixed(l.target_ms, 2)), "",
                  status(s)});
  }
  for (const StandaloneBe& b : r.standalone_be) {
    md += row_of({b.device_mode, b.job + " alone", "", "", "", "", "", "", "", "",
                  measured_text(b.status, fixed(b.run.iterations_per_s, 2)), status(b.status)});
  }
  for (const Training& t : r.trainings) {
    md += row_of({t.device_mode, "predictor training", "", "", "", "", "", "", "", "", "", status(t.status)});
  }
  for (const StandaloneMix& m : r.standalone_mixes) {
    std::string rates;
    for (const BeRun& run : m.runs) rates += (rates.empty() ? "" : ", ") + fixed(run.iterations_per_s, 2);
    md += row_of({m.device_mode, m.be_mix + " alone together", "", "", "", "", "", "", "", "",
                  measured_text(m.status, rates), status(m.status)});
  }
  return md;
}

// "41.20–60.10"; an end the queries are too few for is left open ("≥ 41.20").
std::string interval_text(const QuantileInterval& interval) {
  if (interval.low && interval.high) return fixed(*interval.low, 2) + "–" + fixed(*interval.high, 2);
  if (interval.low) return "≥ " + fixed(*interval.low, 2);
  if (interval.high) return "≤ " + fixed(*interval.high, 2);
  return "n/a";
}

std::string cell_row(const CellResult& c) {
  if (!c.status.ok) {  // the target (when its reference gave one) under its own column
    return row_of({c.cell.policy, c.cell.device_mode, fixed(c.cell.lc_load, 2), c.cell.be_mix, "", "", "",
                   c.lc_reference ? fixed(c.target_ms, 2) : "", "", "", "", "", "", "", "", "",
                   "failed: " + c.status.reason});
  }
  const std::string row = "| " + c.cell.policy + " | " + c.cell.device_mode + " | " + fixed(c.cell.lc_load, 2) +
                          " | " + c.cell.be_mix + " | ";
  std::string rates, fractions;
  for (const BeJobResult& be : c.be) {
    const std::string sep = rates.empty() ? "" : ", ";
    rates += sep + fixed(be.run.iterations_per_s, 2);
    fractions += sep + percent_or_na(be.fraction_of_standalone);
  }
  return row + fixed(c.lc.p50_ms, 2) + " | " + fixed(c.lc.p99_ms, 2) + " | " + interval_text(c.lc_p99_ci95) + " | " +
         fixed(c.target_ms, 2) + " | " +
         (p99_over_target(c) ? fixed(*p99_over_target(c), 2) : "n/a") + " | " + percent(c.violation_fraction) + " | " +
         std::to_string(c.lc.queries) + (c.lc.unserved ? " (" + std::to_string(c.lc.unserved) + " unserved)" : "") +
         " | " + rates + " | " + fractions + " | " + percent_or_na(c.be_fraction_of_ideal) + " | " +
         percent_or_na(c.be_fraction_of_ideal_together) + " | " +
         percent(c.gpu_busy_fraction) + " | " + run_text(c.status) + " |\n";
}

json training_json(const std::vector<Training>& trainings) {
  json all = json::array();
  for (const Training& t : trainings) {
    json j = {{"device_mode", t.device_mode}};
    j.update(status_json(t.status));
    all.push_back(j);
  }
  return all;
}

}  // namespace

json results_json(const Results& results, const json& config) {
  json cells = json::array();
  for (const CellResult& c : results.cells) cells.push_back(cell_json(c));
  json out = {{"benchmark", "gpuqos-bench qos"}, {"config", config}, {"standalone", standalone_json(results)},
              {"training", training_json(results.trainings)}, {"cells", cells}};
  if (results.interrupted) out["interrupted"] = true;  // the runs after these were not made
  return out;
}

std::string results_markdown(const Results& results, double time_scale) {
  std::string md = "Standalone references (simgpu time scale " + fixed(time_scale, 1) + "; latencies in scaled ms)\n\n" +
                   standalone_table(results) + "\nCells (BE columns list the mix's jobs in order)\n\n" +
                   "| policy | device mode | lc_load | BE mix | LC p50 (ms) | LC p99 (ms) | p99 95 % CI (ms) | target (ms) | "
                   "p99/target | violations | queries | BE it/s | BE % of standalone | BE % of ideal | "
                   "BE % of ideal (mix alone) | GPU busy | run |\n"
                   "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                   "| ---: | --- |\n";
  for (const CellResult& c : results.cells) md += cell_row(c);
  if (results.interrupted) md += "\nInterrupted: the runs after these were not made.\n";
  return valid_utf8(md);
}

std::string tail_lines(const std::string& text, std::size_t lines) {
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (std::size_t n = 0; n < lines && pos > 0; ++n) {
    const std::size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) return text;
    pos = nl;
  }
  return pos == 0 ? text : text.substr(pos + 1);
}

}  // namespace gpuqos::qos

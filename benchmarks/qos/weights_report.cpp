// gpuqos-bench weights' table and JSON (weights.h). Pure.
#include "output_dir.h"
#include "report.h"
#include "weights.h"

namespace gpuqos::qos {

using nlohmann::json;

std::optional<double> share_ratio(const WeightsRun& run) {
  if (!(run.a.iterations_per_s > 0)) return std::nullopt;
  return run.b.iterations_per_s / run.a.iterations_per_s;
}

std::size_t failed_runs(const WeightsResults& results) {
  std::size_t failed = 0;
  for (const WeightsRun& r : results.runs) failed += r.status.ok ? 0 : 1;
  for (const Training& t : results.trainings) failed += t.status.ok ? 0 : 1;
  return failed;
}

std::string weights_markdown(const WeightsResults& results, double weight) {
  std::string md = "Two ResNet-50 training replays under baymax: resnet-a at weight 1, resnet-b at 1 and at " +
                   fixed(weight, 2) +
                   ". b/a is resnet-b's throughput over resnet-a's: it should follow the weights.\n\n"
                   "The LC's p99 is there to compare between the runs of a pair (a share must not cost it):\n"
                   "it runs from each query's arrival, queueing included, so it is not held to gpuqosd's target,\n"
                   "which runs from the query's first op.\n\n"
                   "| device mode | BERT stream | weights a:b | resnet-a it/s | resnet-b it/s | b/a | GPU busy | LC p99 (ms) | run |\n"
                   "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |\n";
  for (const WeightsRun& r : results.runs) {
    md += "| " + r.device_mode + " | " + (r.with_lc ? "yes" : "no") + " | 1:" + fixed(r.weight_b, 2) + " | ";
    if (!r.status.ok) {
      md += "failed: " + r.status.reason + " | | | | | |\n";
      continue;
    }
    const std::optional<double> ratio = share_ratio(r);
    md += fixed(r.a.iterations_per_s, 2) + " | " + fixed(r.b.iterations_per_s, 2) + " | " +
          (ratio ? fixed(*ratio, 2) : "n/a") + " | " + fixed(100 * r.gpu_busy_fraction, 0) + " % | " +
          (r.lc ? fixed(r.lc->p99_ms, 1) : std::string("-")) + " | " +
          (r.status.caveat.empty() ? std::string("ok") : "ok, but " + r.status.caveat) + " |\n";
  }
  for (const Training& t : results.trainings) {
    if (!t.status.ok) md += "\nPredictor training (" + t.device_mode + ") failed: " + t.status.reason + "\n";
  }
  return valid_utf8(md);
}

json weights_json(const WeightsResults& results, const WeightsOptions& o) {
  json records = json::array();
  for (const WeightsRun& r : results.runs) {
    json record{{"device_mode", r.device_mode}, {"with_lc", r.with_lc}, {"weight_a", 1.0}, {"weight_b", r.weight_b},
                {"ok", r.status.ok}};
    if (!r.status.ok) {
      record["reason"] = r.status.reason;
    } else {
      if (!r.status.caveat.empty()) record["caveat"] = r.status.caveat;
      record.update({{"a_iterations_per_s", r.a.iterations_per_s}, {"b_iterations_per_s", r.b.iterations_per_s},
                     {"a_iterations", r.a.iterations}, {"b_iterations", r.b.iterations},
                     {"b_over_a", share_ratio(r) ? json(*share_ratio(r)) : json(nullptr)}, {"gpu_busy_fraction", r.gpu_busy_fraction}});
      if (r.lc) record.update({{"lc_p99_ms", r.lc->p99_ms}, {"lc_queries", r.lc->queries}, {"target_ms", r.target_ms}});
    }
    records.push_back(std::move(record));
  }
  json training = json::array();
  for (const Training& t : results.trainings) {
    json record{{"device_mode", t.device_mode}, {"ok", t.status.ok}};
    if (!t.status.ok) record["reason"] = t.status.reason;
    training.push_back(std::move(record));
  }
  return {{"config", {{"device_modes", o.device_modes}, {"weight", o.weight}, {"lc_load", o.lc_load},
                      {"duration_s", o.duration_s}, {"time_scale", o.time_scale}, {"target_factor", o.target_factor},
                      {"seed", o.seed}, {"keep_device_data", o.keep_device_data}, {"baymax_from", o.baymax_source},
                      {"removed_env", o.removed_env}}},
          {"training", training}, {"runs", records}};
}

}  // namespace gpuqos::qos

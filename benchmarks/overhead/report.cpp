// make_report: differences and ratios under gpuqosd against direct simgpu, as a table and JSON.
#include "report.h"

#include <cstdio>

#include "stats.h"

namespace gpuqos::overhead {
namespace {

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, value);
  return buffer;
}

std::string row(const std::string& measure, double direct, double managed, const std::string& difference,
                const std::string& goal) {
  return "| " + measure + " | " + format("%.2f", direct) + " | " + format("%.2f", managed) + " | " + difference +
         " | " + format("%.2f", direct > 0 ? managed / direct : 0.0) + " | " + goal + " |\n";
}

// A launch comparison: p50 and p99 rows, and its JSON (differences of percentiles, not
// percentiles of differences: the two sets are separate runs).
void add_launch(Report& r, const char* key, const char* label, const Summary& direct, const Summary& managed,
                const char* goal_p50, const char* goal_p99) {
  r.json[key] = {{"direct", to_json(direct, "us")},
                 {"gpuqos", to_json(managed, "us")},
                 {"added_p50_us", managed.p50 - direct.p50},
                 {"added_p99_us", managed.p99 - direct.p99},
                 {"ratio_p50", direct.p50 > 0 ? managed.p50 / direct.p50 : 0.0},
                 {"ratio_p99", direct.p99 > 0 ? managed.p99 / direct.p99 : 0.0}};
  r.markdown += row(std::string(label) + " p50 (us)", direct.p50, managed.p50,
                    format("%+.2f us", managed.p50 - direct.p50), goal_p50);
  r.markdown += row(std::string(label) + " p99 (us)", direct.p99, managed.p99,
                    format("%+.2f us", managed.p99 - direct.p99), goal_p99);
}

void add_replay(Report& r, const char* key, const char* label, const Summary& direct_ms, const Summary& low_ms,
                const char* goal) {
  const double direct_per_s = direct_ms.mean > 0 ? 1000.0 / direct_ms.mean : 0.0;
  const double low_per_s = low_ms.mean > 0 ? 1000.0 / low_ms.mean : 0.0;
  const double slowdown_pct = low_per_s > 0 ? (direct_per_s / low_per_s - 1.0) * 100.0 : 0.0;
  r.json[key] = {{"direct", to_json(direct_ms, "ms")},
                         {"gpuqos", to_json(low_ms, "ms")},
                         {"direct_iterations_per_s", direct_per_s},
                         {"gpuqos_iterations_per_s", low_per_s},
                         {"ratio", direct_per_s > 0 ? low_per_s / direct_per_s : 0.0},
                         {"slowdown_pct", slowdown_pct}};
  r.markdown += row(std::string(label) + ", iterations/s", direct_per_s, low_per_s,
                    format("%+.2f %% slowdown", slowdown_pct), goal);
  r.markdown += row(std::string(label) + ", iteration p50 (ms)", direct_ms.p50, low_ms.p50,
                    format("%+.2f ms", low_ms.p50 - direct_ms.p50), "");
}

}  // namespace

Report make_report(const Samples& samples, const nlohmann::json& config) {
  Report r;
  r.json["config"] = config;
  const Summary direct = summarize(samples.direct_launch_us);
  r.markdown =
      "| measure | direct simgpu | under gpuqosd | difference | ratio | goal |\n"
      "| --- | ---: | ---: | ---: | ---: | --- |\n";
  add_launch(r, "high_priority_launch", "high-priority cuLaunchKernel", direct, summarize(samples.high_launch_us),
             "<= 1 us added", "<= 3 us added");
  add_launch(r, "high_priority_launch_legacy_stream", "high-priority cuLaunchKernel, legacy default stream",
             summarize(samples.direct_legacy_launch_us), summarize(samples.high_legacy_launch_us), "<= 1 us added",
             "<= 3 us added");
  add_launch(r, "low_priority_round_trip", "low-priority cuLaunchKernel, grant round trip (--credit-ops 0)", direct,
             summarize(samples.low_strict_launch_us), "<= 10 us added", "<= 50 us added");
  add_launch(r, "low_priority_launch", "low-priority cuLaunchKernel, with credit (default)", direct,
             summarize(samples.low_launch_us), "", "");
  add_replay(r, "be_replay", "BE ResNet-50 replay, low priority (default)", summarize(samples.direct_iteration_ms),
             summarize(samples.low_iteration_ms), "<= 3 % slowdown");
  add_replay(r, "be_replay_round_trip", "BE ResNet-50 replay, --credit-ops 0", summarize(samples.direct_iteration_ms),
             summarize(samples.low_strict_iteration_ms), "");
  return r;
}

}  // namespace gpuqos::overhead

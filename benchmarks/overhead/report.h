// The overhead run's results: pooled samples in, the markdown table and the JSON out.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpuqos::overhead {

// Everything measured, pooled over the rounds of one run.
struct Samples {
  std::vector<double> direct_launch_us, high_launch_us, low_launch_us, low_strict_launch_us;
  // The same 0-us launch on the legacy default stream: directly, and at high priority.
  std::vector<double> direct_legacy_launch_us, high_legacy_launch_us;
  // Wall time per replay iteration: direct, low priority with credit, low with a round trip per op.
  std::vector<double> direct_iteration_ms, low_iteration_ms, low_strict_iteration_ms;
};

struct Report {
  nlohmann::json json;
  std::string markdown;  // the table printed and written to overhead.md
};

// `config` is copied into the JSON. Figures only: goals are shown next to them, never checked.
Report make_report(const Samples& samples, const nlohmann::json& config);

}  // namespace gpuqos::overhead

// gpuqos-bench weights: does `[[job]] weight` split the GPU between best-effort jobs? Two copies of
// the ResNet-50 training replay (resnet-a at weight 1, resnet-b at 1 and then at --weight) under
// gpuqosd's baymax, beside the BERT query stream and with no latency-critical job at all, per
// device mode, side by side in one run. What it prints is each copy's iterations per second and
// their ratio, which should follow the weights.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpuqos/config/config.h"
#include "results.h"

namespace gpuqos::qos {

class QosRig;

struct WeightsOptions {
  std::string out_dir;
  std::vector<std::string> device_modes{"fifo", "timeslice"};
  double weight = 4;           // resnet-b's weight in the second run of each pair (resnet-a: 1)
  double lc_load = 0.4;        // the BERT stream's load in the runs with it
  double duration_s = 20;      // each run
  double calibration_s = 3;    // the closed-loop LC run that gives its rate and gpuqosd's target
  double time_scale = 4;       // simgpud --time-scale and the replayers' --pace-scale
  double target_factor = 1.5;  // gpuqosd's target: this x the closed-loop p50 (the grid's `service`)
  std::uint64_t seed = 1;
  bool keep_device_data = false;  // QosRig::keep_device_data
  std::vector<std::string> removed_env;  // inherited variables the children do not get (qos_main.cpp)
  config::BaymaxConfig baymax;
  std::string baymax_source = "built-in defaults";
};

// One run: the two copies at weights 1 and weight_b, with the LC or without.
struct WeightsRun {
  std::string device_mode;
  bool with_lc = false;
  double weight_b = 1;
  double target_ms = 0;  // gpuqosd's, for the LC (0 without it)
  std::optional<LcStats> lc;
  BeRun a, b;
  double gpu_busy_fraction = 0;
  Status status;
};

// Everything `gpuqos-bench weights` measured.
struct WeightsResults {
  std::vector<WeightsRun> runs;
  std::vector<Training> trainings;  // one per device mode reached
};

// b's iterations per second over a's; none when a made none (a ratio to nothing is no figure).
std::optional<double> share_ratio(const WeightsRun& run);

// The runs that failed, the predictor trainings among them.
std::size_t failed_runs(const WeightsResults& results);

// The table (one row per run, a failed training below it; valid UTF-8, as results_markdown) and the
// JSON record of each run (dump it with json_text). Pure.
std::string weights_markdown(const WeightsResults& results, double weight);
nlohmann::json weights_json(const WeightsResults& results, const WeightsOptions& options);

// Runs the pairs in every device mode (the caller writes weights.json and weights.md). Contract:
// `rig` has converted the LC workload and ResNet-50's. Once `interrupted` is set, returns the runs
// made before it.
WeightsResults run_weights(QosRig& rig, const WeightsOptions& options, const std::atomic<bool>& interrupted);

}  // namespace gpuqos::qos

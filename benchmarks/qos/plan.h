// What one `gpuqos-bench qos` run measures: its options (with the --quick defaults), the workloads
// it replays and the grid of cells (policy x device mode x LC load x best-effort mix). Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpuqos/config/config.h"

namespace gpuqos::qos {

// A workload the benchmark converts from a real trace (../shared/traces) and replays.
struct Workload {
  std::string key;        // short name: bert, resnet, recsys (file names, --be-mixes)
  std::string job;        // the job name it runs as (GPUQOS_JOB, the config's [[job]])
  std::string trace;      // file name in the traces directory
  std::string iteration;  // gpuqos-trace2workload --iteration
};

// The latency-critical query: one BERT-small bs1 inference step (the whole trace is one query).
const Workload& lc_workload();
// The best-effort workloads a mix names: resnet (ResNet-50 training) and recsys (DLRM-style training).
const std::vector<Workload>& be_workloads();
// The workloads of a mix such as "resnet+recsys", in the mix's order; throws std::invalid_argument
// on an unknown or repeated name.
std::vector<Workload> mix_workloads(const std::string& mix);

inline const std::vector<std::string> kPolicies{"none", "fifo", "priority", "baymax"};
inline const std::vector<std::string> kDeviceModes{"fifo", "timeslice", "mps"};
// What gpuqosd is told and shown of the LC's latency (benchmarks/README.md, "gpuqosd's target"):
// `service`: the LC does not mark its queries, gpuqosd sees each from its first op, and its target
// is the factor x the closed-loop service p50; `end-to-end`: the LC marks each query's arrival
// (gpuqos_query_arrived) and gpuqosd gets the cell's own target.
inline const std::vector<std::string> kDaemonTargets{"service", "end-to-end"};
inline const std::vector<std::string> kDaemonLogLevels{"trace", "debug", "info", "warn", "error", "off"};

struct Options {
  std::string out_dir;
  bool quick = false;
  double target_factor = 1.5;
  double duration_s = 10;       // runs without the LC; the least a run with it lasts; --quick: 5
  // Runs with the LC last long enough for this many arrivals on average (lc_run_duration_s): 450 is
  // about four standard deviations over the 368 a p99's upper 95 % end needs. --quick: 0 (--duration
  // alone).
  std::uint32_t min_queries = 450;
  double calibration_s = 3;     // the closed-loop run that gives the LC's mean latency; --quick: 1.5
  double time_scale = 4;        // simgpud --time-scale and the replayers' --pace-scale
  std::uint64_t seed = 1;       // the LC's Poisson arrivals: the same in every run
  std::vector<std::string> policies = kPolicies;
  std::vector<std::string> device_modes{"fifo", "timeslice"};
  std::vector<double> loads{0.2, 0.4, 0.6};
  std::vector<std::string> be_mixes{"resnet", "resnet+recsys"};
  std::string daemon_target = "end-to-end";  // one of kDaemonTargets
  // The LC job's own safety margin ([[job]] safety_margin_ms, x time_scale); none: the default, see
  // lc_margin_ms().
  std::optional<double> lc_margin_ms;
  // Every BE replayer (standalone, alone together, training and the cells) submits each trace stream
  // from a thread of its own (gpuqos-replay --thread-per-stream).
  bool be_thread_per_stream = false;
  // simgpu keeps the replayers' device data, moving its bytes with the host's CPU (QosRig).
  bool keep_device_data = false;
  // Every gpuqosd's --log-level (one of kDaemonLogLevels; "": its config's, info). "trace" logs
  // each op, grant and completion, to read a cell's misses back against what was granted.
  std::string daemon_log_level;
  // [policy.baymax] of every cell's gpuqosd config, times x time_scale (the demo's: the example
  // config's; qos_main loads it from --baymax-from).
  config::BaymaxConfig baymax;
  std::string baymax_source = "built-in defaults";
};

// The LC's margin unless --lc-margin-ms says otherwise (ms, before time_scale): with end-to-end
// targets at least kEndToEndLcMarginMs (more if [policy.baymax] says more), since its target counts
// its own queue of requests, whose variation the example config's 1 ms did not cover on the fifo
// device (benchmarks/README.md); with service targets, none (the policy's margin).
inline constexpr double kEndToEndLcMarginMs = 2.5;
std::optional<double> lc_margin_ms(const Options& o);

// Sets what --quick changes, leaving alone the options the user gave (`given_*` true).
void apply_quick(Options& o, bool given_duration, bool given_loads, bool given_mixes, bool given_min_queries);
// Throws std::invalid_argument with a message naming the bad option.
void validate(const Options& o);

// One cell of the grid.
struct Cell {
  std::string policy;
  std::string device_mode;
  double lc_load = 0;
  std::string be_mix;
};

// Every cell, device mode outermost (one simgpud per mode) and policy innermost, so the policies
// of one load and mix run back to back under the same machine conditions.
std::vector<Cell> plan_cells(const Options& o);
// The BE workloads any mix uses, each once, in table order.
std::vector<Workload> be_workloads_used(const Options& o);
// The mixes of more than one BE job, each once, in table order: their jobs also run alone together.
std::vector<std::string> shared_mixes(const Options& o);
// "baymax-fifo-0.40-resnet+recsys": the file-name stem of a cell's logs and results.
std::string cell_name(const Cell& cell);

// The gpuqosd config of a cell (policy other than none): its policy, the LC job high with
// target_ms at p99 (and lc_margin_ms, if any), each BE job of the mix low with weight 1, and
// `baymax` (read from `baymax_source`, examples/gpuqos.toml by default) with its times stretched by
// time_scale, as every device time is (the LC's margin too).
std::string gpuqosd_config_toml(const Cell& cell, double target_ms, double time_scale,
                                const config::BaymaxConfig& baymax, const std::string& baymax_source,
                                std::optional<double> lc_margin_ms = std::nullopt);

// A best-effort job of a gpuqosd config and its [[job]] weight.
struct BeJobWeight {
  std::string job;
  double weight = 1;
};
// The same for any run: `title` names it in the header comment; the LC job (high, target_ms at p99)
// only when lc_target_ms is given; then each of `be_jobs`, low with its weight.
std::string gpuqosd_config_toml(const std::string& title, const std::string& policy, const std::string& device_mode,
                                std::optional<double> lc_target_ms, const std::vector<BeJobWeight>& be_jobs,
                                double time_scale, const config::BaymaxConfig& baymax, const std::string& baymax_source,
                                std::optional<double> lc_margin_ms = std::nullopt);

}  // namespace gpuqos::qos

// The benchmark's workloads, options and grid of cells (plan.h).
#include "plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace gpuqos::qos {

const Workload& lc_workload() {
  static const Workload bert{"bert", "bert-infer", "tracelens_h100_bert_small_bs1_infer.json.gz", "all"};
  return bert;
}

// Iteration 1 of each training trace, a steady-state step: ResNet's as scripts/demo.sh takes it;
// recsys's iteration 0 carries warm-up work (2,247 ops against 1,375 in each later step).
const std::vector<Workload>& be_workloads() {
  static const std::vector<Workload> all{
      {"resnet", "resnet-train", "kineto_resnet50_v100_train.json.gz", "1"},
      {"recsys", "recsys-train", "hta_a100_recsys_train_rank0.json.gz", "1"},
  };
  return all;
}

std::vector<Workload> mix_workloads(const std::string& mix) {
  std::vector<Workload> result;
  std::size_t begin = 0;
  while (begin <= mix.size()) {
    const std::size_t end = std::min(mix.find('+', begin), mix.size());
    const std::string key = mix.substr(begin, end - begin);
    const auto& known = be_workloads();
    const auto it = std::find_if(known.begin(), known.end(), [&](const Workload& w) { return w.key == key; });
    if (it == known.end()) throw std::invalid_argument("--be-mixes: unknown best-effort job '" + key + "' in '" + mix + "'");
    if (std::any_of(result.begin(), result.end(), [&](const Workload& w) { return w.key == key; })) {
      throw std::invalid_argument("--be-mixes: '" + key + "' twice in '" + mix + "'");
    }
    result.push_back(*it);
    begin = end + 1;
  }
  return result;
}

void apply_quick(Options& o, bool given_duration, bool given_loads, bool given_mixes, bool given_min_queries) {
  if (!o.quick) return;
  if (!given_duration) o.duration_s = 5;
  if (!given_min_queries) o.min_queries = 0;
  if (!given_loads) o.loads = {0.4};
  if (!given_mixes) o.be_mixes = {"resnet"};
  o.calibration_s = 1.5;
}

void validate(const Options& o) {
  const auto check_members = [](const std::vector<std::string>& values, const std::vector<std::string>& allowed,
                                const char* option) {
    if (values.empty()) throw std::invalid_argument(std::string(option) + ": empty");
    for (const auto& v : values) {
      if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
        throw std::invalid_argument(std::string(option) + ": unknown '" + v + "'");
      }
    }
  };
  check_members(o.policies, kPolicies, "--policies");
  check_members(o.device_modes, kDeviceModes, "--device-modes");
  if (o.loads.empty()) throw std::invalid_argument("--loads: empty");
  for (double load : o.loads) {
    if (!(load > 0 && load < 1)) throw std::invalid_argument("--loads: each load must lie in (0, 1)");
  }
  if (o.be_mixes.empty()) throw std::invalid_argument("--be-mixes: empty");
  for (const auto& mix : o.be_mixes) mix_workloads(mix);
  if (!(o.target_factor > 0) || !std::isfinite(o.target_factor)) {
    throw std::invalid_argument("--target-factor must be a positive number");
  }
  check_members({o.daemon_target}, kDaemonTargets, "--daemon-target");
  if (!o.daemon_log_level.empty()) check_members({o.daemon_log_level}, kDaemonLogLevels, "--daemon-log-level");
  if (o.lc_margin_ms && !(*o.lc_margin_ms >= 0 && std::isfinite(*o.lc_margin_ms))) {
    throw std::invalid_argument("--lc-margin-ms must be a number >= 0");
  }
  if (!(o.duration_s > 0) || !(o.time_scale > 0) || !std::isfinite(o.duration_s) || !std::isfinite(o.time_scale)) {
    throw std::invalid_argument("--duration and --time-scale must be positive numbers");
  }
}

std::optional<double> lc_margin_ms(const Options& o) {
  if (o.lc_margin_ms) return o.lc_margin_ms;
  if (o.daemon_target == "end-to-end") return std::max(kEndToEndLcMarginMs, o.baymax.safety_margin_ms);
  return std::nullopt;
}

std::vector<Cell> plan_cells(const Options& o) {
  std::vector<Cell> cells;
  for (const auto& mode : o.device_modes) {
    for (double load : o.loads) {
      for (const auto& mix : o.be_mixes) {
        for (const auto& policy : o.policies) cells.push_back({policy, mode, load, mix});
      }
    }
  }
  return cells;
}

std::vector<Workload> be_workloads_used(const Options& o) {
  std::vector<Workload> used;
  for (const Workload& w : be_workloads()) {
    const bool in_a_mix = std::any_of(o.be_mixes.begin(), o.be_mixes.end(), [&](const std::string& mix) {
      const auto jobs = mix_workloads(mix);
      return std::any_of(jobs.begin(), jobs.end(), [&](const Workload& j) { return j.key == w.key; });
    });
    if (in_a_mix) used.push_back(w);
  }
  return used;
}

std::vector<std::string> shared_mixes(const Options& o) {
  std::vector<std::string> shared;
  for (const std::string& mix : o.be_mixes) {
    const bool seen = std::find(shared.begin(), shared.end(), mix) != shared.end();
    if (mix_workloads(mix).size() > 1 && !seen) shared.push_back(mix);
  }
  return shared;
}

std::string cell_name(const Cell& cell) {
  char load[32];
  std::snprintf(load, sizeof load, "%.2f", cell.lc_load);
  return cell.policy + "-" + cell.device_mode + "-" + load + "-" + cell.be_mix;
}

namespace {

// Always with a decimal point: TOML tells floats from integers.
std::string toml_float(double value, int decimals = 3) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace

std::string gpuqosd_config_toml(const Cell& cell, double target_ms, double time_scale,
                                const config::BaymaxConfig& baymax, const std::string& baymax_source,
                                std::optional<double> lc_margin_ms) {
  std::vector<BeJobWeight> be_jobs;
  for (const Workload& be : mix_workloads(cell.be_mix)) be_jobs.push_back({be.job, 1.0});
  return gpuqosd_config_toml("cell " + cell_name(cell), cell.policy, cell.device_mode, target_ms, be_jobs, time_scale,
                             baymax, baymax_source, lc_margin_ms);
}

std::string gpuqosd_config_toml(const std::string& title, const std::string& policy, const std::string& device_mode,
                                std::optional<double> lc_target_ms, const std::vector<BeJobWeight>& be_jobs,
                                double time_scale, const config::BaymaxConfig& baymax, const std::string& baymax_source,
                                std::optional<double> lc_margin_ms) {
  // Only a time-slicing device delays a query by a slice per process: under MPS a long best-effort
  // kernel shares the SMs with the query's for as long as they overlap, so the in-order rule (its
  // whole length counts) is the safe one there, as it is where kernels run to their end.
  const bool sliced = device_mode == "timeslice";
  const char* how = device_mode == "fifo" ? "runs a kernel to its end once started"
                    : sliced                ? "time-slices contexts' kernels"
                                            : "runs contexts' kernels side by side on shared SMs";
  std::ostringstream toml;
  toml << "# Written by gpuqos-bench for " << title << ".\n"
       << "[daemon]\nlog_level = \"info\"\n\n"
       << "[policy]\nname = \"" << policy << "\"\n\n"
       << "# " << baymax_source << "'s [policy.baymax], its times x time_scale " << time_scale << "\n"
       << "[policy.baymax]\n"
       << "safety_margin_ms = " << toml_float(baymax.safety_margin_ms * time_scale) << "\n"
       << "be_backlog_bound_ms = " << toml_float(baymax.be_backlog_bound_ms * time_scale) << "\n"
       << "max_be_transfers = " << baymax.max_be_transfers << "\n"
       << "copy_chunk_bytes = " << baymax.copy_chunk_bytes << "\n"
       << "adaptation = " << (baymax.adaptation ? "true" : "false") << "\n"
       << "min_backlog_bound_ms = " << toml_float(baymax.min_backlog_bound_ms * time_scale) << "\n"
       << "max_backlog_bound_ms = " << toml_float(baymax.max_backlog_bound_ms * time_scale) << "\n"
       << "adapt_step_ms = " << toml_float(baymax.adapt_step_ms * time_scale) << "\n"
       << "long_op_tail_share = " << toml_float(baymax.long_op_tail_share) << "\n"
       << "# simgpu's " << device_mode << " mode " << how << "\n"
       << "preemptive_device = " << (sliced ? "true" : "false") << "\n"
       << "# simgpu's time slice (timeslice_us of its profile), x time_scale\n"
       << "timeslice_ms = " << toml_float(baymax.timeslice_ms * time_scale) << "\n"
       << "bound_by_slices = " << (baymax.bound_by_slices ? "true" : "false") << "\n"
       << "idle_bound_factor = " << toml_float(baymax.idle_bound_factor) << "\n";
  if (lc_target_ms) {
    toml << "\n[[job]]\nname = \"" << lc_workload().job << "\"\nallowed_priority = \"high\"\n"
         << "target_ms = " << toml_float(*lc_target_ms) << "\npercentile = 99\n";
    if (lc_margin_ms) toml << "safety_margin_ms = " << toml_float(*lc_margin_ms * time_scale) << "\n";
  }
  for (const BeJobWeight& be : be_jobs) {
    toml << "\n[[job]]\nname = \"" << be.job << "\"\nallowed_priority = \"low\"\nweight = " << toml_float(be.weight, 6)
         << "\n";
  }
  return toml.str();
}

}  // namespace gpuqos::qos

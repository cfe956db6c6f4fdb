// gpuqos-bench qos: a latency-critical BERT query stream beside best-effort training jobs on simgpu,
// under each policy (none, fifo, priority, baymax) and each device mode, side by side in one run.
//
//   build/bin/gpuqos-bench qos [--quick] --out DIR [--target-factor 1.5] [--duration S]
//       [--min-queries N] [--time-scale X] [--policies none,fifo,priority,baymax] [--device-modes fifo,timeslice]
//       [--loads 0.2,0.4,0.6] [--be-mixes resnet,resnet+recsys]
//
// It converts the real traces into DIR/workloads, starts its own simgpud per device mode and a
// gpuqosd per cell on private sockets, measures the standalone references, runs every cell, prints
// the table and writes DIR/qos.json, DIR/qos.md and, with python3 and matplotlib, DIR/*.png. With the
// fifo mode and a mix with recsys, qos.md and the output end with fifo_bound.py's table (the most any
// policy could give recsys there). Every child's output is in DIR/logs. benchmarks/README.md explains the columns.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "experiment.h"
#include "gpuqos/config/load.h"
#include "gpuqos/testing/gpuqos_programs.h"
#include "output_dir.h"
#include "plan.h"
#include "qos_rig.h"
#include "report.h"
#include "weights.h"

namespace gpuqos::qos {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Set by SIGINT/SIGTERM/SIGHUP: the run stops before its next measurement and cleans up (the
// children of the current one get a terminal's SIGINT themselves; a SIGTERM lets the current run
// finish). SIGHUP, a closed terminal, too: by default it killed the bench before it stopped its
// children or removed its socket dir, and gpuqosd, which blocks SIGHUP for its reload, lived on.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void on_stop_signal(int) { interrupted = true; }
void handle_stop_signals() {
  for (const int stop : {SIGINT, SIGTERM, SIGHUP}) std::signal(stop, on_stop_signal);
}
constexpr int kInterruptedExit = 130;  // as a shell reports a job SIGINT ended
// The bench's own helpers (plots, fifo_bound.py) die with it too, as the rig's children do.
constexpr auto kWithBench = testing::Lifetime::dies_with_parent;

struct Cli {
  Options options;
  std::string traces_dir = (fs::path(GPUQOS_SOURCE_DIR) / ".." / "shared" / "traces").lexically_normal().string();
  std::vector<std::string> removed_env;  // testing::remove_inherited_gpu_env()
};

json config_json(const Options& o, const Cli& cli, double wall_s) {
  const std::string& traces_dir = cli.traces_dir;
  json workloads = json::array();
  workloads.push_back({{"job", lc_workload().job}, {"trace", lc_workload().trace}, {"iteration", lc_workload().iteration}});
  for (const Workload& w : be_workloads_used(o)) workloads.push_back({{"job", w.job}, {"trace", w.trace}, {"iteration", w.iteration}});
  return {{"quick", o.quick},           {"target_factor", o.target_factor}, {"duration_s", o.duration_s},
          {"min_queries", o.min_queries},
          {"calibration_s", o.calibration_s}, {"time_scale", o.time_scale},   {"seed", o.seed},
          {"policies", o.policies},      {"device_modes", o.device_modes},   {"loads", o.loads},
          {"be_mixes", o.be_mixes},      {"daemon_target", o.daemon_target}, {"lc_margin_ms", lc_margin_ms(o) ? json(*lc_margin_ms(o)) : json(nullptr)}, {"be_thread_per_stream", o.be_thread_per_stream}, {"keep_device_data", o.keep_device_data}, {"daemon_log_level", o.daemon_log_level.empty() ? json(nullptr) : json(o.daemon_log_level)}, {"traces_dir", traces_dir},
          {"workloads", workloads},
          {"baymax_from", o.baymax_source},
          {"baymax", {{"safety_margin_ms", o.baymax.safety_margin_ms},
                      {"be_backlog_bound_ms", o.baymax.be_backlog_bound_ms},
                      {"max_be_transfers", o.baymax.max_be_transfers},
                      {"copy_chunk_bytes", o.baymax.copy_chunk_bytes},
                      {"adaptation", o.baymax.adaptation},
                      {"long_op_tail_share", o.baymax.long_op_tail_share},
                      {"timeslice_ms", o.baymax.timeslice_ms},
                      {"bound_by_slices", o.baymax.bound_by_slices},
                      {"idle_bound_factor", o.baymax.idle_bound_factor},
                      {"times_scaled_by", o.time_scale}}},
          {"removed_env", cli.removed_env},
          {"wall_s", wall_s}};
}

// Runs plot_qos.py with the first python3 that has matplotlib; one warning when there is none.
void plot(const fs::path& out_dir) {
  const fs::path script = fs::path(GPUQOS_SOURCE_DIR) / "benchmarks" / "qos" / "plot_qos.py";
  const fs::path log = out_dir / "logs" / "plot.log";
  if (!fs::exists(script)) {
    std::cerr << "gpuqos-bench: warning: " << script.string() << " not found: no PNG plots\n";
    return;
  }
  // The Debian interpreter second: python3-matplotlib installs there, whatever python3 PATH finds.
  for (const std::vector<std::string>& python : {std::vector<std::string>{"/usr/bin/env", "python3"},
                                                 std::vector<std::string>{"/usr/bin/python3"}}) {
    if (!fs::exists(python.front())) continue;
    std::vector<std::string> argv = python;
    argv.insert(argv.end(), {script.string(), (out_dir / "qos.json").string()});
    testing::ChildProcess child(argv, {}, log, testing::OutputMode::truncate, kWithBench);
    const auto code = child.wait(std::chrono::minutes(2));
    if (code == 0) {
      std::cerr << "gpuqos-bench: plots: " << tail_lines(child.output(), 2);
      return;
    }
    if (code != 2 && code != 127) {  // 2: no matplotlib (the script's exit code); 127: no python3
      std::cerr << "gpuqos-bench: warning: plot_qos.py failed (" << log.string() << "):\n" << tail_lines(child.output(), 10);
      return;
    }
  }
  std::cerr << "gpuqos-bench: warning: no python3 with matplotlib (apt install python3-matplotlib): no PNG plots\n";
}

// With the fifo device mode and a mix with recsys in the grid: what benchmarks/qos/fifo_bound.py
// says any policy could give recsys there while the LC keeps its p99 (the reach of the 80 % bar),
// as a section for qos.md and the output; "" when there is none.
std::string fifo_bound(const Options& o, const fs::path& out_dir) {
  if (interrupted) return "";  // partial results; and the user asked to stop
  const bool fifo = std::find(o.device_modes.begin(), o.device_modes.end(), "fifo") != o.device_modes.end();
  const bool recsys = std::any_of(o.be_mixes.begin(), o.be_mixes.end(),
                                  [](const std::string& mix) { return mix.find("recsys") != std::string::npos; });
  if (!fifo || !recsys) return "";
  const fs::path script = fs::path(GPUQOS_SOURCE_DIR) / "benchmarks" / "qos" / "fifo_bound.py";
  const fs::path log = out_dir / "logs" / "fifo_bound.log";
  try {
    testing::ChildProcess child({"/usr/bin/env", "python3", script.string(), out_dir.string()}, {}, log,
                                testing::OutputMode::truncate, kWithBench);
    const std::optional<int> code = child.wait(std::chrono::minutes(2));
    if (code != 0) {
      std::cerr << "gpuqos-bench: warning: fifo_bound.py " << (code ? "failed" : "timed out after 2 min") << " ("
                << log.string() << "):\n"
                << tail_lines(child.output(), 10);
      return "";
    }
    return "\nWhat any policy could give recsys beside the LC on the fifo device, by the model in "
           "benchmarks/qos/fifo_bound.py (an upper estimate: ResNet-50 and recsys's other kernels left out), over "
           "a long run and in 90 % of cells of the cell's queries\n\n" +
           child.output();
  } catch (const std::exception& e) {
    std::cerr << "gpuqos-bench: warning: fifo_bound.py: " << e.what() << "\n";
    return "";
  }
}

// Removes the results an earlier run left in `out_dir`, saying so: if this run ends early or
// fails, its numbers must not pass for this one's.
void clear_previous_results(const fs::path& out_dir, const std::vector<std::string>& files, const std::string& extension) {
  const std::vector<std::string> removed = remove_previous_results(out_dir, files, extension);
  if (removed.empty()) return;
  std::cerr << "gpuqos-bench: removed the previous run's";
  for (const std::string& name : removed) std::cerr << " " << name;
  std::cerr << " from " << out_dir.string() << "\n";
}

// Writes `text` whole to `path`; false, having said why, when it cannot (a full disk).
bool write_result(const fs::path& path, const std::string& text) {
  try {
    write_file_whole(path, text);
    return true;
  } catch (const std::exception& e) {
    std::cerr << "gpuqos-bench: " << e.what() << "\n";
    return false;
  }
}

constexpr int kNotWrittenExit = 1;  // the results are not on disk: whatever was measured is lost

int run(const Cli& cli) {
  const Options& o = cli.options;
  const auto start = std::chrono::steady_clock::now();
  handle_stop_signals();
  const fs::path out_dir = fs::absolute(o.out_dir);
  QosRig rig(out_dir, o.time_scale);
  clear_previous_results(out_dir, {"qos.json", "qos.md"}, ".png");
  rig.keep_device_data(o.keep_device_data);
  rig.daemon_log_level(o.daemon_log_level);
  std::cerr << "gpuqos-bench: converting traces from " << cli.traces_dir << " into " << (out_dir / "workloads").string() << "\n";
  rig.convert(lc_workload(), cli.traces_dir);
  for (const Workload& w : be_workloads_used(o)) rig.convert(w, cli.traces_dir);
  const Results results = run_experiment(rig, o, interrupted);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::string markdown = results_markdown(results, o.time_scale);
  std::cout << "\n" << markdown << std::flush;
  const bool json_written = write_result(out_dir / "qos.json", json_text(results_json(results, config_json(o, cli, wall_s))));
  const bool written = write_result(out_dir / "qos.md", markdown) && json_written;
  if (!written) {
    std::cerr << "gpuqos-bench: the results were not written to " << out_dir.string() << "\n";
    return kNotWrittenExit;
  }
  plot(out_dir);
  if (const std::string bound = fifo_bound(o, out_dir); !bound.empty()) {
    std::cout << valid_utf8(bound) << std::flush;  // the script's output, whatever its bytes
    if (!write_result(out_dir / "qos.md", valid_utf8(markdown + bound))) return kNotWrittenExit;
  }
  std::size_t failed_cells = 0;
  for (const CellResult& c : results.cells) failed_cells += c.status.ok ? 0 : 1;
  const std::size_t failed = failed_runs(results);
  std::cerr << "gpuqos-bench: " << results.cells.size() - failed_cells << " of " << results.cells.size()
            << " cells ran"
            << (failed > failed_cells ? ", " + std::to_string(failed - failed_cells) + " reference runs or trainings failed" : "")
            << (results.interrupted ? "; interrupted, the rest not run" : "") << "; wrote " << (out_dir / "qos.json").string()
            << " and qos.md in " << wall_s << " s\n";
  // A script (or the demo) must see a run that did not measure everything it was asked to.
  return results.interrupted ? kInterruptedExit : failed > 0 ? 1 : 0;
}

int weights_bench(const std::string& traces_dir, const WeightsOptions& w) {
  handle_stop_signals();
  const auto start = std::chrono::steady_clock::now();
  WeightsOptions options = w;
  options.out_dir = fs::absolute(w.out_dir).string();
  const fs::path out_dir(options.out_dir);
  QosRig rig(out_dir, options.time_scale);
  clear_previous_results(out_dir, {"weights.json", "weights.md"}, "");
  rig.keep_device_data(options.keep_device_data);
  rig.convert(lc_workload(), traces_dir);
  for (const Workload& be : be_workloads()) {
    if (be.key == "resnet") rig.convert(be, traces_dir);
  }
  const WeightsResults results = run_weights(rig, options, interrupted);
  const std::vector<WeightsRun>& runs = results.runs;
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string markdown = weights_markdown(results, options.weight);
  std::cout << "\n" << markdown << std::flush;
  const bool json_written = write_result(out_dir / "weights.json", json_text(weights_json(results, options)));
  if (!(write_result(out_dir / "weights.md", markdown) && json_written)) {
    std::cerr << "gpuqos-bench: the results were not written to " << out_dir.string() << "\n";
    return kNotWrittenExit;
  }
  const std::size_t failed_pairs =
      static_cast<std::size_t>(std::count_if(runs.begin(), runs.end(), [](const WeightsRun& r) { return !r.status.ok; }));
  const std::size_t failed = failed_runs(results);
  std::cerr << "gpuqos-bench: " << runs.size() - failed_pairs << " of " << runs.size() << " runs ok"
            << (failed > failed_pairs ? ", " + std::to_string(failed - failed_pairs) + " predictor trainings failed" : "")
            << (interrupted ? "; interrupted, the rest not run" : "") << "; wrote " << (out_dir / "weights.json").string()
            << " and weights.md in " << wall_s << " s\n";
  return interrupted ? kInterruptedExit : failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace gpuqos::qos

int main(int argc, char** argv) {
  using namespace gpuqos::qos;
  Cli cli;
  // Before anything runs: the user's LD_PRELOAD, GPUQOS_*, SIMGPU_* and CUDA_* must not reach
  // simgpud, gpuqosd or the replayers (an installed shim, a GPUQOS_PROFILE, fault injection); the
  // rig sets what each child needs. qos.json and weights.json name what was removed.
  cli.removed_env = gpuqos::testing::remove_inherited_gpu_env();
  Options& o = cli.options;
  CLI::App app{"gpuqos-bench: gpuqos's benchmarks on simgpu."};
  app.require_subcommand(1);
  CLI::App* qos = app.add_subcommand("qos", "LC query latency and BE throughput under each policy and device mode");
  qos->add_option("--out", o.out_dir, "write qos.json, qos.md, plots, workloads and logs here")->required();
  qos->add_flag("--quick", o.quick, "one load (0.4), one mix (resnet), 5-s runs: a few minutes");
  qos->add_option("--target-factor", o.target_factor, "target = this x the standalone LC p99")->capture_default_str();
  auto* duration = qos->add_option("--duration", o.duration_s, "seconds each run lasts (a run with the LC: at least; --min-queries)")->capture_default_str();
  auto* min_queries =
      qos->add_option("--min-queries", o.min_queries,
                      "runs with the LC last long enough for this many arrivals on average, so that each p99 has "
                      "an upper 95 % end (368 needed); 0: --duration alone; --quick: 0")
          ->capture_default_str();
  qos->add_option("--time-scale", o.time_scale, "simgpud --time-scale and the replayers' --pace-scale")->capture_default_str();
  qos->add_option("--policies", o.policies, "none, fifo, priority, baymax")->delimiter(',')->capture_default_str();
  qos->add_option("--device-modes", o.device_modes, "simgpu compute modes: fifo, timeslice, mps")->delimiter(',')->capture_default_str();
  auto* loads = qos->add_option("--loads", o.loads, "LC loads (rate x standalone mean latency)")->delimiter(',')->capture_default_str();
  auto* mixes = qos->add_option("--be-mixes", o.be_mixes, "BE mixes: jobs joined by + (resnet, recsys)")->delimiter(',')->capture_default_str();
  qos->add_option("--seed", o.seed, "seed of the LC's Poisson arrivals")->capture_default_str();
  qos->add_option("--daemon-target", o.daemon_target,
                  "service: gpuqosd sees each query from its first op, with target factor x the closed-loop "
                  "service p50; end-to-end: the LC marks arrivals and gpuqosd gets the cell's target")
      ->check(CLI::IsMember(kDaemonTargets))->capture_default_str();
  qos->add_option("--lc-margin-ms", o.lc_margin_ms,
                  "the LC job's own safety margin ([[job]] safety_margin_ms, ms before --time-scale); default: " +
                      json(kEndToEndLcMarginMs).dump() +
                      " or the [policy.baymax] margin if larger with end-to-end targets, none (the [policy.baymax] margin) "
                      "with service ones")
      ->check(CLI::NonNegativeNumber);
  qos->add_flag("--be-thread-per-stream", o.be_thread_per_stream,
                "BE replayers submit each trace stream from a thread of its own, so each stream keeps its "
                "schedule while another's launch is held, as host-side deferral of held launches would");
  qos->add_flag("--keep-device-data", o.keep_device_data,
                "simgpu keeps the replayers' device memory contents, moving the bytes of copies and memsets "
                "into it with the host's CPU, which a GPU's engines spare (default: SIMGPU_DEVICE_DATA=none)");
  qos->add_option("--daemon-log-level", o.daemon_log_level,
                  "every gpuqosd's --log-level (default: the configs' info); trace logs each op, grant and "
                  "completion into DIR/logs, to read a cell's misses back against what was granted")
      ->check(CLI::IsMember(kDaemonLogLevels));
  std::string baymax_from = (fs::path(GPUQOS_SOURCE_DIR) / "examples" / "gpuqos.toml").string();
  qos->add_option("--baymax-from", baymax_from,
                  "config file whose [policy.baymax] every cell's gpuqosd gets (times x --time-scale; "
                  "preemptive_device and timeslice_ms come from the device mode and simgpu's profile)")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  qos->add_option("--traces", cli.traces_dir, "directory of the real traces")->check(CLI::ExistingDirectory)->capture_default_str();

  WeightsOptions w;
  CLI::App* weights = app.add_subcommand(
      "weights", "two ResNet-50 replays at weights 1 and 1, then 1 and --weight, under baymax: their throughput ratio");
  weights->add_option("--out", w.out_dir, "write weights.json, weights.md, workloads and logs here")->required();
  weights->add_option("--weight", w.weight, "resnet-b's weight in the second run of each pair")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  weights->add_option("--load", w.lc_load, "the BERT stream's load in the runs with it")
      ->check(CLI::Range(0.01, 0.99))
      ->capture_default_str();
  weights->add_option("--duration", w.duration_s, "seconds each run lasts")->check(CLI::PositiveNumber)->capture_default_str();
  weights->add_option("--time-scale", w.time_scale, "simgpud --time-scale and the replayers' --pace-scale")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  weights->add_flag("--keep-device-data", w.keep_device_data,
                    "simgpu keeps the replayers' device memory contents (as for qos)");
  weights->add_option("--device-modes", w.device_modes, "simgpu compute modes: fifo, timeslice, mps")
      ->delimiter(',')
      ->check(CLI::IsMember(kDeviceModes))
      ->capture_default_str();
  weights->add_option("--baymax-from", baymax_from, "config file whose [policy.baymax] gpuqosd gets (as for qos)")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  weights->add_option("--traces", cli.traces_dir, "directory of the real traces")->check(CLI::ExistingDirectory)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    auto loaded = gpuqos::config::load_config_file(baymax_from);
    if (!loaded) {
      std::cerr << "gpuqos-bench: --baymax-from: " << loaded.error() << "\n";
      return 2;
    }
    gpuqos::config::BaymaxConfig baymax = loaded.value().policy.baymax;
    baymax.timeslice_ms = device_timeslice_ms();  // the device's own, as an operator sets it
    baymax.device_timeslice_ms.clear();           // one simulated device: its slice is that one
    if (weights->parsed()) {
      w.removed_env = cli.removed_env;
      w.baymax = baymax;
      w.baymax_source = baymax_from;
      return gpuqos::qos::weights_bench(cli.traces_dir, w);
    }
    apply_quick(o, duration->count() > 0, loads->count() > 0, mixes->count() > 0, min_queries->count() > 0);
    validate(o);
    o.baymax = baymax;
    o.baymax_source = baymax_from;
    return gpuqos::qos::run(cli);
  } catch (const std::exception& e) {
    std::cerr << "gpuqos-bench: " << e.what() << "\n";
    return 1;
  }
}

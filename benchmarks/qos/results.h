// What the QoS benchmark measured: the standalone references per device mode, and per cell the
// raw measurement and the figures derived from it against those references. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cell_math.h"
#include "plan.h"

namespace gpuqos::qos {

// How a run ended. A failed run keeps its reason and the tail of the log that explains it.
struct Status {
  bool ok = true;
  std::string reason;    // one line, for the table
  std::string log_path;  // the log that explains it
  std::string log_tail;  // its last lines
  // ok, but not entirely what it measures: a job fell open (ran unmanaged a while, having lost
  // gpuqosd), or gpuqosd's loop stalled past the shims' heartbeat limit. One line; "" when neither.
  std::string caveat;
};

// Appends `text` ("" adds nothing) to the status's caveat, "; " between.
void add_caveat(Status& status, const std::string& text);

// The latency-critical replayer's figures of one run (ms).
struct LcStats {
  std::uint64_t queries = 0;
  double mean_ms = 0, p50_ms = 0, p99_ms = 0;
  std::vector<double> latency_ms;  // every query, arrival to completion (unserved: to the run's end)
  std::uint64_t unserved = 0;      // of `queries`, arrived and never served (their wait, a lower bound)
};

// One best-effort job's throughput in one run.
struct BeRun {
  std::string job;
  std::uint64_t iterations = 0;
  double iterations_per_s = 0;
};

// The LC alone, closed loop: its mean latency is the service time that turns a load into a rate.
struct Calibration {
  std::string device_mode;
  LcStats lc;
  Status status;
};

// The LC alone, open loop at one load: its p99 sets the cells' target, its GPU busy share the ideal
// leftover for the BE jobs.
struct StandaloneLc {
  std::string device_mode;
  double lc_load = 0;           // nominal: rate x the calibration's mean latency
  double rate_per_s = 0;
  LcStats lc;
  double lc_load_measured = 0;  // rate x this run's mean latency (queueing included)
  double gpu_busy_fraction = 0; // compute engine busy share over the run
  double target_ms = 0;         // target_factor x lc.p99_ms
  Status status;
};

// One BE job alone: its throughput is what "fraction of standalone" divides by.
struct StandaloneBe {
  std::string device_mode;
  std::string job;
  BeRun run;
  double gpu_busy_fraction = 0;
  Status status;
};

// The BE jobs of a mix of more than one, alone together (no LC): each one's throughput beside the
// others is the most it can get in that mix, the reference of "fraction of the mix alone".
struct StandaloneMix {
  std::string device_mode;
  std::string be_mix;
  std::vector<BeRun> runs;  // in mix order
  double gpu_busy_fraction = 0;
  Status status;
};

// A device mode's predictor training: the CUPTI-profiled run of its jobs and `gpuqos train`. When it
// failed, every gpuqosd of the mode started from an untrained predictor (baymax then holds
// best-effort work on wild upper estimates): its cells ran, but not as a user would deploy them.
struct Training {
  std::string device_mode;
  Status status;
};

// The caveat of a cell under gpuqosd whose mode's training failed; "" for `none` (no gpuqosd) and
// when the training went (or is not in `trainings`).
std::string untrained_caveat(const Cell& cell, const std::vector<Training>& trainings);

// What a cell's processes reported, before any reference is applied.
struct CellMeasurement {
  LcStats lc;
  std::vector<BeRun> be;
  double gpu_busy_fraction = 0;
};

// A BE job's throughput in a cell against its references. A reference that is missing, failed or
// made no iteration gives none (JSON null, "n/a"), never 0 or a ratio to 0; the cell's caveat says which.
struct BeJobResult {
  BeRun run;
  std::optional<double> standalone_iterations_per_s;
  std::optional<double> fraction_of_standalone;
  std::optional<double> mix_alone_iterations_per_s;  // beside the mix's other jobs, no LC (one-job mix: standalone)
  std::optional<double> fraction_of_mix_alone;
};

struct CellResult {
  Cell cell;
  // Whether its standalone LC reference went: rate_per_s, target_ms and lc_gpu_busy_standalone are
  // its figures only then (qos.json: null otherwise, not 0).
  bool lc_reference = false;
  double rate_per_s = 0;
  double target_ms = 0;
  LcStats lc;
  double violation_fraction = 0;         // share of queries over target_ms
  QuantileInterval lc_p99_ci95;          // where the LC's true p99 lies, at 95 % (ends none: too few queries)
  double lc_gpu_busy_standalone = 0;     // the reference's, which sets the ideal leftover
  std::vector<BeJobResult> be;
  std::optional<double> be_fraction_of_ideal;  // none when a job has no usable standalone reference
  // The same with each job's throughput in the mix alone as its reference: of the GPU time the LC
  // leaves idle, the share the mix got of what it gets with the whole GPU. Two BE jobs that each
  // keep the GPU busy alone cannot both run at their standalone rate, LC or not. None when a job
  // has no usable reference (rather than a figure pulled down by a missing one).
  std::optional<double> be_fraction_of_ideal_together;
  double gpu_busy_fraction = 0;
  Status status;
};

struct Results {
  std::vector<Calibration> calibrations;
  std::vector<StandaloneLc> standalone_lc;
  std::vector<StandaloneBe> standalone_be;
  std::vector<StandaloneMix> standalone_mixes;
  std::vector<Training> trainings;
  std::vector<CellResult> cells;
  bool interrupted = false;  // stopped by the user: the runs after the last ones here were not made
};

// The runs that failed: references (calibration, standalone LC, BE jobs and mixes), the predictor
// trainings and cells.
std::size_t failed_runs(const Results& results);

// The cell's figures from its measurement and the standalone runs of its device mode and load.
// A BE job without a usable standalone throughput has no fraction of it, and the cell no
// be_fraction_of_ideal; one of a mix without a usable run of the mix alone has no fraction of it,
// and the cell no be_fraction_of_ideal_together. The status is ok, its caveat naming each
// reference that is missing or failed (the caller adds the run's own with add_caveat).
CellResult evaluate_cell(const Cell& cell, const CellMeasurement& measured, const StandaloneLc& lc_reference,
                         const std::vector<StandaloneBe>& be_references,
                         const std::vector<StandaloneMix>& mix_references);

// A failed cell: the grid coordinates, target (when `lc_reference` went) and reason, no figures.
CellResult failed_cell(const Cell& cell, const StandaloneLc& lc_reference, Status status);

// A replayer's result (gpuqos-replay --out): the LC's figures and every latency, or a best-effort
// job's throughput. Throw nlohmann::json's exceptions on a result without them.
LcStats lc_stats(const nlohmann::json& result);
BeRun be_run(const std::string& job, const nlohmann::json& result);

}  // namespace gpuqos::qos

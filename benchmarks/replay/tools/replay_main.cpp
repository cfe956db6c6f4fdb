// gpuqos-replay: replays a workload on a CUDA device as latency-critical queries or best-effort iterations.
#include <gpuqos/query.h>

#include <CLI/CLI.hpp>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include "cli_checks.h"
#include "cuda_replayer.h"
#include "gpuqos/replay/measurements.h"
#include "gpuqos/replay/replay_module.h"
#include "gpuqos/replay/text_file.h"
#include "gpuqos/replay/workload.h"

namespace {

using namespace gpuqos::replay;
using Clock = CudaReplayer::Clock;
using nlohmann::json;

struct Options {
  std::string workload_path;
  std::string ptx_path;  // empty: generate it from the workload
  std::string mode = "be";
  std::string gaps = "keep";
  double lead_us = 0;
  double pace_scale = 1.0;
  double rate_per_s = 10;
  bool closed_loop = false;
  bool mark_queries = false;
  bool thread_per_stream = false;
  std::uint64_t seed = 1;
  std::optional<double> duration_s;
  std::optional<std::uint64_t> count;  // --queries / --iterations
  std::string out_path;
  int device = 0;
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

json summary_json(const LatencySummary& s) {
  return {{"count", s.count},   {"mean_ms", s.mean_ms}, {"p50_ms", s.p50_ms}, {"p90_ms", s.p90_ms},
          {"p99_ms", s.p99_ms}, {"min_ms", s.min_ms},   {"max_ms", s.max_ms}};
}

// Stops at the count or when the duration has passed, whichever comes first.
struct StopRule {
  Clock::time_point begin;
  std::optional<double> duration_s;
  std::optional<std::uint64_t> count;
  bool done(std::uint64_t finished, Clock::time_point now) const {
    if (count && finished >= *count) return true;
    return duration_s && ms_between(begin, now) >= *duration_s * 1000.0;
  }
};

Clock::time_point next_arrival(Clock::time_point arrival, PoissonArrivals& arrivals) {
  return arrival + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals.next_gap_s()));
}

// --mark-queries, open loop: says when each request arrives (gpuqos_query_arrived), at its arrival,
// from a thread of its own, as a server's receiving thread would, while the worker may be busy with
// an earlier one. The schedule is the worker's: the same process from the same seed. The worker
// begins request n only once its arrival was said (wait_said), so the daemon pairs them right.
class ArrivalAnnouncer {
 public:
  ArrivalAnnouncer(const Options& o, Clock::time_point first)
      : thread_([this, rate = o.rate_per_s, seed = o.seed, first](std::stop_token stop) { run(stop, rate, seed, first); }) {}

  void wait_said(std::uint64_t count) {
    std::unique_lock lock(mutex_);
    said_cv_.wait(lock, [&] { return said_ >= count; });
  }

 private:
  void run(std::stop_token stop, double rate, std::uint64_t seed, Clock::time_point arrival) {
    PoissonArrivals arrivals(rate, seed);
    std::mutex sleep_mutex;
    std::condition_variable_any sleep_cv;
    for (;;) {
      std::unique_lock sleep(sleep_mutex);
      if (sleep_cv.wait_until(sleep, stop, arrival, [] { return false; }) || stop.stop_requested()) return;
      gpuqos_query_arrived();
      {
        std::lock_guard lock(mutex_);
        ++said_;
      }
      said_cv_.notify_all();
      arrival = next_arrival(arrival, arrivals);
    }
  }

  std::mutex mutex_;
  std::condition_variable said_cv_;
  std::uint64_t said_ = 0;
  std::jthread thread_;  // last: stopped and joined before the rest goes
};

// Latency-critical: each query replays the workload once; one query at a time, in arrival order.
// --mark-queries brackets each with gpuqos/query.h's marks (no-ops without the shim).
// Open loop with a duration: the requests that arrived before its end are served after it too (a
// review: they were dropped, and they are the slowest), for at most as long again; any still
// waiting then are `unserved`, their latency counted as their wait so far (a lower bound).
json run_queries(CudaReplayer& replayer, const Options& o, const StopRule& stop) {
  std::vector<double> latency_ms, service_ms, device_ms, unserved_ms;
  PoissonArrivals arrivals(o.closed_loop ? 1.0 : o.rate_per_s, o.seed);
  Clock::time_point arrival = stop.begin;
  std::optional<ArrivalAnnouncer> announcer;
  if (o.mark_queries && !o.closed_loop) announcer.emplace(o, arrival);
  const bool drains = !o.closed_loop && stop.duration_s.has_value();
  const auto span = drains ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*stop.duration_s))
                           : Clock::duration::zero();
  const Clock::time_point end = stop.begin + span;
  const auto counted = [&] { return stop.count && latency_ms.size() >= *stop.count; };
  const auto more = [&] {
    if (drains && arrival >= end) return false;  // one arriving after the run is not the run's (a review)
    if (!stop.done(latency_ms.size(), Clock::now())) return true;
    return drains && Clock::now() < end + span && !counted();
  };
  while (more()) {
    std::this_thread::sleep_until(arrival);
    if (announcer) announcer->wait_said(latency_ms.size() + 1);
    if (o.mark_queries) gpuqos_query_begin();
    replayer.start(false);  // the query's clock is the host's: its arrival
    const Clock::time_point start = std::max(Clock::now(), arrival);
    replayer.submit(start);
    device_ms.push_back(replayer.wait());
    if (o.mark_queries) gpuqos_query_end();
    const Clock::time_point done = Clock::now();
    latency_ms.push_back(ms_between(arrival, done));
    service_ms.push_back(ms_between(start, done));
    arrival = o.closed_loop ? done : next_arrival(arrival, arrivals);
  }
  announcer.reset();
  const Clock::time_point stopped = Clock::now();
  // Stopped by --queries, none is left waiting; by the clock, those that came by then and by the end.
  for (; drains && !counted() && arrival < std::min(end, stopped); arrival = next_arrival(arrival, arrivals)) {
    unserved_ms.push_back(ms_between(arrival, stopped));
  }
  const double wall_s = ms_between(stop.begin, stopped) / 1000.0;
  std::vector<double> all_ms = latency_ms;
  all_ms.insert(all_ms.end(), unserved_ms.begin(), unserved_ms.end());
  json summary = summary_json(summarize(all_ms));
  summary["unserved"] = unserved_ms.size();
  summary["throughput_per_s"] = static_cast<double>(latency_ms.size()) / wall_s;
  summary["wall_s"] = wall_s;
  summary["service"] = summary_json(summarize(service_ms));
  summary["device"] = summary_json(summarize(device_ms));
  return {{"latency_ms", latency_ms}, {"unserved_ms", unserved_ms}, {"service_ms", service_ms},
          {"device_ms", device_ms},   {"summary", summary}};
}

// Best-effort: iterations back to back, each timed by events and by the wall clock.
json run_iterations(CudaReplayer& replayer, const StopRule& stop) {
  std::vector<double> iteration_ms, wall_ms;
  while (!stop.done(iteration_ms.size(), Clock::now())) {
    const Clock::time_point start = Clock::now();
    replayer.submit(replayer.start(true));
    iteration_ms.push_back(replayer.wait());
    wall_ms.push_back(ms_between(start, Clock::now()));
  }
  const double wall_s = ms_between(stop.begin, Clock::now()) / 1000.0;
  json summary = summary_json(summarize(iteration_ms));
  summary["iterations_per_s"] = static_cast<double>(iteration_ms.size()) / wall_s;
  summary["throughput_per_s"] = summary["iterations_per_s"];
  summary["wall_s"] = wall_s;
  summary["wall"] = summary_json(summarize(wall_ms));
  return {{"iteration_ms", iteration_ms}, {"iteration_wall_ms", wall_ms}, {"summary", summary}};
}

void print_summary(const Options& o, const json& result, const Workload& w) {
  const json& s = result["summary"];
  std::cout << "gpuqos-replay: " << o.mode << " " << s["count"] << (o.mode == "lc" ? " queries" : " iterations")
            << " of " << o.workload_path << " (" << w.ops.size() << " ops, gaps " << o.gaps << "): "
            << (o.mode == "lc" ? "latency" : "iteration") << " mean " << s["mean_ms"].get<double>() << " ms, p50 "
            << s["p50_ms"].get<double>() << ", p90 " << s["p90_ms"].get<double>() << ", p99 "
            << s["p99_ms"].get<double>() << " ms; " << s["throughput_per_s"].get<double>() << " per second\n";
}

int run(const Options& o) {
  const Workload workload = load_workload(o.workload_path);
  const std::string ptx = o.ptx_path.empty() ? generate_ptx(workload) : read_text_file(o.ptx_path);
  const auto us = [](double v) { return std::chrono::nanoseconds(static_cast<std::int64_t>(v * 1000)); };
  CudaReplayer replayer(workload, ptx, o.device, o.gaps == "keep", us(o.lead_us), o.pace_scale, o.thread_per_stream);
  StopRule stop{Clock::now(), o.duration_s, o.count};
  if (!stop.count && !stop.duration_s) stop.duration_s = 10.0;
  json result = o.mode == "lc" ? run_queries(replayer, o, stop) : run_iterations(replayer, stop);
  result["config"] = {{"workload", o.workload_path}, {"mode", o.mode},   {"gaps", o.gaps}, {"lead_us", o.lead_us}, {"pace_scale", o.pace_scale},
                      {"rate_per_s", o.rate_per_s},  {"closed_loop", o.closed_loop}, {"mark_queries", o.mark_queries}, {"thread_per_stream", o.thread_per_stream}, {"seed", o.seed},
                      {"device", replayer.device_name()}};
  result["trace"] = {{"source", workload.source},
                     {"span_ms", static_cast<double>(workload.span_ns) / 1e6},
                     {"busy_ms", static_cast<double>(workload.busy_ns) / 1e6},
                     {"kernel_busy_ms", static_cast<double>(workload.kernel_busy_ns) / 1e6},
                     {"ops", workload.ops.size()},
                     {"skipped_zero_byte_ops", replayer.skipped_ops()}};
  print_summary(o, result, workload);
  if (!o.out_path.empty()) {
    std::ofstream out(o.out_path);
    if (!out || !(out << result.dump(1) << "\n")) throw std::runtime_error("cannot write " + o.out_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replays a gpuqos workload through the CUDA driver API."};
  Options o;
  std::uint64_t queries = 0, iterations = 0;
  double duration_s = 0;
  app.add_option("--workload", o.workload_path, "workload JSON from gpuqos-trace2workload")->required()->check(CLI::ExistingFile);
  app.add_option("--ptx", o.ptx_path, "PTX module (default: generated from the workload)")->check(CLI::ExistingFile);
  app.add_option("--mode", o.mode, "lc: latency-critical queries; be: best-effort iterations")
      ->check(CLI::IsMember({"lc", "be"}))->capture_default_str();
  app.add_option("--gaps", o.gaps, "keep: submit each op at its recorded offset; drop: back to back")
      ->check(CLI::IsMember({"keep", "drop"}))->capture_default_str();
  app.add_option("--lead-us", o.lead_us,
                 "gaps keep: submit each op this much before its recorded start, to cover the time work "
                 "takes to reach the device (0: never before it)")
      ->check(gpuqos::tools::finite_in(0, 3.6e9))->capture_default_str();
  app.add_option("--pace-scale", o.pace_scale,
                 "gaps keep: stretch recorded offsets by this factor (the device's time_scale when it runs "
                 "slowed down, e.g. simgpu with time_scale > 1)")
      ->check(gpuqos::tools::positive_number())->capture_default_str();
  app.add_option("--rate", o.rate_per_s, "lc: query arrivals per second (Poisson, open loop)")
      ->check(gpuqos::tools::positive_number())->capture_default_str();
  app.add_flag("--closed-loop", o.closed_loop, "lc: the next query arrives when the previous one finished");
  app.add_flag("--mark-queries", o.mark_queries,
               "lc: mark each query with gpuqos/query.h (its arrival, from a thread of its own, its begin and "
               "end), so gpuqosd's latency and deadline run from the arrival");
  app.add_flag("--thread-per-stream", o.thread_per_stream,
               "submit each trace stream's ops from a thread of its own: a call that blocks (a launch held "
               "by gpuqosd) then stops only the thread of its stream, not the others' schedule");
  app.add_option("--seed", o.seed, "seed of the arrival process")->capture_default_str();
  auto* duration = app.add_option("--duration", duration_s, "stop after this many seconds (default 10 without a count)")
                       ->check(gpuqos::tools::positive_number());
  auto* n_queries = app.add_option("--queries", queries, "lc: stop after this many queries")->check(CLI::PositiveNumber);
  auto* n_iterations = app.add_option("--iterations", iterations, "be: stop after this many iterations")->check(CLI::PositiveNumber);
  app.add_option("--device", o.device, "CUDA device ordinal")->capture_default_str();
  app.add_option("--out", o.out_path, "write all measurements and the summary here (JSON)");
  CLI11_PARSE(app, argc, argv);
  if (*duration) o.duration_s = duration_s;
  if (*n_queries) o.count = queries;
  if (*n_iterations) o.count = iterations;
  try {
    if (*n_queries && o.mode != "lc") throw std::invalid_argument("--queries is for --mode lc (use --iterations)");
    if (*n_iterations && o.mode != "be") throw std::invalid_argument("--iterations is for --mode be (use --queries)");
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "gpuqos-replay: " << e.what() << "\n";
    return 1;
  }
}

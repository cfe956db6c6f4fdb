// Replay fidelity on simgpu: real traces converted, replayed through simgpu's libcuda, and the
// device's own figures compared with the trace (BERT busy time per query, ResNet iteration time).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/replay/measurements.h"
#include "gpuqos/replay/workload.h"
#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/simgpud_process.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::replay {
namespace {

namespace fs = std::filesystem;
using gpuqos::testing::ChildProcess;
using gpuqos::testing::SimgpudProcess;
using gpuqos::testing::SimgpudStartup;
using nlohmann::json;
using namespace std::chrono_literals;

const fs::path kBuild = GPUQOS_BUILD_DIR;
const fs::path kTraces = fs::path(GPUQOS_SOURCE_DIR) / ".." / "shared" / "traces";
constexpr double kTolerance = 0.02;

// One simgpud on a socket of its own, in its temp dir that holds every file of the test (the
// catalog there is the one the trace conversion writes).
class SimgpuRig {
 public:
  // time_scale > 1 runs the device in slow motion so that this machine's scheduling noise is
  // small next to device time (the replay paces itself by the same factor).
  explicit SimgpuRig(double time_scale = 1.0)
      : simgpud_({.profile_toml = "time_scale = " + std::to_string(time_scale) + "\n",
                  .dir_prefix = "gpuqos-replay-itest"}) {
    for (const fs::path& p : {bin("simgpud"), bin("simgpu-stat"), bin("gpuqos-replay"), bin("gpuqos-trace2workload"),
                              kBuild / "lib" / "simgpu" / "libcuda.so.1"}) {
      if (!fs::exists(p)) missing_ += p.string() + " ";
    }
  }
  const std::string& missing() const { return missing_; }
  fs::path file(const std::string& name) const { return simgpud_.file(name); }

  // Converts a trace; returns the workload (also written to <name>.json).
  Workload convert(const std::string& trace, const std::string& name, const std::string& iteration) {
    run({bin("gpuqos-trace2workload").string(), "--trace", (kTraces / trace).string(), "--out",
         file(name + ".json").string(), "--catalog", file("catalog.json").string(), "--iteration", iteration},
        name + "-convert");
    return load_workload(file(name + ".json"));
  }

  void start_simgpud() {
    const SimgpudStartup startup = simgpud_.try_start(10s);
    ASSERT_NE(startup, SimgpudStartup::exited) << "simgpud exited:\n" << simgpud_.log_text();
    ASSERT_EQ(startup, SimgpudStartup::serving) << "simgpud did not create its socket:\n" << simgpud_.log_text();
  }

  json device_stats() {
    const std::string out = run({bin("simgpu-stat").string(), "--socket", socket().string()}, "stat");
    return json::parse(out).at("devices").at(0);
  }

  json replay(const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv{bin("gpuqos-replay").string(), "--workload", file(name + ".json").string(), "--out",
                                  file(name + "-results.json").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    run(argv, name + "-replay");
    std::ifstream in(file(name + "-results.json"));
    return json::parse(in);
  }

  // Runs a program to completion with simgpu's driver and socket; throws with its output on failure.
  std::string run(const std::vector<std::string>& argv, const std::string& log) {
    ChildProcess child(argv,
                       {{"LD_LIBRARY_PATH", (kBuild / "lib" / "simgpu").string()}, {"SIMGPU_SOCKET", socket().string()}},
                       file(log + ".log"));
    const auto code = child.wait(240s);
    if (code != 0) {
      throw std::runtime_error(argv[0] + (code ? " exited with " + std::to_string(*code) : " timed out") + ":\n" +
                               child.output() + "\nsimgpud log:\n" + simgpud_.log_text());
    }
    return child.output();
  }

 private:
  static fs::path bin(const std::string& name) { return kBuild / "bin" / name; }
  fs::path socket() const { return simgpud_.socket(); }

  // No profile (simgpud's default device); convert() writes the catalog.
  SimgpudProcess simgpud_;
  std::string missing_;
};

double relative_error(double measured, double expected) { return std::abs(measured - expected) / expected; }

// How many requests the replayer's open loop (rate, seed) makes arrive in its first duration_s.
std::size_t arrivals_before(double rate_per_s, std::uint64_t seed, double duration_s) {
  std::size_t arrived = 0;
  PoissonArrivals arrivals(rate_per_s, seed);
  for (double at_s = 0; at_s < duration_s; at_s += arrivals.next_gap_s()) ++arrived;
  return arrived;
}

// An iteration that is not a number is said plainly, before the trace is read (it said only
// "stoul"; "-1" became iteration 18446744073709551615).
TEST(Trace2Workload, AnIterationThatIsNotANumberIsSaidPlainly) {
  SimgpuRig rig;
  if (!rig.missing().empty()) GTEST_SKIP() << "not built: " << rig.missing();
  for (const std::string bad : {"abc", "-1", "2x", ""}) {
    try {
      rig.convert("tracelens_h100_bert_small_bs1_infer.json.gz", "bad", bad);
      ADD_FAILURE() << "--iteration '" << bad << "' was taken";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("exited with 2"), std::string::npos) << what;
      EXPECT_NE(what.find("gpuqos-trace2workload: --iteration " + bad + ": expected 'all' or an iteration number (0, 1, ...)"),
                std::string::npos)
          << what;
    }
  }
}

// A rate, time scale or duration that is not a positive number is said in a line, not as CLI11's
// range of a double (300 digits), and refused before any workload is read.
TEST(Replay, ANumberThatMustBePositiveIsSaidPlainly) {
  const fs::path replay = kBuild / "bin" / "gpuqos-replay";
  if (!fs::exists(replay)) GTEST_SKIP() << "not built: " << replay;
  gpuqos::testing::TempDir dir("replay-usage");
  const fs::path workload = dir.write("w.json", "{}");  // there, so only the number is wrong
  for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{
           {"--rate", "0"}, {"--pace-scale", "nan"}, {"--duration", "-1"}, {"--rate", "inf"}}) {
    ChildProcess child({replay.string(), "--workload", workload.string(), option, value},
                       {{"LD_LIBRARY_PATH", (kBuild / "lib" / "simgpu").string()}}, dir.path() / "out.txt");
    const auto code = child.wait(30s);
    EXPECT_NE(code.value_or(0), 0) << option << " " << value;
    const std::string out = child.output();
    EXPECT_NE(out.find(option + ": must be a positive number (got " + value + ")"), std::string::npos) << out;
    EXPECT_LT(out.size(), 400u) << out;
  }
}

TEST(ReplayFidelity, BertQueryDeviceBusyTimeMatchesTrace) {
  SimgpuRig rig;
  if (!rig.missing().empty()) GTEST_SKIP() << "not built: " << rig.missing();
  const Workload bert = rig.convert("tracelens_h100_bert_small_bs1_infer.json.gz", "bert", "all");
  ASSERT_NO_FATAL_FAILURE(rig.start_simgpud());
  constexpr int kQueries = 20;
  const json before = rig.device_stats();
  const json results = rig.replay("bert", {"--mode", "lc", "--queries", std::to_string(kQueries), "--closed-loop"});
  const json after = rig.device_stats();

  const auto delta = [&](const char* key) { return after.at(key).get<double>() - before.at(key).get<double>(); };
  EXPECT_EQ(delta("kernels_completed"), 60.0 * kQueries);
  const double compute_busy_ns = delta("compute_busy_ns") / kQueries;
  const double copy_busy_ns = (delta("h2d_busy_ns") + delta("d2h_busy_ns")) / kQueries;
  std::cout << "BERT query: trace busy " << bert.busy_ns << " ns (kernels " << bert.kernel_busy_ns
            << "), simgpu busy per query: compute " << compute_busy_ns << " ns, copies " << copy_busy_ns
            << " ns; query latency p50 " << results["summary"]["p50_ms"] << " ms (trace span "
            << bert.span_ns / 1e6 << " ms)\n";
  EXPECT_LT(relative_error(compute_busy_ns, static_cast<double>(bert.kernel_busy_ns)), kTolerance);
  EXPECT_LT(relative_error(compute_busy_ns + copy_busy_ns, static_cast<double>(bert.busy_ns)), kTolerance);
  EXPECT_EQ(results["latency_ms"].size(), static_cast<std::size_t>(kQueries));
}

// A review: the open-loop replayer stopped at its duration and dropped the requests still queued,
// the slowest ones, so an overloaded run's p99 and violations were understated. Every request that
// arrived in the run is now served or counted as unserved, with its wait as a lower bound.
TEST(Replay, EveryRequestThatArrivedIsServedOrCountedUnserved) {
  SimgpuRig rig;
  if (!rig.missing().empty()) GTEST_SKIP() << "not built: " << rig.missing();
  rig.convert("tracelens_h100_bert_small_bs1_infer.json.gz", "bert", "all");
  ASSERT_NO_FATAL_FAILURE(rig.start_simgpud());
  // A query takes about 4 ms (its recorded host gaps kept): 600/s is more than twice what it serves.
  constexpr double kRate = 600, kDurationS = 0.5;
  const json results = rig.replay("bert", {"--mode", "lc", "--rate", std::to_string(kRate), "--duration",
                                           std::to_string(kDurationS), "--seed", "7"});
  const std::size_t arrived = arrivals_before(kRate, 7, kDurationS);
  const std::size_t served = results.at("latency_ms").size();
  const std::size_t unserved = results.at("unserved_ms").size();
  EXPECT_EQ(served + unserved, arrived) << served << " served, " << unserved << " unserved";
  EXPECT_EQ(results["summary"]["count"].get<std::size_t>(), arrived);
  EXPECT_EQ(results["summary"]["unserved"].get<std::size_t>(), unserved);
  EXPECT_GT(unserved, 0u) << "served after the end for at most as long again: an overload leaves some";
  // Served after the end, for as long again: an overload keeps it serving to the limit.
  EXPECT_GT(results["summary"]["wall_s"].get<double>(), 1.5 * kDurationS) << "the queue was served after the end";
  const auto& last = results.at("unserved_ms");
  if (!last.empty()) {
    EXPECT_GT(last.front().get<double>(), kDurationS * 1000) << "the oldest waited past the end";
  }
}

// A review of the drain: with --queries too, the requests after the count were taken as unserved
// with negative waits; and an idle replayer served one that arrived after the end.
TEST(Replay, OnlyRequestsThatArrivedInTheRunAreCounted) {
  SimgpuRig rig;
  if (!rig.missing().empty()) GTEST_SKIP() << "not built: " << rig.missing();
  rig.convert("tracelens_h100_bert_small_bs1_infer.json.gz", "bert", "all");
  ASSERT_NO_FATAL_FAILURE(rig.start_simgpud());
  const json counted = rig.replay("bert", {"--mode", "lc", "--rate", "20", "--queries", "5", "--duration", "3"});
  EXPECT_EQ(counted.at("latency_ms").size(), 5u);
  EXPECT_EQ(counted.at("unserved_ms").size(), 0u) << counted.at("unserved_ms").dump();
  EXPECT_GT(counted["summary"]["min_ms"].get<double>(), 0.0);
  constexpr double kRate = 4, kDurationS = 2;
  const json idle = rig.replay("bert", {"--mode", "lc", "--rate", std::to_string(kRate), "--duration",
                                        std::to_string(kDurationS), "--seed", "3"});
  EXPECT_EQ(idle.at("latency_ms").size() + idle.at("unserved_ms").size(), arrivals_before(kRate, 3, kDurationS));
}

TEST(ReplayFidelity, ResNetIterationTimeMatchesTrace) {
  // 1,516 ops in 118 ms: at full speed a few microseconds of host delay per op would show.
  constexpr double kTimeScale = 4;
  SimgpuRig rig(kTimeScale);
  if (!rig.missing().empty()) GTEST_SKIP() << "not built: " << rig.missing();
  const Workload resnet = rig.convert("kineto_resnet50_v100_train.json.gz", "resnet", "1");
  ASSERT_EQ(resnet.iterations.size(), 1u);
  ASSERT_NO_FATAL_FAILURE(rig.start_simgpud());
  const json results = rig.replay("resnet", {"--mode", "be", "--iterations", "3", "--pace-scale", "4"});
  const double trace_ms = static_cast<double>(resnet.iterations[0].span_ns) / 1e6;
  ASSERT_EQ(results["iteration_ms"].size(), 3u);
  // Host and server scheduling delays on a busy machine only ever add time (a late submission
  // leaves the device idle), so the best iteration is the one that shows the replay's fidelity.
  double best_error = 1e9;
  for (const json& measured : results["iteration_ms"]) {
    const double simulated_ms = measured.get<double>() / kTimeScale;
    std::cout << "ResNet-50 iteration (" << resnet.iterations[0].name << "): trace " << trace_ms << " ms, simgpu "
              << simulated_ms << " ms (at time_scale " << kTimeScale << ")\n";
    best_error = std::min(best_error, relative_error(simulated_ms, trace_ms));
  }
  EXPECT_LT(best_error, kTolerance);
}

// --thread-per-stream (each trace stream submitted from a thread of its own, the QoS benchmark's
// stand-in for host-side deferral of held launches): every op of every stream reaches the device
// once per iteration, none lost or repeated across the threads.
TEST(ReplayThreadPerStream, SubmitsEveryOpOfEveryStreamOnce) {
  SimgpuRig rig;
  if (!rig.missing().empty()) GTEST_SKIP() << "not built: " << rig.missing();
  const Workload recsys = rig.convert("hta_a100_recsys_train_rank0.json.gz", "recsys", "1");
  std::set<std::int64_t> streams;
  std::uint64_t kernels = 0, copies = 0;
  for (const Operation& op : recsys.ops) {
    streams.insert(op.stream);
    if (op.kind == OpKind::kernel) {
      ++kernels;
    } else if (op.bytes > 0) {
      ++copies;  // simgpu counts memsets with copies; zero-byte ones are skipped
    }
  }
  ASSERT_GT(streams.size(), 2u) << "the test needs a workload of several streams";
  ASSERT_NO_FATAL_FAILURE(rig.start_simgpud());
  constexpr std::uint64_t kIterations = 2;
  const json before = rig.device_stats();
  const json results =
      rig.replay("recsys", {"--mode", "be", "--iterations", std::to_string(kIterations), "--thread-per-stream"});
  const json after = rig.device_stats();
  const auto delta = [&](const char* key) { return after.at(key).get<std::uint64_t>() - before.at(key).get<std::uint64_t>(); };
  EXPECT_EQ(delta("kernels_completed"), kIterations * kernels);
  EXPECT_EQ(delta("copies_completed"), kIterations * copies);
  EXPECT_EQ(results.at("iteration_ms").size(), kIterations);
  EXPECT_TRUE(results.at("config").at("thread_per_stream").get<bool>());
}

}  // namespace
}  // namespace gpuqos::replay

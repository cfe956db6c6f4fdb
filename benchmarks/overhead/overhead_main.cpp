// gpuqos-overhead: what gpuqosd and libgpuqos.so cost, measured side by side in one run against
// direct simgpu calls (issue 3's overhead goals). Figures only: nothing here checks a goal.
//
//   build/bin/gpuqos-overhead [--out DIR] [--quick] [--rounds N] [--launches N] [--iterations N]
//
// It starts its own simgpud and two gpuqosd (fifo; one granting credit as by default, one with
// --credit-ops 0) on private sockets in a temp dir, then, in each round, runs as child processes:
//   1. gpuqos-overhead-launch-timer (N cuLaunchKernel calls of a 0-us kernel, each timed) directly
//      on simgpu, under `gpuqos run --priority high`, and at low priority under each daemon, on a
//      stream of its own; and directly and at high priority on the legacy default stream;
//   2. gpuqos-replay --mode be on one ResNet-50 training iteration (converted from
//      ../shared/traces/kineto_resnet50_v100_train.json.gz) directly and at low priority under each.
// Samples are pooled over the rounds; it prints a markdown table (p50/p99, differences, ratios)
// and with --out writes DIR/overhead.json and DIR/overhead.md. About a minute; --quick: seconds.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "report.h"
#include "rig.h"

namespace gpuqos::overhead {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kResNetTrace =
    fs::path(GPUQOS_SOURCE_DIR) / ".." / "shared" / "traces" / "kineto_resnet50_v100_train.json.gz";

struct Options {
  std::string out_dir;
  bool quick = false;
  int rounds = 5;
  long launches = 20000;    // per launch-timer run
  long iterations = 20;     // per replay run, after one warm-up iteration
};

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// One launch-timer run (on a stream of its own, or the legacy default stream); its call times (us)
// are appended to `samples`.
void time_launches(const Rig& rig, Placement placement, const Options& o, int round, std::vector<double>& samples,
                   bool legacy = false) {
  const std::string name = std::string("launch-") + placement_name(placement) + (legacy ? "-legacy-" : "-") +
                           std::to_string(round);
  const fs::path out = rig.file(name + ".json");
  rig.run(placement,
          {Rig::bin("gpuqos-overhead-launch-timer").string(), "--launches", std::to_string(o.launches), "--warmup",
           std::to_string(o.launches / 20 + 100), "--out", out.string(), "--stream", legacy ? "legacy" : "own"},
          name);
  const json result = read_json(out);  // named: a range-for over a temporary's member would dangle
  for (const json& ns : result.at("call_ns")) samples.push_back(ns.get<double>() / 1000.0);
}

// One best-effort replay run; its iteration wall times (ms) but the first are appended to `samples`.
void replay(const Rig& rig, Placement placement, const Options& o, int round, std::vector<double>& samples) {
  const std::string name = std::string("replay-") + placement_name(placement) + "-" + std::to_string(round);
  const fs::path out = rig.file(name + ".json");
  rig.run(placement,
          {Rig::bin("gpuqos-replay").string(), "--workload", rig.file("resnet.json").string(), "--mode", "be",
           "--iterations", std::to_string(o.iterations + 1), "--out", out.string()},
          name);
  const json wall_ms = read_json(out).at("iteration_wall_ms");
  for (std::size_t i = 1; i < wall_ms.size(); ++i) samples.push_back(wall_ms[i].get<double>());
}

void prepare(Rig& rig) {
  rig.run(Placement::direct,
          {Rig::bin("gpuqos-trace2workload").string(), "--trace", kResNetTrace.string(), "--out",
           rig.file("resnet.json").string(), "--catalog", rig.file("replay_catalog.json").string(), "--iteration", "1"},
          "convert");
  std::ifstream in(rig.file("replay_catalog.json"));
  rig.write_catalog(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  rig.start();
}

// Rounds alternate the configurations so that drift in the machine's load hits all of them alike.
Samples measure(const Rig& rig, const Options& o) {
  Samples s;
  for (int round = 0; round < o.rounds; ++round) {
    std::cerr << "gpuqos-overhead: round " << round + 1 << " of " << o.rounds << "\n";
    time_launches(rig, Placement::direct, o, round, s.direct_launch_us);
    time_launches(rig, Placement::high, o, round, s.high_launch_us);
    time_launches(rig, Placement::low, o, round, s.low_launch_us);
    time_launches(rig, Placement::low_strict, o, round, s.low_strict_launch_us);
    time_launches(rig, Placement::direct, o, round, s.direct_legacy_launch_us, /*legacy=*/true);
    time_launches(rig, Placement::high, o, round, s.high_legacy_launch_us, /*legacy=*/true);
    replay(rig, Placement::direct, o, round, s.direct_iteration_ms);
    replay(rig, Placement::low, o, round, s.low_iteration_ms);
    replay(rig, Placement::low_strict, o, round, s.low_strict_iteration_ms);
  }
  return s;
}

void write_outputs(const Report& report, const std::string& out_dir) {
  fs::create_directories(out_dir);
  std::ofstream(fs::path(out_dir) / "overhead.json") << report.json.dump(2) << "\n";
  std::ofstream(fs::path(out_dir) / "overhead.md") << report.markdown;
  std::cerr << "gpuqos-overhead: wrote " << out_dir << "/overhead.json and overhead.md\n";
}

int run(const Options& o) {
  Rig rig;
  prepare(rig);
  const Samples samples = measure(rig, o);
  const json config = {{"rounds", o.rounds},          {"launches_per_run", o.launches},
                       {"iterations_per_run", o.iterations}, {"quick", o.quick},
                       {"policy", "fifo"}, {"credit_ops", {32, 0}},            {"replay", "gpuqos-replay --mode be, ResNet-50 iteration 1"}};
  const Report report = make_report(samples, config);
  std::cout << report.markdown;
  if (!o.out_dir.empty()) write_outputs(report, o.out_dir);
  return 0;
}

}  // namespace
}  // namespace gpuqos::overhead

int main(int argc, char** argv) {
  gpuqos::overhead::Options o;
  CLI::App app{"gpuqosd/libgpuqos.so overhead against direct simgpu, side by side in one run."};
  app.add_option("--out", o.out_dir, "write overhead.json and overhead.md here");
  app.add_flag("--quick", o.quick, "one short round (1 round, 2000 launches, 3 iterations)");
  app.add_option("--rounds", o.rounds, "rounds (each runs every configuration once)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--launches", o.launches, "timed launches per launch-timer run")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--iterations", o.iterations, "timed replay iterations per run")->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.rounds = 1;
    o.launches = 2000;
    o.iterations = 3;
  }
  try {
    return gpuqos::overhead::run(o);
  } catch (const std::exception& e) {
    std::cerr << "gpuqos-overhead: " << e.what() << "\n";
    return 1;
  }
}

// The real pieces together on simgpu: simgpud, gpuqosd and CUDA programs (gpuqos-replay and
// tests/e2e/programs/pipeline_client) under libgpuqos.so, started with `gpuqos run` or LD_PRELOAD.
// Accounting in `gpuqos status --json`, order within streams, fail-open at start and on a daemon
// crash, re-registration, reclaiming killed clients, a hostile client.
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/pipeline_harness.h"

namespace {

using gpuqos::testing::ChildProcess;
using gpuqos::testing::eventually;
using gpuqos::testing::FakeClient;
using gpuqos::testing::Launch;
using gpuqos::testing::occurrences;
using gpuqos::testing::PipelineRig;
using nlohmann::json;
using namespace std::chrono_literals;
namespace ipc = gpuqos::ipc;

constexpr auto kFinish = 60s;  // only so that a hang fails instead of blocking the suite
// A node with two GPUs, for the tests of CUDA_VISIBLE_DEVICES.
constexpr const char* kTwoDevices = "sms = 8\n[[device]]\nname = \"e2e gpu zero\"\n[[device]]\nname = \"e2e gpu one\"\n";

bool holding(ChildProcess& program) { return program.output().find("e2e-hold: holding") != std::string::npos; }

// The last "<key> <n>" line of the output (-1 when none).
long last_value(const std::string& output, const std::string& key) {
  long value = -1;
  for (auto at = output.find(key + " "); at != std::string::npos; at = output.find(key + " ", at + 1)) {
    if (at == 0 || output[at - 1] == '\n') value = std::atol(output.c_str() + at + key.size() + 1);
  }
  return value;
}

// True when one line of the log contains both `first` and, after it, `then`.
bool logged(const std::string& log, const std::string& first, const std::string& then) {
  for (auto at = log.find(first); at != std::string::npos; at = log.find(first, at + 1)) {
    const auto end = log.find('\n', at);
    if (log.substr(at, end - at).find(then) != std::string::npos) return true;
  }
  return false;
}

std::uint64_t ops(const json& client, const char* which) { return client["ops"][which].get<std::uint64_t>(); }

// A small synthetic workload: stream 1 copies in, runs two kernels and copies out; stream 2 clears
// a buffer and runs a kernel. Seven operations per query or iteration, none of zero bytes.
json synthetic_workload() {
  const auto kernel = [](int stream, std::int64_t start_ns, const char* entry, std::int64_t duration_ns) {
    return json{{"kind", "kernel"}, {"stream", stream}, {"start_ns", start_ns}, {"duration_ns", duration_ns},
                {"idle_gap_ns", 0}, {"iteration", 0}, {"entry", entry}, {"grid", {4, 1, 1}},
                {"block", {128, 1, 1}}, {"shared_bytes", 0}};
  };
  const auto copy = [](int stream, std::int64_t start_ns, const char* direction) {
    return json{{"kind", "memcpy"}, {"stream", stream}, {"start_ns", start_ns}, {"duration_ns", 20'000},
                {"idle_gap_ns", 0}, {"iteration", 0}, {"bytes", 65536}, {"direction", direction},
                {"host_memory", "pinned"}};
  };
  json memset{{"kind", "memset"}, {"stream", 2}, {"start_ns", 0}, {"duration_ns", 5'000},
              {"idle_gap_ns", 0}, {"iteration", 0}, {"bytes", 4096}};
  return json{{"format", "gpuqos-workload"}, {"version", 1}, {"source", "e2e synthetic"}, {"gpu", nullptr},
              {"span_ns", 1'000'000}, {"busy_ns", 900'000}, {"kernel_busy_ns", 800'000},
              {"iterations", {{{"name", "step"}, {"start_ns", 0}, {"span_ns", 1'000'000}, {"busy_ns", 900'000}, {"ops", 7}}}},
              {"kernels", {{{"entry", "gq_k0"}, {"name", "k0"}}, {{"entry", "gq_k1"}, {"name", "k1"}}}},
              {"ops", {copy(1, 0, "h2d"), memset, kernel(1, 30'000, "gq_k0", 300'000), kernel(2, 40'000, "gq_k1", 200'000),
                       kernel(1, 340'000, "gq_k1", 200'000), copy(1, 560'000, "d2h"),
                       kernel(2, 600'000, "gq_k0", 300'000)}}};
}
constexpr std::uint64_t kWorkloadOps = 7;

// Every snapshot of a client must be consistent: nothing granted or completed that was not posted.
void expect_consistent(const json& client, std::uint64_t most_ops) {
  if (client.is_null()) return;
  EXPECT_LE(ops(client, "granted"), ops(client, "posted")) << client.dump();
  EXPECT_LE(ops(client, "completed"), ops(client, "posted")) << client.dump();
  EXPECT_LE(ops(client, "posted"), most_ops) << client.dump();
  if (client["priority"] == "high") {
    EXPECT_EQ(ops(client, "granted"), ops(client, "posted")) << client.dump();
  }
}

// Waits until gpuqosd has seen every op of `job` posted and completed.
json settled(PipelineRig& rig, const std::string& job, std::uint64_t posted) {
  json client;
  eventually([&] {
    client = rig.gpuqosd().client(job);
    return !client.is_null() && ops(client, "posted") == posted && ops(client, "completed") == posted;
  }, 10s);
  return client;
}

TEST(Pipeline, HighAndLowReplayersAreAccountedForOpByOp) {
  PipelineRig rig;
  rig.gpuqosd().start();
  rig.dir().write("synthetic.json", synthetic_workload().dump(1));
  constexpr std::uint64_t kCount = 12;
  constexpr std::uint64_t kOps = kWorkloadOps * kCount;
  ChildProcess& low = rig.start({.job = "be-replay", .priority = "low", .hold = true},
                                rig.replay("synthetic", {"--mode", "be", "--iterations", std::to_string(kCount), "--gaps", "drop"}));
  ChildProcess& high = rig.start({.job = "lc-replay", .priority = "high", .hold = true},
                                 rig.replay("synthetic", {"--mode", "lc", "--queries", std::to_string(kCount), "--closed-loop"}));
  // While they run: every snapshot is consistent.
  const bool both_done = eventually([&] {
    const json status = rig.gpuqosd().status();
    for (const json& client : status["clients"]) expect_consistent(client, kOps);
    return (holding(low) || !low.running()) && (holding(high) || !high.running());
  }, kFinish);
  ASSERT_TRUE(both_done) << low.output() << high.output();
  ASSERT_TRUE(holding(low)) << low.output() << rig.logs();
  ASSERT_TRUE(holding(high)) << high.output() << rig.logs();

  // Finished, still connected: every operation posted, granted and completed.
  const json be = settled(rig, "be-replay", kOps);
  const json lc = settled(rig, "lc-replay", kOps);
  ASSERT_FALSE(be.is_null()) << rig.gpuqosd().status().dump(1);
  ASSERT_FALSE(lc.is_null()) << rig.gpuqosd().status().dump(1);
  for (const json& client : {be, lc}) {
    EXPECT_EQ(ops(client, "posted"), kOps) << client.dump();
    EXPECT_EQ(ops(client, "granted"), kOps) << client.dump();
    EXPECT_EQ(ops(client, "completed"), kOps) << client.dump();
    // Every seq is GPU work or a synchronisation (each query and iteration ends in at least one).
    const auto syncs = client["marks"]["sync"].get<std::uint64_t>();
    EXPECT_GE(syncs, kCount) << client.dump();
    EXPECT_EQ(client["last_seq"].get<std::uint64_t>(), kOps + syncs) << client.dump();
    EXPECT_EQ(client["uid"].get<uid_t>(), ::getuid());
    EXPECT_EQ(client["current_wait_ns"].get<std::int64_t>(), 0) << client.dump();
  }
  EXPECT_EQ(be["priority"], "low");
  EXPECT_EQ(lc["priority"], "high");
  EXPECT_GE(be["granted_through_seq"].get<std::uint64_t>(), kOps) << be.dump();
  const json status = rig.gpuqosd().status();
  EXPECT_EQ(status["daemon"]["policy"], "fifo");
  for (const json& engine : status["backlog"]) EXPECT_EQ(engine["outstanding_ops"], 0) << status.dump(1);

  rig.release("be-replay");
  rig.release("lc-replay");
  EXPECT_EQ(low.wait(kFinish), 0) << low.output();
  EXPECT_EQ(high.wait(kFinish), 0) << high.output();
  EXPECT_TRUE(eventually([&] { return rig.gpuqosd().status()["clients"].empty(); }, 5s)) << rig.gpuqosd().status().dump(1);
}

TEST(Pipeline, LowPriorityDataRoundTripsInStreamOrderUnderContention) {
  PipelineRig rig;
  rig.gpuqosd().start();
  rig.dir().write("synthetic.json", synthetic_workload().dump(1));
  ChildProcess& high = rig.start({.job = "lc-replay", .priority = "high", .launch = Launch::ld_preload},
                                 rig.replay("synthetic", {"--mode", "lc", "--queries", "30", "--closed-loop"}));
  ChildProcess& low = rig.start({.job = "ordered", .priority = "low", .hold = true}, PipelineRig::client({"streams", "20", "300"}));
  ASSERT_TRUE(eventually([&] { return holding(low) || !low.running(); }, kFinish)) << low.output();
  const std::string output = low.output();
  ASSERT_NE(output.find("streams ok"), std::string::npos) << output << rig.logs();
  EXPECT_EQ(output.find("running unmanaged"), std::string::npos) << output;  // it was managed throughout
  const std::uint64_t issued = static_cast<std::uint64_t>(last_value(output, "ops"));
  EXPECT_EQ(issued, 240u);
  const json client = settled(rig, "ordered", issued);
  ASSERT_FALSE(client.is_null()) << rig.gpuqosd().status().dump(1);
  EXPECT_EQ(ops(client, "posted"), issued) << client.dump();
  EXPECT_EQ(ops(client, "granted"), issued) << client.dump();
  EXPECT_EQ(ops(client, "completed"), issued) << client.dump();
  rig.release("ordered");
  EXPECT_EQ(low.wait(kFinish), 0) << low.output();
  EXPECT_EQ(high.wait(kFinish), 0) << high.output();
}

// A program whose signal handler calls exit() (a Ctrl-C handler that "exits cleanly") while its main
// thread is inside a hook or the driver: the shim's exit handlers must not wait for a lock or a
// thread the interrupted call holds. Before, 8 runs of 150 hung: the interrupted call held the
// driver's lock, and the exit handler joined the completion thread, which waited for that lock in
// cuEventQuery. (The same program against the fake daemon of gate_itest did not hang in 240 runs.)
// Since: none in over 3,000 runs by hand and of this test, one in the suite under load (not caught in a
// debugger, perhaps a slow run: a run now has 30 s).
TEST(Pipeline, ExitFromASignalHandlerDuringHooksNeverHangs) {
  PipelineRig rig({"--policy", "baymax"});
  rig.gpuqosd().start();
  const std::string program = gpuqos::testing::build_path("tests/programs/intercept_gate_client");
  int hung = 0, runs = 0;
  for (long after_us = 1'000; after_us <= 60'000 && hung == 0; after_us += 1'000, ++runs) {
    ChildProcess& run = rig.start({.job = "exit-" + std::to_string(after_us), .launch = Launch::ld_preload},
                                  {program, "exit-in-handler", std::to_string(after_us)});
    const int code = run.wait(30s).value_or(-1);  // a run takes about 0.1 s; a loaded machine, more
    EXPECT_EQ(code, 3) << "exit after " << after_us << " us\n" << run.output();
    hung += code == -1;
  }
  EXPECT_EQ(hung, 0) << "of " << runs << " runs";
}

// An async copy the shim would split goes whole onto a stream that waits, by CUDA's implicit
// synchronisation, for the legacy default stream's work (a blocking stream, the per-thread default
// stream), and onto the legacy stream, which waits for every blocking stream's: cuStreamQuery said
// such a stream idle, the chunks each waited for the one before to run, and behind a host function
// waiting for the program each sat out gpuqosd's 2-s stuck limit (a review: 0.0 ms without the
// shim, 30.1 s with it for 64 MiB; 14 s for 32 MiB on the per-thread and legacy streams). A
// high-priority client on the device: no credit, every chunk asks for its grant.
TEST(Pipeline, AnAsyncCopyIsNotSplitOntoAStreamThatWaitsForTheLegacyStream) {
  PipelineRig rig({"--config", std::string(GPUQOS_SOURCE_DIR) + "/examples/gpuqos.toml"});
  rig.gpuqosd().start();
  FakeClient serve(rig.gpuqosd().socket(), ipc::Priority::high, "serve");
  const std::string program = gpuqos::testing::build_path("tests/programs/intercept_gate_client");
  for (const std::string how : {"blocking", "per-thread", "legacy"}) {
    ChildProcess& run = rig.start({.job = "copy-" + how, .launch = Launch::ld_preload},
                                  {program, "copy-behind-legacy", std::to_string(32 << 20), how});
    ASSERT_EQ(run.wait(kFinish), 0) << how << "\n" << run.output() << rig.logs();
    EXPECT_NE(run.output().find("copy behind legacy ok"), std::string::npos) << run.output();
    EXPECT_LT(last_value(run.output(), "call_ms"), 1'000) << how << "\n" << run.output();
  }
}

TEST(Pipeline, NoDaemonAtStartRunsUnmanagedWithOneWarning) {
  PipelineRig rig;  // gpuqosd never started: nothing listens on its socket
  ChildProcess& program = rig.start({.job = "alone"}, PipelineRig::client({"streams", "5", "100"}));
  ASSERT_EQ(program.wait(kFinish), 0) << program.output();
  const std::string output = program.output();
  EXPECT_NE(output.find("streams ok"), std::string::npos) << output;
  EXPECT_EQ(occurrences(output, "running unmanaged"), 1u) << output;
}

TEST(Pipeline, DaemonKilledMidRunReleasesTheProgramWhichReRegistersAfterRestart) {
  PipelineRig rig;
  rig.gpuqosd().start();
  ChildProcess& program = rig.start({.job = "survivor"}, PipelineRig::client({"loop", "300", "2000"}));
  ASSERT_TRUE(eventually([&] {
    const json c = rig.gpuqosd().client("survivor");
    return !c.is_null() && ops(c, "completed") >= 5;
  }, 20s)) << program.output() << rig.logs();

  rig.gpuqosd().kill();
  const long at_kill = last_value(program.output(), "iteration");
  ASSERT_TRUE(eventually([&] { return last_value(program.output(), "iteration") >= at_kill + 5 || !program.running(); }, 20s))
      << "the program stopped making progress when gpuqosd died:\n" << program.output();
  EXPECT_NE(program.output().find("lost gpuqosd"), std::string::npos) << program.output();

  rig.gpuqosd().start();  // same socket (the dead one's file is still there)
  json client;
  ASSERT_TRUE(eventually([&] {
    client = rig.gpuqosd().client("survivor");
    return !client.is_null() && ops(client, "posted") >= 1;
  }, 20s)) << "not registered again:\n" << program.output() << rig.logs();
  EXPECT_EQ(client["priority"], "low");
  EXPECT_EQ(program.wait(kFinish), 0) << program.output();
  EXPECT_NE(program.output().find("loop ok"), std::string::npos) << program.output();
}

// A gpuqosd stopping (SIGTERM) tells every job so, high priority too (which never reads grants while
// it runs): each says it was asked to detach, not that the connection closed, and runs on.
TEST(Pipeline, AStoppingDaemonDetachesHighAndLowPriorityJobsAlike) {
  PipelineRig rig;
  rig.gpuqosd().start();
  ChildProcess& high = rig.start({.job = "serve", .priority = "high"}, PipelineRig::client({"loop", "300", "2000"}));
  ChildProcess& low = rig.start({.job = "train"}, PipelineRig::client({"loop", "300", "2000"}));
  ASSERT_TRUE(eventually([&] {
    const json h = rig.gpuqosd().client("serve"), l = rig.gpuqosd().client("train");
    return !h.is_null() && !l.is_null() && ops(h, "completed") >= 3 && ops(l, "completed") >= 3;
  }, 20s)) << high.output() << low.output() << rig.logs();
  rig.gpuqosd().stop();
  for (ChildProcess* program : {&high, &low}) {
    EXPECT_TRUE(eventually([&] { return program->output().find("lost gpuqosd") != std::string::npos; }, 5s))
        << program->output();
    EXPECT_NE(program->output().find("lost gpuqosd (gpuqosd asked its clients to detach)"), std::string::npos)
        << program->output();
  }
  const std::string log = rig.gpuqosd().log();
  const std::size_t detached = log.find(": detached (high priority: nothing of it was held)");
  ASSERT_NE(detached, std::string::npos) << log;
  EXPECT_NE(log.substr(log.rfind('\n', detached) + 1, detached).find("job 'serve'"), std::string::npos) << log;
  EXPECT_EQ(high.wait(kFinish), 0) << high.output();
  EXPECT_EQ(low.wait(kFinish), 0) << low.output();
}

TEST(Pipeline, DaemonKilledWhileALowPriorityLaunchWaitsReleasesIt) {
  PipelineRig rig({"--max-outstanding", "1"});
  rig.gpuqosd().start();
  // The first 10 s kernel takes the only slot; the second launch waits for a grant.
  ChildProcess& program = rig.start({.job = "waiter"}, PipelineRig::client({"pair", "10000000"}));
  ASSERT_TRUE(eventually([&] {
    const json c = rig.gpuqosd().client("waiter");
    return !c.is_null() && c["state"] == "waiting" && ops(c, "posted") == 2;
  }, 20s)) << program.output() << rig.logs();
  EXPECT_EQ(program.output().find("second launched"), std::string::npos) << "launched without a grant";
  rig.gpuqosd().kill();
  // Released long before the slot would have freed (the issue asks for 100 ms; 5 s only bounds a hang).
  EXPECT_TRUE(eventually([&] { return program.output().find("second launched") != std::string::npos; }, 5s))
      << "a waiting launch was not released when gpuqosd died:\n" << program.output();
  EXPECT_EQ(program.wait(20s), 0) << "a waiting launch hung when gpuqosd died:\n" << program.output();
  EXPECT_NE(program.output().find("pair ok"), std::string::npos) << program.output();
}

TEST(Pipeline, ClientsKilledWhileWaitingAndWhileRunningAreReclaimed) {
  PipelineRig rig({"--max-outstanding", "1"});
  rig.gpuqosd().start();
  ChildProcess& runner = rig.start({.job = "runner"}, PipelineRig::client({"loop", "1", "4000000"}));
  ASSERT_TRUE(eventually([&] {
    const json c = rig.gpuqosd().client("runner");
    return !c.is_null() && ops(c, "granted") == 1;
  }, 20s)) << runner.output() << rig.logs();
  ChildProcess& waiter = rig.start({.job = "waiter", .launch = Launch::ld_preload}, PipelineRig::client({"loop", "1", "1000"}));
  ASSERT_TRUE(eventually([&] {
    const json c = rig.gpuqosd().client("waiter");
    return !c.is_null() && c["state"] == "waiting";
  }, 20s)) << waiter.output() << rig.logs();
  const json running = rig.gpuqosd().client("runner");
  EXPECT_EQ(ops(running, "completed"), 0u) << running.dump();  // its 4 s kernel is still on the device

  waiter.kill();
  runner.kill();
  EXPECT_TRUE(eventually([&] { return rig.gpuqosd().status()["clients"].empty(); }, 5s)) << rig.gpuqosd().status().dump(1);

  // The slot the dead runner held is free again: a third client gets its grants and finishes.
  ChildProcess& third = rig.start({.job = "third", .hold = true}, PipelineRig::client({"streams", "3", "100"}));
  ASSERT_TRUE(eventually([&] { return holding(third) || !third.running(); }, kFinish))
      << third.output() << rig.gpuqosd().status().dump(1) << rig.logs();
  EXPECT_NE(third.output().find("streams ok"), std::string::npos) << third.output();
  const json client = settled(rig, "third", 36);
  EXPECT_EQ(ops(client, "completed"), 36u) << client.dump();
  rig.release("third");
  EXPECT_EQ(third.wait(kFinish), 0) << third.output();
  EXPECT_TRUE(rig.gpuqosd().process_alive());
}

TEST(Pipeline, AHostileClientIsDisconnectedAndTheRealClientIsUnaffected) {
  PipelineRig rig;
  rig.gpuqosd().start();
  ChildProcess& program = rig.start({.job = "honest", .launch = Launch::ld_preload, .hold = true},
                                    PipelineRig::client({"loop", "60", "1000"}));
  ASSERT_TRUE(eventually([&] {
    const json c = rig.gpuqosd().client("honest");
    return !c.is_null() && ops(c, "posted") >= 3;
  }, 20s)) << program.output() << rig.logs();

  FakeClient hostile(rig.gpuqosd().socket(), ipc::Priority::low, "hostile");
  auto& ring = hostile.segment().ops();
  auto* bytes = reinterpret_cast<unsigned char*>(&ring);
  std::mt19937 random(42);
  for (std::size_t i = 0; i < sizeof ring; ++i) bytes[i] = static_cast<unsigned char>(random());
  EXPECT_TRUE(hostile.disconnected(5s)) << rig.logs();
  EXPECT_TRUE(eventually([&] { return rig.gpuqosd().client("hostile").is_null(); }, 5s));
  EXPECT_TRUE(logged(rig.gpuqosd().log(), "warning job 'hostile' pid " + std::to_string(::getpid()) + ": ", "disconnected"))
      << rig.logs();

  ASSERT_TRUE(eventually([&] { return holding(program) || !program.running(); }, kFinish)) << program.output();
  const std::string output = program.output();
  EXPECT_NE(output.find("loop ok"), std::string::npos) << output;
  EXPECT_EQ(output.find("lost gpuqosd"), std::string::npos) << output;
  const json client = settled(rig, "honest", 60);
  ASSERT_FALSE(client.is_null()) << rig.gpuqosd().status().dump(1);
  EXPECT_EQ(ops(client, "posted"), 60u) << client.dump();
  EXPECT_EQ(ops(client, "granted"), 60u) << client.dump();
  EXPECT_EQ(ops(client, "completed"), 60u) << client.dump();
  rig.release("honest");
  EXPECT_EQ(program.wait(kFinish), 0) << program.output();
}

// Completed ops on device 0's `engine` ("compute", "h2d", "d2h", "local"), from gpuqosd's status.
std::uint64_t engine_completed(PipelineRig& rig, const std::string& engine) {
  const json status = rig.gpuqosd().status();
  for (const json& load : status["backlog"]) {
    if (load["device"] == 0 && load["engine"] == engine) return load["completed_ops"].get<std::uint64_t>();
  }
  return 0;
}

// [devices] ordinals are each process's own numbering: a job that sees only the node's second GPU
// (CUDA_VISIBLE_DEVICES=1) calls it device 0, which ordinals = [0] schedules; with ordinals = [1]
// none of its work is, and the shim says so once, with what the process sees.
TEST(Pipeline, DeviceOrdinalsAreAsEachProcessNumbersItsDevices) {
  const auto run_on_second_gpu = [&](const std::string& ordinals) {
    gpuqos::testing::TempDir config_dir("e2e-ordinals-config");
    const auto config = config_dir.write("gpuqosd.toml", "[devices]\nordinals = [" + ordinals + "]\n");
    PipelineRig rig({"--config", config.string()}, kTwoDevices);
    rig.gpuqosd().start();
    ChildProcess& program = rig.start({.job = "second-gpu", .hold = true, .env = {{"CUDA_VISIBLE_DEVICES", "1"}}},
                                      PipelineRig::client({"streams", "2", "50"}));
    EXPECT_TRUE(eventually([&] { return holding(program) || !program.running(); }, kFinish)) << program.output();
    EXPECT_NE(program.output().find("streams ok"), std::string::npos) << program.output() << rig.logs();
    const json client = rig.gpuqosd().client("second-gpu");
    rig.release("second-gpu");
    EXPECT_EQ(program.wait(kFinish), 0) << program.output();
    return std::pair{client, program.output()};
  };
  const auto [managed, quiet] = run_on_second_gpu("0");
  ASSERT_FALSE(managed.is_null());
  EXPECT_GT(ops(managed, "posted"), 0u) << managed.dump();
  EXPECT_EQ(quiet.find("gpuqosd schedules only devices"), std::string::npos) << quiet;
  const auto [unmanaged, warned] = run_on_second_gpu("1");
  ASSERT_FALSE(unmanaged.is_null()) << "registered all the same";
  EXPECT_EQ(ops(unmanaged, "posted"), 0u) << unmanaged.dump();
  EXPECT_EQ(occurrences(warned, "this process sees one device, 0 (GPU-"), 1u) << warned;
  EXPECT_TRUE(logged(warned, "this process sees one device, 0 (GPU-", "), and gpuqosd schedules only devices [1]"))
      << warned;
}

// Jobs given different GPUs (Slurm, Kubernetes: CUDA_VISIBLE_DEVICES) each call theirs device 0;
// gpuqosd tells the GPUs apart by the UUIDs the shim sends, so an inference job on one never holds
// back training on the other, and a job that sees every GPU meets each on the same device.
TEST(Pipeline, JobsOnDifferentGpusAreOnDifferentDevicesThoughEachCallsItsDevice0) {
  PipelineRig rig({}, kTwoDevices);
  rig.gpuqosd().start();
  const auto run = [&](const std::string& job, const char* priority, std::map<std::string, std::string> env) -> ChildProcess& {
    return rig.start({.job = job, .priority = priority, .hold = true, .env = std::move(env)},
                     PipelineRig::client({"streams", "2", "20"}));
  };
  ChildProcess& serve = run("serve-gpu-one", "high", {{"CUDA_VISIBLE_DEVICES", "1"}});
  ChildProcess& train = run("train-gpu-zero", "low", {{"CUDA_VISIBLE_DEVICES", "0"}});
  ChildProcess& both = run("sees-both", "low", {});
  for (ChildProcess* program : {&serve, &train, &both}) {
    ASSERT_TRUE(eventually([&] { return holding(*program) || !program->running(); }, kFinish)) << program->output();
    EXPECT_NE(program->output().find("streams ok"), std::string::npos) << program->output() << rig.logs();
  }
  const json status = rig.gpuqosd().status();
  const auto devices_of = [&](const std::string& job) {
    for (const json& client : status["clients"]) {
      if (client["job"] == job) return client["devices"];
    }
    return json();
  };
  ASSERT_EQ(devices_of("serve-gpu-one").size(), 1u) << status.dump(1);
  EXPECT_NE(devices_of("serve-gpu-one"), devices_of("train-gpu-zero")) << "two GPUs\n" << status.dump(1);
  EXPECT_EQ(devices_of("sees-both"), devices_of("train-gpu-zero")) << "the node's GPU 0 either way\n" << status.dump(1);
  ASSERT_EQ(status["devices"].size(), 2u) << status.dump(1);
  EXPECT_NE(status["devices"][0]["uuid"], status["devices"][1]["uuid"]);
  for (const json& device : status["devices"]) {
    EXPECT_TRUE(device["uuid"].get<std::string>().starts_with("GPU-")) << device.dump();
    EXPECT_EQ(device["ordinal"], 0) << "each job called its GPU device 0\n" << device.dump();
  }
  for (const char* job : {"serve-gpu-one", "train-gpu-zero", "sees-both"}) rig.release(job);
  for (ChildProcess* program : {&serve, &train, &both}) EXPECT_EQ(program->wait(kFinish), 0) << program->output();
}

// [devices] uuids name GPUs whatever each job numbers them: the node's second GPU, listed, is
// scheduled for a job under CUDA_VISIBLE_DEVICES=1 (its device 0), and the first, not listed, is
// not for a job under CUDA_VISIBLE_DEVICES=0 (its device 0 too), which the shim says.
TEST(Pipeline, GpusNamedByUuidAreTheSameWhateverEachJobCallsThem) {
  gpuqos::testing::TempDir config_dir("e2e-uuids-config");
  const auto config = config_dir.path() / "gpuqosd.toml";
  PipelineRig rig({"--config", config.string()}, kTwoDevices);
  ChildProcess stat({gpuqos::testing::bin("simgpu-stat"), "--socket", rig.simgpud_socket()}, {},
                    rig.dir().path() / "stat.out");
  ASSERT_EQ(stat.wait(kFinish), 0) << stat.output();
  const std::string second = json::parse(stat.output())["devices"][1]["uuid"].get<std::string>();
  ASSERT_TRUE(second.starts_with("GPU-")) << stat.output();
  config_dir.write("gpuqosd.toml", "[devices]\nuuids = [\"" + second.substr(0, 13) + "\"]\n");
  rig.gpuqosd().start();
  ChildProcess& listed = rig.start({.job = "on-second", .hold = true, .env = {{"CUDA_VISIBLE_DEVICES", "1"}}},
                                   PipelineRig::client({"streams", "2", "20"}));
  ChildProcess& unlisted = rig.start({.job = "on-first", .hold = true, .env = {{"CUDA_VISIBLE_DEVICES", "0"}}},
                                     PipelineRig::client({"streams", "2", "20"}));
  for (ChildProcess* program : {&listed, &unlisted}) {
    ASSERT_TRUE(eventually([&] { return holding(*program) || !program->running(); }, kFinish)) << program->output();
    EXPECT_NE(program->output().find("streams ok"), std::string::npos) << program->output() << rig.logs();
  }
  const json scheduled = rig.gpuqosd().client("on-second");
  const json unscheduled = rig.gpuqosd().client("on-first");
  ASSERT_FALSE(scheduled.is_null());
  ASSERT_FALSE(unscheduled.is_null()) << "registered all the same";
  EXPECT_GT(ops(scheduled, "posted"), 0u) << scheduled.dump();
  EXPECT_EQ(ops(unscheduled, "posted"), 0u) << unscheduled.dump();
  EXPECT_NE(unlisted.output().find("gpuqosd schedules only the GPU " + second.substr(0, 13) + " ([devices] uuids)"),
            std::string::npos)
      << unlisted.output();
  const std::string first = json::parse(stat.output())["devices"][0]["uuid"].get<std::string>();
  EXPECT_NE(unlisted.output().find("this process sees one device, 0 (" + first + ")"), std::string::npos)
      << "the node's first GPU, by the UUID simgpu-stat gives\n" << unlisted.output();
  EXPECT_EQ(listed.output().find("schedules only"), std::string::npos) << listed.output();
  // gpuqosd's status says which GPU the unscheduled job runs without it (protocol 1.9).
  json unscheduled_devices;
  EXPECT_TRUE(eventually([&] {
    unscheduled_devices = rig.gpuqosd().client("on-first").value("unscheduled_devices", json());
    return !unscheduled_devices.is_null();
  }, kFinish)) << rig.gpuqosd().status().dump(1);
  EXPECT_EQ(unscheduled_devices, json::parse(R"([{"ordinal":0,"uuid":")" + first + R"("}])"));
  EXPECT_FALSE(rig.gpuqosd().client("on-second").contains("unscheduled_devices"));
  EXPECT_NE(rig.gpuqosd().log().find("runs its device 0 (" + first + ") unscheduled"), std::string::npos)
      << rig.gpuqosd().log();
  rig.release("on-second");
  rig.release("on-first");
  EXPECT_EQ(listed.wait(kFinish), 0) << listed.output();
  EXPECT_EQ(unlisted.wait(kFinish), 0) << unlisted.output();
}

TEST(Pipeline, BestEffortCopiesGoInChunksOfTheConfiguredSizeAndHighPriorityOnesDoNot) {
  gpuqos::testing::TempDir config_dir("e2e-chunk-config");
  const auto config = config_dir.write(
      "gpuqosd.toml", "[policy]\nname = \"fifo\"\n[policy.baymax]\ncopy_chunk_bytes = \"4MiB\"\n");
  PipelineRig rig({"--config", config.string()});
  rig.gpuqosd().start();
  const std::string ten_mib = std::to_string(10 << 20);

  ChildProcess& low = rig.start({.job = "be-copies", .hold = true}, PipelineRig::client({"copies", ten_mib}));
  ASSERT_TRUE(eventually([&] { return holding(low) || !low.running(); }, kFinish)) << low.output();
  ASSERT_NE(low.output().find("copies ok"), std::string::npos) << low.output() << rig.logs();
  const json be = settled(rig, "be-copies", 6);
  EXPECT_EQ(ops(be, "posted"), 6u) << "10 MiB up and back in 4 MiB chunks: 3 + 3\n" << be.dump();
  EXPECT_EQ(ops(be, "granted"), 6u) << be.dump();
  EXPECT_EQ(engine_completed(rig, "h2d"), 3u) << "the upload: three copy ops\n" << rig.gpuqosd().status().dump(1);
  EXPECT_EQ(engine_completed(rig, "d2h"), 3u) << rig.gpuqosd().status().dump(1);

  ChildProcess& high = rig.start({.job = "lc-copies", .priority = "high", .hold = true},
                                 PipelineRig::client({"copies", ten_mib}));
  ASSERT_TRUE(eventually([&] { return holding(high) || !high.running(); }, kFinish)) << high.output();
  ASSERT_NE(high.output().find("copies ok"), std::string::npos) << high.output() << rig.logs();
  const json lc = settled(rig, "lc-copies", 2);
  EXPECT_EQ(ops(lc, "posted"), 2u) << "high priority: one op per copy\n" << lc.dump();
  EXPECT_EQ(engine_completed(rig, "h2d"), 4u) << rig.gpuqosd().status().dump(1);

  rig.release("be-copies");
  rig.release("lc-copies");
  EXPECT_EQ(low.wait(kFinish), 0) << low.output();
  EXPECT_EQ(high.wait(kFinish), 0) << high.output();
}

// A job whose requests end with a synchronous download (the runtime's plain cudaMemcpy) calls no
// synchronisation: its queries never closed, and status showed none (a review). The download is one.
TEST(Pipeline, ARequestEndingWithASynchronousDownloadIsAQuery) {
  gpuqos::testing::TempDir config_dir("e2e-copy-back-config");
  const auto config = config_dir.write(
      "gpuqosd.toml", "[policy]\nname = \"baymax\"\n[[job]]\nname = \"serve-copy\"\ntarget_ms = 1000.0\n");
  PipelineRig rig({"--config", config.string()});
  rig.gpuqosd().start();
  ChildProcess& serve = rig.start({.job = "serve-copy", .priority = "high", .hold = true},
                                  PipelineRig::client({"copy-back", "12", "2000"}));
  ASSERT_TRUE(eventually([&] { return holding(serve) || !serve.running(); }, kFinish)) << serve.output();
  ASSERT_NE(serve.output().find("copy-back ok"), std::string::npos) << serve.output() << rig.logs();
  json job;
  ASSERT_TRUE(eventually([&] {
    const json status = rig.gpuqosd().status();
    for (const json& j : status["jobs"]) {
      if (j["job"] == "serve-copy") job = j;
    }
    return job.is_object() && job.value("queries", 0) >= 12;
  }, 10s)) << job.dump(1) << rig.logs();
  EXPECT_EQ(job["queries"], 12) << "one per request: each opens at its upload, closes at its download\n" << job.dump(1);
  EXPECT_GT(job["p50_ms"].get<double>(), 1.9) << "the 2-ms kernel is in each\n" << job.dump(1);
  rig.release("serve-copy");
  EXPECT_EQ(serve.wait(kFinish), 0) << serve.output();
}

// A review: a best-effort async copy goes in chunks, each granted once the one before is done (the
// example config's one best-effort transfer in flight), so the call returned only when the work
// queued ahead of it on its stream was done, and a stream waiting on something the program does
// after the call held it about 2 s a chunk (the daemon's stuck-op limit). A copy onto a stream with
// work still queued goes whole, as the program asked: it returns at once.
TEST(Pipeline, AnAsyncBestEffortCopyBehindQueuedWorkReturnsAtOnce) {
  gpuqos::testing::TempDir config_dir("e2e-behind-config");
  const auto config = config_dir.write("gpuqosd.toml",
                                       "[policy]\nname = \"baymax\"\n[policy.baymax]\ncopy_chunk_bytes = \"4MiB\"\n"
                                       "max_be_transfers = 1\n");
  PipelineRig rig({"--config", config.string()});
  rig.gpuqosd().start();
  ChildProcess& low = rig.start({.job = "be-behind", .hold = true},
                                PipelineRig::client({"behind", std::to_string(16 << 20), "3000000"}));
  ASSERT_TRUE(eventually([&] { return holding(low) || !low.running(); }, kFinish)) << low.output();
  const std::string out = low.output();
  ASSERT_NE(out.find("behind ok"), std::string::npos) << out << rig.logs();
  const auto at = out.find("returned in ");
  ASSERT_NE(at, std::string::npos) << out;
  const double ms = std::atof(out.c_str() + at + std::string("returned in ").size());
  EXPECT_LT(ms, 1000.0) << "the call waited for the 3-s kernel queued ahead of it\n" << out << rig.logs();
  const json be = settled(rig, "be-behind", 3);
  EXPECT_EQ(ops(be, "posted"), 3u) << "the kernel and two whole copies\n" << be.dump();
  rig.release("be-behind");
  EXPECT_EQ(low.wait(kFinish), 0) << low.output();
}

// Each thread's per-thread default stream is a stream of its own, to gpuqosd too: one thread's
// long memset there must not keep another thread's finished copy in flight (best-effort copies go
// max_be_transfers at a time), so that thread's next copy is granted at once. Both ways of naming
// the stream: NULL in a _ptsz call, and CU_STREAM_PER_THREAD.
TEST(Pipeline, PerThreadDefaultStreamsOfTwoThreadsAreTrackedApart) {
  gpuqos::testing::TempDir config_dir("e2e-per-thread-config");
  const auto config = config_dir.write(
      "gpuqosd.toml", "[policy]\nname = \"baymax\"\n[policy.baymax]\nmax_be_transfers = 1\n");
  // Memsets at 10 MB/s: 48 MiB take about 5 s of device time (a bound robust on a slow machine).
  PipelineRig rig({"--config", config.string()}, "name = \"e2e gpu\"\nsms = 8\nd2d_gbps = 0.01\n");
  rig.gpuqosd().start();
  // A high-priority job on the device, idle: best-effort jobs then get no credit (grants ahead of
  // their posts, which would let the copy go unasked), every op asks gpuqosd.
  ChildProcess& resident = rig.start({.job = "resident", .priority = "high", .hold = true}, PipelineRig::client({"copies", "4096"}));
  ASSERT_TRUE(eventually([&] { return holding(resident) || !resident.running(); }, kFinish)) << resident.output();
  ASSERT_TRUE(holding(resident)) << resident.output() << rig.logs();
  constexpr std::int64_t kMemsetMs = 5000;
  const std::string memset_bytes = std::to_string(48 << 20), copy_bytes = std::to_string(1 << 20);
  for (const std::string naming : {"null", "handle"}) {
    SCOPED_TRACE(naming);
    const std::vector<std::string> command = {gpuqos::testing::build_path("tests/programs/e2e_per_thread_streams"),
                                              naming, memset_bytes, copy_bytes};
    ChildProcess& program = rig.start({.job = "per-thread-" + naming}, command);
    ASSERT_EQ(program.wait(kFinish), 0) << program.output() << rig.logs();
    const std::string output = program.output();
    ASSERT_NE(output.find("per-thread ok"), std::string::npos) << output;
    // The copy did not wait for the memset: the call returned while it still ran, well before its end.
    EXPECT_EQ(last_value(output, "memset running"), 1) << output << rig.logs();
    // (gpuqosd takes a best-effort op for done 2 s after it began, whatever the shim said.)
    EXPECT_LT(last_value(output, "second copy call ms"), kMemsetMs / 5) << output << rig.logs();
    EXPECT_GE(last_value(output, "second copy call ms"), 0) << output;
  }
  rig.release("resident");
  EXPECT_EQ(resident.wait(kFinish), 0) << resident.output();
}

// A release of the primary context that is not its last does not end it: its work in flight is
// not reported done (nor its events forgotten) until the device has run it.
TEST(Pipeline, ARetainAndReleasePairWhileWorkRunsDoesNotReportItDone) {
  PipelineRig rig;
  rig.gpuqosd().start();
  // High priority: gpuqosd takes its op for done only after 10 s (a best-effort one after 2).
  ChildProcess& program = rig.start({.job = "release-pair", .priority = "high", .hold = true},
                                    PipelineRig::client({"release", "4000000"}));  // a 4-s kernel
  ASSERT_TRUE(eventually([&] {
    return program.output().find("released while running") != std::string::npos || !program.running();
  }, kFinish)) << program.output();
  ASSERT_NE(program.output().find("released while running"), std::string::npos) << program.output() << rig.logs();
  // For a second after the release (the kernel runs three more): posted, not completed.
  const auto until = std::chrono::steady_clock::now() + 1s;
  bool seen = false;
  while (std::chrono::steady_clock::now() < until) {
    const json client = rig.gpuqosd().client("release-pair");
    if (!client.is_null() && ops(client, "posted") == 1) {
      seen = true;
      EXPECT_EQ(ops(client, "completed"), 0u) << "reported done while it ran\n" << client.dump();
      if (ops(client, "completed") != 0) break;
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(seen) << rig.gpuqosd().status().dump(1);
  ASSERT_TRUE(eventually([&] { return holding(program) || !program.running(); }, kFinish)) << program.output();
  ASSERT_NE(program.output().find("release ok"), std::string::npos) << program.output() << rig.logs();
  // Once the kernel ended, its completion came from its event, as any other.
  const json client = settled(rig, "release-pair", 1);
  EXPECT_EQ(ops(client, "completed"), 1u) << client.dump();
  rig.release("release-pair");
  EXPECT_EQ(program.wait(kFinish), 0) << program.output();
}

}  // namespace

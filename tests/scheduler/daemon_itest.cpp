// Integration tests of gpuqosd and the gpuqos CLI: real daemon processes on unique sockets, fake
// clients written with ipc alone (no CUDA, no shim).
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <deque>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "daemon_harness.h"
#include "gpuqos/testing/gpuqos_programs.h"
#include "gpuqos/testing/ready_child.h"
#include "gpuqos/scheduler/baymax_policy.h"
#include "gpuqos/testing/text.h"
#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/daemon.h"
#include "gpuqos/predictor/features.h"
#include "gpuqos/predictor/store.h"

namespace gpuqos::testing {
namespace {

using ipc::Priority;

// A kernel on the process's device `ordinal`, saying the UUID of GPU `gpu` (GPU-<tag>000000-...-0000000000<gpu>).
ipc::OpDescriptor kernel_on_gpu(std::uint64_t seq, std::uint32_t ordinal, std::uint8_t gpu, std::uint8_t tag = 0xc0) {
  ipc::OpDescriptor op = FakeClient::kernel(seq);
  op.device = ordinal;
  op.device_uuid[0] = tag;
  op.device_uuid[15] = gpu;
  return op;
}

TEST(Daemon, RegistersAClientWithTheKernelsCredentials) {
  DaemonProcess daemon;
  FakeClient client(daemon.socket(), Priority::low, "trainer");
  EXPECT_EQ(client.client_number(), 1u);
  EXPECT_TRUE(client.segment_passed());
  EXPECT_FALSE(segment_exists(client.segment_name())) << "a sealed memfd: nothing in /dev/shm";
  EXPECT_TRUE(segment_held(daemon.pid(), client.segment_name()));
  EXPECT_EQ(client.segment().header().client_pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(client.segment().header().client_uid, ::getuid());
  const auto entry = daemon.client_with_pid(::getpid());
  ASSERT_FALSE(entry.is_null()) << daemon.status().dump(2);
  EXPECT_EQ(entry["uid"], ::getuid());
  EXPECT_EQ(entry["job"], "trainer");
  EXPECT_EQ(entry["priority"], "low");
  EXPECT_EQ(entry["segment"], client.segment_name());
  EXPECT_NE(daemon.log().find("job 'trainer' pid " + std::to_string(::getpid())), std::string::npos) << daemon.log();
}

// A shim registers before it knows a device (Hello.device is 0 for all): status lists the devices
// its work named, so a client working on device 1 does not read as one on device 0.
TEST(Daemon, StatusListsTheDevicesAClientsWorkNamed) {
  DaemonProcess daemon({"--credit-ops", "0"});
  FakeClient client(daemon.socket(), Priority::low, "trainer");
  client.name_kernel(1, "gemm");
  EXPECT_EQ(daemon.client_with_pid(::getpid())["devices"], nlohmann::json::array());
  std::uint64_t seq = 0;
  for (const std::uint32_t device : {3u, 1u, 3u}) {
    ipc::OpDescriptor op = FakeClient::kernel(++seq);
    op.device = device;
    client.post(op);
    ASSERT_TRUE(client.wait_granted(seq));
  }
  const auto entry = daemon.client_with_pid(::getpid());
  EXPECT_EQ(entry["devices"], (nlohmann::json{1, 3})) << entry.dump();
  EXPECT_EQ(entry["device"], 0) << "the registration's, as the shim sent it";
}

// Each process numbers its GPUs from 0 (CUDA_VISIBLE_DEVICES): two jobs that both call their GPU
// device 0 are on two devices when their ops say two UUIDs, and on one when they say the same.
TEST(Daemon, DevicesAreTheGpusTheOpsUuidsNameNotTheirOrdinals) {
  DaemonProcess daemon({"--credit-ops", "0"});
  const auto on_gpu = [](std::uint64_t seq, std::uint32_t ordinal, std::uint8_t gpu) { return kernel_on_gpu(seq, ordinal, gpu); };
  FakeClient a(daemon.socket(), Priority::low, "on-gpu-5");
  FakeClient b(daemon.socket(), Priority::low, "on-gpu-2");
  FakeClient c(daemon.socket(), Priority::low, "sees-both");
  for (FakeClient* client : {&a, &b, &c}) client->name_kernel(1, "gemm");
  a.post(on_gpu(1, 0, 5));
  ASSERT_TRUE(a.wait_granted(1));
  b.post(on_gpu(1, 0, 2));
  ASSERT_TRUE(b.wait_granted(1));
  c.post(on_gpu(1, 1, 2));
  c.post(on_gpu(2, 0, 5));
  ASSERT_TRUE(c.wait_granted(2));
  const nlohmann::json status = daemon.status();
  const auto devices_of = [&](const std::string& job) {
    for (const auto& client : status["clients"]) {
      if (client["job"] == job) return client["devices"];
    }
    return nlohmann::json();
  };
  EXPECT_EQ(devices_of("on-gpu-5"), (nlohmann::json{0})) << status.dump(1);
  EXPECT_EQ(devices_of("on-gpu-2"), (nlohmann::json{1})) << "its device 0 is another GPU\n" << status.dump(1);
  EXPECT_EQ(devices_of("sees-both"), (nlohmann::json{0, 1})) << status.dump(1);
  ASSERT_EQ(status["devices"].size(), 2u) << status.dump(1);
  EXPECT_EQ(status["devices"][1]["uuid"], "GPU-c0000000-0000-0000-0000-000000000002");
  EXPECT_EQ(status["devices"][1]["ordinal"], 0);
  EXPECT_EQ(status["devices"][1]["clients"], 2);
  EXPECT_NE(daemon.log().find("device 1 is GPU-c0000000-0000-0000-0000-000000000002 (job 'on-gpu-2' pid "),
            std::string::npos) << daemon.log();

  // A process's ordinal names one GPU while it runs: one that says another is garbage.
  b.post(on_gpu(2, 0, 9));
  EXPECT_TRUE(b.disconnected());
  EXPECT_NE(daemon.log().find("device UUIDs: device 0 was GPU-c0000000-0000-0000-0000-000000000002, now it says "
                              "GPU-c0000000-0000-0000-0000-000000000009"),
            std::string::npos) << daemon.log();
}

// [policy.baymax] per-device settings are by ordinal, each job's numbering: a GPU renumbered takes
// those of the ordinal its first job called it, in the policy (a preemptive device has no long-op
// budget), and a job calling it by an ordinal whose settings differ is warned of, again after a reload.
TEST(Daemon, ARenumberedGpuTakesTheSettingsOfItsFirstJobsOrdinal) {
  TempDir dir("gpuqosd-devices");
  const std::string config = "[policy]\nname = \"baymax\"\n[policy.baymax]\npreemptive_device = [0]\n"
                             "[[job]]\nname = \"serve\"\ntarget_ms = 10.0\n";
  const auto path = dir.write("gpuqosd.toml", config);
  DaemonProcess daemon({"--config", path.string()});
  const auto on_gpu = [](std::uint64_t seq, std::uint32_t ordinal, std::uint8_t gpu) { return kernel_on_gpu(seq, ordinal, gpu, 0xd0); };
  FakeClient first(daemon.socket(), Priority::high, "serve");
  FakeClient second(daemon.socket(), Priority::high, "serve");
  FakeClient both(daemon.socket(), Priority::high, "serve");
  for (FakeClient* client : {&first, &second, &both}) client->name_kernel(1, "infer");
  first.post(on_gpu(1, 0, 1));   // GPU 1 is device 0
  second.post(on_gpu(1, 0, 2));  // GPU 2, also its job's device 0: gpuqosd's device 1, preemptive
  nlohmann::json status;
  ASSERT_TRUE(eventually([&] {
    status = daemon.status();
    return status["devices"].size() == 2;
  }, 5s)) << status.dump(1);
  ASSERT_TRUE(status.contains("policy_state")) << status.dump(1);
  EXPECT_EQ(status["policy_state"]["long_op_budget"], nlohmann::json::array())
      << "both devices preemptive: device 1 took ordinal 0's settings\n" << status.dump(1);
  const std::string warning = "calls GPU-d0000000-0000-0000-0000-000000000002 its device 1; [policy.baymax] gives ordinal 1 "
                              "other per-device settings";
  both.post(on_gpu(1, 1, 2));  // a job that sees both calls GPU 2 its device 1: not preemptive
  ASSERT_TRUE(eventually([&] { return occurrences(daemon.log(), warning) == 1; }, 5s)) << daemon.log();
  both.post(on_gpu(2, 1, 2));
  EXPECT_EQ(occurrences(daemon.log(), warning), 1u) << "once";
  dir.write("gpuqosd.toml", config);
  ASSERT_EQ(::kill(daemon.pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return daemon.log().find("config reloaded") != std::string::npos; }, 5s)) << daemon.log();
  both.post(on_gpu(3, 1, 2));
  EXPECT_TRUE(eventually([&] { return occurrences(daemon.log(), warning) == 2; }, 5s)) << "said again after a reload\n"
                                                                                      << daemon.log();
}

// A GPU named by UUID in [policy.baymax] has those settings whatever its jobs call it, even when
// its number is its ordinal; the status says what each GPU runs as.
TEST(Daemon, AGpuNamedByUuidInTheConfigHasItsSettings) {
  TempDir dir("gpuqosd-devices");
  const auto path = dir.write("gpuqosd.toml",
                              "[policy]\nname = \"baymax\"\n[policy.baymax]\n"
                              "preemptive_device = [\"GPU-d0000000-0000-0000-0000-000000000002\"]\n"
                              "timeslice_ms = { default = 2.0, GPU-D0000000-0000-0000-0000-000000000002 = 0.5 }\n"
                              "[[job]]\nname = \"serve\"\ntarget_ms = 10.0\n");
  DaemonProcess daemon({"--config", path.string()});
  FakeClient serve(daemon.socket(), Priority::high, "serve");
  serve.name_kernel(1, "infer");
  std::uint64_t seq = 0;
  for (const std::uint8_t gpu : {2, 1}) {  // GPU 2 as device 0, GPU 1 as device 1: no renumbering
    ++seq;
    serve.post(kernel_on_gpu(seq, static_cast<std::uint32_t>(seq - 1), gpu, 0xd0));
  }
  nlohmann::json status;
  ASSERT_TRUE(eventually([&] {
    status = daemon.status();
    return status["devices"].size() == 2;
  }, 5s)) << status.dump(1);
  EXPECT_EQ(status["devices"][0]["preemptive"], true) << status.dump(1);
  EXPECT_EQ(status["devices"][0]["timeslice_ns"], 500'000);
  EXPECT_EQ(status["devices"][1]["preemptive"], false);
  ASSERT_EQ(status["policy_state"]["long_op_budget"].size(), 1u) << "only the GPU that runs kernels to their end\n"
                                                                  << status.dump(1);
  EXPECT_EQ(status["policy_state"]["long_op_budget"][0]["device"], 1);
  const std::string table = scheduler::render_status_table(status);
  EXPECT_NE(table.find("  device 0 is GPU-d0000000-0000-0000-0000-000000000002, 1 client(s), time-slicing (0.500 ms "
                       "slices)\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  device 1 is GPU-d0000000-0000-0000-0000-000000000001, 1 client(s), runs kernels to their end\n"),
            std::string::npos)
      << table;
}

// The point of telling GPUs apart: training on one GPU is not held back for an inference job on
// another, though both call their GPU device 0. (Beside a high-priority job on its device a
// best-effort one gets no credit: each op asks. Nor while its kernels are guessed: the daemon here
// is untrained, so it learns `step` from its first op.)
TEST(Daemon, BestEffortWorkOnAnotherGpuIsNotHeldBackForAHighPriorityJob) {
  DaemonProcess daemon({"--policy", "baymax", "--credit-ops", "8"});
  FakeClient serve(daemon.socket(), Priority::high, "serve");
  serve.name_kernel(1, "infer");
  serve.post(kernel_on_gpu(1, 0, 1));
  ASSERT_TRUE(eventually([&] { return daemon.status()["devices"].size() == 1; }, 5s)) << daemon.status().dump(1);
  FakeClient train(daemon.socket(), Priority::low, "train");
  train.name_kernel(1, "step");
  train.post(kernel_on_gpu(1, 0, 2));
  ASSERT_TRUE(train.wait_granted(1));
  EXPECT_FALSE(train.wait_granted(2, 100ms)) << "a kernel it does not know yet: no credit";
  train.complete_just_now(1, 200'000);  // 0.2 ms
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][1]["ops"]["completed"] == 1; }));
  constexpr std::uint64_t kLearning = scheduler::BaymaxPolicy::kGuessedMemoryOps + 1;
  for (std::uint64_t seq = 2; seq <= kLearning; ++seq) {
    train.post(kernel_on_gpu(seq, 0, 2));
    ASSERT_TRUE(train.wait_granted(seq)) << seq;
    train.complete_just_now(seq, 200'000);
  }
  EXPECT_TRUE(train.wait_granted(kLearning + 1)) << "credit: no high-priority job on its GPU";
  FakeClient beside(daemon.socket(), Priority::low, "beside");
  beside.name_kernel(1, "step");
  beside.post(kernel_on_gpu(1, 0, 1));
  ASSERT_TRUE(beside.wait_granted(1));
  EXPECT_FALSE(beside.wait_granted(2, 300ms)) << "on the inference job's GPU: no credit";
}

TEST(Daemon, GrantsLowPriorityOpsInArrivalOrder) {
  DaemonProcess daemon({"--max-outstanding", "1"});
  FakeClient a(daemon.socket(), Priority::low, "a");
  FakeClient b(daemon.socket(), Priority::low, "b");
  a.name_kernel(1, "gemm");
  b.name_kernel(1, "conv");
  a.post(FakeClient::kernel(1));
  ASSERT_TRUE(a.wait_granted(1));
  b.post(FakeClient::kernel(1));
  // Arrival order is the order the daemon takes ops from the rings: let b's op arrive first.
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][1]["ops"]["posted"] == 1; }));
  a.post(FakeClient::kernel(2));
  EXPECT_FALSE(b.wait_granted(1, 50ms)) << "a's op 1 holds the only slot";
  const auto waiting = daemon.status()["clients"][1];
  EXPECT_EQ(waiting["state"], "waiting");
  EXPECT_GT(waiting["current_wait_ns"].get<std::int64_t>(), 0);
  a.complete(1);
  ASSERT_TRUE(b.wait_granted(1));
  EXPECT_FALSE(a.wait_granted(2, 50ms)) << "b arrived first";
  b.complete(1);
  ASSERT_TRUE(a.wait_granted(2));
  a.complete(2);
  EXPECT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["completed"] == 2; }));
  const auto status = daemon.status();
  EXPECT_EQ(status["clients"][0]["ops"]["posted"], 2);
  EXPECT_EQ(status["clients"][0]["ops"]["granted"], 2);
  EXPECT_EQ(status["clients"][0]["kernel_names"], 1);
  EXPECT_EQ(status["clients"][0]["state"], "running");
}

// A kernel op says its device's SM count (1.5): the untrained predictor counts waves by it, and a
// device of another count is warned about, naming the client.
TEST(Daemon, TheFirstDevicesSmCountIsAdoptedAndAnotherIsWarnedAbout) {
  DaemonProcess daemon;
  FakeClient client(daemon.socket(), Priority::low, "sms");
  client.name_kernel(1, "gemm");
  ipc::OpDescriptor op = FakeClient::kernel(1);
  op.sm_count = 132;
  client.post(op);
  ASSERT_TRUE(client.wait_granted(1));
  op = FakeClient::kernel(2);
  op.device = 1;
  op.sm_count = 80;
  client.post(op);
  ASSERT_TRUE(client.wait_granted(2));
  EXPECT_TRUE(eventually([&] { return daemon.log().find("device 1 has 80 SMs") != std::string::npos; })) << daemon.log();
  const std::string log = daemon.log();
  EXPECT_NE(log.find("counts waves by 132 SMs, as device 0 has"), std::string::npos) << log;
  EXPECT_NE(log.find("gpuqos train --sms 80"), std::string::npos) << log;
}

TEST(Daemon, GrantsCreditAheadWhenNothingElseWaits) {
  DaemonProcess daemon({"--credit-ops", "8"});
  FakeClient low(daemon.socket(), Priority::low, "credit");
  low.name_kernel(1, "k");
  low.post(FakeClient::kernel(1));
  ASSERT_TRUE(low.wait_granted(9)) << "granted through seq 9 after posting only seq 1";
  for (std::uint64_t seq = 2; seq <= 9; ++seq) low.post(FakeClient::kernel(seq));
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["granted"] == 9; }));
  EXPECT_EQ(daemon.status()["clients"][0]["state"], "running");
}

// Protocol 1.6: the shim is handed its ops ring's doorbell, the loop says on the ring when it
// sleeps, and a post then rings (no thread between the ring and the loop). A 1.5 shim gets no
// doorbell and is served by a thread on the ring's futex, as before. Both get their grants.
TEST(Daemon, ANewShimRingsItsOpsDoorbellAndAnOlderOneIsServedByAThread) {
  DaemonProcess daemon({"--credit-ops", "0"});
  FakeClient current(daemon.socket(), Priority::low, "current");
  FakeClient older(daemon.socket(), Priority::low, "older", 5);
  ASSERT_TRUE(current.has_doorbell());
  EXPECT_FALSE(older.has_doorbell());
  current.name_kernel(1, "gemm");
  older.name_kernel(1, "gemm");
  // The loop was asleep when looked at, so the post rings it; but it can wake by itself (its timer)
  // between the look and the post, which then rings nothing: a full ctest run once saw it at one
  // post of 20. Most posts must ring.
  int rang = 0;
  for (std::uint64_t seq = 1; seq <= 20; ++seq) {
    ASSERT_TRUE(eventually([&] { return current.segment().ops().consumer_sleeping(); }, 1s)) << "the loop never armed";
    rang += current.post(FakeClient::kernel(seq)) ? 1 : 0;
    ASSERT_TRUE(current.wait_granted(seq)) << seq;
    EXPECT_FALSE(older.post(FakeClient::kernel(seq))) << seq;  // nothing to ring: a futex wake
    ASSERT_TRUE(older.wait_granted(seq)) << seq;
  }
  EXPECT_GE(rang, 17) << "posts to a sleeping loop rang it";
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"].size() == 2; }));
  for (const auto& client : daemon.status()["clients"]) EXPECT_EQ(client["ops"]["granted"], 20) << client.dump();
}

// gpuqosd's priority policy, a high-priority job and a best-effort one: the setting of the tests of
// ops held behind a query.
struct HeldBehindAQuery {
  DaemonProcess daemon{{"--policy", "priority"}};
  FakeClient serve{daemon.socket(), Priority::high, "serve"};
  FakeClient train{daemon.socket(), Priority::low, "train"};
  HeldBehindAQuery() {
    serve.name_kernel(1, "attention");
    train.name_kernel(1, "conv");
  }
  // serve's kernel `seq` opens a query (it is on the device until serve completes it); train's
  // kernel `seq` is posted behind it.
  void post_behind_a_query(std::uint64_t seq) {
    serve.post(FakeClient::kernel(seq));
    ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["posted"] == seq; }));
    train.post(FakeClient::kernel(seq));
  }
};

// While it holds ops, the loop asks for completions too: the one that releases them (here the
// query's last kernel) rings the doorbell and the held op is granted at once, not at the next
// 10-ms tick (a chunked best-effort copy waited a tick per chunk behind the transfer limit). With
// nothing held, completions do not wake the loop. The loop can wake by itself (its timer) between
// the look at the ring and the completion, which then rings nothing (seen once under ctest -j2), so
// most completions must ring, not all.
TEST(Daemon, ACompletionThatMayReleaseHeldOpsRingsTheDoorbell) {
  HeldBehindAQuery held;
  auto& [daemon, serve, train] = held;
  int rang = 0;
  for (std::uint64_t seq = 1; seq <= 10; ++seq) {
    ASSERT_NO_FATAL_FAILURE(held.post_behind_a_query(seq));
    ASSERT_FALSE(train.wait_granted(seq, 20ms)) << "the query's kernel is still on the device";
    ASSERT_TRUE(eventually([&] { return serve.segment().completions().consumer_sleeping(); }, 1s))
        << "the loop did not ask for completions while it held an op";
    rang += serve.complete(seq) ? 1 : 0;
    ASSERT_TRUE(train.wait_granted(seq)) << seq;
    EXPECT_FALSE(train.complete(seq)) << "nothing held: no need to wake the loop";
  }
  EXPECT_GE(rang, 8) << "completions that may release a held op rang the loop";
}

// The doorbell is the client's to ring, not to take back: a client that makes its end blocking and
// rings and reads without end (with a shared eventfd it could read the count the loop was about to
// read, and the loop's read would then block for ever) costs the loop wake-ups, never its turn.
TEST(Daemon, AClientCannotMakeTheLoopWaitOnItsDoorbell) {
  DaemonProcess daemon({"--credit-ops", "0"});
  FakeClient evil(daemon.socket(), Priority::low, "evil");
  FakeClient good(daemon.socket(), Priority::low, "good");
  ASSERT_TRUE(evil.has_doorbell());
  ASSERT_EQ(::fcntl(evil.doorbell_fd(), F_SETFL, 0), 0);  // blocking, for whatever shares it
  std::atomic<bool> stop{false};
  std::thread ringer([&] {
    char byte = 1;
    while (!stop.load()) {
      [[maybe_unused]] const ssize_t sent = ::send(evil.doorbell_fd(), &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      [[maybe_unused]] const ssize_t got = ::recv(evil.doorbell_fd(), &byte, 1, MSG_DONTWAIT);
    }
  });
  good.name_kernel(1, "gemm");
  bool served = true;
  for (std::uint64_t seq = 1; seq <= 20 && served; ++seq) {
    good.post(FakeClient::kernel(seq));
    served = good.wait_granted(seq);
  }
  const std::uint64_t beat = evil.segment().daemon_heartbeat_ns();
  std::this_thread::sleep_for(50ms);
  const bool beating = evil.segment().daemon_heartbeat_ns() > beat;
  stop.store(true);
  ringer.join();
  EXPECT_TRUE(served) << "the loop stopped granting";
  EXPECT_TRUE(beating) << "the loop stopped its heartbeat";
  EXPECT_EQ(daemon.status()["clients"].size(), 2u);
}

// A review: a client whose threads (or forked processes) refill its socket with kernel-name records
// as fast as gpuqosd reads them kept the loop reading them, 2.2 s with six writers, so every other
// job's shim passed its heartbeat limit and ran unmanaged. A read takes at most kRecordsPerRead of
// them a pass; the rest wait for the next. Here eight threads flood for up to 3 s while another
// job's op must be granted within half a second.
TEST(Daemon, AClientFloodingItsSocketDoesNotHoldTheLoop) {
  DaemonProcess daemon({"--policy", "fifo"});
  FakeClient flood(daemon.socket(), Priority::low, "flood");
  FakeClient other(daemon.socket(), Priority::low, "other");
  other.name_kernel(1, "k");
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  const auto record = ipc::encode_kernel_name(1, "same-name-again").value();
  for (int i = 0; i < 8; ++i) {
    writers.emplace_back([&] {
      const auto until = std::chrono::steady_clock::now() + 3s;
      while (!stop.load() && std::chrono::steady_clock::now() < until) {
        if (!ipc::send_record(flood.socket_fd(), record)) break;
      }
    });
  }
  std::this_thread::sleep_for(200ms);  // the flood is on
  other.post(FakeClient::kernel(1));
  const bool granted = other.wait_granted(1, 500ms);
  stop.store(true);
  for (auto& writer : writers) writer.join();
  EXPECT_TRUE(granted) << "the loop was held reading the flood\n" << daemon.log();
}

// A review: a client posting a new unnamed kernel with each op wrote a warning line each (65,536
// in a second). The line is under the per-user warning budget; the ops still go, named kernel-<id>.
TEST(Daemon, OpsOfKernelsNeverNamedAreWarnedOfWithinTheBudget) {
  DaemonProcess daemon({"--policy", "fifo"});
  FakeClient client(daemon.socket(), Priority::low, "unnamed");
  constexpr std::uint64_t kOps = 200;
  for (std::uint64_t seq = 1; seq <= kOps; ++seq) {
    client.post(FakeClient::kernel(seq, static_cast<std::uint32_t>(seq)));
    ASSERT_TRUE(client.wait_granted(seq)) << daemon.log();
  }
  const std::size_t said = occurrences(daemon.log(), "whose name was never sent");
  EXPECT_GE(said, 1u) << daemon.log();
  EXPECT_LE(said, static_cast<std::size_t>(scheduler::Daemon::kPeerWarningsPerWindow)) << daemon.log();
}

// A review: a pass of the loop may take a client's ops more than once (here a status request's, then
// the doorbell's), and each op of a new kernel read its name within one budget of records a pass, so
// from the 257th new kernel in a pass the ops were learned under kernel-<id>. A warm-up launches
// many new kernels at once: each finds its name. Which events share the pass is the kernel's
// choice: without the fix, 6 of 10 runs failed (2026-12-02), so this catches a return of it most of
// the time, not always.
TEST(Daemon, ManyNewKernelsAtOnceAreEachLearnedUnderTheirNames) {
  DaemonProcess daemon({"--policy", "fifo"});
  FakeClient client(daemon.socket(), Priority::low, "warm-up");
  // A status request's connection, accepted first: its request then comes in the same pass as the
  // client's names and ops, and takes the ops once (for the status) before the doorbell or the
  // timer takes them again.
  auto status = scheduler::connect_unix(daemon.socket());
  ASSERT_TRUE(status) << status.error();
  std::this_thread::sleep_for(100ms);  // accepted
  constexpr std::uint32_t kKernels = 270;  // names: about what a socket holds (278 records of this size)
  ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
  ASSERT_TRUE(ipc::send_record(status->get(), ipc::encode_control_request(ipc::ControlKind::status)));
  for (std::uint32_t id = 1; id <= kKernels; ++id) client.name_kernel(id, "kernel_" + std::to_string(id));
  for (std::uint32_t id = 1; id <= kKernels; ++id) client.post(FakeClient::kernel(id, id));
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
  EXPECT_TRUE(client.wait_granted(kKernels, 10s)) << daemon.log();
  std::vector<std::byte> answer;
  EXPECT_TRUE(ipc::receive_record(status->get(), answer, ipc::kMaxControlRecordBytes));
  EXPECT_EQ(occurrences(daemon.log(), "whose name was never sent"), 0u) << daemon.log();
}

// Status requests that arrive together are answered from one status made for them all (a review
// queued 64, an epoll batch, each made anew: 300 ms of the loop with 400 clients). Each still gets
// the whole answer, the one of that moment.
TEST(Daemon, StatusRequestsThatComeTogetherAreAllAnswered) {
  DaemonProcess daemon;
  FakeClient train(daemon.socket(), Priority::low, "train");
  ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
  std::vector<std::future<ipc::Result<std::string>>> asked;
  for (int i = 0; i < 32; ++i) {
    asked.push_back(std::async(std::launch::async, [&] { return scheduler::request_status(daemon.socket()); }));
  }
  std::this_thread::sleep_for(300ms);  // every request is queued
  ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
  for (auto& answer : asked) {
    const auto text = answer.get();
    ASSERT_TRUE(text) << text.error();
    const auto json = nlohmann::json::parse(text.value(), nullptr, false);
    ASSERT_FALSE(json.is_discarded()) << text.value();
    ASSERT_EQ(json["clients"].size(), 1u) << text.value();
    EXPECT_EQ(json["clients"][0]["job"], "train");
  }
}

// Any local user may ask for the status in a loop (`gpuqos top --interval 0.001`, a script). Each
// was made anew in its pass of the loop, about 6 ms of it with 500 clients; now making them takes at
// most a tenth of the loop's time (after a first 50 ms), and requests beyond are answered with the
// latest (a review). Told apart by the daemon's uptime in each answer.
TEST(Daemon, StatusRequestsInALoopAreMadeWithinAShareOfTheLoopsTime) {
  DaemonProcess daemon;
  std::vector<std::unique_ptr<FakeClient>> clients;
  for (int i = 0; i < 200; ++i) clients.push_back(std::make_unique<FakeClient>(daemon.socket(), Priority::low, "many"));
  const auto uptime = [&] {
    const auto text = scheduler::request_status(daemon.socket());
    if (!text) return "error: " + text.error();
    const std::size_t at = text.value().find("\"uptime_ns\":");
    return at == std::string::npos ? "none" : text.value().substr(at, text.value().find_first_of(",}", at) - at);
  };
  constexpr int kRequests = 400;
  std::set<std::string> made;
  for (int i = 0; i < kRequests; ++i) {
    const std::string made_at = uptime();
    ASSERT_EQ(made_at.rfind("\"uptime_ns\":", 0), 0u) << made_at;
    made.insert(made_at);
  }
  EXPECT_LE(made.size(), static_cast<std::size_t>(kRequests / 2)) << "of " << kRequests << " asked back to back";
  EXPECT_GE(made.size(), 2u) << "the status goes on being made";
  // Nor do clients that come and go between the requests make each anew once the budget is spent
  // (each such change dropped the answer kept).
  std::set<std::string> made_in_churn;
  for (int i = 0; i < 100; ++i) {
    { FakeClient churn(daemon.socket(), Priority::low, "churn"); }
    made_in_churn.insert(uptime());
  }
  EXPECT_LE(made_in_churn.size(), 50u) << "of 100, each after a client came and went";
  // After a pause the budget has refilled (600 ms: 50 ms of making, its most): each is made anew.
  std::this_thread::sleep_for(600ms);
  const std::string first = uptime(), second = uptime();
  EXPECT_NE(first, second);
  EXPECT_EQ(made.count(first), 0u);
  // A client that leaves shows.
  clients.pop_back();
  const auto clients_told = [&] {  // listed, and counted past what one answer holds
    const nlohmann::json status = daemon.status();
    return status["clients"].size() + status.value("clients_omitted", std::size_t{0});
  };
  EXPECT_TRUE(eventually([&] { return clients_told() == 199u; })) << clients_told();
}

TEST(Daemon, WithoutCreditEveryOpWaitsForItsGrant) {
  DaemonProcess daemon({"--credit-ops", "0"});
  FakeClient low(daemon.socket(), Priority::low, "strict");
  low.name_kernel(1, "k");
  low.post(FakeClient::kernel(1));
  ASSERT_TRUE(low.wait_granted(1));
  EXPECT_FALSE(low.wait_granted(2, 200ms));
}

TEST(Daemon, PriorityPolicyHoldsBestEffortWhileAQueryRuns) {
  HeldBehindAQuery held;
  auto& [daemon, serve, train] = held;
  ASSERT_NO_FATAL_FAILURE(held.post_behind_a_query(1));
  EXPECT_FALSE(train.wait_granted(1, 200ms)) << "the query's kernel is still on the device";
  serve.complete(1);
  EXPECT_TRUE(train.wait_granted(1));
  EXPECT_EQ(daemon.status()["daemon"]["policy"], "priority");
}

// A stalled loop (here gpuqosd stopped for 600 ms) leaves every waiting shim past its heartbeat
// limit, and each runs its held ops unmanaged there: their wait ends at the limit, not at the grant
// the loop makes once it is back (which counted the whole stall as waiting for a grant).
TEST(Daemon, AHeldOpsWaitEndsWhereItsShimStoppedWaitingForAStalledLoop) {
  HeldBehindAQuery held;
  auto& [daemon, serve, train] = held;
  ASSERT_NO_FATAL_FAILURE(held.post_behind_a_query(1));
  ASSERT_FALSE(train.wait_granted(1, 50ms)) << "held behind the query's kernel";
  ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(600ms);
  serve.complete(1);  // there when the loop is back: handled in the same wake-up as the stall's timer
  ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
  ASSERT_TRUE(train.wait_granted(1));
  const auto grants = daemon.status()["grants"];
  const std::int64_t max_ns = grants["held_wait_ns_max"];
  EXPECT_GT(max_ns, 50'000'000);
  EXPECT_LT(max_ns, 400'000'000) << "the stall counted as a wait for the grant";
  EXPECT_TRUE(eventually([&] { return daemon.log().find(kDaemonStalledMark) != std::string::npos; }))
      << "the operator is told why the jobs ran unscheduled\n" << daemon.log();
  EXPECT_NE(daemon.log().find(" ms, over the shims' 100 ms heartbeat limit: its 2 client(s) ran"), std::string::npos)
      << daemon.log();
  EXPECT_NE(daemon.log().find("re-register. Give gpuqosd CPU time it cannot be starved of"), std::string::npos)
      << "stopped from outside, not by its own work\n" << daemon.log();
}

// Shims retry their Hello once a second while gpuqosd is stopped; back, it answers every one of them
// after its shim stopped waiting. A user test got a line for each (17 after a 17-s stop): now the
// first is said, at info, and the rest are counted in one line at the window's end. A status
// request that gave up the same way is no warning either.
TEST(Daemon, AnswersThatPeersStoppedWaitingForAreSaidOnceAndCounted) {
  DaemonProcess daemon;
  ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
  constexpr int kHellos = 5;
  for (int i = 0; i < kHellos + 1; ++i) {  // the connections wait in the listener's backlog
    auto fd = scheduler::connect_unix(daemon.socket());
    ASSERT_TRUE(fd) << fd.error();
    const auto record = i < kHellos ? ipc::encode(ipc::make_hello(Priority::low, 0, "gave-up").value())
                                    : ipc::encode_control_request(ipc::ControlKind::status);
    ASSERT_TRUE(ipc::send_record(fd->get(), record));
  }  // each closed: its peer gave up
  ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
  const std::string said = "its shim stopped waiting for the answer to its hello";
  const std::string said_status = "its status request stopped waiting for the answer";
  const std::string counted = std::to_string(kHellos) +
                              " more answers to peers that had stopped waiting (Hellos, status requests) in the last";
  EXPECT_TRUE(eventually([&] { return daemon.log().find(counted) != std::string::npos; },
                         std::chrono::milliseconds(scheduler::Daemon::kPeerWarningWindowNs / 1'000'000) + 10s))
      << daemon.log();
  // The first late answer is said, whichever kind gpuqosd came to first.
  EXPECT_EQ(occurrences(daemon.log(), said) + occurrences(daemon.log(), said_status), 1u) << daemon.log();
  EXPECT_NE(daemon.log().find("gpuqosd answered late (stalled or stopped?)"), std::string::npos) << daemon.log();
  EXPECT_EQ(daemon.log().find("[warning]"), std::string::npos) << daemon.log();
  EXPECT_EQ(daemon.log().find("cannot answer"), std::string::npos) << daemon.log();
  EXPECT_EQ(daemon.log().find("cannot send status"), std::string::npos) << daemon.log();
}

// One gpuqosd per socket path, even when a tmp cleaner removed the first one's socket file: the
// second refuses (naming the first), and the first serves the path again.
TEST(Daemon, ASecondDaemonOnTheSamePathIsRefusedAndARemovedSocketIsServedAgain) {
  DaemonProcess daemon;
  ASSERT_TRUE(std::filesystem::remove(daemon.socket()));
  ChildProcess second({bin("gpuqosd"), "--socket", daemon.socket()}, {}, daemon.dir() / "second.log");
  EXPECT_EQ(second.wait(10s), 1) << second.output();
  EXPECT_NE(second.output().find("another gpuqosd (pid " + std::to_string(daemon.pid()) + ") holds " + daemon.socket() +
                                 ".lock"),
            std::string::npos) << second.output();
  ASSERT_TRUE(eventually([&] { return scheduler::connect_unix(daemon.socket()).ok(); }, 5s)) << daemon.log();
  // Said as it serves the path again: the line may follow the bind a connect sees by a moment.
  EXPECT_TRUE(eventually([&] {
    return daemon.log().find(daemon.socket() + " was removed (a tmp cleaner?): serving it again") != std::string::npos;
  }, 5s)) << daemon.log();
  FakeClient client(daemon.socket(), Priority::low, "after");
  client.name_kernel(1, "k");
  client.post(FakeClient::kernel(1));
  EXPECT_TRUE(client.wait_granted(1));
  // A cleaner that takes the lock file too: locked again before the socket is served again.
  const std::string lock = daemon.socket() + ".lock";
  ASSERT_TRUE(std::filesystem::remove(daemon.socket()));
  ASSERT_TRUE(std::filesystem::remove(lock));
  ASSERT_TRUE(eventually([&] { return scheduler::connect_unix(daemon.socket()).ok(); }, 5s)) << daemon.log();
  std::string pid;
  std::ifstream(lock) >> pid;
  EXPECT_EQ(pid, std::to_string(daemon.pid()));
  ChildProcess third({bin("gpuqosd"), "--socket", daemon.socket()}, {}, daemon.dir() / "third.log");
  EXPECT_EQ(third.wait(10s), 1) << third.output();
  // The lock file alone removed: taken again (a second daemon would otherwise lock a new one).
  const std::string relocked = lock + " was removed or replaced: locked again";
  const std::size_t relocks = occurrences(daemon.log(), relocked);  // once already, with the socket
  ASSERT_TRUE(std::filesystem::remove(lock));
  ASSERT_TRUE(eventually([&] { return occurrences(daemon.log(), relocked) > relocks; }, 5s)) << daemon.log();
  // A pid there that is not running (the holder could not write its own): not named as the holder.
  std::ofstream(lock) << "999999999\n";
  ChildProcess fourth({bin("gpuqosd"), "--socket", daemon.socket()}, {}, daemon.dir() / "fourth.log");
  EXPECT_EQ(fourth.wait(10s), 1) << fourth.output();
  EXPECT_NE(fourth.output().find("another gpuqosd (its pid is not recorded) holds " + lock), std::string::npos)
      << fourth.output();
}

// A gpuqosd that cannot serve its socket path (another one does) leaves its store as it was: it
// used to read it first, and move one it could not use aside, before it found the path taken.
TEST(Daemon, ADaemonRefusedItsSocketLeavesItsStoreAlone) {
  DaemonProcess daemon;
  const auto store = daemon.dir() / "newer.gqp";
  std::ofstream(store, std::ios::binary) << "GPUQOSPF from a newer gpuqos";
  ChildProcess second({bin("gpuqosd"), "--socket", daemon.socket(), "--profile-store", store.string()}, {},
                      daemon.dir() / "second.log");
  EXPECT_EQ(second.wait(10s), 1) << second.output();
  EXPECT_NE(second.output().find("another gpuqosd (pid " + std::to_string(daemon.pid()) + ") holds"), std::string::npos)
      << second.output();
  EXPECT_EQ(second.output().find("moved aside"), std::string::npos) << second.output();
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(daemon.dir())) names.push_back(entry.path().filename());
  EXPECT_TRUE(std::filesystem::exists(store));
  EXPECT_EQ(std::count_if(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("newer.gqp."); }), 0)
      << "nothing beside it: no lock, nothing moved aside";
}

TEST(Daemon, AccountsHighPriorityOpsWithoutGrants) {
  DaemonProcess daemon({"--max-outstanding", "1"});
  FakeClient high(daemon.socket(), Priority::high, "serve");
  high.name_kernel(7, "resnet_block");
  for (std::uint64_t seq = 1; seq <= 5; ++seq) high.post(FakeClient::kernel(seq, 7));
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["posted"] == 5; }));
  for (std::uint64_t seq = 1; seq <= 5; ++seq) high.complete(seq);
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["completed"] == 5; }));
  const auto status = daemon.status();
  EXPECT_EQ(status["clients"][0]["ops"]["granted"], 5);
  EXPECT_EQ(status["clients"][0]["priority"], "high");
  EXPECT_EQ(status["backlog"][0]["engine"], "compute");
  EXPECT_EQ(status["backlog"][0]["completed_ops"], 5);
  EXPECT_EQ(status["backlog"][0]["outstanding_ops"], 0);
  EXPECT_TRUE(high.segment().grants().empty()) << "high-priority ops never wait for grants";
}

TEST(Daemon, CountsSynchronisationsAndQueryMarksApartFromWork) {
  DaemonProcess daemon({"--max-outstanding", "1"});
  FakeClient low(daemon.socket(), Priority::low, "marks");
  low.name_kernel(1, "k");
  const auto mark = [](std::uint64_t seq, ipc::OpKind kind) {
    ipc::OpDescriptor op{};
    op.seq = seq;
    op.posted_ns = 1;
    op.kind = kind;
    return op;
  };
  low.post(mark(1, ipc::OpKind::query_begin));
  low.post(FakeClient::kernel(2));
  low.post(mark(3, ipc::OpKind::sync));
  low.post(mark(4, ipc::OpKind::query_end));
  ASSERT_TRUE(low.wait_granted(4)) << "marks take no engine slot: granted behind the one kernel";
  low.complete(2);
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["completed"] == 1; }));
  const auto client = daemon.status()["clients"][0];
  EXPECT_EQ(client["ops"]["posted"], 1);
  EXPECT_EQ(client["ops"]["granted"], 1);
  EXPECT_EQ(client["marks"]["sync"], 1);
  EXPECT_EQ(client["marks"]["query_begin"], 1);
  EXPECT_EQ(client["marks"]["query_end"], 1);
  EXPECT_EQ(client["state"], "running");
}

// One user's jobs bring at most a quarter of the predictor's kernel-name table into a table three
// quarters full (DurationLearner::client_user): gpuqosd says whose clients they are, and says once
// that the user's new names are no longer learned.
TEST(Daemon, OneUsersMadeUpKernelNamesLeaveAQuarterOfTheTable) {
  DaemonProcess daemon;
  FakeClient flooder(daemon.socket(), Priority::high, "flood");  // high: its ops go without a grant
  constexpr std::uint32_t kNames = 3100;
  for (std::uint32_t id = 1; id <= kNames; ++id) flooder.name_kernel(id, "made-up-" + std::to_string(id));
  for (std::uint32_t first = 1; first <= kNames; first += 500) {
    const std::uint32_t last = std::min(kNames, first + 499);
    for (std::uint32_t id = first; id <= last; ++id) flooder.post(FakeClient::kernel(id, id));
    ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["posted"] == last; }))
        << daemon.status().dump(1);
    for (std::uint32_t id = first; id <= last; ++id) flooder.complete_just_now(id, 1'000);
    ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["completed"] == last; }))
        << daemon.status().dump(1);
  }
  const auto predictor = daemon.status()["predictor"];
  EXPECT_EQ(predictor["kernels"], 3072) << predictor.dump(1);
  EXPECT_EQ(predictor["learned"], 3072);
  const std::string said = "predictor: the jobs of uid " + std::to_string(::getuid()) + " use 3072 kernel names";
  // Said at the loop's next tick after the refusal.
  ASSERT_TRUE(eventually([&] { return daemon.log().find(said) != std::string::npos; })) << daemon.log();
  const std::string log = daemon.log();
  EXPECT_EQ(log.find(said, log.find(said) + 1), std::string::npos) << "said once";
}

TEST(Daemon, LearnsFromExactCompletionsAndSavesTheStoreAtExit) {
  TempDir dir("gpuqosd-store");
  const std::string store = (dir.path() / "profile.gqp").string();
  {
    DaemonProcess daemon({"--profile-store", store});
    FakeClient high(daemon.socket(), Priority::high, "serve");
    high.name_kernel(1, "gemm");
    for (std::uint64_t seq = 1; seq <= 21; ++seq) high.post(FakeClient::kernel(seq));
    // Spans as a shim reports them: after the ops were posted, before they are read.
    const std::int64_t base = ipc::monotonic_ns() - 10'000'000;
    for (std::uint64_t seq = 1; seq <= 20; ++seq) high.complete(seq, base, base + 50'000);  // 50 us each
    high.complete(21, base, base + 40'000, ipc::kCompletionCoarse);  // a batch's time: not learned
    ASSERT_TRUE(eventually([&] { return daemon.status()["predictor"]["learned"] == 20; })) << daemon.status().dump(1);
    // Another client's op whose span overlaps those: it waited behind them, not learned.
    FakeClient low(daemon.socket(), Priority::low, "train");
    low.post(FakeClient::kernel(1));
    ASSERT_TRUE(low.wait_granted(1));
    low.complete(1, base, base + 200'000);
    ASSERT_TRUE(eventually([&] { return daemon.status()["predictor"]["shared"] == 1; })) << daemon.status().dump(1);
    const auto predictor = daemon.status()["predictor"];
    EXPECT_EQ(predictor["learned"], 20);
    EXPECT_EQ(predictor["coarse"], 1);
    EXPECT_EQ(predictor["kernels"], 1);
    EXPECT_EQ(predictor["store"], store);
    daemon.process().stop();  // SIGTERM: drains and saves
    EXPECT_NE(daemon.log().find("predictor: saved 1 kernels"), std::string::npos) << daemon.log();
    // A first start is no problem: said at info, not warned of (a user test read it as one).
    EXPECT_NE(daemon.log().find("info predictor: " + store + " is not there yet: starting with an empty model"),
              std::string::npos)
        << daemon.log();
    EXPECT_EQ(daemon.log().find("warning predictor: " + store), std::string::npos) << daemon.log();
  }
  predictor::LoadedProfile loaded = predictor::load_profile(store, predictor::PredictorConfig{});
  ASSERT_FALSE(loaded.warning) << *loaded.warning;
  const auto prediction = loaded.predictor.predict(predictor::features_of(FakeClient::kernel(1), "gemm"));
  EXPECT_NEAR(prediction.duration_ns, 50'000, 2'500);

  // The next daemon starts from what the last one learned.
  DaemonProcess again({"--profile-store", store});
  EXPECT_EQ(again.status()["predictor"]["kernels"], 1);
}

namespace {

// Has a high-priority client of `daemon` complete 20 exact 50-us kernels of one name, then stops
// the daemon (it saves what it learned as it stops).
void learn_one_kernel_and_stop(DaemonProcess& daemon) {
  {
    FakeClient high(daemon.socket(), Priority::high, "serve");
    high.name_kernel(1, "gemm");
    for (std::uint64_t seq = 1; seq <= 20; ++seq) high.post(FakeClient::kernel(seq));
    for (std::uint64_t seq = 1; seq <= 20; ++seq) high.complete_just_now(seq, 50'000);
    ASSERT_TRUE(eventually([&] { return daemon.status()["predictor"]["learned"] == 20; })) << daemon.status().dump(1);
  }
  EXPECT_EQ(daemon.process().terminate(5s), 0) << daemon.log();
}

}  // namespace

// A user test: a store at `current.gqp -> models/v3.gqp` became a plain file at the first save,
// v3.gqp untouched; a read-only store (0444) was saved over; a store at a FIFO (or /dev/null) left
// `<store>.lock` beside it, in /dev.
TEST(Daemon, AStoreIsSavedWhereItsLinkPointsBesideItWhenReadOnlyAndNowhereWhenADevice) {
  TempDir dir("gpuqosd-store");
  std::filesystem::create_directory(dir.path() / "models");
  const auto version = dir.path() / "models" / "v3.gqp";
  const auto link = dir.path() / "current.gqp";
  std::filesystem::create_symlink("models/v3.gqp", link);
  {
    DaemonProcess daemon({"--profile-store", link.string()});
    EXPECT_NE(daemon.log().find("the profile store " + link.string() + " is a link to " + version.string()),
              std::string::npos)
        << daemon.log();
    learn_one_kernel_and_stop(daemon);
    EXPECT_NE(daemon.log().find("predictor: saved 1 kernels to " + version.string()), std::string::npos) << daemon.log();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(predictor::load_profile(version, predictor::PredictorConfig{}).predictor.kernel_count(), 1u);

  std::filesystem::permissions(version, std::filesystem::perms(0444));
  const auto before = std::filesystem::last_write_time(version);
  {
    DaemonProcess daemon({"--profile-store", version.string()});
    const std::string beside = version.string() + ".gpuqosd-" + std::to_string(daemon.pid());
    EXPECT_NE(daemon.log().find("is read-only (mode 0444"), std::string::npos) << daemon.log();
    learn_one_kernel_and_stop(daemon);
    EXPECT_NE(daemon.log().find("warning predictor: " + version.string() + " is read-only"), std::string::npos)
        << daemon.log();
    EXPECT_NE(daemon.log().find("saved to " + beside), std::string::npos) << daemon.log();
    EXPECT_EQ(daemon.log().find("error"), std::string::npos) << daemon.log();
    EXPECT_EQ(predictor::load_profile(beside, predictor::PredictorConfig{}).predictor.kernel_count(), 1u);
  }
  EXPECT_EQ(std::filesystem::last_write_time(version), before);

  const auto fifo = dir.path() / "fifo.gqp";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  {
    DaemonProcess daemon({"--profile-store", fifo.string()});
    learn_one_kernel_and_stop(daemon);
    EXPECT_NE(daemon.log().find("predictor: what was learned is not saved: " + fifo.string() + " is not a regular file"),
              std::string::npos)
        << daemon.log();
    EXPECT_EQ(daemon.log().find(" error "), std::string::npos) << daemon.log();
  }
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_FALSE(entry.path().filename().string().starts_with("fifo.gqp.")) << entry.path() << " beside a FIFO";
  }
}

// Two gpuqosd on one store (two sockets, one node) would each save over what the other learned: the
// first holds the store's lock, the second is told so at start and saves beside the store.
// A re-test planted a link at <store>.lock: it could not be opened (O_NOFOLLOW), the daemon went on
// unlocked, and two root daemons saved over each other's store. Something there that cannot be
// locked is taken as held: warned of, and this daemon saves beside the store.
TEST(Daemon, ALinkAtTheStoresLockIsTakenAsHeld) {
  TempDir dir("gpuqosd-store");
  const std::string store = (dir.path() / "profile.gqp").string();
  std::filesystem::create_symlink(dir.path() / "elsewhere", store + ".lock");
  DaemonProcess daemon({"--profile-store", store});
  EXPECT_NE(daemon.log().find("warning predictor: cannot lock " + store + ": cannot open " + store + ".lock"),
            std::string::npos)
      << daemon.log();
  EXPECT_NE(daemon.log().find("saves what it learns to " + store + ".gpuqosd-" + std::to_string(daemon.pid())),
            std::string::npos)
      << daemon.log();
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "elsewhere")) << "nothing made through the link";
}

// A save cut short leaves <store>.tmp.XXXXXX, and no later save reuses the name: the store's saver
// removes its own user's that are an hour old, and nothing else.
TEST(Daemon, TemporariesOfSavesCutShortAreRemovedWhenOld) {
  TempDir dir("gpuqosd-store");
  const std::string store = (dir.path() / "profile.gqp").string();
  const auto make = [](const std::string& path, bool old) {
    std::ofstream(path) << "half a model";
    if (old) std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  };
  make(store + ".tmp.aB3dE9", true);
  make(store + ".tmp.4242", true);     // named as before the names were random
  make(store + ".tmp.fresh1", false);  // a save going on now (gpuqos train --out)
  make(store + ".other", true);
  std::filesystem::create_symlink(dir.path() / "elsewhere", store + ".tmp.linked");
  DaemonProcess daemon({"--profile-store", store});
  EXPECT_NE(daemon.log().find("predictor: removed 2 temporary file(s) " + store + ".tmp.* left by saves cut short"),
            std::string::npos)
      << daemon.log();
  EXPECT_FALSE(std::filesystem::exists(store + ".tmp.aB3dE9"));
  EXPECT_FALSE(std::filesystem::exists(store + ".tmp.4242"));
  EXPECT_TRUE(std::filesystem::exists(store + ".tmp.fresh1"));
  EXPECT_TRUE(std::filesystem::exists(store + ".other"));
  EXPECT_TRUE(std::filesystem::is_symlink(store + ".tmp.linked"));
}

TEST(Daemon, ASecondDaemonOnTheSameStoreSavesBesideIt) {
  TempDir dir("gpuqosd-store");
  const std::string store = (dir.path() / "profile.gqp").string();
  DaemonProcess first({"--profile-store", store});
  // What is at the store now is the first daemon's business: the second does not move it aside, even
  // when it cannot read it.
  const std::string garbage = "GPUQOSPF but then garbage";
  std::ofstream(store) << garbage;
  std::optional<DaemonProcess> second(std::in_place, std::vector<std::string>{"--profile-store", store});
  const pid_t second_pid = second->pid();
  const std::string beside = store + ".gpuqosd-" + std::to_string(second_pid);
  EXPECT_NE(second->log().find("predictor: another gpuqosd (pid " + std::to_string(first.pid()) + ") learns into " +
                               store + ": this one reads it but saves what it learns to " + beside),
            std::string::npos)
      << second->log();
  EXPECT_EQ(first.log().find("learns into"), std::string::npos) << first.log();
  {
    FakeClient high(second->socket(), Priority::high, "serve");
    high.name_kernel(1, "gemm");
    for (std::uint64_t seq = 1; seq <= 20; ++seq) high.post(FakeClient::kernel(seq));
    for (std::uint64_t seq = 1; seq <= 20; ++seq) high.complete_just_now(seq, 50'000);
    ASSERT_TRUE(eventually([&] { return second->status()["predictor"]["learned"] == 20; })) << second->status().dump(1);
  }
  second->process().stop();
  EXPECT_NE(second->log().find("predictor: saved 1 kernels to " + beside), std::string::npos) << second->log();
  second.reset();
  std::ifstream in(store);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), garbage) << "the first daemon's store is not the second's";
  EXPECT_EQ(predictor::load_profile(beside, predictor::PredictorConfig{}).predictor.kernel_count(), 1u);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".unreadable-"), std::string::npos) << entry.path();
  }
}

// A directory as the store (meant: keep the store in it) is refused at start with a file to give, and
// so is a path ending in '/' whose directory is not there yet (it would be made, and every save fail).
TEST(Daemon, RefusesADirectoryAsTheProfileStore) {
  TempDir dir("gpuqosd-store");
  const std::string yet = (dir.path() / "not-yet").string() + "/";
  for (const std::string& store : {dir.path().string(), yet}) {
    ChildProcess start({bin("gpuqosd"), "--socket", (dir.path() / "s.sock").string(), "--profile-store", store}, {},
                       dir.path() / "out");
    EXPECT_EQ(start.wait(5s), 1) << start.output();
    const std::filesystem::path example = (std::filesystem::path(store) / "gpuqosd.gqp").lexically_normal();
    EXPECT_NE(start.output().find("the profile store " + store + " is a directory: give a file in it, e.g. " +
                                  example.string()),
              std::string::npos)
        << start.output();
  }
  EXPECT_FALSE(std::filesystem::exists(yet)) << "nothing made";
}

TEST(Daemon, ACorruptStoreIsAWarningAndAnEmptyModel) {
  TempDir dir("gpuqosd-store");
  const auto store = dir.path() / "profile.gqp";
  std::ofstream(store) << "GPUQOSPF but then garbage";
  DaemonProcess daemon({"--profile-store", store.string()});
  EXPECT_EQ(daemon.status()["predictor"]["kernels"], 0);
  EXPECT_NE(daemon.log().find(store.string()), std::string::npos) << daemon.log();
  EXPECT_NE(daemon.log().find("warn"), std::string::npos) << daemon.log();
}

// A store path pointed at another kind of file (the CUPTI profile the store is trained from): the
// daemon would move it aside and save a store in its place, so it refuses to start and says why.
TEST(Daemon, RefusesAProfileStorePathThatHoldsAnotherKindOfFile) {
  TempDir dir("gpuqosd-store");
  const auto store = dir.path() / "profile.jsonl";
  const std::string content = "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"j\",\"pid\":1}\n";
  std::ofstream(store) << content;
  ChildProcess start({bin("gpuqosd"), "--socket", (dir.path() / "s.sock").string(), "--profile-store", store.string()},
                     {}, dir.path() / "out");
  EXPECT_EQ(start.wait(5s), 1) << start.output();
  EXPECT_NE(start.output().find("the profile store " + store.string() + " is not a predictor store but a gpuqos profile"),
            std::string::npos)
      << start.output();
  EXPECT_NE(start.output().find("gpuqos train --from"), std::string::npos) << start.output();
  std::ifstream in(store);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), content);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 2)
      << "nothing moved aside";
}

TEST(Daemon, DropsAGarbageHelloAndServesOthers) {
  DaemonProcess daemon;
  FakeClient good(daemon.socket(), Priority::low, "good");
  auto raw = scheduler::connect_unix(daemon.socket());
  ASSERT_TRUE(raw);
  std::vector<std::byte> garbage(80);
  std::mt19937 random(7);
  for (auto& byte : garbage) byte = static_cast<std::byte>(random());
  ASSERT_TRUE(ipc::send_record(raw->get(), garbage));
  std::vector<std::byte> record;
  EXPECT_FALSE(ipc::receive_record(raw->get(), record)) << "the daemon closes the connection";
  EXPECT_TRUE(eventually([&] { return daemon.log().find("pid " + std::to_string(::getpid()) + ": garbage") != std::string::npos; }))
      << daemon.log();
  good.name_kernel(1, "k");
  good.post(FakeClient::kernel(1));
  EXPECT_TRUE(good.wait_granted(1));
}

// A user test connected, sent a byte and closed in a loop: 200,000 warnings (20 MB) in 3 s. A
// window's first warnings are said, the rest counted in one line at its end; none is lost.
namespace {

constexpr int kGarbageFlood = 100;

// kGarbageFlood connections that each send one byte instead of a Hello.
void flood_with_garbage(const std::string& socket) {
  for (int i = 0; i < kGarbageFlood; ++i) {
    auto raw = scheduler::connect_unix(socket);
    ASSERT_TRUE(raw);
    ASSERT_TRUE(ipc::send_record(raw->get(), std::vector<std::byte>{std::byte{7}}));
    std::vector<std::byte> record;
    EXPECT_FALSE(ipc::receive_record(raw->get(), record)) << "closed";
  }
}

std::size_t garbage_said(const std::string& log) { return occurrences(log, "garbage instead of a hello"); }

// The sum of the counts said in the budget's lines "N more warnings of connections ...".
std::size_t garbage_counted(const std::string& log) {
  std::size_t sum = 0;
  for (std::size_t at = log.find(" more warnings of connections"); at != std::string::npos;
       at = log.find(" more warnings of connections", at + 1)) {
    const std::size_t start = log.find_last_not_of("0123456789", at - 1) + 1;
    sum += std::stoul(log.substr(start, at - start));
  }
  return sum;
}

}  // namespace

TEST(Daemon, AFloodOfGarbageIsSaidAFewTimesAndTheRestCounted) {
  DaemonProcess daemon;
  FakeClient good(daemon.socket(), Priority::low, "good");
  flood_with_garbage(daemon.socket());
  const auto said = [&] { return garbage_said(daemon.log()); };
  const auto counted = [&] { return garbage_counted(daemon.log()); };
  constexpr int kFlood = kGarbageFlood;
  // The window is 10 s: its count comes within 11 s of the flood.
  EXPECT_TRUE(eventually([&] { return said() + counted() == kFlood; }, std::chrono::seconds(12))) << daemon.log();
  EXPECT_LE(said(), 2u * scheduler::Daemon::kPeerWarningsPerWindow) << "the flood spans two windows at most";
  good.name_kernel(1, "k");
  good.post(FakeClient::kernel(1));
  EXPECT_TRUE(good.wait_granted(1));
}

// gpuqosd stopped within the flood's window: the count of what it did not say is said as it stops
// rather than lost with it.
TEST(Daemon, WhatAStoppingDaemonCountedButDidNotSayIsSaidAsItStops) {
  DaemonProcess daemon;
  flood_with_garbage(daemon.socket());
  ASSERT_TRUE(eventually([&] { return garbage_said(daemon.log()) > 0; })) << daemon.log();
  EXPECT_EQ(daemon.process().terminate(5s), 0) << daemon.log();
  const std::string log = daemon.log();
  EXPECT_GT(garbage_counted(log), 0u) << log;
  EXPECT_EQ(garbage_said(log) + garbage_counted(log), static_cast<std::size_t>(kGarbageFlood)) << log;
}

// A re-test flooded the socket with connections past the user's cap: gpuqosd's accept loop never ran
// out of them, and its heartbeat stopped for the whole flood (its jobs unmanaged, status unanswered).
// It accepts a few per pass and serves everything else in between.
TEST(Daemon, AFloodOfConnectionsDoesNotStopTheHeartbeat) {
  DaemonProcess daemon({"--max-connections-per-user", "2"});
  FakeClient client(daemon.socket(), Priority::low, "served");  // one of the user's two: the flood fills the other
  std::atomic<bool> flooding{true};
  std::vector<std::thread> flooders;
  for (int i = 0; i < 3; ++i) {
    flooders.emplace_back([&] {
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::strncpy(address.sun_path, daemon.socket().c_str(), sizeof address.sun_path - 1);
      while (flooding.load()) {
        const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        (void)::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
        ::close(fd);
      }
    });
  }
  std::int64_t oldest_ns = 0;
  const std::int64_t until_ns = ipc::monotonic_ns() + 2'000'000'000;
  while (ipc::monotonic_ns() < until_ns) {
    const auto beat = static_cast<std::int64_t>(client.segment().daemon_heartbeat_ns());
    oldest_ns = std::max(oldest_ns, ipc::monotonic_ns() - beat);
    std::this_thread::sleep_for(5ms);
  }
  flooding = false;
  for (auto& flooder : flooders) flooder.join();
  EXPECT_LT(oldest_ns, 1'000'000'000) << "the heartbeat stopped for " << oldest_ns / 1'000'000 << " ms";
  EXPECT_NE(daemon.log().find("the most one user may hold"), std::string::npos) << "the flood reached the cap";
}

// One user's flood must not hide another user's problem: past the window's budget, the first
// warning of each further user is still said.
TEST(Daemon, AnotherUsersFirstWarningIsSaidThroughAFlood) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  DaemonProcess daemon;
  std::filesystem::permissions(daemon.dir(), std::filesystem::perms(0755), std::filesystem::perm_options::replace);
  for (int i = 0; i < 3 * scheduler::Daemon::kPeerWarningsPerWindow; ++i) {
    auto raw = scheduler::connect_unix(daemon.socket());
    ASSERT_TRUE(raw);
    ASSERT_TRUE(ipc::send_record(raw->get(), std::vector<std::byte>{std::byte{7}}));
    std::vector<std::byte> record;
    EXPECT_FALSE(ipc::receive_record(raw->get(), record));
  }
  ReadyChild other([&] {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) return false;
    auto raw = scheduler::connect_unix(daemon.socket());
    std::vector<std::byte> record;
    return raw && ipc::send_record(raw->get(), std::vector<std::byte>{std::byte{7}}) &&
           !ipc::receive_record(raw->get(), record);
  });
  ASSERT_TRUE(other.ready());
  EXPECT_TRUE(eventually([&] {
    return daemon.log().find("pid " + std::to_string(other.pid()) + ": garbage instead of a hello") != std::string::npos;
  })) << daemon.log();
  EXPECT_LT(occurrences(daemon.log(), "garbage instead of a hello"), 3u * scheduler::Daemon::kPeerWarningsPerWindow)
      << "the flood itself is cut";
}

// The re-test registered and hung up in a loop: 64,000 lines (8.9 MB) in 10 s. A window's first
// registrations and disconnections are said, the rest counted; none is lost.
TEST(Daemon, AChurnOfRegistrationsIsSaidUpToABudgetAndTheRestCounted) {
  DaemonProcess daemon;
  constexpr int kClients = 300;  // each registers and leaves: 600 lines, over the window's 400
  for (int i = 0; i < kClients; ++i) FakeClient churn(daemon.socket(), Priority::low, "churn");
  const auto said = [&] {
    return occurrences(daemon.log(), "job 'churn' pid " + std::to_string(::getpid()) + ": registered as client") +
           occurrences(daemon.log(), ": disconnected (");
  };
  const auto counted = [&] {
    const std::string log = daemon.log();
    const std::size_t at = log.find(" more registrations and disconnections of clients");
    if (at == std::string::npos) return std::size_t{0};
    const std::size_t start = log.find_last_not_of("0123456789", at - 1) + 1;
    return static_cast<std::size_t>(std::stoul(log.substr(start, at - start)));
  };
  EXPECT_TRUE(eventually([&] { return said() + counted() == 2u * kClients; }, std::chrono::seconds(12)))
      << said() << " said, " << counted() << " counted";
  EXPECT_LE(said(), 2u * 400) << "the churn spans two windows at most";
  EXPECT_GT(counted(), 0u);
}

// A review: a client's lines beyond its registration (each GPU it runs unscheduled, up to 16; a shim
// that cannot take the config's UUIDs; a job whose target it does not claim) were said for every
// registration: 2,000 registrations of 16 unscheduled GPUs each wrote 32,000 lines. They have a
// budget of their own now (so they crowd out no registration line, nor these them).
TEST(Daemon, AChurnOfClientsRunningGpusUnscheduledIsSaidUpToABudget) {
  DaemonProcess daemon;
  constexpr int kClients = 100;  // 100 x (16 GPUs + registered + disconnected): 1,800 lines
  for (int i = 0; i < kClients; ++i) {
    FakeClient churn(daemon.socket(), Priority::low, "churn");
    std::array<std::uint8_t, 16> uuid{};
    for (std::uint32_t ordinal = 0; ordinal < 16; ++ordinal) {
      uuid[0] = static_cast<std::uint8_t>(ordinal + 1);
      ASSERT_TRUE(ipc::send_record(churn.socket_fd(), ipc::encode_unscheduled_device(ordinal, uuid)));
    }
  }
  const auto lines = [&] { return occurrences(daemon.log(), "unscheduled: [devices] does not name it"); };
  EXPECT_TRUE(eventually([&] { return daemon.log().find(" more notes of clients' settings") != std::string::npos; },
                         std::chrono::seconds(12)))
      << lines() << " lines said";
  EXPECT_LE(lines(), 2u * 400) << "the churn spans two windows at most";
  EXPECT_EQ(occurrences(daemon.log(), ": registered as client"), static_cast<std::size_t>(kClients))
      << "every registration said: 100 are under their own budget";
}

// A user test opened 7,000 connections from one account: gpuqosd ran out of descriptors and no
// other user's job could register. One user holds at most --max-connections-per-user (by default a
// quarter of the descriptors, at most 512); others still register.
TEST(Daemon, OneUserHoldsSoManyConnectionsAndOthersStillRegister) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to register as another user";
  DaemonProcess daemon({"--max-connections-per-user", "8"});
  std::filesystem::permissions(daemon.dir(), std::filesystem::perms(0755), std::filesystem::perm_options::replace);
  std::vector<std::unique_ptr<FakeClient>> held;
  for (int i = 0; i < 8; ++i) held.push_back(std::make_unique<FakeClient>(daemon.socket(), Priority::low, "many"));
  // Past the limit: closed without an answer, and said.
  auto extra = scheduler::connect_unix(daemon.socket());
  ASSERT_TRUE(extra);
  // Closed at once: the Hello may not even be sent (the connection is gone first), never answered.
  const bool sent = static_cast<bool>(ipc::send_record(extra->get(), ipc::encode(ipc::make_hello(Priority::low, 0, "extra").value())));
  std::vector<std::byte> record;
  EXPECT_FALSE(sent && static_cast<bool>(ipc::receive_record(extra->get(), record))) << "refused";
  EXPECT_TRUE(eventually([&] { return daemon.log().find("the user has 8 connections to gpuqosd") != std::string::npos; }))
      << daemon.log();
  // Another user is served meanwhile.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(1);
    try {
      FakeClient other(daemon.socket(), Priority::low, "other-user");
      ::_exit(0);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "1: could not become nobody; 2: not registered";
  // Once one of its connections closes, the user registers again.
  held.pop_back();
  EXPECT_TRUE(eventually([&] {
    try {
      FakeClient again(daemon.socket(), Priority::low, "again");
      return true;
    } catch (...) {
      return false;
    }
  }));
}

// A review: a user at the cap could not run `gpuqos status` (closed at once: "recv: Connection reset
// by peer"). A status request past the cap is answered (it holds nothing once answered); a Hello
// there is still refused. Only when kOverCapPending such connections wait for their first record is
// one closed at once, which the CLI explains.
TEST(Daemon, AUserAtTheConnectionCapCanStillAskForTheStatus) {
  DaemonProcess daemon({"--max-connections-per-user", "8"});
  std::vector<std::unique_ptr<FakeClient>> held;
  for (int i = 0; i < 8; ++i) held.push_back(std::make_unique<FakeClient>(daemon.socket(), Priority::low, "many"));
  const auto answer = scheduler::request_status(daemon.socket());
  ASSERT_TRUE(answer) << answer.error();
  EXPECT_EQ(nlohmann::json::parse(answer.value())["clients"].size(), 8u);
  EXPECT_THROW(FakeClient(daemon.socket(), Priority::low, "one-more"), std::runtime_error) << "no hello reply";
  EXPECT_TRUE(eventually([&] { return daemon.log().find("the user has 8 connections to gpuqosd") != std::string::npos; }))
      << daemon.log();

  std::vector<scheduler::FileDescriptor> silent;  // past the cap, sending nothing: they wait their 2 s
  for (std::size_t i = 0; i < scheduler::Daemon::kOverCapPending; ++i) {
    auto connected = scheduler::connect_unix(daemon.socket());
    ASSERT_TRUE(connected) << connected.error();
    silent.push_back(std::move(connected.value()));
  }
  const auto refused = scheduler::request_status(daemon.socket());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().find("gpuqosd closed the connection without an answer: it is stopping, or it refused the "
                                 "connection because this user holds as many as one user may: gpuqosd "
                                 "--max-connections-per-user"),
            std::string::npos)
      << refused.error();
  silent.clear();
  EXPECT_TRUE(eventually([&] { return scheduler::request_status(daemon.socket()).ok(); }, 5s)) << "answered again";
}

TEST(Daemon, TheDefaultConnectionCapIsAQuarterOfTheDescriptors) {
  EXPECT_EQ(scheduler::Daemon::connection_cap_for(1024), 80u);  // (1024 - 64) / 3 / 4
  EXPECT_EQ(scheduler::Daemon::connection_cap_for(20000), scheduler::Daemon::kMaxConnectionsPerUser);
  EXPECT_EQ(scheduler::Daemon::connection_cap_for(100), scheduler::Daemon::kMinConnectionsPerUser);
  EXPECT_EQ(scheduler::Daemon::connection_cap_for(0), scheduler::Daemon::kMinConnectionsPerUser);
}

// A user test: a root daemon's socket in an existing 0700 directory, other users' jobs unmanaged,
// and a log that read as a normal start. It is warned of (the harness's directory is 0700).
TEST(Daemon, ASocketOtherUsersCannotReachIsWarnedOf) {
  if (::geteuid() != 0) GTEST_SKIP() << "only a root daemon serves other users";
  DaemonProcess daemon;
  EXPECT_TRUE(eventually([&] {
    return daemon.log().find("warning " + daemon.dir().string() + " (mode 0700, owner uid 0, group 0) lets only its "
                             "owner through to " + daemon.socket() + ": other users' jobs cannot reach gpuqosd") !=
           std::string::npos;
  })) << daemon.log();
}

// A user test: gpuqosd run as a service user started like any other, then refused every other
// user's job one at a time (it cannot hand them their segments). It says so at start.
TEST(Daemon, ADaemonNotRunAsRootSaysWhoseJobsItManages) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start gpuqosd as another user";
  TempDir dir("gpuqosd-nobody");
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0777), std::filesystem::perm_options::replace);
  ChildProcess daemon({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin("gpuqosd"),
                       "--socket", (dir.path() / "d.sock").string()},
                      {}, dir.path() / "daemon.out");
  // Waited for itself: it is logged just after "serving", which a look can catch alone (a full ctest
  // run once did).
  EXPECT_TRUE(eventually([&] {
    return daemon.output().find("gpuqosd runs as uid 65534, not root: it manages that user's jobs only") !=
           std::string::npos;
  }, 5s)) << daemon.output();
}

TEST(Daemon, RefusesAnotherProtocolVersion) {
  DaemonProcess daemon;
  auto fd = scheduler::connect_unix(daemon.socket());
  ASSERT_TRUE(fd);
  auto hello = ipc::make_hello(Priority::low, 0, "old").value();
  hello.version_major = ipc::kProtocolVersionMajor + 1;
  ASSERT_TRUE(ipc::send_record(fd->get(), ipc::encode(hello)));
  std::vector<std::byte> record;
  ASSERT_TRUE(ipc::receive_record(fd->get(), record));
  auto reply = ipc::decode_hello_reply(record);
  ASSERT_TRUE(reply) << reply.error();
  EXPECT_EQ(reply->status, ipc::HelloStatus::version_mismatch);
  EXPECT_FALSE(ipc::receive_record(fd->get(), record)) << "then closed";
}

// One misbehaving client is dropped while another keeps being granted.
void expect_dropped_others_served(DaemonProcess& daemon, FakeClient& bad, FakeClient& good) {
  EXPECT_TRUE(bad.disconnected()) << daemon.log();
  EXPECT_TRUE(eventually([&] { return !segment_held(daemon.pid(), bad.segment_name()); }));
  EXPECT_EQ(daemon.status()["clients"].size(), 1u);
  good.name_kernel(1, "k");
  good.post(FakeClient::kernel(1));
  EXPECT_TRUE(good.wait_granted(1));
}

TEST(Daemon, DisconnectsAClientWhoseRingIsCorrupted) {
  DaemonProcess daemon;
  FakeClient bad(daemon.socket(), Priority::low, "bad");
  FakeClient good(daemon.socket(), Priority::low, "good");
  // The ops ring's producer index sits on the ring's second cache line: make it impossible.
  auto* ring = reinterpret_cast<std::byte*>(&bad.segment().ops());
  reinterpret_cast<std::atomic<std::uint32_t>*>(ring + ipc::kCacheLineBytes)->store(0xfffffff0u);
  ASSERT_TRUE(bad.segment().ops().corrupted());
  expect_dropped_others_served(daemon, bad, good);
  EXPECT_NE(daemon.log().find("job 'bad' pid " + std::to_string(::getpid()) + ": ops ring corrupted"), std::string::npos)
      << daemon.log();
}

// An older shim's (1.9) segment is named in /dev/shm.
TEST(Daemon, DisconnectsAClientThatTruncatesItsSegment) {
  DaemonProcess daemon;
  FakeClient bad(daemon.socket(), Priority::low, "bad", 9);
  FakeClient good(daemon.socket(), Priority::low, "good");
  ASSERT_FALSE(bad.segment_passed());
  // The client owns its segment's file: shrinking it would SIGBUS an unguarded daemon.
  const int fd = ::shm_open(bad.segment().name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ::close(fd);
  expect_dropped_others_served(daemon, bad, good);
  EXPECT_TRUE(daemon.process().running());
  EXPECT_NE(daemon.log().find("job 'bad' pid " + std::to_string(::getpid()) + ": segment truncated"), std::string::npos)
      << daemon.log();
}

// A shim of 1.10 is passed a sealed memfd: no one can truncate it, through any descriptor of it (the
// shim closes its own once mapped; /proc/PID/fd reopens one as long as it is open), so neither the
// daemon nor the job can be hit by a SIGBUS (an audit: truncating a named segment killed the job's
// process).
TEST(Daemon, APassedSegmentCannotBeTruncatedByAnyone) {
  DaemonProcess daemon;
  FakeClient client(daemon.socket(), Priority::low, "sealed");
  ASSERT_TRUE(client.segment_passed());
  ASSERT_GE(client.segment_fd(), 0);
  EXPECT_NE(::ftruncate(client.segment_fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(client.segment_fd(), static_cast<off_t>(2 * ipc::kSegmentBytes)), 0) << "nor grown";
  const std::string reopened = "/proc/self/fd/" + std::to_string(client.segment_fd());  // a file of its own
  const int fd = ::open(reopened.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_NE(::ftruncate(fd, 0), 0);
  ::close(fd);
  client.name_kernel(1, "k");
  client.post(FakeClient::kernel(1));
  EXPECT_TRUE(client.wait_granted(1)) << daemon.log();
}

// A shim says which of its devices it runs unscheduled (protocol 1.9): kept for the status, at most
// 16 (a node with more must not cost the job its scheduling). A record that does not decode (an
// impossible ordinal) is a broken client.
TEST(Daemon, KeepsTheGpusAClientRunsUnscheduledAndDropsOneThatSaysGarbage) {
  DaemonProcess daemon;
  FakeClient bad(daemon.socket(), Priority::low, "bad");
  FakeClient good(daemon.socket(), Priority::low, "good");
  std::array<std::uint8_t, 16> uuid{0xe0};
  uuid[15] = 7;
  ASSERT_TRUE(ipc::send_record(good.socket_fd(), ipc::encode_unscheduled_device(2, uuid)));
  ASSERT_TRUE(ipc::send_record(good.socket_fd(), ipc::encode_unscheduled_device(2, uuid)));  // again: once
  nlohmann::json unscheduled;
  ASSERT_TRUE(eventually([&] {
    const nlohmann::json status = daemon.status();
    for (const auto& entry : status["clients"]) {
      if (entry["job"] == "good") unscheduled = entry.value("unscheduled_devices", nlohmann::json());
    }
    return !unscheduled.is_null();
  })) << daemon.status().dump(1);
  EXPECT_EQ(unscheduled, nlohmann::json::parse(R"([{"ordinal":2,"uuid":"GPU-e0000000-0000-0000-0000-000000000007"}])"));
  EXPECT_EQ(occurrences(daemon.log(), "runs its device 2 (GPU-e0000000-0000-0000-0000-000000000007) unscheduled"), 1u)
      << daemon.log();
  for (std::uint32_t ordinal = 3; ordinal < 3 + scheduler::DeviceTable::kMaxGpusPerClient; ++ordinal) {
    uuid[15] = static_cast<std::uint8_t>(ordinal);
    ASSERT_TRUE(ipc::send_record(good.socket_fd(), ipc::encode_unscheduled_device(ordinal, uuid)));
  }
  ASSERT_TRUE(eventually([&] {
    return daemon.log().find("says more than 16 unscheduled GPUs: the status lists the first 16") != std::string::npos;
  })) << daemon.log();
  const nlohmann::json status = daemon.status();
  ASSERT_EQ(status["clients"].size(), 2u) << "kept\n" << daemon.log();
  for (const auto& entry : status["clients"]) {
    if (entry["job"] == "good") {
      EXPECT_EQ(entry["unscheduled_devices"].size(), 16u) << entry.dump();
    }
  }
  std::vector<std::byte> garbage = ipc::encode_unscheduled_device(1, uuid);
  garbage[4] = std::byte{200};  // ordinal 200: no such device
  ASSERT_TRUE(ipc::send_record(bad.socket_fd(), garbage));
  expect_dropped_others_served(daemon, bad, good);
  EXPECT_NE(daemon.log().find("job 'bad' pid " + std::to_string(::getpid()) +
                              ": bad record on its socket: unscheduled device: ordinal 200 not under 64"),
            std::string::npos) << daemon.log();
}

TEST(Daemon, DisconnectsAClientThatPostsAnInvalidDescriptor) {
  DaemonProcess daemon;
  FakeClient bad(daemon.socket(), Priority::high, "bad");
  FakeClient good(daemon.socket(), Priority::low, "good");
  auto op = FakeClient::kernel(1);
  op.kind = static_cast<ipc::OpKind>(99);
  bad.post(op);
  expect_dropped_others_served(daemon, bad, good);
  EXPECT_NE(daemon.log().find("job 'bad' pid " + std::to_string(::getpid()) + ": invalid op descriptor"), std::string::npos)
      << daemon.log();
}

// Completions are stamped by the shim before it pushes them: one that ends after the daemon read it
// is garbage (and summed end - start could overflow the backlog's counters).
TEST(Daemon, DisconnectsAClientWhoseCompletionEndsInTheFuture) {
  DaemonProcess daemon;
  FakeClient bad(daemon.socket(), Priority::high, "bad");
  FakeClient good(daemon.socket(), Priority::low, "good");
  bad.name_kernel(1, "k");
  bad.post(FakeClient::kernel(1));
  const std::int64_t hour_ahead = ipc::monotonic_ns() + 3'600'000'000'000;
  bad.complete(1, hour_ahead - 1000, hour_ahead);
  expect_dropped_others_served(daemon, bad, good);
  EXPECT_NE(daemon.log().find("job 'bad' pid " + std::to_string(::getpid()) + ": completion of seq 1 ends "),
            std::string::npos)
      << daemon.log();
}

// Pushes ops seq first.. until `count` are posted, waiting while the ring is full; false once the
// daemon hung up.
bool post_many(FakeClient& client, std::uint64_t first, std::uint64_t count) {
  for (std::uint64_t seq = first; seq < first + count;) {
    if (client.segment().ops().try_push(FakeClient::kernel(seq))) {
      ++seq;
    } else if (client.disconnected(0ms)) {
      return false;
    } else {
      std::this_thread::sleep_for(100us);
    }
  }
  return true;
}

// A shim holds one op per waiting thread; a client that posts without waiting for its grants is cut
// off before the ops the policy holds for it grow the daemon's memory without bound.
TEST(Daemon, DisconnectsALowPriorityClientThatPostsWithoutWaitingForItsGrants) {
  DaemonProcess daemon({"--max-outstanding", "1"});
  FakeClient bad(daemon.socket(), Priority::low, "bad");
  bad.name_kernel(1, "k");
  bad.post(FakeClient::kernel(1));
  ASSERT_TRUE(bad.wait_granted(1));  // and never completed: everything after it is held
  post_many(bad, 2, scheduler::Daemon::kMaxUngrantedOps + 10);
  EXPECT_TRUE(bad.disconnected(10s)) << daemon.log();
  EXPECT_NE(daemon.log().find("job 'bad' pid " + std::to_string(::getpid()) + ": posts without waiting for its grants"),
            std::string::npos)
      << daemon.log();
  FakeClient good(daemon.socket(), Priority::low, "good");  // the slot the bad one held is free again
  expect_dropped_others_served(daemon, bad, good);
}

// Each of a user's clients within its own limit, together over the user's: the client that takes the
// user past it goes, those before it stay (a review: 512 connections at the per-client limit held
// 8 GiB of gpuqosd's memory).
TEST(Daemon, OneUsersClientsPostingWithoutWaitingAreLimitedTogether) {
  DaemonProcess daemon({"--max-outstanding", "1"});
  FakeClient first(daemon.socket(), Priority::low, "first");
  first.name_kernel(1, "k");
  first.post(FakeClient::kernel(1));
  ASSERT_TRUE(first.wait_granted(1));  // and never completed: everything after it is held
  constexpr std::size_t kEach = scheduler::Daemon::kMaxUngrantedOps - 1000;  // each within its own limit
  constexpr std::size_t kClients = scheduler::Daemon::kMaxUngrantedOpsPerUser / kEach + 1;
  ASSERT_TRUE(post_many(first, 2, kEach));
  std::vector<std::unique_ptr<FakeClient>> more;
  for (std::size_t i = 1; i < kClients; ++i) {
    more.push_back(std::make_unique<FakeClient>(daemon.socket(), Priority::low, "more"));
    more.back()->name_kernel(1, "k");
    if (!post_many(*more.back(), 1, kEach)) break;
  }
  ASSERT_EQ(more.size(), kClients - 1);
  EXPECT_TRUE(more.back()->disconnected(10s)) << daemon.log();
  EXPECT_NE(daemon.log().find("its user's clients post without waiting for their grants"), std::string::npos)
      << daemon.log();
  EXPECT_FALSE(first.disconnected(300ms)) << "within its own limit, and before the user's was reached";
  EXPECT_FALSE(more.front()->disconnected(0ms));
}

// A completion read before its op waits for it, at most kDeferredCompletionLimitNs without one of
// them going through: a client whose ops keep coming is not a protocol violator because some of its
// completions are always ahead (a review: one posting 15,000 ops a second beside clients flooding
// ops was dropped). Here eight completions come first and their ops one every 250 ms, over 2 s.
TEST(Daemon, CompletionsAheadOfOpsThatKeepComingAreKept) {
  DaemonProcess daemon;
  FakeClient fast(daemon.socket(), Priority::high, "fast");
  fast.name_kernel(1, "k");
  const std::int64_t now = ipc::monotonic_ns();
  for (std::uint64_t seq = 1; seq <= 8; ++seq) fast.complete(seq, now - 2'000'000, now - 1'000'000);
  for (std::uint64_t seq = 1; seq <= 8; ++seq) {
    std::this_thread::sleep_for(250ms);
    fast.post(FakeClient::kernel(seq));
  }
  EXPECT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["completed"] == 8; }, 2s)) << daemon.log();
  EXPECT_FALSE(fast.disconnected(0ms)) << daemon.log();
}

// gpuqosd's resident memory in bytes (VmRSS), 0 when it cannot be read.
std::size_t resident_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Marks are posted without waiting for grants (a thread looping on cuStreamSynchronize while
// another's launch is held): marks in a row behind a held op take one entry, not one each. An audit
// grew gpuqosd by 250 MB with a million of them from one client, and a user may hold hundreds of
// connections. Past kMaxUngrantedPosts of them the client stays, and the grant that releases the
// op releases them all.
TEST(Daemon, MarksPostedBehindAHeldOpTakeNoMemoryEach) {
  DaemonProcess daemon({"--max-outstanding", "1"});
  FakeClient low(daemon.socket(), Priority::low, "loop");
  low.name_kernel(1, "k");
  low.post(FakeClient::kernel(1));
  ASSERT_TRUE(low.wait_granted(1));
  low.post(FakeClient::kernel(2));  // held: op 1 holds the one slot
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["state"] == "waiting"; }));
  const std::size_t before = resident_bytes(daemon.pid());
  ASSERT_GT(before, 0u);
  const std::uint64_t last = 2 + scheduler::Daemon::kMaxUngrantedPosts + 1000;
  for (std::uint64_t seq = 3; seq <= last;) {
    ipc::OpDescriptor sync{};
    sync.seq = seq;
    sync.posted_ns = 1;
    sync.kind = ipc::OpKind::sync;
    if (low.segment().ops().try_push(sync)) {
      ++seq;
    } else {
      ASSERT_FALSE(low.disconnected(0ms)) << "at seq " << seq << "\n" << daemon.log();
      std::this_thread::sleep_for(100us);
    }
  }
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["last_seq"] == last; }, 30s)) << daemon.log();
  EXPECT_FALSE(low.disconnected(0ms)) << daemon.log();
  EXPECT_LT(resident_bytes(daemon.pid()), before + (32u << 20)) << "a million marks held: under 32 MiB more";
  low.complete(1);
  EXPECT_TRUE(low.wait_granted(last)) << "op 2 and every mark behind it";
}

TEST(Daemon, DisconnectsAClientThatRegistersTooManyKernelNames) {
  DaemonProcess daemon;
  FakeClient bad(daemon.socket(), Priority::low, "bad");
  FakeClient good(daemon.socket(), Priority::low, "good");
  for (std::uint32_t id = 1; id <= scheduler::Daemon::kMaxKernelNames + 1; ++id) {
    if (!ipc::send_record(bad.socket_fd(), ipc::encode_kernel_name(id, "k" + std::to_string(id)).value())) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) break;  // hung up on us
      std::this_thread::sleep_for(1ms);
      --id;
    }
  }
  expect_dropped_others_served(daemon, bad, good);
  EXPECT_NE(daemon.log().find("job 'bad' pid " + std::to_string(::getpid()) + ": more than 65536 kernel names"),
            std::string::npos)
      << daemon.log();
}

// Sends kernel names of 4,000 bytes on `client` until `bytes` are sent or it is hung up on; false then.
bool send_long_names(FakeClient& client, std::size_t bytes) {
  const std::string name(4000, 'n');
  for (std::uint32_t id = 1; static_cast<std::size_t>(id - 1) * name.size() < bytes; ++id) {
    while (!ipc::send_record(client.socket_fd(), ipc::encode_kernel_name(id, name).value())) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;  // hung up on us
      std::this_thread::sleep_for(1ms);
    }
  }
  return true;
}

// A re-test sent 65,536 names of 4,000 bytes on each of several connections (each within the
// count): the root daemon grew to 1.45 GB. Names are limited in bytes per client and per user.
TEST(Daemon, KernelNamesAreLimitedInBytesPerClientAndPerUser) {
  DaemonProcess daemon;
  FakeClient good(daemon.socket(), Priority::low, "good");
  {
    FakeClient big(daemon.socket(), Priority::low, "big");
    send_long_names(big, scheduler::Daemon::kMaxKernelNameBytesPerClient + (1u << 20));
    EXPECT_TRUE(big.disconnected()) << daemon.log();
    EXPECT_TRUE(eventually([&] { return daemon.log().find("job 'big' pid " + std::to_string(::getpid()) +
                                                          ": kernel names over 32 MiB") != std::string::npos; }))
        << daemon.log();
  }
  // Several clients of one user, each within its own budget, together over the user's.
  std::vector<std::unique_ptr<FakeClient>> many;
  const std::size_t each = scheduler::Daemon::kMaxKernelNameBytesPerClient * 13 / 16;  // 26 MiB
  for (int i = 0; i < 5; ++i) {
    many.push_back(std::make_unique<FakeClient>(daemon.socket(), Priority::low, "many"));
    send_long_names(*many.back(), each);
  }
  EXPECT_TRUE(many.back()->disconnected()) << daemon.log();
  EXPECT_FALSE(many.front()->disconnected(300ms));
  EXPECT_NE(daemon.log().find("its user's clients' kernel names over 128 MiB"), std::string::npos) << daemon.log();
  // The bytes of a client that left are the user's again.
  many.front().reset();
  EXPECT_TRUE(eventually([&] { return daemon.status()["clients"].size() == 4u; })) << daemon.status().dump(1);
  FakeClient after(daemon.socket(), Priority::low, "after");
  EXPECT_TRUE(send_long_names(after, 8u << 20));
  good.name_kernel(1, "k");
  good.post(FakeClient::kernel(1));
  EXPECT_TRUE(good.wait_granted(1));
  EXPECT_FALSE(after.disconnected(300ms));
}

// Out of descriptors, accept() fails while the connection stays queued: the daemon must not spin
// on its readable listener (logging each time), and accepts again once descriptors are free.
TEST(Daemon, OutOfDescriptorsPausesAcceptingInsteadOfSpinning) {
  DaemonProcess daemon;
  const auto open_fds = [&] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(daemon.pid()) + "/fd")) ++n;
    return n;
  };
  rlimit original{};
  ASSERT_EQ(::prlimit(daemon.pid(), RLIMIT_NOFILE, nullptr, &original), 0);
  rlimit tight = original;
  tight.rlim_cur = open_fds() + 2;
  ASSERT_EQ(::prlimit(daemon.pid(), RLIMIT_NOFILE, &tight, nullptr), 0);
  std::vector<scheduler::FileDescriptor> silent;  // connect and say nothing: each holds a descriptor
  for (int i = 0; i < 6; ++i) {
    auto fd = scheduler::connect_unix(daemon.socket());
    ASSERT_TRUE(fd.ok()) << fd.error();
    silent.push_back(std::move(fd.value()));
  }
  std::this_thread::sleep_for(1s);
  const std::string log = daemon.log();
  std::size_t warnings = 0;
  for (auto at = log.find("accept: "); at != std::string::npos; at = log.find("accept: ", at + 1)) ++warnings;
  EXPECT_GE(warnings, 1u) << log;
  EXPECT_LE(warnings, 20u) << "one per 100-ms pause at most, not one per loop turn";
  ASSERT_EQ(::prlimit(daemon.pid(), RLIMIT_NOFILE, &original, nullptr), 0);
  silent.clear();
  FakeClient late(daemon.socket(), Priority::low, "late");  // accepted once the pause ends
  late.name_kernel(1, "k");
  late.post(FakeClient::kernel(1));
  EXPECT_TRUE(late.wait_granted(1));
}

// Connections that never send their hello are closed after the first-record timeout; a flood of
// them is said in one line per sweep, not one each (a scanner would fill the log).
TEST(Daemon, SilentConnectionsAreClosedAndAFloodIsOneLine) {
  DaemonProcess daemon;
  std::vector<scheduler::FileDescriptor> silent;
  for (int i = 0; i < 10; ++i) {
    auto fd = scheduler::connect_unix(daemon.socket());
    ASSERT_TRUE(fd.ok()) << fd.error();
    silent.push_back(std::move(fd.value()));
  }
  ASSERT_TRUE(eventually([&] { return daemon.log().find("sent nothing within") != std::string::npos; }, 10s))
      << daemon.log();
  std::this_thread::sleep_for(300ms);  // any later sweep's lines
  const std::string log = daemon.log();
  // Each sweep closes what expired by then: one line for up to 3, a summary for more. All 10 are
  // said, in fewer than 10 lines (one sweep, or a few if they fell between their connects).
  std::size_t lines = 0, closed = 0;
  std::istringstream text(log);
  for (std::string line; std::getline(text, line);) {
    const auto summary = line.find(" connections sent nothing within 2000 ms of connecting: closed (pids ");
    if (summary != std::string::npos) {
      ++lines;
      closed += std::stoul(line.substr(line.rfind(' ', summary - 1) + 1));
    } else if (line.find("sent nothing within 2000 ms of connecting: closed") != std::string::npos) {
      ++lines;
      ++closed;
    }
  }
  EXPECT_EQ(closed, 10u) << log;
  EXPECT_LT(lines, 10u) << log;
  char byte = 0;
  EXPECT_EQ(::recv(silent[0].get(), &byte, 1, 0), 0) << "closed by the daemon";
}

// A trickle of silent connections, one every 10 ms, expires a few at each sweep: each sweep's line
// is within the peer warnings' budget, not 100 lines a second for as long as it goes on (a review).
TEST(Daemon, ATrickleOfSilentConnectionsIsSaidWithinTheWarningsBudget) {
  DaemonProcess daemon;
  std::deque<scheduler::FileDescriptor> silent;
  const auto until = std::chrono::steady_clock::now() + 4s;
  while (std::chrono::steady_clock::now() < until) {
    auto fd = scheduler::connect_unix(daemon.socket());
    ASSERT_TRUE(fd.ok()) << fd.error();
    silent.push_back(std::move(fd.value()));
    if (silent.size() > 300) silent.pop_front();  // closed by gpuqosd long since
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(2500ms);  // the last ones expire
  const std::string log = daemon.log();
  const std::size_t lines = occurrences(log, "sent nothing within 2000 ms of connecting: closed");
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, static_cast<std::size_t>(scheduler::Daemon::kPeerWarningsPerWindow)) << log;
}

TEST(Daemon, ReclaimsAClientKilledWhileWaitingWithin100ms) {
  DaemonProcess daemon({"--max-outstanding", "1"});
  FakeClient holder(daemon.socket(), Priority::low, "holder");
  holder.name_kernel(1, "k");
  holder.post(FakeClient::kernel(1));
  ASSERT_TRUE(holder.wait_granted(1));
  int names[2];
  ASSERT_EQ(::pipe(names), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the victim: registers, posts an op that must wait, then waits to be killed
    try {
      FakeClient victim(daemon.socket(), Priority::low, "victim");
      victim.name_kernel(1, "k");
      victim.post(FakeClient::kernel(1));
      const std::string name = victim.segment_name() + "\n";
      [[maybe_unused]] auto written = ::write(names[1], name.data(), name.size());
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ForkedChild child(pid);
  ::close(names[1]);
  char buffer[128] = {};
  ASSERT_GT(::read(names[0], buffer, sizeof buffer - 1), 0);
  ::close(names[0]);
  const std::string segment = std::string(buffer, std::strchr(buffer, '\n'));
  ASSERT_TRUE(eventually([&] {
    const auto entry = daemon.client_with_pid(pid);
    return entry.is_object() && entry["state"] == "waiting";
  })) << daemon.status().dump(2);
  child.kill();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return !segment_held(daemon.pid(), segment) && daemon.client_with_pid(pid).is_null(); }));
  const auto reclaim = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(reclaim, 100ms) << std::chrono::duration_cast<std::chrono::microseconds>(reclaim).count() << " us";
  holder.complete(1);
  holder.post(FakeClient::kernel(2));
  EXPECT_TRUE(holder.wait_granted(2)) << "the survivor is unaffected";
}

TEST(Daemon, ReclaimsAClientWhoseProcessExitedWhileAForkedChildHoldsItsSocket) {
  DaemonProcess daemon;
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // registers, forks a child that inherits the socket, then waits to be killed
    try {
      FakeClient victim(daemon.socket(), Priority::low, "forker");
      const pid_t grandchild = ::fork();
      if (grandchild == 0) {
        ::pause();
        ::_exit(0);
      }
      const std::string line = victim.segment_name() + " " + std::to_string(grandchild) + "\n";
      [[maybe_unused]] auto written = ::write(report[1], line.data(), line.size());
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ForkedChild child(pid);
  ::close(report[1]);
  char buffer[128] = {};
  ASSERT_GT(::read(report[0], buffer, sizeof buffer - 1), 0);
  ::close(report[0]);
  std::string segment;
  pid_t grandchild = 0;
  std::istringstream(buffer) >> segment >> grandchild;
  ASSERT_GT(grandchild, 0);
  struct KillOnExit {
    pid_t pid;
    ~KillOnExit() { ::kill(pid, SIGKILL); }
  } grandchild_guard{grandchild};
  ASSERT_TRUE(eventually([&] { return daemon.client_with_pid(pid).is_object(); }));
  child.kill();  // the socket stays open in the grandchild: only the pidfd tells
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return !segment_held(daemon.pid(), segment) && daemon.client_with_pid(pid).is_null(); }))
      << daemon.log();
  const auto reclaim = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(reclaim, 100ms) << std::chrono::duration_cast<std::chrono::microseconds>(reclaim).count() << " us";
  EXPECT_NE(daemon.log().find("process exited"), std::string::npos) << daemon.log();
}

TEST(Daemon, HeartbeatAdvances) {
  DaemonProcess daemon;
  FakeClient client(daemon.socket(), Priority::low, "hb");
  const std::uint64_t first = client.segment().daemon_heartbeat_ns();
  std::this_thread::sleep_for(50ms);
  const std::uint64_t second = client.segment().daemon_heartbeat_ns();
  EXPECT_GT(second, first);
  EXPECT_LT(static_cast<std::uint64_t>(ipc::monotonic_ns()) - second, 100'000'000u) << "fresher than the shim's limit";
}

// A named segment (an older shim's, 1.9) is removed at exit; a sealed one goes with the process.
TEST(Daemon, SigtermReleasesWaitingClientsAndExitsCleanly) {
  auto daemon = std::make_unique<DaemonProcess>(std::vector<std::string>{"--max-outstanding", "1"});
  FakeClient holder(daemon->socket(), Priority::low, "holder", 9);
  ASSERT_TRUE(segment_exists(holder.segment_name()));
  FakeClient waiter(daemon->socket(), Priority::low, "waiter");
  ASSERT_TRUE(hold_one_behind_another(holder, waiter));
  waiter.post(FakeClient::kernel(2));
  ASSERT_TRUE(eventually([&] { return daemon->status()["clients"][1]["ops"]["posted"] == 2; }));
  EXPECT_FALSE(waiter.wait_granted(1, 20ms));
  EXPECT_EQ(daemon->process().terminate(5s), 0) << daemon->log();
  EXPECT_TRUE(waiter.wait_granted(2, 100ms));
  EXPECT_EQ(waiter.last_flags() & ipc::kGrantDetach, ipc::kGrantDetach);
  EXPECT_FALSE(std::filesystem::exists(daemon->socket()));
  EXPECT_FALSE(segment_exists(holder.segment_name()));
}

// A SIGKILLed gpuqosd cannot remove its clients' named segments (an older shim's); the next one to
// start does. (A sealed one goes with the last descriptor of it.)
TEST(Daemon, AStartingDaemonRemovesTheSegmentsOfAKilledOne) {
  DaemonProcess killed;
  FakeClient client(killed.socket(), Priority::low, "orphan", 9);
  ASSERT_FALSE(client.segment_passed());
  killed.process().kill();
  ASSERT_TRUE(segment_exists(client.segment_name()));
  DaemonProcess next;
  // Not the log's word: a daemon of a test running alongside may have removed it first.
  EXPECT_FALSE(segment_exists(client.segment_name())) << next.log();
}

TEST(Daemon, RefusesToStartWhereAnotherDaemonServes) {
  DaemonProcess daemon;
  ChildProcess second({bin("gpuqosd"), "--socket", daemon.socket()}, {}, daemon.dir() / "second.log");
  EXPECT_EQ(second.wait(5s), 1);
  EXPECT_NE(second.output().find("another gpuqosd"), std::string::npos) << second.output();
  EXPECT_TRUE(scheduler::connect_unix(daemon.socket())) << "the first one still serves";
}

TEST(Cli, StatusJsonDescribesTheDaemonAndItsClients) {
  DaemonProcess daemon;
  FakeClient client(daemon.socket(), Priority::high, "resnet-serve");
  client.name_kernel(1, "k");
  client.post(FakeClient::kernel(1));
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"][0]["ops"]["posted"] == 1; }));
  ChildProcess cli({bin("gpuqos"), "status", "--json", "--socket", daemon.socket()}, {}, daemon.dir() / "status.out");
  ASSERT_EQ(cli.wait(5s), 0) << cli.output();
  const auto status = nlohmann::json::parse(cli.output());
  EXPECT_EQ(status["daemon"]["policy"], "fifo");
  EXPECT_GT(status["daemon"]["uptime_ns"].get<std::int64_t>(), 0);
  ASSERT_EQ(status["clients"].size(), 1u);
  const auto& entry = status["clients"][0];
  EXPECT_EQ(entry["pid"], ::getpid());
  EXPECT_EQ(entry["job"], "resnet-serve");
  EXPECT_EQ(entry["priority"], "high");
  EXPECT_EQ(entry["ops"]["posted"], 1);
  EXPECT_EQ(entry["ops"]["granted"], 1);
  EXPECT_EQ(entry["ops"]["completed"], 0);
  EXPECT_EQ(entry["current_wait_ns"], 0);

  ChildProcess table({bin("gpuqos"), "status", "--socket", daemon.socket()}, {}, daemon.dir() / "table.out");
  ASSERT_EQ(table.wait(5s), 0) << table.output();
  EXPECT_NE(table.output().find("resnet-serve"), std::string::npos) << table.output();
}

// A review: `gpuqos status --json` passed any answer through with exit 0. Not JSON is said and
// fails, with --json and without; JSON the table cannot read (an integer out of range) fails
// naming the field.
TEST(Cli, StatusSaysAnAnswerThatIsNotJsonOrCannotBeRead) {
  const auto status = [](const FakeControlDaemon& daemon, std::vector<std::string> args) {
    std::vector<std::string> argv = {bin("gpuqos"), "status", "--socket", daemon.socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto cli = std::make_unique<ChildProcess>(argv, std::map<std::string, std::string>{},
                                              std::filesystem::path(daemon.socket()).parent_path() / "cli.out");
    const auto code = cli->wait(10s);
    return std::pair{code, cli->output()};
  };
  {
    FakeControlDaemon garbage("<html>not a status</html>");
    for (const auto& args : {std::vector<std::string>{"--json"}, std::vector<std::string>{}}) {
      const auto [code, output] = status(garbage, args);
      EXPECT_EQ(code, 1) << output;
      EXPECT_EQ(output, "gpuqos status: the daemon's answer is not JSON\n");
    }
  }
  {
    FakeControlDaemon array("[1, 2]");
    const auto [code, output] = status(array, {"--json"});
    EXPECT_EQ(code, 1) << output;
    EXPECT_EQ(output, "gpuqos status: the daemon's answer is not a JSON object\n");
  }
  nlohmann::json bogus = nlohmann::json::parse(scheduler::bounded_status_text(
      scheduler::DaemonStatus{42, 5'000'000'000, "fifo", "/tmp/s.sock", {scheduler::EngineLoad{0, scheduler::Engine::h2d, 1, 10, 2, 20}}, {}}));
  bogus["backlog"][0]["backlog_ns"] = 1e300;
  FakeControlDaemon out_of_range(bogus.dump());
  auto [code, output] = status(out_of_range, {});
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("gpuqos status: unexpected answer from gpuqosd: [json.exception.type_error.302] backlog_ns is "
                        "1e+300, not an integer"),
            std::string::npos)
      << output;
  std::tie(code, output) = status(out_of_range, {"--json"});
  EXPECT_EQ(code, 0) << "--json passes JSON on as it is: " << output;
  EXPECT_EQ(output, bogus.dump() + "\n");
}

TEST(Cli, StatusWithoutDaemonFails) {
  TempDir dir;
  ChildProcess cli({bin("gpuqos"), "status", "--socket", (dir.path() / "none.sock").string()}, {}, dir.path() / "out");
  EXPECT_EQ(cli.wait(5s), 1);
  EXPECT_NE(cli.output().find("cannot reach gpuqosd"), std::string::npos) << cli.output();
}

TEST(Cli, RunPassesTheEnvironmentAndTheExitStatus) {
  TempDir dir;
  ChildProcess run({bin("gpuqos"), "run", "--priority", "high", "--job", "nightly", "--socket", "/tmp/x.sock", "--",
                    "sh", "-c", "echo $GPUQOS_PRIORITY $GPUQOS_JOB $GPUQOS_SOCKET; exit 7"},
                   {}, dir.path() / "out");
  EXPECT_EQ(run.wait(5s), 7);
  EXPECT_NE(run.output().find("high nightly /tmp/x.sock"), std::string::npos) << run.output();

  // Empty counts as unset (whatever the environment running the tests exports).
  ChildProcess defaults({bin("gpuqos"), "run", "--", "sh", "-c", "echo [$GPUQOS_PRIORITY]"}, {{"GPUQOS_PRIORITY", ""}},
                        dir.path() / "out2");
  EXPECT_EQ(defaults.wait(5s), 0);
  EXPECT_NE(defaults.output().find("[low]"), std::string::npos) << defaults.output();

  // The environment's priority stands without --priority, as its job and socket do (a user test
  // found it turned low without a word); --priority wins over it.
  ChildProcess from_env({bin("gpuqos"), "run", "--", "sh", "-c", "echo [$GPUQOS_PRIORITY]"},
                        {{"GPUQOS_PRIORITY", "high"}}, dir.path() / "out3");
  EXPECT_EQ(from_env.wait(5s), 0);
  EXPECT_NE(from_env.output().find("[high]"), std::string::npos) << from_env.output();
  ChildProcess given({bin("gpuqos"), "run", "--priority", "low", "--", "sh", "-c", "echo [$GPUQOS_PRIORITY]"},
                     {{"GPUQOS_PRIORITY", "high"}}, dir.path() / "out4");
  EXPECT_EQ(given.wait(5s), 0);
  EXPECT_NE(given.output().find("[low]"), std::string::npos) << given.output();
  // One the shim would refuse (every process warning, and running low) is said here, once, and the
  // job runs low, as it would under the shim alone. (A user test: it was refused with exit 2, and a
  // service wrapper that inherited it would not have started.)
  ChildProcess lowered({bin("gpuqos"), "run", "--", "sh", "-c", "echo [$GPUQOS_PRIORITY]; exit 7"},
                       {{"GPUQOS_PRIORITY", "HIGH"}}, dir.path() / "out5");
  EXPECT_EQ(lowered.wait(5s), 7);
  EXPECT_NE(lowered.output().find("GPUQOS_PRIORITY='HIGH' in the environment is neither high nor low: the job runs "
                                  "at low priority"),
            std::string::npos)
      << lowered.output();
  EXPECT_NE(lowered.output().find("[low]"), std::string::npos) << lowered.output();
  EXPECT_EQ(occurrences(lowered.output(), "GPUQOS_PRIORITY="), 1u) << lowered.output();
}

TEST(Cli, RunPutsTheShimFirstInLdPreloadWhenItExists) {
  TempDir dir;
  const std::string shim = std::string(GPUQOS_BUILD_DIR) + "/lib/libgpuqos.so";
  ChildProcess run({bin("gpuqos"), "run", "--", "sh", "-c", "echo \"[$LD_PRELOAD]\""}, {{"LD_PRELOAD", ""}},
                   dir.path() / "out");
  EXPECT_EQ(run.wait(5s), 0);
  if (std::filesystem::exists(shim)) {
    EXPECT_NE(run.output().find("[" + shim + "]"), std::string::npos) << run.output();
  } else {
    EXPECT_NE(run.output().find("not found; the job runs unmanaged"), std::string::npos) << run.output();
  }
}

TEST(Cli, BadArgumentsExitWith2) {
  TempDir dir;
  for (const auto& args : std::vector<std::vector<std::string>>{{"run", "--priority", "medium", "--", "true"},
                                                                {"run", "--job", "x"},
                                                                {"frobnicate"},
                                                                {}}) {
    std::vector<std::string> argv = {bin("gpuqos")};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess cli(argv, {}, dir.path() / "out");
    EXPECT_EQ(cli.wait(5s), 2) << cli.output();
    EXPECT_FALSE(cli.output().empty());
  }
  ChildProcess missing({bin("gpuqos"), "run", "--", "/no/such/program"}, {}, dir.path() / "out");
  EXPECT_EQ(missing.wait(5s), 127);
  // A user test: a directory was said to be "Permission denied", which is what exec says of it.
  ChildProcess directory({bin("gpuqos"), "run", "--", dir.path().string()}, {}, dir.path() / "dir.out");
  EXPECT_EQ(directory.wait(5s), 126);
  EXPECT_NE(directory.output().find("cannot run " + dir.path().string() + ": it is a directory"), std::string::npos)
      << directory.output();
}

TEST(Cli, VersionIsTheBuildsAndItsProtocol) {
  TempDir dir;
  const std::string protocol = " (shim-daemon protocol " + std::to_string(ipc::kProtocolVersionMajor) + "." +
                               std::to_string(ipc::kProtocolVersionMinor) + ")";
  for (const std::string tool : {"gpuqos", "gpuqosd"}) {
    ChildProcess version({bin(tool), "--version"}, {}, dir.path() / (tool + ".out"));
    EXPECT_EQ(version.wait(5s), 0) << version.output();
    EXPECT_EQ(version.output(), tool + " " GPUQOS_TEST_PROJECT_VERSION + protocol + "\n");
  }
}

// The usage errors people make, each said plainly and with the program's name.
TEST(Cli, UsageMistakesAreSaidPlainly) {
  TempDir dir;
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"stauts"}, "gpuqos: unknown command 'stauts' (commands: status, top, run, train, eval)"},
           {{}, "gpuqos: a command is required (commands: status, top, run, train, eval)"},
           {{"train"}, "--from is required"},
           {{"eval"}, "--train is required"},
           {{"run", "--priority", "high", "true"}, "gpuqos run: the command goes after --: gpuqos run [options] -- CMD"},
           {{"run", "--priority", "high"}, "gpuqos run: no command: gpuqos run [options] -- CMD ARGS..."},
           // An option run does not have is named (it was "the command goes after --").
           {{"run", "--prio", "high", "--", "true"}, "gpuqos run: unknown option '--prio' (run's options:"},
           {{"run", "--priorty=high", "--", "true"}, "gpuqos run: unknown option '--priorty' (run's options:"},
           {{"run", "--socket", "", "--", "true"}, "gpuqos run: --socket '': must name a socket"},
           {{"run", "ls", "-l"}, "gpuqos run: the command goes after --: gpuqos run [options] -- CMD"},
           // A user test: CLI11 said "--job: At Most 1 required but received 2".
           {{"run", "--job", "a", "--job", "b", "--", "true"}, "gpuqos run: --job is given more than once: give it once"},
           {{"status", "--socket", "a", "--socket", "b"}, "gpuqos status: --socket is given more than once"}}) {
    std::vector<std::string> argv = {bin("gpuqos")};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess cli(argv, {}, dir.path() / "out");
    EXPECT_EQ(cli.wait(5s), 2) << cli.output();
    EXPECT_NE(cli.output().find(message), std::string::npos) << cli.output();
  }
}

// A user test: every process of a profiled job was killed, so only profile.jsonl.tmp.<pid> was
// there, and `train --from profile.jsonl` said only that the file does not exist.
TEST(Cli, TrainSaysWhereAKilledJobsProfileIs) {
  TempDir dir;
  const std::string profile = (dir.path() / "profile.jsonl").string();
  std::ofstream(profile + ".tmp.6978") << "{\"format\":\"gpuqos-profile\",\"version\":1}\n";
  ChildProcess cli({bin("gpuqos"), "train", "--from", profile, "--out", (dir.path() / "s.gqp").string()}, {},
                   dir.path() / "out");
  EXPECT_EQ(cli.wait(5s), 2) << cli.output();
  EXPECT_NE(cli.output().find("File does not exist: " + profile + " (but " + profile +
                              ".tmp.6978 beside it holds the records of its job's processes that were killed"),
            std::string::npos)
      << cli.output();
}

// A user test: `gpuqos run --help` said "Usage: gpuqos run [OPTIONS]", without the command.
TEST(Cli, RunsHelpShowsWhereTheCommandGoes) {
  TempDir dir;
  ChildProcess cli({bin("gpuqos"), "run", "--help"}, {}, dir.path() / "out");
  EXPECT_EQ(cli.wait(5s), 0) << cli.output();
  EXPECT_NE(cli.output().find("Usage: gpuqos run [OPTIONS] -- CMD [ARGS...]\n"), std::string::npos) << cli.output();
  ChildProcess status({bin("gpuqos"), "status", "--help"}, {}, dir.path() / "status.out");
  EXPECT_EQ(status.wait(5s), 0) << status.output();
  EXPECT_NE(status.output().find("Usage: gpuqos status [OPTIONS]\n"), std::string::npos) << "only run's changes\n"
                                                                                       << status.output();
}

// status and top find the daemon where the jobs' shims do: GPUQOS_SOCKET, unless --socket says.
TEST(Cli, StatusTakesTheSocketFromGpuqosSocket) {
  DaemonProcess daemon;
  ChildProcess cli({bin("gpuqos"), "status", "--json"}, {{"GPUQOS_SOCKET", daemon.socket()}}, daemon.dir() / "env.out");
  ASSERT_EQ(cli.wait(5s), 0) << cli.output();
  EXPECT_EQ(nlohmann::json::parse(cli.output())["daemon"]["socket"], daemon.socket());
  ChildProcess top({bin("gpuqos"), "top", "--once"}, {{"GPUQOS_SOCKET", daemon.socket()}}, daemon.dir() / "top.out");
  EXPECT_EQ(top.wait(5s), 0) << top.output();
  ChildProcess given({bin("gpuqos"), "status", "--socket", (daemon.dir() / "none.sock").string()},
                     {{"GPUQOS_SOCKET", daemon.socket()}}, daemon.dir() / "given.out");
  EXPECT_EQ(given.wait(5s), 1) << "--socket wins: " << given.output();
}

// What the shim would refuse or rename (warning from every process) is refused
// here, before the job starts; "nan" passes CLI11's own range checks.
TEST(Cli, RunRefusesAJobNameOrSocketTheShimWouldNotTakeAndDurationsMustBeFinite) {
  TempDir dir;
  const std::string long_socket = "/" + std::string(120, 's');
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"run", "--job", "my job", "--", "true"}, "gpuqos run: --job 'my job': must be 1 to 63 characters"},
           {{"run", "--job", "", "--", "true"}, "gpuqos run: --job '': must be 1 to 63 characters"},
           {{"run", "--socket", long_socket, "--", "true"}, "must be at most 107 bytes"},
           {{"top", "--interval", "nan"}, "must be a finite number in [0.001, 86400] (got nan)"},
           {{"top", "--interval", "0"}, "must be a finite number in [0.001, 86400] (got 0)"},
           {{"train", "--from", "/dev/null", "--sms", "100000", "--out", "x.gqp"}, "--sms"}}) {
    std::vector<std::string> argv = {bin("gpuqos")};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess cli(argv, {}, dir.path() / "out");
    EXPECT_EQ(cli.wait(5s), 2) << cli.output();
    EXPECT_NE(cli.output().find(message), std::string::npos) << cli.output();
  }
  ChildProcess daemon({bin("gpuqosd"), "--socket", (dir.path() / "d.sock").string(), "--profile-save-interval", "nan"},
                      {}, dir.path() / "daemon.out");
  EXPECT_EQ(daemon.wait(5s), 2) << daemon.output();
  EXPECT_NE(daemon.output().find("must be a finite number in [0, "), std::string::npos) << daemon.output();
  EXPECT_NE(daemon.output().find("(got nan)"), std::string::npos) << daemon.output();
  // An empty path (an unset variable) started a daemon on the default socket: a check never returned.
  for (const std::string option : {"--check-config", "--config"}) {
    ChildProcess empty({bin("gpuqosd"), "--socket", (dir.path() / "d.sock").string(), option, ""}, {},
                       dir.path() / "empty.out");
    EXPECT_EQ(empty.wait(5s), 2) << empty.output();
    EXPECT_NE(empty.output().find(option + ": an empty path names no file"), std::string::npos) << empty.output();
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "d.sock")) << empty.output();
  }
  for (const std::string option : {"--credit-ops", "--max-outstanding"}) {  // was "Could not convert"
    ChildProcess count({bin("gpuqosd"), "--socket", (dir.path() / "d.sock").string(), option, "-1"}, {},
                       dir.path() / "count.out");
    EXPECT_EQ(count.wait(5s), 2) << count.output();
    EXPECT_NE(count.output().find(option + ": Value -1 not in range 0 to 4294967295"), std::string::npos)
        << count.output();
  }
  // A relative socket is made absolute here: the job may start in another directory.
  ChildProcess relative({bin("gpuqos"), "run", "--socket", "d.sock", "--", "sh", "-c", "echo [$GPUQOS_SOCKET]"}, {},
                        dir.path() / "out");
  EXPECT_EQ(relative.wait(5s), 0) << relative.output();
  EXPECT_NE(relative.output().find("[" + (std::filesystem::current_path() / "d.sock").string() + "]"), std::string::npos)
      << relative.output();
  // So is one the job inherits (it was left relative: a `cd` in `sh -c` put it elsewhere).
  ChildProcess inherited({bin("gpuqos"), "run", "--", "sh", "-c", "echo [$GPUQOS_SOCKET]"}, {{"GPUQOS_SOCKET", "e.sock"}},
                         dir.path() / "out");
  EXPECT_EQ(inherited.wait(5s), 0) << inherited.output();
  EXPECT_NE(inherited.output().find("[" + (std::filesystem::current_path() / "e.sock").string() + "]"), std::string::npos)
      << inherited.output();
  // Unless it would no longer fit a socket's path: left as it is, and the job runs (a review: it was
  // refused as if --socket had given it).
  const std::string deep(100, 'd');
  ChildProcess too_long({bin("gpuqos"), "run", "--", "sh", "-c", "echo [$GPUQOS_SOCKET]"}, {{"GPUQOS_SOCKET", deep}},
                        dir.path() / "out");
  EXPECT_EQ(too_long.wait(5s), 0) << too_long.output();
  EXPECT_NE(too_long.output().find("[" + deep + "]"), std::string::npos) << too_long.output();
  // A relative --socket from a directory that was removed has no absolute form: said, not an abort
  // (a review: terminate, exit 134).
  const std::string gone = (dir.path() / "gone").string();
  ChildProcess removed({"/bin/sh", "-c", "mkdir \"$1\" && cd \"$1\" && rmdir \"$1\" && exec \"$2\" run --socket d.sock -- true",
                        "sh", gone, bin("gpuqos")},
                       {}, dir.path() / "out");
  EXPECT_EQ(removed.wait(5s), 2) << removed.output();
  EXPECT_NE(removed.output().find("gpuqos run: --socket d.sock: cannot make it absolute"), std::string::npos)
      << removed.output();
}

TEST(Gpuqosd, CheckConfigAcceptsAFifoConfigAndPrintsWhatItSets) {
  TempDir dir;
  const auto file = dir.path() / "fifo.toml";
  std::ofstream(file) << "[policy]\nname = \"fifo\"\n[policy.fifo]\nmax_outstanding = 3\n";
  ChildProcess check({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "out");
  EXPECT_EQ(check.wait(5s), 0) << check.output();
  EXPECT_NE(check.output().find("ok"), std::string::npos) << check.output();
  EXPECT_NE(check.output().find("fifo"), std::string::npos) << check.output();
}

// A relative socket or store is gpuqosd's working directory's (/ under systemd): --check-config says
// so, and the daemon names it in full in its log and status.
TEST(Gpuqosd, ARelativeSocketIsNotedAndServedByItsFullPath) {
  TempDir dir;
  const auto file = dir.path() / "relative.toml";
  const std::string relative = std::filesystem::relative(dir.path() / "r.sock", std::filesystem::current_path()).string();
  ASSERT_FALSE(std::filesystem::path(relative).is_absolute());
  std::ofstream(file) << "[daemon]\nsocket = \"" << relative << "\"\nprofile_store = \"/var/lib/gpuqos/p.gqp\"\n";
  ChildProcess check({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "out");
  EXPECT_EQ(check.wait(5s), 0) << check.output();
  EXPECT_NE(check.output().find("note: daemon.socket \"" + relative + "\" is relative: it is taken from gpuqosd's "
                                "working directory"),
            std::string::npos)
      << check.output();
  EXPECT_EQ(check.output().find("daemon.profile_store"), std::string::npos) << "absolute\n" << check.output();
  ChildProcess daemon({bin("gpuqosd"), "--socket", relative}, {}, dir.path() / "daemon");
  const std::string full = std::filesystem::weakly_canonical(dir.path() / "r.sock").string();  // links resolved
  EXPECT_TRUE(eventually([&] { return daemon.output().find("serving " + full + " with policy") != std::string::npos; }, 5s))
      << daemon.output();
  EXPECT_TRUE(eventually([&] { return scheduler::connect_unix(full).ok(); }, 5s)) << daemon.output();
  EXPECT_EQ(daemon.terminate(10s), 0) << daemon.output();
}

TEST(Gpuqosd, CheckConfigNamesFileLineColumnAndKey) {
  TempDir dir;
  const auto file = dir.path() / "bad.toml";
  std::ofstream(file) << "[policy]\nname = \"fifo\"\n[policy.fifo]\nmax_outstanding = -3\n";
  ChildProcess check({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "out");
  EXPECT_EQ(check.wait(5s), 1);
  EXPECT_NE(check.output().find("bad.toml:4:"), std::string::npos) << check.output();
  EXPECT_NE(check.output().find("policy.fifo.max_outstanding"), std::string::npos) << check.output();
}

// What gpuqosd refused only as it began to serve, with no line named, --check-config said "ok" to:
// a profile store that is a directory, a socket under a file (an audit). Relative paths are this
// directory's, as gpuqosd's started here.
TEST(Gpuqosd, CheckConfigRefusesPathsTheDaemonCouldNotUse) {
  TempDir dir;
  const auto file = dir.path() / "paths.toml";
  std::ofstream(dir.path() / "plain") << "a file\n";
  std::ofstream(file) << "[daemon]\nprofile_store = \"" << dir.path().string() << "\"\nsocket = \""
                      << (dir.path() / "plain" / "run" / "g.sock").string() << "\"\n";
  ChildProcess check({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "out");
  EXPECT_EQ(check.wait(5s), 1) << check.output();
  EXPECT_NE(check.output().find("paths.toml:2:17: daemon.profile_store: is a directory: give a file in it, e.g. " +
                                (dir.path() / "gpuqosd.gqp").string()),
            std::string::npos)
      << check.output();
  EXPECT_NE(check.output().find("paths.toml:3:10: daemon.socket: " + (dir.path() / "plain").string() +
                                " is not a directory: the socket cannot be made under it"),
            std::string::npos)
      << check.output();
  // The command line's paths replace the file's: those of the file are not the daemon's to refuse
  // (a review: a store given with --profile-store was refused for the file's).
  const std::string socket = (dir.path() / "given.sock").string();
  ChildProcess daemon({bin("gpuqosd"), "--config", file.string(), "--socket", socket, "--profile-store",
                       (dir.path() / "node.gqp").string()},
                      {}, dir.path() / "daemon");
  EXPECT_TRUE(eventually([&] { return daemon.output().find("serving " + socket) != std::string::npos; }, 5s))
      << daemon.output();
  EXPECT_EQ(daemon.terminate(10s), 0) << daemon.output();
  // A review: a socket that is a file or a directory, and a store under a file, were "ok" here
  // and refused by gpuqosd as it started (the socket's with no line named).
  for (const auto& [socket_path, said] : std::vector<std::pair<std::string, std::string>>{
           {(dir.path() / "plain").string(), "daemon.socket: exists and is not a socket: gpuqosd would not replace it"},
           {dir.path().string() + "/", "daemon.socket: is a directory: give a socket file in it, e.g. " +
                                           (dir.path() / "gpuqosd.sock").string()},
           {dir.path().string(), "daemon.socket: is a directory: give a socket file in it"}}) {
    std::ofstream(file) << "[daemon]\nsocket = \"" << socket_path << "\"\nprofile_store = \""
                        << (dir.path() / "plain" / "p.gqp").string() << "\"\n";
    ChildProcess refused({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "out");
    EXPECT_EQ(refused.wait(5s), 1) << refused.output();
    EXPECT_NE(refused.output().find("paths.toml:2:10: " + said), std::string::npos) << refused.output();
    EXPECT_NE(refused.output().find("paths.toml:3:17: daemon.profile_store: " + (dir.path() / "plain").string() +
                                    " is not a directory: the store cannot be made under it"),
              std::string::npos)
        << refused.output();
  }
  // A socket whose directories are yet to be made is fine: gpuqosd makes them.
  std::ofstream(file) << "[daemon]\nsocket = \"" << (dir.path() / "new" / "run" / "g.sock").string() << "\"\n";
  ChildProcess fine({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "out");
  EXPECT_EQ(fine.wait(5s), 0) << fine.output();
}

TEST(Gpuqosd, RefusesPolicyNoneWhichMeansNoDaemon) {
  TempDir dir;
  const auto file = dir.path() / "none.toml";
  std::ofstream(file) << "[policy]\nname = \"none\"\n";
  ChildProcess check({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "check");
  EXPECT_EQ(check.wait(5s), 1);
  EXPECT_NE(check.output().find("without gpuqosd"), std::string::npos) << check.output();
  // With the file's other problems, in file order (it was said only once they were fixed).
  std::ofstream(file) << "[daemon]\nlog_level = \"verbose\"\n[policy]\nname = \"none\"\n";
  ChildProcess both({bin("gpuqosd"), "--check-config", file.string()}, {}, dir.path() / "both");
  EXPECT_EQ(both.wait(5s), 1);
  const std::string out = both.output();
  const std::size_t level = out.find("none.toml:2:"), none = out.find("none.toml:4:8: policy.name: \"none\" means running");
  EXPECT_NE(level, std::string::npos) << out;
  EXPECT_NE(none, std::string::npos) << out;
  EXPECT_LT(level, none) << out;
  ChildProcess start({bin("gpuqosd"), "--config", file.string(), "--socket", (dir.path() / "s.sock").string()}, {},
                     dir.path() / "start");
  EXPECT_EQ(start.wait(5s), 2) << start.output();
  // Each problem on a line of its own, each said as gpuqosd's (only the first was).
  EXPECT_NE(start.output().find("gpuqosd: " + file.string() + ":2:"), std::string::npos) << start.output();
  EXPECT_NE(start.output().find("gpuqosd: " + file.string() + ":4:8: policy.name"), std::string::npos) << start.output();
}

TEST(Gpuqosd, RunsWithAConfigFileAndTheCommandLineWins) {
  TempDir dir;
  const auto file = dir.path() / "daemon.toml";
  const auto store = dir.path() / "profile.gqp";
  std::ofstream(file) << "[daemon]\nsocket = \"" << (dir.path() / "from-config.sock").string()
                      << "\"\nprofile_store = \"" << store.string() << "\"\n[policy]\nname = \"fifo\"\n";
  DaemonProcess daemon({"--config", file.string()});  // its own --socket wins
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "from-config.sock"));
  EXPECT_EQ(daemon.status()["predictor"]["store"], store.string());
  EXPECT_EQ(daemon.status()["daemon"]["policy"], "fifo");
}

// The shim sends only names of the job-name rule; a client of its own may send any printable bytes. A
// user test's 'sp ace=1,y="2"\\' registered as it was and ran into the status table's columns: it is
// made a job name as the shim would make it, and said.
TEST(Daemon, AJobNameOutsideTheRuleIsRegisteredAsTheShimWouldMakeIt) {
  DaemonProcess daemon;
  FakeClient odd(daemon.socket(), Priority::low, "sp ace=1,y=\"2\"\\");
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"].size() == 1; })) << daemon.log();
  EXPECT_EQ(daemon.status()["clients"][0]["job"], "sp_ace_1_y__2__");
  EXPECT_NE(daemon.log().find("job name \"sp ace=1,y=\\\"2\\\"\\\\\" is not 1 to 63 of A-Z a-z 0-9 . _ -: registered "
                              "as 'sp_ace_1_y__2__'"),
            std::string::npos)
      << daemon.log();
  FakeClient fine(daemon.socket(), Priority::low, "batch-7.a_b");
  ASSERT_TRUE(eventually([&] { return daemon.status()["clients"].size() == 2; })) << daemon.log();
  EXPECT_EQ(daemon.status()["clients"][1]["job"], "batch-7.a_b");
  EXPECT_EQ(occurrences(daemon.log(), "is not 1 to 63"), 1u) << daemon.log();
}

}  // namespace
}  // namespace gpuqos::testing

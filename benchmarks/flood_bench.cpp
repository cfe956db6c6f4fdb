// gpuqosd-flood: what clients flooding gpuqosd with ops and completions cost everyone else. Starts a
// gpuqosd on a private socket, N high-priority fake clients that post kernels and push their exact
// completions as fast as the rings take them, and one more client that only watches the daemon's
// heartbeat in its segment. Prints the oldest heartbeat it saw (a shim takes gpuqosd for gone past
// ipc::kHeartbeatLimitNs, 100 ms, and runs unmanaged), the completions gpuqosd learned per second, and
// the stall warnings gpuqosd logged. The flooders are threads of this process: on a small machine they
// also take CPU from gpuqosd, which is part of what a flood does.
#include <CLI/CLI.hpp>

#include <atomic>
#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include "scheduler/daemon_harness.h"

using namespace std::chrono_literals;
using gpuqos::ipc::Priority;
using gpuqos::testing::DaemonProcess;
using gpuqos::testing::FakeClient;

int main(int argc, char** argv) {
  CLI::App app{"gpuqosd-flood: the heartbeat others see while clients flood gpuqosd with ops and completions"};
  int clients = 4;
  double seconds = 3;
  std::size_t outstanding = 3000;
  app.add_option("--clients", clients, "flooding clients")->check(CLI::Range(1, 256));
  app.add_option("--seconds", seconds, "how long they flood")->check(CLI::Range(0.5, 600.0));
  app.add_option("--outstanding", outstanding, "ops each keeps posted and not completed")->check(CLI::Range(1, 4000));
  CLI11_PARSE(app, argc, argv);

  DaemonProcess daemon;
  FakeClient watcher(daemon.socket(), Priority::low, "watch");
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      FakeClient flood(daemon.socket(), Priority::high, "flood" + std::to_string(i));
      flood.name_kernel(1, "k" + std::to_string(i));
      std::uint64_t posted = 0, completed = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        while (posted - completed < outstanding && flood.segment().ops().try_push(FakeClient::kernel(posted + 1))) {
          ++posted;
        }
        while (completed < posted) {
          const std::int64_t now = gpuqos::ipc::monotonic_ns();
          const gpuqos::ipc::CompletionDescriptor done{completed + 1, now - 2000, now - 1000, 0,
                                                        gpuqos::ipc::kCompletionExact};
          if (!flood.segment().completions().try_push(done)) break;
          ++completed;
        }
      }
    });
  }
  std::this_thread::sleep_for(300ms);  // registered and flooding
  const auto learned_at = [&] { return daemon.status()["predictor"]["learned"].get<std::uint64_t>(); };
  const std::uint64_t learned_before = learned_at();
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::int64_t oldest = 0;
  while (std::chrono::steady_clock::now() < until) {
    const auto age = gpuqos::ipc::monotonic_ns() - static_cast<std::int64_t>(watcher.segment().daemon_heartbeat_ns());
    oldest = std::max<std::int64_t>(oldest, age);
    std::this_thread::sleep_for(1ms);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::uint64_t learned = learned_at() - learned_before;
  stop = true;
  for (auto& thread : threads) thread.join();
  std::printf("%d flooding clients, %.1f s: oldest heartbeat %.1f ms (limit %lld ms), %.0f completions learned/s\n",
              clients, elapsed, static_cast<double>(oldest) / 1e6,
              static_cast<long long>(gpuqos::ipc::kHeartbeatLimitNs / 1'000'000), static_cast<double>(learned) / elapsed);
  std::istringstream log(daemon.log());
  for (std::string line; std::getline(log, line);) {
    if (line.find("stalled") != std::string::npos) std::printf("gpuqosd: %s\n", line.c_str());
  }
  return 0;
}

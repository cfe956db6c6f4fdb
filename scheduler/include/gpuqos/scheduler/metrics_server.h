// gpuqosd's Prometheus endpoint: an HTTP server (cpp-httplib) on threads of its own that answers
// `GET /metrics` with a text the daemon's loop thread publishes (render_metrics, metrics.h).
//
// Threads: the server's threads never touch daemon state. They read the published text under a
// mutex; when it is older than kFreshNs they raise a flag and wait up to kRefreshWaitNs for the loop,
// which polls refresh_wanted() on every tick and publishes a new text. So the loop renders only
// while someone scrapes, and at most about every kFreshNs. start() and stop() are the loop's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "gpuqos/config/config.h"
#include "gpuqos/ipc/result.h"

namespace gpuqos::scheduler {

class MetricsServer {
 public:
  static constexpr std::int64_t kFreshNs = 500'000'000;
  static constexpr std::int64_t kRefreshWaitNs = 250'000'000;
  // A text older than this that the loop did not renew within kRefreshWaitNs is not served (503):
  // the loop is stalled, and figures that stopped would read as a healthy daemon.
  static constexpr std::int64_t kStaleNs = 2'000'000'000;
  // Threads serving connections. Each serves one connection at a time, and a connection that sends
  // nothing holds its thread for kIoTimeoutS: kPoolThreads - 1 idle connections (a client that
  // keeps one open, a port scanner) leave a scrape served at once.
  static constexpr int kPoolThreads = 4;
  // Connections accepted and not yet closed, at most (kPoolThreads served by the pool, the rest
  // queued for it, one served by the accept thread); the kernel's listen backlog holds the others.
  static constexpr int kMaxConnections = kPoolThreads + 2;
  // How long a connection may wait for its request's first byte, or for each later read or write,
  // before it is closed. Per read, not in all: a peer that trickles bytes keeps its connection
  // (httplib has no deadline per request), which is why stop() does not wait for it for long.
  static constexpr int kIoTimeoutS = 2;
  // How long stop() waits by default (at exit) for the requests in progress to finish before it
  // leaves them to finish on their own: more than one read's timeout, so that only a peer that
  // keeps trickling is left.
  static constexpr std::int64_t kStopWaitNs = 3'000'000'000;

  // Binds address (host:port) and serves on a thread of its own; why not, when it cannot bind.
  static ipc::Result<std::unique_ptr<MetricsServer>> start(const config::ListenAddress& address);
  ~MetricsServer();  // stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Stops accepting at once (the port is free when it returns) and waits up to wait_ns for the
  // requests in progress and the connections accepted and not yet served (each closed within
  // kIoTimeoutS of its last byte). What is still in progress by then (a peer trickling its bytes,
  // or any scrape at all with wait_ns 0) keeps its connection and the server's threads, which own
  // all they use, until it ends: the caller waits wait_ns at most. The daemon's loop passes 0 on a
  // reload (it must not stall) and waits kStopWaitNs at exit. Idempotent.
  void stop(std::int64_t wait_ns = kStopWaitNs);
  // Whether a server thread that a stop() of this process left running (a request still in
  // progress) has not ended yet. It may be inside cpp-httplib or spdlog when the process exits: the
  // program should then end with std::quick_exit (no static destructors under it) once what it
  // must keep is flushed.
  static bool left_a_request_running() noexcept;

  // True once after a request found the text stale (the loop should publish a new one).
  bool refresh_wanted();
  // The text GET /metrics answers from now on; now_ns in CLOCK_MONOTONIC.
  void publish(std::string text, std::int64_t now_ns);
  const config::ListenAddress& address() const { return address_; }

 private:
  struct Shared;  // the cpp-httplib server and the published text, owned by this and its threads
  explicit MetricsServer(config::ListenAddress address);

  config::ListenAddress address_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace gpuqos::scheduler

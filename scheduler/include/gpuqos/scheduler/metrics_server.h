// gpuqosd's Prometheus endpoint: an HTTP server (cpp-httplib) on threads of its own that answers
// `GET /metrics` with a text the daemon's loop thread publishes (render_metrics, metrics.h).
//
// Threads: the server's threads never touch daemon state. They read the published text under a
// mutex; when it is older than kFreshNs they raise a flag and wait up to kRefreshWaitNs for the loop,
// which polls refresh_wanted() on every tick and publishes a new text. So the loop renders only
// while someone scrapes, and at most about every kFreshNs. start() and stop() are the loop's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gpuqos/config/config.h"
#include "gpuqos/ipc/result.h"

namespace gpuqos::scheduler {

class MetricsServer {
 public:
  static constexpr std::int64_t kFreshNs = 500'000'000;
  static constexpr std::int64_t kRefreshWaitNs = 250'000'000;
  // Connections accepted and not yet closed, at most (two served by the pool, the rest queued for
  // it, one served by the accept thread); the kernel's listen backlog holds the others.
  static constexpr int kMaxConnections = 5;
  // How long a connection may wait for its request's first byte, or for each later read or write,
  // before it is closed. Per read, not in all: a peer that trickles bytes keeps its connection.
  static constexpr int kIoTimeoutS = 2;

  // Binds address (host:port) and serves on a thread of its own; why not, when it cannot bind.
  static ipc::Result<std::unique_ptr<MetricsServer>> start(const config::ListenAddress& address);
  ~MetricsServer();  // stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Stops accepting, finishes the requests in progress (one whose peer stalls: within kIoTimeoutS of
  // its last byte), closes the connections accepted and not yet served, joins the threads.
  // Idempotent.
  void stop();

  // True once after a request found the text stale (the loop should publish a new one).
  bool refresh_wanted() { return refresh_wanted_.exchange(false, std::memory_order_acq_rel); }
  // The text GET /metrics answers from now on; now_ns in CLOCK_MONOTONIC.
  void publish(std::string text, std::int64_t now_ns);
  const config::ListenAddress& address() const { return address_; }

 private:
  struct Http;  // the cpp-httplib server, kept out of this header
  explicit MetricsServer(config::ListenAddress address);
  // Server thread: the newest text, fresh if the loop answers in time; empty before the first.
  std::string current_text();

  config::ListenAddress address_;
  std::unique_ptr<Http> http_;
  std::thread thread_;
  std::atomic<bool> refresh_wanted_{false};
  std::mutex mutex_;
  std::condition_variable published_;
  std::string text_;              // guarded by mutex_
  std::int64_t published_ns_ = 0; // guarded by mutex_
  std::uint64_t generation_ = 0;  // guarded by mutex_: publications so far
};

}  // namespace gpuqos::scheduler

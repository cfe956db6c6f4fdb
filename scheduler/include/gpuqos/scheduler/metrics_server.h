// gpuqosd's Prometheus endpoint: an HTTP server (Boost.Beast) on a thread of its own that answers
// `GET /metrics` with a text the daemon's loop thread publishes (render_metrics, metrics.h).
//
// Threads: the server's thread never touches daemon state. It reads the published text under a
// mutex; when it is older than kFreshNs it raises a flag and waits up to kRefreshWaitNs for the loop,
// which polls refresh_wanted() on every tick and publishes a new text. So the loop renders only
// while someone scrapes, and at most about every kFreshNs. start() and stop() are the loop's.
//
// Every connection has a deadline for its whole request, not for each read: a peer that trickles
// its bytes is cut off when it passes, as is one that sends nothing. At most kMaxConnections are
// open at once; one more closes the oldest still sending its request. So neither idle nor trickling
// peers, however many, keep a scrape from being served, and stop() never waits past the deadlines.
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
  // Connections open at once, at most (a descriptor each); the kernel's listen backlog holds the
  // others until one ends, and one more than this closes the oldest still sending its request.
  static constexpr int kMaxConnections = 64;
  // How long a connection has, from its accept, to send its whole request (headers and any body),
  // and then how long the answer may take to write. A scrape takes a millisecond of each.
  static constexpr std::int64_t kRequestDeadlineNs = 2'000'000'000;
  static constexpr std::int64_t kWriteDeadlineNs = 2'000'000'000;
  // The largest request taken: headers, then a body (a scrape has none; a bigger one gets 413).
  static constexpr std::uint32_t kMaxHeaderBytes = 16 * 1024;
  static constexpr std::uint64_t kMaxBodyBytes = 64 * 1024;
  // How long stop() waits by default (at exit) for the exchanges in progress to end: past the
  // deadlines of any of them, so that only a peer that does not read its answer is cut.
  static constexpr std::int64_t kStopWaitNs = kRequestDeadlineNs + kRefreshWaitNs + 500'000'000;

  // Binds address (host:port) and serves on a thread of its own; why not, when it cannot bind.
  static ipc::Result<std::unique_ptr<MetricsServer>> start(const config::ListenAddress& address);
  ~MetricsServer();  // stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Stops accepting at once (the port is free when it returns), lets the exchanges in progress end
  // for up to wait_ns (each ends within its deadlines anyway), closes what is left and joins the
  // server's thread: nothing of it runs after. The daemon's loop passes 0 on a reload that moves
  // the endpoint (it must not stall: a scrape in progress is cut, and the scraper asks again) and
  // kStopWaitNs at exit. Idempotent.
  void stop(std::int64_t wait_ns = kStopWaitNs);

  // True once after a request found the text stale (the loop should publish a new one).
  bool refresh_wanted();
  // The text GET /metrics answers from now on; now_ns in CLOCK_MONOTONIC.
  void publish(std::string text, std::int64_t now_ns);
  const config::ListenAddress& address() const { return address_; }

 private:
  struct Shared;  // the io_context, its acceptor and connections, and the published text
  explicit MetricsServer(config::ListenAddress address);

  config::ListenAddress address_;
  std::unique_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace gpuqos::scheduler

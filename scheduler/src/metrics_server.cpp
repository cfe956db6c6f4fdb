// MetricsServer: cpp-httplib serving the text the loop publishes at GET /metrics.
#include "gpuqos/scheduler/metrics_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/metrics.h"

namespace gpuqos::scheduler {
namespace {

// httplib's ThreadPool (0.11, Debian 12's) queues every accepted connection without limit, so a
// flood of connections that stall would each hold a descriptor and a queued task until the pool
// reached it, two timeouts at a time. (A task that starts after stop() closes its connection at
// once.) This one keeps at most kMaxConnections accepted at once: past that the accept thread
// serves the connection itself, so it accepts no more until that one is done, and the kernel's
// listen backlog (then refusal) holds the rest. A connection's task is what closes its socket, so
// a task can be run late but never dropped.
class BoundedQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    if (accepted_.load(std::memory_order_acquire) >= MetricsServer::kMaxConnections - 1) return fn();
    accepted_.fetch_add(1, std::memory_order_acq_rel);
    pool_.enqueue([this, fn = std::move(fn)] {
      fn();
      accepted_.fetch_sub(1, std::memory_order_acq_rel);
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_{MetricsServer::kPoolThreads};
  std::atomic<int> accepted_{0};  // handed to the pool and not finished (only the accept thread adds)
};

}  // namespace

// What the server's threads use. They hold it by shared_ptr, so a stop() that leaves a trickling
// peer's request in progress can let go of the MetricsServer; the handler refers to it by pointer,
// which the server (a member) keeps valid for as long as it can call the handler.
struct MetricsServer::Shared {
  httplib::Server server;
  std::atomic<bool> refresh_wanted{false};
  std::mutex mutex;
  std::condition_variable published;
  std::condition_variable finished_changed;
  std::string text;              // guarded by mutex
  std::int64_t published_ns = 0; // guarded by mutex
  std::uint64_t generation = 0;  // guarded by mutex: publications so far
  bool finished = false;         // guarded by mutex: the accept loop and its pool are done
  bool detached = false;         // guarded by mutex: stop() left the thread running (counted)

  // Server thread: the newest text, fresh if the loop answers in time; nullopt and why not before the
  // first, or when the newest is older than kStaleNs and the loop did not answer.
  std::optional<std::string> current_text(std::string& why) {
    std::unique_lock lock(mutex);
    if (generation > 0 && ipc::monotonic_ns() - published_ns <= kFreshNs) return text;
    const std::uint64_t seen = generation;
    refresh_wanted.store(true, std::memory_order_release);
    published.wait_for(lock, std::chrono::nanoseconds(kRefreshWaitNs), [&] { return generation != seen; });
    if (generation == 0) {
      why = "gpuqosd: no metrics yet, try again\n";
      return std::nullopt;
    }
    if (const std::int64_t age = ipc::monotonic_ns() - published_ns; age > kStaleNs) {
      why = "gpuqosd: its loop has not answered for " + std::to_string(age / 1'000'000) + " ms (stalled)\n";
      return std::nullopt;
    }
    return text;
  }
};

namespace {
// Server threads stop() left running that have not ended yet.
std::atomic<int>& detached_running() {
  static std::atomic<int> running{0};  // a function's static: never destroyed before its readers
  return running;
}
}  // namespace

MetricsServer::MetricsServer(config::ListenAddress address)
    : address_(std::move(address)), shared_(std::make_shared<Shared>()) {}

MetricsServer::~MetricsServer() { stop(); }

ipc::Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const config::ListenAddress& address) {
  std::unique_ptr<MetricsServer> metrics(new MetricsServer(address));
  Shared* shared = metrics->shared_.get();
  httplib::Server& server = shared->server;
  // A scrape every few seconds needs neither many threads nor kept-alive connections, and a short
  // timeout keeps a stuck peer from delaying the daemon's exit.
  server.new_task_queue = [] { return new BoundedQueue; };
  // httplib's default sets SO_REUSEPORT, with which a second gpuqosd on the same port binds too and
  // the kernel splits the scrapes between them (counters that jump between two daemons). Only
  // SO_REUSEADDR: a restart may bind beside its predecessor's closing connections, a second
  // listener may not.
  server.set_socket_options([](socket_t socket) {
    const int yes = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.set_keep_alive_max_count(1);
  server.set_keep_alive_timeout(kIoTimeoutS);  // the wait for a request's first byte (httplib: 5 s)
  server.set_read_timeout(kIoTimeoutS, 0);
  server.set_write_timeout(kIoTimeoutS, 0);
  server.set_payload_max_length(64 * 1024);  // a scrape has no body: refuse one (413) before reading it
  server.Get("/metrics", [shared](const httplib::Request&, httplib::Response& response) {
    std::string why;
    std::optional<std::string> text = shared->current_text(why);
    if (!text) {
      response.status = 503;
      response.set_content(why, "text/plain");
      return;
    }
    response.set_content(std::move(*text), kMetricsContentType);
  });
  // The metrics are only read: another method is told so (405), not that its request was bad. Before
  // routing, where httplib would first refuse a POST or PUT without a body length (400).
  server.set_pre_routing_handler([](const httplib::Request& request, httplib::Response& response) {
    if (request.path != "/metrics" || request.method == "GET" || request.method == "HEAD") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    response.status = 405;
    response.set_header("Allow", "GET, HEAD");
    response.set_content("gpuqosd: /metrics is read with GET\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  errno = 0;
  if (!server.bind_to_port(address.host, address.port)) {
    const int error = errno;
    return ipc::Error{"cannot listen on " + config::to_string(address) +
                      (error != 0 ? std::string(": ") + std::strerror(error) : std::string())};
  }
  metrics->thread_ = std::thread([owned = metrics->shared_]() mutable {
    owned->server.listen_after_bind();
    bool detached = false;
    {
      std::lock_guard lock(owned->mutex);
      owned->finished = true;
      detached = owned->detached;
    }
    owned->finished_changed.notify_all();
    owned.reset();  // the server may end here, so only then is this thread no longer running
    if (detached) detached_running().fetch_sub(1, std::memory_order_acq_rel);
  });
  // stop() before the accept loop runs would be lost (httplib ignores it): wait until it does.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!server.is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return metrics;
}

void MetricsServer::stop(std::int64_t wait_ns) {
  if (!thread_.joinable()) return;
  shared_->server.stop();  // closes the listening socket now
  bool finished = false;
  {
    std::unique_lock lock(shared_->mutex);
    finished = shared_->finished_changed.wait_for(lock, std::chrono::nanoseconds(std::max<std::int64_t>(0, wait_ns)),
                                                  [&] { return shared_->finished; });
    if (!finished) {
      shared_->detached = true;
      detached_running().fetch_add(1, std::memory_order_acq_rel);
    }
  }
  if (finished) return thread_.join();
  if (wait_ns > 0) {
    spdlog::warn("metrics: a peer of {} is still sending its request after {:.1f} s; its connection is left to "
                 "end on its own",
                 config::to_string(address_), static_cast<double>(wait_ns) / 1e9);
  }
  thread_.detach();
}

bool MetricsServer::left_a_request_running() noexcept {
  return detached_running().load(std::memory_order_acquire) > 0;
}

bool MetricsServer::refresh_wanted() {
  return shared_->refresh_wanted.exchange(false, std::memory_order_acq_rel);
}

void MetricsServer::publish(std::string text, std::int64_t now_ns) {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->text = std::move(text);
    shared_->published_ns = now_ns;
    ++shared_->generation;
  }
  shared_->published.notify_all();
}

}  // namespace gpuqos::scheduler

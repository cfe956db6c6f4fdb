// MetricsServer: cpp-httplib serving the text the loop publishes at GET /metrics.
#include "gpuqos/scheduler/metrics_server.h"

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

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
  httplib::ThreadPool pool_{2};
  std::atomic<int> accepted_{0};  // handed to the pool and not finished (only the accept thread adds)
};

}  // namespace

struct MetricsServer::Http {
  httplib::Server server;
};

MetricsServer::MetricsServer(config::ListenAddress address)
    : address_(std::move(address)), http_(std::make_unique<Http>()) {}

MetricsServer::~MetricsServer() { stop(); }

ipc::Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const config::ListenAddress& address) {
  std::unique_ptr<MetricsServer> metrics(new MetricsServer(address));
  httplib::Server& server = metrics->http_->server;
  // A scrape every few seconds needs neither many threads nor kept-alive connections, and a short
  // timeout keeps a stuck peer from delaying the daemon's exit.
  server.new_task_queue = [] { return new BoundedQueue; };
  server.set_keep_alive_max_count(1);
  server.set_keep_alive_timeout(kIoTimeoutS);  // the wait for a request's first byte (httplib: 5 s)
  server.set_read_timeout(kIoTimeoutS, 0);
  server.set_write_timeout(kIoTimeoutS, 0);
  server.set_payload_max_length(64 * 1024);  // a scrape has no body: refuse one (413) before reading it
  MetricsServer* self = metrics.get();
  server.Get("/metrics", [self](const httplib::Request&, httplib::Response& response) {
    std::string text = self->current_text();
    if (text.empty()) {
      response.status = 503;
      response.set_content("gpuqosd: no metrics yet, try again\n", "text/plain");
      return;
    }
    response.set_content(std::move(text), kMetricsContentType);
  });
  errno = 0;
  if (!server.bind_to_port(address.host, address.port)) {
    const int error = errno;
    return ipc::Error{"cannot listen on " + config::to_string(address) +
                      (error != 0 ? std::string(": ") + std::strerror(error) : std::string())};
  }
  metrics->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // stop() before the accept loop runs would be lost (httplib ignores it): wait until it does.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!server.is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return metrics;
}

void MetricsServer::stop() {
  if (!thread_.joinable()) return;
  http_->server.stop();
  thread_.join();
}

void MetricsServer::publish(std::string text, std::int64_t now_ns) {
  {
    std::lock_guard lock(mutex_);
    text_ = std::move(text);
    published_ns_ = now_ns;
    ++generation_;
  }
  published_.notify_all();
}

std::string MetricsServer::current_text() {
  std::unique_lock lock(mutex_);
  if (generation_ > 0 && ipc::monotonic_ns() - published_ns_ <= kFreshNs) return text_;
  const std::uint64_t seen = generation_;
  refresh_wanted_.store(true, std::memory_order_release);
  published_.wait_for(lock, std::chrono::nanoseconds(kRefreshWaitNs), [&] { return generation_ != seen; });
  return text_;
}

}  // namespace gpuqos::scheduler

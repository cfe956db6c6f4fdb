// MetricsServer: Boost.Beast serving the text the loop publishes at GET /metrics, one io_context
// on one thread, each connection under a deadline for its whole request.
#include "gpuqos/scheduler/metrics_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/metrics.h"

namespace gpuqos::scheduler {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class Connection;

// What the server's thread owns, and the text the loop publishes to it.
struct Server {
  // The published text: written by the loop (publish), read by the server's thread.
  std::atomic<bool> refresh_wanted{false};
  std::mutex mutex;
  std::string text;               // guarded by mutex
  std::int64_t published_ns = 0;  // guarded by mutex
  std::uint64_t generation = 0;   // guarded by mutex: publications so far
  // stop() was called: the loop that publishes is the one stopping, so a request in progress gets
  // the newest text, whatever its age, rather than waiting for one that cannot come.
  std::atomic<bool> stopping{false};

  // The server's thread's alone (stop() and publish() reach them by posting to io). The open
  // connections, oldest first, are declared before io: it destroys the handlers that hold them.
  std::list<Connection*> open;
  std::atomic<int> open_count{0};                          // open.size(), for stop() to watch
  std::vector<std::weak_ptr<Connection>> refresh_waiters;  // woken by the next publication
  asio::io_context io{1};
  // Keeps io.run() going until stop() lets go of it, whatever else it has to do (a thread that ran
  // out of work would leave stop() posting to nobody).
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{io.get_executor()};
  // One per address the listen address names (a name may have several: localhost's ::1 and
  // 127.0.0.1), each with the timer of its retries.
  struct Listener {
    Listener(asio::io_context& io, tcp protocol) : acceptor(io), retry(io), protocol(protocol) {}
    tcp::acceptor acceptor;
    asio::steady_timer retry;
    tcp protocol;  // its connections'
  };
  std::vector<std::unique_ptr<Listener>> listeners;
  std::int64_t accept_warned_ns = 0;

  void accept(Listener& listener);
  void take(tcp::socket socket);
  void evict_one();
  void wake_refresh_waiters();
  // A stalled loop publishes nothing: scrapes that gave up waiting are let go of as more come.
  void add_refresh_waiter(std::weak_ptr<Connection> waiter) {
    if (refresh_waiters.size() >= 2 * static_cast<std::size_t>(MetricsServer::kMaxConnections)) {
      std::erase_if(refresh_waiters, [](const std::weak_ptr<Connection>& w) { return w.expired(); });
    }
    refresh_waiters.push_back(std::move(waiter));
  }
};

std::chrono::nanoseconds ns(std::int64_t n) { return std::chrono::nanoseconds(n); }

// One connection: its request (headers, then a body if any) under one deadline, the answer, and a
// short drain of what the peer still sends so that closing does not reset the answer away.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Where it is, for an eviction: one draining has its answer sent, one reading has had more of its
  // time than any newer one, one being answered (waiting for fresh figures, or writing them) is
  // most likely a scrape.
  enum class Stage { reading, answering, draining, closed };

  Connection(Server& server, tcp::socket socket) : server_(server), stream_(std::move(socket)), wait_(server.io) {
    place_ = server_.open.insert(server_.open.end(), this);
    server_.open_count.fetch_add(1, std::memory_order_acq_rel);
    parser_.header_limit(MetricsServer::kMaxHeaderBytes);
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());  // the method first: see on_header
  }
  ~Connection() {
    server_.open.erase(place_);
    server_.open_count.fetch_sub(1, std::memory_order_acq_rel);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start() {
    // One deadline for the whole request: the stream's reads all wait on the same expiry, which a
    // completed read does not move, so a peer trickling bytes is cut when it passes.
    stream_.expires_after(ns(MetricsServer::kRequestDeadlineNs));
    http::async_read_header(stream_, buffer_, parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }
  Stage stage() const { return stage_; }
  // Ends it: what is in progress fails, and its handlers let go of it.
  void close() {
    stage_ = Stage::closed;
    beast::error_code ignored;
    stream_.socket().close(ignored);
    wait_.cancel();
  }
  // The loop published new figures: a request waiting for them is answered now.
  void wake() {
    if (stage_ == Stage::answering) wait_.cancel();
  }

 private:
  void on_header(beast::error_code ec) {
    if (ec) return refuse(ec);
    const auto& request = parser_.get();
    std::string_view target(request.target().data(), request.target().size());
    // The absolute form (http://host:port/metrics, as a proxy sends it) names the same path.
    if (const auto scheme = target.find("://"); !target.empty() && target.front() != '/' && scheme != target.npos) {
      const auto path = target.find('/', scheme + 3);
      target = path == target.npos ? std::string_view("/") : target.substr(path);
    }
    metrics_ = target.substr(0, target.find('?')) == "/metrics";
    head_ = request.method() == http::verb::head;
    // The metrics are only read: another method is told so (405) before any body is read, however
    // long it says it is.
    if (metrics_ && request.method() != http::verb::get && !head_) {
      response_.set(http::field::allow, "GET, HEAD");
      return answer(http::status::method_not_allowed, "gpuqosd: /metrics is read with GET\n");
    }
    // A body is refused by its announced length before any of it is read; a chunked one as it comes.
    if (const auto length = parser_.content_length(); length && *length > MetricsServer::kMaxBodyBytes) {
      return answer(http::status::payload_too_large, "gpuqosd: a request's body is at most 64 KiB\n");
    }
    parser_.body_limit(MetricsServer::kMaxBodyBytes);
    if (parser_.is_done()) return on_request({});
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code e, std::size_t) { self->on_request(e); });
  }

  void on_request(beast::error_code ec) {
    if (ec) return refuse(ec);
    stage_ = Stage::answering;
    if (!metrics_) return answer(http::status::not_found, "gpuqosd: the metrics are at /metrics\n");
    serve_metrics();
  }

  // A request that could not be read whole: a peer gone, past its deadline or closed needs no
  // answer; a bad one is told why.
  void refuse(beast::error_code ec) {
    if (stage_ == Stage::closed) return;
    if (ec == http::error::body_limit) {
      return answer(http::status::payload_too_large, "gpuqosd: a request's body is at most 64 KiB\n");
    }
    if (ec == http::error::header_limit) {
      return answer(http::status::request_header_fields_too_large, "gpuqosd: a request's headers are at most 16 KiB\n");
    }
    const bool http_error = ec.category() == beast::error_code(http::error::bad_method).category();
    if (http_error && ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return answer(http::status::bad_request, "gpuqosd: not an HTTP request: " + ec.message() + "\n");
    }
    close();
  }

  // The newest text, fresh if the loop publishes one within kRefreshWaitNs; a 503 before the first,
  // or when the newest is older than kStaleNs and the loop did not answer.
  void serve_metrics() {
    bool usable = false;
    {
      std::lock_guard lock(server_.mutex);
      const bool fresh = ipc::monotonic_ns() - server_.published_ns <= MetricsServer::kFreshNs;
      seen_ = server_.generation;
      usable = seen_ > 0 && (fresh || server_.stopping.load(std::memory_order_acquire));
    }
    if (usable) return answer_newest();
    server_.refresh_wanted.store(true, std::memory_order_release);
    server_.add_refresh_waiter(weak_from_this());
    wait_.expires_after(ns(MetricsServer::kRefreshWaitNs));
    wait_for_refresh();
  }

  // Until a publication newer than the one seen (wake), or the refresh wait's end.
  void wait_for_refresh() {
    wait_.async_wait([self = shared_from_this()](beast::error_code) {
      if (self->stage_ != Stage::answering) return;  // closed meanwhile
      bool early = false;
      {
        std::lock_guard lock(self->server_.mutex);
        early = self->server_.generation == self->seen_ &&
                self->wait_.expiry() > asio::steady_timer::clock_type::now() &&
                !self->server_.stopping.load(std::memory_order_acquire);
      }
      if (!early) return self->answer_newest();
      // Woken by a publication that came before this wait began: wait on for a newer one.
      self->server_.add_refresh_waiter(self->weak_from_this());
      self->wait_for_refresh();
    });
  }

  // The newest text, whatever its age while stopping (the loop that would publish a newer one is the
  // one stopping); else a 503 when there is none or it is stale.
  void answer_newest() {
    std::unique_lock lock(server_.mutex);
    if (server_.generation == 0) {
      lock.unlock();
      return answer(http::status::service_unavailable, "gpuqosd: no metrics yet, try again\n");
    }
    const std::int64_t age = ipc::monotonic_ns() - server_.published_ns;
    if (age > MetricsServer::kStaleNs && !server_.stopping.load(std::memory_order_acquire)) {
      lock.unlock();
      return answer(http::status::service_unavailable,
                    "gpuqosd: its loop has not answered for " + std::to_string(age / 1'000'000) + " ms (stalled)\n");
    }
    std::string text = server_.text;
    lock.unlock();
    answer(http::status::ok, std::move(text), kMetricsContentType);
  }

  void answer(http::status status, std::string body, std::string_view type = "text/plain") {
    stage_ = Stage::answering;
    response_.result(status);
    response_.version(11);
    response_.set(http::field::server, "gpuqosd");
    response_.set(http::field::content_type, beast::string_view(type.data(), type.size()));
    response_.keep_alive(false);  // a scrape every few seconds needs no kept connection
    const std::size_t length = body.size();
    if (!head_) response_.body() = std::move(body);
    response_.content_length(length);  // a HEAD's says what a GET would carry
    stream_.expires_after(ns(MetricsServer::kWriteDeadlineNs));
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  // Half-closes and reads what the peer still sends (a body not read, say) until it closes, for a
  // short while: closing with unread bytes would reset the connection, which can discard the
  // answer before the peer has read it.
  // The stream's expiry cuts only a read still waiting when it passes: one that always finds bytes
  // (a peer sending as fast as it can) is ended by the deadline checked here and by a byte limit.
  void drain() {
    if (stage_ == Stage::closed) return;
    stage_ = Stage::draining;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(ns(kDrainNs));
    drain_until_ns_ = ipc::monotonic_ns() + kDrainNs;
    drain_more();
  }
  void drain_more() {
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > kMaxDrainBytes || ipc::monotonic_ns() > self->drain_until_ns_) return self->close();
      self->drain_more();
    });
  }
  static constexpr std::int64_t kDrainNs = 500'000'000;
  static constexpr std::uint64_t kMaxDrainBytes = 1 << 20;

  Server& server_;
  std::list<Connection*>::iterator place_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{MetricsServer::kMaxHeaderBytes};
  http::request_parser<http::string_body> parser_;
  http::response<http::string_body> response_;
  asio::steady_timer wait_;  // the refresh wait
  std::array<char, 4096> discard_{};
  std::uint64_t seen_ = 0;  // the publication a refresh wait waits past
  std::int64_t drain_until_ns_ = 0;
  std::uint64_t drained_ = 0;
  Stage stage_ = Stage::reading;
  bool metrics_ = false;
  bool head_ = false;
};

void Server::accept(Listener& listener) {
  // Waited for by Asio, accepted by hand: accept4 gives the connection SOCK_CLOEXEC atomically
  // (Asio's accept does not), so it never outlives us in a program another thread execs.
  listener.acceptor.async_wait(tcp::acceptor::wait_read, [this, &listener](beast::error_code ec) {
    if (!listener.acceptor.is_open()) return;  // stopped
    if (!ec) {
      const int fd = ::accept4(listener.acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      const int error = errno;
      if (fd >= 0) {
        tcp::socket socket(io);
        if (socket.assign(listener.protocol, fd, ec); ec) {
          ::close(fd);
          spdlog::warn("metrics: cannot serve a connection: {}", ec.message());
          return accept(listener);
        }
        try {
          take(std::move(socket));
        } catch (const std::exception& e) {  // out of memory: this connection is dropped, the next taken
          spdlog::warn("metrics: cannot serve a connection: {}", e.what());
        }
        return accept(listener);
      }
      // Gone before we took it (reset meanwhile: the listener is non-blocking), or a network error
      // pending on the new connection, which accept(2) says to treat as EAGAIN: wait again.
      switch (error) {
        case EAGAIN: case ECONNABORTED: case EINTR: case EPROTO: case ENETDOWN: case ENOPROTOOPT:
        case EHOSTDOWN: case ENONET: case EHOSTUNREACH: case EOPNOTSUPP: case ENETUNREACH:
          return accept(listener);
        default:
          ec = beast::error_code(error, beast::system_category());
      }
    }
    // Out of descriptors, most likely: said once every 10 s, and tried again shortly (a pending
    // connection keeps the socket readable, so accepting at once again would spin). One of ours
    // makes room, as for a connection past the cap: else idle peers holding descriptors would keep
    // every scrape out for as long as the process has none to spare.
    if (const std::int64_t now = ipc::monotonic_ns(); now - accept_warned_ns >= 10'000'000'000) {
      accept_warned_ns = now;
      spdlog::warn("metrics: cannot accept a connection: {}", ec.message());
    }
    const bool out_of_descriptors = ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
                                    ec == asio::error::no_memory ||
                                    ec == beast::error_code(ENFILE, beast::system_category());
    if (out_of_descriptors) evict_one();
    listener.retry.expires_after(std::chrono::milliseconds(out_of_descriptors ? 5 : 100));
    listener.retry.async_wait([this, &listener](beast::error_code e) {
      if (!e) accept(listener);
    });
  });
}

void Server::take(tcp::socket socket) {
  // Closed ones not yet let go of do not count.
  const auto live = std::count_if(open.begin(), open.end(),
                                  [](const Connection* c) { return c->stage() != Connection::Stage::closed; });
  if (live >= MetricsServer::kMaxConnections) evict_one();
  std::make_shared<Connection>(*this, std::move(socket))->start();
}

void Server::evict_one() {
  // One makes room, so that no number of peers holding connections keeps a scrape out: the oldest
  // that has its answer sent, else the oldest still sending its request, else the oldest being
  // answered. Each stage has its deadline anyway.
  for (const auto stage : {Connection::Stage::draining, Connection::Stage::reading, Connection::Stage::answering}) {
    const auto oldest = std::find_if(open.begin(), open.end(), [stage](const Connection* c) { return c->stage() == stage; });
    if (oldest != open.end()) return (*oldest)->close();
  }
}

void Server::wake_refresh_waiters() {
  std::vector<std::weak_ptr<Connection>> waiters;
  waiters.swap(refresh_waiters);
  for (const auto& waiter : waiters) {
    if (const auto connection = waiter.lock()) connection->wake();
  }
}

// Where host:port is. An address is taken as it is. A name is looked up on a thread of its own and
// waited for kResolveWaitNs at most, since start() runs on the daemon's loop (at start, on a reload,
// and every few seconds while it fails), which must not stall past the shims' 100-ms heartbeat on
// a slow name server. A lookup that takes longer goes on, and a later start() takes its answer,
// which is kept for the process's life (a failure is looked up afresh).
constexpr std::int64_t kResolveWaitNs = 50'000'000;

struct Lookup {
  std::mutex mutex;
  std::condition_variable done_changed;
  bool done = false;                      // guarded by mutex
  std::vector<tcp::endpoint> endpoints;   // guarded by mutex (their port: 0)
  std::string error;                      // guarded by mutex
};

ipc::Result<std::vector<tcp::endpoint>> resolve(const config::ListenAddress& address) {
  beast::error_code ec;
  if (const auto ip = asio::ip::make_address(address.host, ec); !ec) {
    // Asio takes an interface name it cannot find for index 0, which the bind then refuses as
    // "Invalid argument": the name is said instead.
    if (const auto percent = address.host.find('%'); percent != std::string::npos && ip.is_v6() && ip.to_v6().scope_id() == 0) {
      return ipc::Error{"no network interface '" + address.host.substr(percent + 1) + "' here"};
    }
    return std::vector<tcp::endpoint>{tcp::endpoint(ip, address.port)};
  }
  static std::mutex lookups_mutex;
  static auto* const lookups = new std::map<std::string, std::shared_ptr<Lookup>>;  // never destroyed: threads use it
  std::shared_ptr<Lookup> lookup;
  {
    std::lock_guard guard(lookups_mutex);
    std::shared_ptr<Lookup>& entry = (*lookups)[address.host];
    if (entry) {
      std::lock_guard lock(entry->mutex);
      if (entry->done && entry->endpoints.empty()) entry.reset();  // failed: asked again
    }
    if (!entry) {
      entry = std::make_shared<Lookup>();
      try {
        std::thread([entry, host = address.host] {
          addrinfo hints{};
          hints.ai_family = AF_UNSPEC;
          hints.ai_socktype = SOCK_STREAM;
          addrinfo* found = nullptr;
          const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
          std::lock_guard lock(entry->mutex);
          if (rc != 0) entry->error = ::gai_strerror(rc);
          for (const addrinfo* a = rc == 0 ? found : nullptr; a; a = a->ai_next) {
            if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
            tcp::endpoint endpoint;
            std::memcpy(endpoint.data(), a->ai_addr, a->ai_addrlen);
            endpoint.resize(a->ai_addrlen);
            if (std::find(entry->endpoints.begin(), entry->endpoints.end(), endpoint) == entry->endpoints.end()) {
              entry->endpoints.push_back(endpoint);
            }
          }
          if (rc == 0 && entry->endpoints.empty()) entry->error = "no address";
          if (found) ::freeaddrinfo(found);
          entry->done = true;
          entry->done_changed.notify_all();
        }).detach();
      } catch (const std::exception& e) {
        entry.reset();
        return ipc::Error{std::string("cannot look up its host: ") + e.what()};
      }
    }
    lookup = entry;
  }
  std::unique_lock lock(lookup->mutex);
  if (!lookup->done_changed.wait_for(lock, ns(kResolveWaitNs), [&] { return lookup->done; })) {
    return ipc::Error{"looking up " + address.host + " takes over " + std::to_string(kResolveWaitNs / 1'000'000) +
                      " ms (a slow name server?); its answer is taken when it comes"};
  }
  if (lookup->endpoints.empty()) return ipc::Error{"cannot look up " + address.host + ": " + lookup->error};
  std::vector<tcp::endpoint> endpoints = lookup->endpoints;
  for (tcp::endpoint& endpoint : endpoints) endpoint.port(address.port);
  return endpoints;
}

}  // namespace

struct MetricsServer::Shared : Server {};

MetricsServer::MetricsServer(config::ListenAddress address)
    : address_(std::move(address)), shared_(std::make_unique<Shared>()) {}

MetricsServer::~MetricsServer() {
  try {
    stop();
  } catch (const std::exception& e) {  // a post or a join that failed: nothing more can be done
    spdlog::error("metrics: stopping: {}", e.what());
  }
}

ipc::Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const config::ListenAddress& address) {
  std::unique_ptr<MetricsServer> metrics(new MetricsServer(address));
  Server& server = *metrics->shared_;
  auto resolved = resolve(address);
  if (!resolved) return ipc::Error{"cannot listen on " + config::to_string(address) + ": " + resolved.error()};
  const std::vector<tcp::endpoint>& endpoints = resolved.value();
  const auto failed = [&](const tcp::endpoint& endpoint, const beast::error_code& ec) {
    // A name's addresses are each said: which of them could not be listened on.
    const std::string which = endpoints.size() > 1 || endpoint.address().to_string() != address.host
                                  ? " (" + endpoint.address().to_string() + ")"
                                  : "";
    return ipc::Error{"cannot listen on " + config::to_string(address) + which + ": " + ec.message()};
  };
  beast::error_code ec;
  // SO_REUSEADDR only, not SO_REUSEPORT (with which a second gpuqosd on the same port would bind
  // too and the kernel split the scrapes between them): a restart may bind beside its
  // predecessor's closing connections, a second listener may not.
  const auto listen_on = [&](const tcp::endpoint& endpoint) -> beast::error_code {
    auto& listener = *server.listeners.emplace_back(std::make_unique<Server::Listener>(server.io, endpoint.protocol()));
    tcp::acceptor& acceptor = listener.acceptor;
    // Opened by hand for SOCK_CLOEXEC, which asio's open() does not set.
    // Non-blocking too: accept() takes a connection only once the wait says one is there, and
    // one reset meanwhile must not block the server's thread.
    const int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return beast::error_code(errno, beast::system_category());
    if (acceptor.assign(endpoint.protocol(), fd, ec); ec) {
      ::close(fd);
      return ec;
    }
    if (acceptor.set_option(asio::socket_base::reuse_address(true), ec); ec) return ec;
    if (acceptor.bind(endpoint, ec); ec) return ec;
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    return ec;
  };
  // A name's address that this host does not have (`localhost`'s ::1 with IPv6 disabled, as
  // /etc/hosts lists it by default) is left out while another of its addresses serves: it kept
  // the endpoint down for good, retried every 5 s. Any other failure fails the whole name.
  // Said once the endpoint serves, not at each failed try (every 5 s).
  std::vector<std::pair<tcp::endpoint, beast::error_code>> absent;
  for (const tcp::endpoint& endpoint : endpoints) {
    const beast::error_code error = listen_on(endpoint);
    if (!error) continue;
    const bool lacking = error == beast::error_code(EADDRNOTAVAIL, beast::system_category()) ||
                         error == beast::error_code(EAFNOSUPPORT, beast::system_category());
    if (!lacking || endpoints.size() == 1) return failed(endpoint, error);
    server.listeners.pop_back();
    absent.emplace_back(endpoint, error);
  }
  if (server.listeners.empty()) return failed(absent.front().first, absent.front().second);
  for (const auto& [endpoint, error] : absent) {
    spdlog::warn("metrics: {} is served without its address {}: {}", config::to_string(address),
                 endpoint.address().to_string(), error.message());
  }
  for (const auto& listener : server.listeners) server.accept(*listener);
  metrics->thread_ = std::thread([&server] {
    for (;;) {
      try {
        server.io.run();
        return;  // stop() let go of it, and every connection has ended
      } catch (const std::exception& e) {  // out of memory in a handler, say: the endpoint serves on
        spdlog::error("metrics: {}", e.what());
      }
    }
  });
  return metrics;
}

void MetricsServer::stop(std::int64_t wait_ns) {
  if (!thread_.joinable()) return;
  Server& server = *shared_;
  server.stopping.store(true, std::memory_order_release);
  std::promise<void> closed;
  asio::post(server.io, [&] {
    beast::error_code ignored;
    for (const auto& listener : server.listeners) {
      listener->acceptor.close(ignored);
      listener->retry.cancel();
    }
    server.wake_refresh_waiters();  // answered with the newest figures: no more are coming
    closed.set_value();
  });
  closed.get_future().wait();  // the port is free
  const auto until = std::chrono::steady_clock::now() + ns(std::max<std::int64_t>(0, wait_ns));
  while (server.open_count.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (const int left = server.open_count.load(std::memory_order_acquire); left > 0 && wait_ns > 0) {
    spdlog::warn("metrics: {} connection(s) of {} still open after {:.1f} s: closed", left, config::to_string(address_),
                 static_cast<double>(wait_ns) / 1e9);
  }
  asio::post(server.io, [&server] {
    for (Connection* connection : server.open) connection->close();
    server.work.reset();  // io.run() returns once the closed connections' handlers have run
  });
  thread_.join();
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
  Server& server = *shared_;
  asio::post(server.io, [&server] { server.wake_refresh_waiters(); });
}

}  // namespace gpuqos::scheduler

// simgpud's event loop: accepting clients, reading their messages, driving the engine's clock.
#include "server.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "listen_socket.h"

namespace gpuqos::simgpu::server {
namespace {

// epoll tags of the server's own descriptors; client sessions are tagged by their number (< 2^24).
constexpr std::uint64_t kListenTag = std::uint64_t{1} << 60;
constexpr std::uint64_t kTimerTag = kListenTag + 1;
constexpr std::uint64_t kSignalTag = kListenTag + 2;

// A client that does not read its messages is dropped before it can exhaust the server's memory.
constexpr std::size_t kMaxOutboxBytes = 64u << 20;
// Messages read from one client per wakeup, so a chatty client cannot starve the others.
constexpr int kMaxMessagesPerWakeup = 64;


std::runtime_error sys_error(const char* what) { return std::runtime_error(std::string(what) + ": " + std::strerror(errno)); }

void watch(int epoll_fd, int fd, std::uint32_t events, std::uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) throw sys_error("epoll_ctl");
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Server::Server(std::vector<DeviceProfile> devices, KernelCatalog catalog, ServerOptions options)
    : engine_(std::move(devices)),
      catalog_(std::move(catalog)),
      options_(std::move(options)),
      memory_used_bytes_(engine_.device_count(), 0),
      recv_buffer_(sizeof(wire::MsgHeader) + wire::kMaxPayload) {}

Server::~Server() { shutdown(); }

void Server::open() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (::sigprocmask(SIG_BLOCK, &stop_signals, nullptr) != 0) throw sys_error("sigprocmask");
  ::signal(SIGPIPE, SIG_IGN);
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // wake up on the ns the engine asked for
  start_monotonic_ns_ = wire::monotonic_ns();

  listen_fd_ = open_listen_socket(options_.socket_path, options_.socket_mode);
  socket_bound_ = true;
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw sys_error("epoll_create1");
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) throw sys_error("timerfd_create");
  signal_fd_ = ::signalfd(-1, &stop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) throw sys_error("signalfd");
  watch(epoll_fd_, listen_fd_, EPOLLIN, kListenTag);
  watch(epoll_fd_, timer_fd_, EPOLLIN, kTimerTag);
  watch(epoll_fd_, signal_fd_, EPOLLIN, kSignalTag);
  spdlog::info("simgpud serving {} device(s) on {}", engine_.device_count(), options_.socket_path);
}

int Server::run() {
  epoll_event ready[64];
  while (!stopping_) {
    rearm_timer();
    int n = ::epoll_wait(epoll_fd_, ready, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::critical("epoll_wait failed: {}", std::strerror(errno));
      shutdown();
      return 1;
    }
    for (int i = 0; i < n && !stopping_; ++i) {
      std::uint64_t tag = ready[i].data.u64;
      if (tag == kListenTag) {
        accept_clients();
      } else if (tag == kTimerTag) {
        std::uint64_t expirations;
        [[maybe_unused]] ssize_t ignored = ::read(timer_fd_, &expirations, sizeof expirations);
        advance_due();
      } else if (tag == kSignalTag) {
        signalfd_siginfo info{};
        if (::read(signal_fd_, &info, sizeof info) == sizeof info) {
          spdlog::info("simgpud: {} received, shutting down", ::strsignal(static_cast<int>(info.ssi_signo)));
          stopping_ = true;
        }
      } else if (auto it = sessions_.find(static_cast<std::uint32_t>(tag)); it != sessions_.end()) {
        Session& session = *it->second;
        std::uint32_t events = ready[i].events;
        if (!session.closing && (events & EPOLLIN)) on_readable(session);
        if (!session.closing && (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR))) doom(session, "");
        if (!session.closing && (events & EPOLLOUT)) on_writable(session);
      }
      reap();
    }
  }
  shutdown();
  return 0;
}

Nanos Server::now_ns() const { return wire::monotonic_ns() - start_monotonic_ns_; }

// Runs every event due by now, leaving the device clock at the last of them (not at now), so
// a message stamped before now and read after can still take effect at its own time.
void Server::advance_due() {
  EngineEvents events;
  Nanos now = now_ns();
  for (auto next = engine_.next_event_ns(); next && *next <= now; next = engine_.next_event_ns()) {
    engine_.advance_to(*next, events);
  }
  deliver(events);
}

// Moves the device clock to when the client made its call: clamped to [device now, now], so
// no client can push the device into the future or rewrite its past.
void Server::advance_to_sent(std::int64_t sent_monotonic_ns) {
  Nanos now = now_ns();
  Nanos at = sent_monotonic_ns == 0 ? now : std::clamp(sent_monotonic_ns - start_monotonic_ns_, engine_.now(), now);
  EngineEvents events;
  engine_.advance_to(at, events);
  deliver(events);
}

void Server::deliver(const EngineEvents& events) {
  auto owner = [this](OpId op) -> Session* {
    auto it = sessions_.find(session_of_op(op));
    return it == sessions_.end() || it->second->closing ? nullptr : it->second.get();
  };
  for (const Completion& done : events.completions) {
    if (Session* session = owner(done.op)) {
      wire::CompletionMsg msg{client_op(done.op), done.start_ns, done.end_ns, 0, 0};
      send(*session, wire::MsgType::completion, &msg, sizeof msg);
    }
  }
  for (OpId op : events.host_funcs_ready) {
    if (Session* session = owner(op)) {
      wire::HostFuncRun msg{client_op(op)};
      send(*session, wire::MsgType::host_func_run, &msg, sizeof msg);
    }
  }
}

void Server::rearm_timer() {
  itimerspec spec{};  // all zero: disarmed
  if (auto next = engine_.next_event_ns()) {
    std::int64_t at = start_monotonic_ns_ + std::max(*next, engine_.now());
    spec.it_value.tv_sec = at / 1'000'000'000;
    spec.it_value.tv_nsec = at % 1'000'000'000;
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  }
  if (::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
    spdlog::error("timerfd_settime failed: {}", std::strerror(errno));
  }
}

void Server::accept_clients() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) spdlog::error("accept failed: {}", std::strerror(errno));
      return;
    }
    if (next_session_ > kMaxSessionNumber) {
      spdlog::error("simgpud has used up its session numbers; restart it to accept clients");
      ::close(fd);
      continue;
    }
    auto session = std::make_unique<Session>();
    session->number = next_session_++;
    session->fd = fd;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) session->pid = cred.pid;
    try {
      watch(epoll_fd_, fd, EPOLLIN | EPOLLRDHUP, session->number);
    } catch (const std::exception& e) {
      spdlog::error("cannot watch client pid {}: {}", session->pid, e.what());
      ::close(fd);
      continue;
    }
    spdlog::debug("client pid {} connected (session {})", session->pid, session->number);
    sessions_.emplace(session->number, std::move(session));
  }
}

void Server::on_readable(Session& session) {
  for (int i = 0; i < kMaxMessagesPerWakeup && !session.closing; ++i) {
    ssize_t n = ::recv(session.fd, recv_buffer_.data(), recv_buffer_.size(), MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) doom(session, "");
      return;
    }
    if (n == 0) {
      doom(session, "");
      return;
    }
    if (static_cast<std::size_t>(n) > recv_buffer_.size()) {
      doom(session, "sent a record of " + std::to_string(n) + " bytes, more than a message may have");
      return;
    }
    on_message(session, std::span<const std::byte>(recv_buffer_.data(), static_cast<std::size_t>(n)));
  }
}

void Server::on_writable(Session& session) {
  if (!session.outbox.flush(session.fd)) {
    doom(session, "");
  } else if (session.outbox.empty()) {
    set_writable_interest(session, false);
  }
}

void Server::send(Session& session, wire::MsgType type, const void* head, std::size_t head_bytes, const void* tail,
                  std::size_t tail_bytes) {
  if (session.closing) return;
  switch (session.outbox.send(session.fd, type, head, head_bytes, tail, tail_bytes)) {
    case Outbox::Result::sent:
      return;
    case Outbox::Result::failed:
      doom(session, "");
      return;
    case Outbox::Result::queued:
      if (session.outbox.queued_bytes() > kMaxOutboxBytes) {
        doom(session, "does not read its messages (more than 64 MiB queued)");
      } else {
        set_writable_interest(session, true);
      }
      return;
  }
}

void Server::set_writable_interest(Session& session, bool want) {
  if (session.waiting_writable == want) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
  ev.data.u64 = session.number;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, session.fd, &ev) != 0) {
    spdlog::error("epoll_ctl for client pid {}: {}", session.pid, std::strerror(errno));
  }
  session.waiting_writable = want;
}

void Server::doom(Session& session, const std::string& why) {
  if (session.closing) return;
  if (!why.empty()) spdlog::warn("client pid {} {}; disconnecting it", session.pid, why);
  session.closing = true;
  doomed_.push_back(session.number);
}

void Server::reap() {
  // Closing a session delivers completions to others, which may doom them in turn.
  while (!doomed_.empty()) {
    std::uint32_t number = doomed_.back();
    doomed_.pop_back();
    if (auto it = sessions_.find(number); it != sessions_.end()) close_session(*it->second);
  }
}

void Server::close_session(Session& session) {
  advance_to_sent(0);  // its work stops now, not at the device clock's last event
  EngineEvents events;
  for (std::uint32_t ctx : session.contexts) engine_.destroy_context(session.context_id(ctx), events);
  deliver(events);
  std::uint64_t reclaimed_bytes = 0;
  for (std::size_t d = 0; d < session.memory_bytes.size(); ++d) {
    std::uint64_t bytes = std::min(session.memory_bytes[d], memory_used_bytes_[d]);
    memory_used_bytes_[d] -= bytes;
    reclaimed_bytes += session.memory_bytes[d];
  }
  if (session.greeted && !session.observer) {
    spdlog::info("client pid {} disconnected: reclaimed {} contexts, {} bytes", session.pid, session.contexts.size(),
                 reclaimed_bytes);
  } else {
    spdlog::debug("client pid {} disconnected (session {})", session.pid, session.number);
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, session.fd, nullptr);
  ::close(session.fd);
  sessions_.erase(session.number);  // `session` dangles from here
}

void Server::shutdown() {
  for (auto& [number, session] : sessions_) ::close(session->fd);
  sessions_.clear();
  doomed_.clear();
  if (socket_bound_) {
    ::unlink(options_.socket_path.c_str());
    socket_bound_ = false;
  }
  close_fd(listen_fd_);
  close_fd(signal_fd_);
  close_fd(timer_fd_);
  close_fd(epoll_fd_);
}

}  // namespace gpuqos::simgpu::server

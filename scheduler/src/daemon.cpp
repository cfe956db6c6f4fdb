// gpuqosd's loop: setup of its descriptors, the epoll dispatch, ticks, status and shutdown.
#include "gpuqos/scheduler/daemon.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon_tokens.h"
#include "gpuqos/config/summary.h"
#include "gpuqos/ipc/bus_guard.h"
#include "gpuqos/ipc/clock.h"
#include "gpuqos/predictor/store.h"

namespace gpuqos::scheduler {
namespace {

ipc::Error system_error(const std::string& what) { return ipc::Error{what + ": " + std::strerror(errno)}; }

// A best-effort head held this long is logged (once per op): what it is, its prediction, why.
constexpr std::int64_t kLongHoldNs = 5'000'000'000;

const char* direction_name(ipc::CopyDirection direction) {
  switch (direction) {
    case ipc::CopyDirection::h2d: return "h2d";
    case ipc::CopyDirection::d2h: return "d2h";
    case ipc::CopyDirection::d2d: return "d2d";
    default: return "";
  }
}

}  // namespace

std::optional<HeldOpStatus> Daemon::held_op(Client& client) const {
  const auto head = policy_->held_head(client.identity().id);
  if (!head) return std::nullopt;
  const ipc::OpDescriptor& op = head->op;
  std::string what;
  switch (op.kind) {
    case ipc::OpKind::kernel: {
      const auto name = client.kernel_names().find(op.kernel_id);
      what = "kernel " + (name == client.kernel_names().end() ? std::to_string(op.kernel_id) : *name->second);
      break;
    }
    case ipc::OpKind::copy: what = std::string("copy ") + direction_name(op.direction) + " " + std::to_string(op.bytes) + " bytes"; break;
    case ipc::OpKind::memset: what = "memset " + std::to_string(op.bytes) + " bytes"; break;
    case ipc::OpKind::graph: what = "graph"; break;
    default: what = "mark"; break;
  }
  return HeldOpStatus{op.seq, std::move(what), head->predicted_ns, head->expected_ns,
                      std::string(kHoldReasonNames[static_cast<std::size_t>(head->reason)]), op.device};
}

void Daemon::tell_stall(std::int64_t now_ns) {
  // The shims took gpuqosd for gone, ran their held work and re-register: say why, at most every
  // kStallTellEveryNs (a CPU-starved node stalls often), with how many more there were meanwhile.
  const double ms = static_cast<double>(now_ns - heartbeat_ns_) / 1e6;
  const double own_ms = static_cast<double>(longest_work_ns_) / 1e6;
  ++stalls_untold_;
  if (stall_told_ns_ != 0 && now_ns - stall_told_ns_ < kStallTellEveryNs) return;
  // Its own work took most of it (one pass of the loop between two waits): not the node's doing.
  const bool own = 2 * longest_work_ns_ >= now_ns - heartbeat_ns_;
  spdlog::warn("gpuqosd's loop stalled for {:.0f} ms{}, over the shims' {} ms heartbeat limit: its {} client(s) ran "
               "their held work unmanaged and re-register. {}",
               ms, stalls_untold_ > 1 ? fmt::format(" (and {} more stalls since the last such line)", stalls_untold_ - 1) : "",
               ipc::kHeartbeatLimitNs / 1'000'000, clients_.size(),
               own ? fmt::format("One pass of its own loop took {:.0f} ms of it (a status of many clients, a "
                                 "profile store save on a slow disk?)", own_ms)
                   : std::string("Give gpuqosd CPU time it cannot be starved of (a core of its own, or CPU priority: "
                                 "scheduler/README.md, \"Running gpuqosd\")"));
  stall_told_ns_ = now_ns;
  stalls_untold_ = 0;
}

std::set<std::string> Daemon::high_priority_jobs(std::uint32_t device) const {
  std::set<std::string> jobs;
  for (const auto& [id, client] : clients_) {
    if (client->high_priority() && ipc::device_in(client->devices_posted(), device)) jobs.insert(client->identity().job);
  }
  return jobs;
}

void Daemon::tell_long_holds(std::int64_t now_ns) {
  std::map<std::uint32_t, std::set<std::string>> high_jobs;  // asked once per device and tick, when a hold is told of
  const auto high_now = [&](std::uint32_t device) -> const std::set<std::string>& {
    const auto it = high_jobs.find(device);
    return it != high_jobs.end() ? it->second : high_jobs.emplace(device, high_priority_jobs(device)).first->second;
  };
  for (auto& [id, client] : clients_) {
    const std::int64_t wait_ns = client->current_wait_ns(now_ns);
    const auto told = told_holds_.find(id);
    if (told == told_holds_.end() && wait_ns < kLongHoldNs) continue;
    const auto held = held_op(*client);
    if (told != told_holds_.end()) {
      // Gone once granted, whatever the policy says of it.
      if (client->granted_through() < told->second.seq) {
        if (held && held->seq == told->second.seq) told->second.held_by = held->held_by;
        told->second.high_jobs = high_now(told->second.device);
        continue;
      }
      // A hold that ends as the jobs it was held for leave: say so, or it reads as the policy relenting.
      std::string left;
      std::size_t gone = 0;
      for (const std::string& job : told->second.high_jobs) {
        if (!high_now(told->second.device).contains(job)) left += (gone++ == 0 ? "" : ", ") + ("'" + job + "'");
      }
      if (gone > 0) left = (gone == 1 ? ", as high-priority job " : ", as high-priority jobs ") + left + " left";
      spdlog::info("{}: op {} ({}) went after {:.1f} s held, last by {}{}", client->tag(), told->second.seq,
                   told->second.op, static_cast<double>(now_ns - told->second.since_ns) / 1e9, told->second.held_by, left);
      told_holds_.erase(told);
    }
    if (!held || wait_ns < kLongHoldNs) continue;
    told_holds_[id] = ToldHold{held->seq, held->op, held->held_by, now_ns - wait_ns, held->device, high_now(held->device)};
    spdlog::warn("{}: op {} ({}, predicted {:.3f} ms, up to {:.3f} ms) held for {:.1f} s by {}", client->tag(),
                 held->seq, held->op, static_cast<double>(held->expected_ns) / 1e6,
                 static_cast<double>(held->predicted_ns) / 1e6, static_cast<double>(wait_ns) / 1e9, held->held_by);
  }
}

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {}

Daemon::~Daemon() {
  // Normally drain_and_release() already did this; on an early failure nothing must be left.
  for (auto& [id, client] : clients_) client->segment().remove_name();
  clients_.clear();
  if (listener_.valid()) unlink_own_socket();
}

void Daemon::unlink_own_socket() const {
  struct stat info{};
  if (::lstat(options_.socket_path.c_str(), &info) == 0 && info.st_dev == socket_device_ && info.st_ino == socket_inode_) {
    ::unlink(options_.socket_path.c_str());
  }
}

namespace {

// Every client holds descriptors (socket, doorbell, pidfd): the soft limit, often 1024, is raised to
// the hard one, as servers of many connections do (gpuqosd waits with epoll, and the metrics
// endpoint's Asio too, so no descriptor is too high for them). The limit that applies.
std::uint64_t raise_descriptor_limit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0) return 1024;
  if (files.rlim_cur < files.rlim_max) {
    rlimit raised = files;
    raised.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
  }
  return files.rlim_cur == RLIM_INFINITY ? std::uint64_t{1} << 20 : static_cast<std::uint64_t>(files.rlim_cur);
}

}  // namespace

ipc::Result<std::unique_ptr<Daemon>> Daemon::create(DaemonOptions options) {
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(options)));
  daemon->policy_ = make_policy(daemon->options_.policy);
  if (!daemon->policy_) return ipc::Error{"unknown policy '" + daemon->options_.policy.name + "' (known: fifo, priority, baymax)"};
  daemon->numbered_policy_ = daemon->options_.policy;  // no device renumbered yet
  // A store path that is a link of this user's or root's (`current.gqp -> v3.gqp`) is the file it
  // names: saved there, locked there, so the link stays a link.
  if (std::string& given = daemon->options_.learning.store_path; !given.empty()) {
    if (const std::string target = predictor::save_target(given).string(); target != given) {
      spdlog::info("predictor: the profile store {} is a link to {}: that file is read and saved", given, target);
      given = target;
    }
  }
  const std::string& store = daemon->options_.learning.store_path;
  if (const auto what = store.empty() ? std::nullopt : predictor::foreign_file(store)) {
    return ipc::Error{"the profile store " + store + " is not a predictor store but " + *what +
                      "; gpuqosd would move it aside and save over it, so it does not start: give another path"};
  }
  if (std::error_code error; !store.empty() && (std::filesystem::is_directory(store, error) ||
                                                 !std::filesystem::path(store).has_filename())) {
    return ipc::Error{"the profile store " + store + " is a directory: give a file in it, e.g. " +
                      (std::filesystem::path(store) / "gpuqosd.gqp").lexically_normal().string()};
  }
  // The socket path first: a gpuqosd that cannot serve it (another one does) starts nothing and
  // leaves the store as it is (it moved an unreadable one aside before it found out).
  auto socket_lock = lock_socket_path(daemon->options_.socket_path);
  if (!socket_lock) return ipc::Error{socket_lock.error()};
  daemon->socket_lock_ = std::move(socket_lock.value());
  // Locked before the store is read: a store another gpuqosd holds is never moved aside or saved over.
  const std::optional<std::string> holder = store.empty() ? std::nullopt : daemon->lock_store();
  daemon->options_.learning.saves_beside = holder.has_value();
  std::optional<std::string> warning;
  daemon->learner_ = std::make_unique<DurationLearner>(daemon->options_.learning, ipc::monotonic_ns(), warning);
  if (warning) spdlog::warn("predictor: {}", *warning);
  if (holder) {
    spdlog::warn("predictor: {} learns into {}: this one reads it but saves what it learns to {}", *holder, store,
                 daemon->learner_->save_path());
  }
  if (!daemon->options_.learning.store_path.empty()) {
    const auto& predictor = daemon->learner_->predictor();
    if (std::error_code error; !holder && !warning && !std::filesystem::exists(store, error) && !error) {
      spdlog::info("predictor: {} is not there yet: starting with an empty model, saved there as gpuqosd learns", store);
    } else if (predictor.kernel_count() == 0) {
      spdlog::info("predictor: no kernels from {}", daemon->options_.learning.store_path);
    } else {
      spdlog::info("predictor: {} kernels from {}, trained for {} SMs", predictor.kernel_count(),
                   daemon->options_.learning.store_path, predictor.config().sm_count);
    }
  }
  if (ipc::Status ready = daemon->setup(); !ready) return ipc::Error{ready.error()};
  daemon->connection_cap_ = daemon->options_.max_connections_per_user > 0
                                ? daemon->options_.max_connections_per_user
                                : connection_cap_for(raise_descriptor_limit());
  if (daemon->connection_cap_ < kMaxConnectionsPerUser) {
    spdlog::info("one user's processes may hold {} connections (a quarter of the descriptors gpuqosd may open; "
                 "--max-connections-per-user, or raise LimitNOFILE)",
                 daemon->connection_cap_);
  }
  // A save cut short (a crash between writing the temporary file and renaming it) leaves
  // <store>.tmp.XXXXXX, which no later save reuses (their names are random): the store's saver
  // removes such files of its own user that are an hour old (a `gpuqos train --out` writing one now
  // is left alone), never a link.
  if (!store.empty() && !holder) {
    if (const std::size_t removed = predictor::remove_stale_temporaries(store); removed > 0) {
      spdlog::info("predictor: removed {} temporary file(s) {}.tmp.* left by saves cut short", removed, store);
    }
  }
  // A gpuqosd killed (SIGKILL, OOM) never removed its clients' segments: 0.5 MiB of /dev/shm each.
  const std::vector<std::string> stale = ipc::remove_stale_segments(static_cast<std::uint32_t>(::getpid()));
  if (!stale.empty()) {
    spdlog::info("removed {} segment(s) left by gpuqosd processes no longer running (first: {})", stale.size(),
                 stale.front());
  }
  return daemon;
}

// Two gpuqosd learning into one store would each save over the other's learning. The first that can
// write beside the store holds `<store>.lock`; a later one reads the store and saves beside it (who
// holds it is returned). A lock that cannot be taken for another reason (a directory this daemon
// cannot write, where its saves fail anyway and the learner says so) is not taken: a daemon that
// could not save must not keep one that can from its store.
std::optional<std::string> Daemon::lock_store() {
  const std::string& store = options_.learning.store_path;
  if (struct stat there{}; ::stat(store.c_str(), &there) == 0 && !S_ISREG(there.st_mode)) {
    return std::nullopt;  // /dev/null, a FIFO: nothing is saved there, and no lock is left beside it
  }
  auto lock = lock_beside(store, /*read_only_fallback=*/false);
  if (lock) {
    store_lock_ = std::move(lock.value());
  } else if (lock.error().empty()) {
    return held_by(store + ".lock");
  } else if (struct stat there{}; ::lstat((store + ".lock").c_str(), &there) == 0) {
    // Something is at the lock's path that cannot be locked (a link planted there, in a re-test,
    // had two root daemons save over each other's store): as if another held it, so this one
    // saves beside the store.
    spdlog::warn("predictor: cannot lock {}: {}", store, lock.error());
    return "whatever holds " + store + ".lock (it cannot be locked)";
  } else {
    spdlog::debug("predictor: {} is not locked: {}", store, lock.error());  // no directory to save in either
  }
  return std::nullopt;
}

ipc::Status Daemon::setup() {
  started_ns_ = ipc::monotonic_ns();
  config_status_.path = options_.config_path;
  config_status_.loaded_unix_s = static_cast<std::int64_t>(std::time(nullptr));
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);  // reload the config file
  if (::pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) return system_error("pthread_sigmask");
  ::signal(SIGPIPE, SIG_IGN);
  // A client can truncate its own segment: that must cost it its registration, not us a SIGBUS.
  if (ipc::Status guarded = ipc::install_bus_guard(); !guarded) return ipc::Error{guarded.error()};
  signals_ = FileDescriptor(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  timer_ = FileDescriptor(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  wake_ = FileDescriptor(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  epoll_ = FileDescriptor(::epoll_create1(EPOLL_CLOEXEC));
  if (!signals_.valid() || !timer_.valid() || !wake_.valid() || !epoll_.valid()) return system_error("event descriptors");
  const itimerspec period{{0, kTickNs}, {0, kTickNs}};
  if (::timerfd_settime(timer_.get(), 0, &period, nullptr) != 0) return system_error("timerfd_settime");
  auto listener = listen_unix(options_.socket_path);  // socket_lock_ held since create()
  if (!listener) return ipc::Error{listener.error()};
  listener_ = std::move(listener.value());
  note_socket_identity();
  watch(listener_.get(), tokens::kListener, EPOLLIN);
  watch(signals_.get(), tokens::kSignals, EPOLLIN);
  watch(timer_.get(), tokens::kTimer, EPOLLIN);
  watch(wake_.get(), tokens::kWake, EPOLLIN);
  start_metrics(ipc::monotonic_ns());
  return {};
}

void Daemon::watch(int fd, std::uint64_t token, std::uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = token;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    spdlog::error("epoll_ctl add: {}", std::strerror(errno));
  }
}

int Daemon::run() {
  spdlog::info("gpuqosd pid {} serving {} with policy {}, managing {}", ::getpid(), options_.socket_path,
               policy_->name(), managed_devices_text(options_.config.devices));
  // A root daemon serves every user, but only those who can reach its socket: a user test had it in
  // a 0700 directory, and other users' jobs ran unmanaged ("connect: Permission denied") while the
  // log read as a normal start. A directory only a group may pass may be meant: said, not warned.
  bool group_only = false;
  if (const std::string closed = closed_to_others(options_.socket_path, group_only);
      ::geteuid() == 0 && !closed.empty()) {
    spdlog::log(group_only ? spdlog::level::info : spdlog::level::warn,
                "{} lets {} through to {}: other users' jobs {}", closed,
                group_only ? "only its owner and group" : "only its owner", options_.socket_path,
                group_only ? "reach gpuqosd if they are in that group" : "cannot reach gpuqosd and run unmanaged");
  }
  // A user test: a daemon run as a service user started like any other, then refused every other
  // user's job one by one (it cannot hand them their segments).
  if (const uid_t uid = ::geteuid(); uid != 0) {
    spdlog::info("gpuqosd runs as uid {}, not root: it manages that user's jobs only (another user's is refused, "
                 "as their segments cannot be handed to them); run it as root to serve every user",
                 uid);
  }
  std::array<epoll_event, 64> events;
  std::int64_t woke_ns = ipc::monotonic_ns();
  while (!stopping_) {
    const bool items_waiting = arm_doorbells();
    // How long the loop's own work ran between two waits: a stall it makes itself (a huge status,
    // a slow profile save) is told apart from one the node makes (tell_stall).
    longest_work_ns_ = std::max(longest_work_ns_, ipc::monotonic_ns() - woke_ns);
    const int ready = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), items_waiting ? 0 : -1);
    const int wait_error = errno;
    woke_ns = ipc::monotonic_ns();
    disarm_doorbells();
    if (ready < 0) {
      if (wait_error == EINTR) continue;
      spdlog::critical("epoll_wait: {}", std::strerror(wait_error));
      drain_and_release();
      return 1;
    }
    // Back from a stall past the shims' heartbeat limit (each ran its held ops unmanaged): the
    // heartbeat first, so each client notes where its shim stopped waiting before a grant counts.
    if (woke_ns - heartbeat_ns_ > ipc::kHeartbeatLimitNs) {
      heartbeat_and_tick(woke_ns);
    }
    doorbell_rang_ = items_waiting;
    if (status_may_be_made(woke_ns)) pass_status_text_.reset();
    ++loop_pass_;
    for (int i = 0; i < ready; ++i) on_event(events[i].data.u64, events[i].events);
    if (std::exchange(doorbell_rang_, false)) drain_all(ipc::monotonic_ns());
  }
  drain_and_release();  // the clients first: the metrics endpoint's wait for its scrapes is no stall of theirs
  return 0;
}

bool Daemon::arm_doorbells() {
  // A completion matters at once only while ops are held: it may free what they wait for (a
  // transfer slot, backlog, a query's end). Otherwise the next tick reads it, and the clients'
  // completion threads do not wake the loop for each.
  const bool held = std::any_of(clients_.begin(), clients_.end(),
                                [](const auto& entry) { return entry.second->ungranted_count() > 0; });
  bool ready = false;
  for (auto& [id, client] : clients_) {
    if (client->doorbell_fd() >= 0) ready = client->arm_doorbell(held) || ready;
  }
  return ready;
}

void Daemon::disarm_doorbells() {
  for (auto& [id, client] : clients_) {
    if (client->doorbell_fd() >= 0) client->disarm_doorbell();
  }
}

void Daemon::on_event(std::uint64_t token, std::uint32_t events) {
  const std::int64_t now = ipc::monotonic_ns();
  if (token == tokens::kListener) return accept_connections();
  if (token == tokens::kSignals) {
    signalfd_siginfo info{};
    while (::read(signals_.get(), &info, sizeof info) == sizeof info) {
      if (info.ssi_signo == SIGHUP) {
        spdlog::info("SIGHUP from pid {}: reloading the config", info.ssi_pid);
        reload_config();
        continue;
      }
      spdlog::info("signal {} from pid {}: draining", strsignal(static_cast<int>(info.ssi_signo)), info.ssi_pid);
      stopping_ = true;
    }
    return;
  }
  if (token == tokens::kTimer) {
    std::uint64_t expirations = 0;
    [[maybe_unused]] ssize_t got = ::read(timer_.get(), &expirations, sizeof expirations);
    return heartbeat_and_tick(now);
  }
  if (token == tokens::kWake) {
    std::uint64_t count = 0;
    [[maybe_unused]] ssize_t got = ::read(wake_.get(), &count, sizeof count);
    return drain_all(now);
  }
  if (tokens::is_pending(token)) return on_pending_readable(token, events);
  if (tokens::is_doorbell(token)) {  // drained once for every doorbell of the batch (run())
    if (auto rung = clients_.find(static_cast<ClientId>(token - tokens::kDoorbellBase)); rung != clients_.end()) {
      rung->second->clear_doorbell();
    }
    doorbell_rang_ = true;
    return;
  }
  if (tokens::is_pidfd(token)) {
    // The process is gone even if a child it forked still holds the socket open.
    return drop_client(static_cast<ClientId>(token - tokens::kPidfdBase), "process exited", false);
  }
  auto client = clients_.find(static_cast<ClientId>(token));
  if (client == clients_.end()) return;
  if (events & EPOLLIN) {
    if (std::string why = read_client_socket(*client->second); !why.empty()) return drop_client(client->first, why, true);
  }
  if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) drop_client(client->first, "hung up", false);
}

void Daemon::note_socket_identity() {
  struct stat info{};
  if (::lstat(options_.socket_path.c_str(), &info) == 0) {
    socket_device_ = info.st_dev;
    socket_inode_ = info.st_ino;
  }
}

bool Daemon::hold_socket_lock() {
  struct stat held{}, named{};
  const std::string lock_path = options_.socket_path + ".lock";
  if (::fstat(socket_lock_.get(), &held) == 0 && ::lstat(lock_path.c_str(), &named) == 0 &&
      held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
    return true;
  }
  // Removed (a cleaner) or replaced: take the file there again, so that it keeps a second gpuqosd out.
  auto lock = lock_socket_path(options_.socket_path);
  if (!lock) {
    if (!told_lock_lost_) spdlog::error("{} is no longer this gpuqosd's lock: {}", lock_path, lock.error());
    told_lock_lost_ = true;
    return false;
  }
  socket_lock_ = std::move(lock.value());
  told_lock_lost_ = false;
  spdlog::warn("{} was removed or replaced: locked again", lock_path);
  return true;
}

void Daemon::check_socket_path(std::int64_t now_ns) {
  if (now_ns - socket_checked_ns_ < kSocketCheckNs || !listener_.valid()) return;
  socket_checked_ns_ = now_ns;
  const bool locked = hold_socket_lock();
  struct stat info{};
  if (::lstat(options_.socket_path.c_str(), &info) == 0) {
    if ((info.st_dev != socket_device_ || info.st_ino != socket_inode_) && !told_socket_replaced_) {
      told_socket_replaced_ = true;
      spdlog::error("{} is no longer this gpuqosd's socket (something else took its place): new jobs cannot reach "
                    "this daemon; remove it and gpuqosd serves the path again", options_.socket_path);
    }
    return;
  }
  if (errno != ENOENT) return;
  // Removed (a tmp cleaner, a stray rm): the jobs registered keep their connections, new ones would
  // find nothing. Served again under the lock (not when another gpuqosd took it meanwhile).
  if (!locked) return;
  auto listener = listen_unix(options_.socket_path);
  if (!listener) {
    if (!told_socket_replaced_) spdlog::error("{} was removed and cannot be served again: {}", options_.socket_path, listener.error());
    told_socket_replaced_ = true;
    return;
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  listener_ = std::move(listener.value());
  if (accept_paused_until_ns_ == 0) watch(listener_.get(), tokens::kListener, EPOLLIN);
  note_socket_identity();
  told_socket_replaced_ = false;
  spdlog::warn("{} was removed (a tmp cleaner?): serving it again", options_.socket_path);
}

void Daemon::heartbeat_and_tick(std::int64_t now_ns) {
  if (heartbeat_ns_ > 0 && now_ns - heartbeat_ns_ > ipc::kHeartbeatLimitNs && !clients_.empty()) tell_stall(now_ns);
  heartbeat_ns_ = now_ns;
  longest_work_ns_ = 0;
  if (accept_paused_until_ns_ != 0 && now_ns >= accept_paused_until_ns_ && listener_.valid()) {
    accept_paused_until_ns_ = 0;
    watch(listener_.get(), tokens::kListener, EPOLLIN);
  }
  for (auto& [id, client] : clients_) {
    client->publish_heartbeat(now_ns);
    if (client->grant_pending() && !client->publish_grant()) {
      spdlog::debug("{}: grants ring full, retrying", client->tag());
    }
  }
  drain_all(now_ns);
  apply(policy_->tick(now_ns));
  expire_pending(now_ns);
  tell_unsaid_peer_warnings(now_ns);
  check_socket_path(now_ns);
  if (auto error = learner_->tick(now_ns)) spdlog::warn("predictor: {}", *error);
  for (const std::uint32_t uid : learner_->take_crowded_users()) {
    const predictor::Predictor& predictor = learner_->predictor();
    spdlog::warn("predictor: the jobs of uid {} use {} kernel names they brought into the predictor's table ({} of "
                 "{} names used), a quarter of it or more: their new kernel names are not learned (predicted by the "
                 "default) until some of theirs have been unused for an hour",
                 uid, learner_->names_brought_in_by(uid), predictor.kernel_count(), predictor.config().max_kernels);
  }
  tell_long_holds(now_ns);
  qos_tick(now_ns);
}

DaemonStatus Daemon::status_snapshot() const {
  const std::int64_t now_ns = ipc::monotonic_ns();
  DaemonStatus status;
  status.pid = ::getpid();
  status.uptime_ns = now_ns - started_ns_;
  status.policy = std::string(policy_->name());
  status.socket = options_.socket_path;
  if (!options_.config_path.empty()) status.config = config_status_;
  if (const config::ListenAddress& wanted = options_.config.daemon.metrics_listen; wanted.enabled() || metrics_) {
    // Between a reload and the next tick the error may be the previous address's: said only while the
    // address asked for is the one that failed and is not served.
    const bool failing = wanted == metrics_failed_ && !(metrics_ && wanted == metrics_address_);
    status.metrics = MetricsStatus{config::to_string(wanted), metrics_ ? config::to_string(metrics_address_) : "",
                                   failing ? metrics_error_ : "", kMetricsRetryNs / 1'000'000'000};
  }
  status.backlog = policy_->backlog().loads();
  for (const DeviceTable::Device& device : devices_.devices()) {
    const BaymaxOptions& settings = numbered_policy_.baymax;
    status.devices.push_back(DeviceStatus{device.number, DeviceTable::uuid_text(device.uuid), device.first_ordinal,
                                          device.clients, settings.preemptive(device.number),
                                          settings.timeslice(device.number)});
  }
  const DurationLearner::Counts& learned = learner_->counts();
  status.predictor = PredictorStatus{learner_->store_path(), learner_->predictor().kernel_count(), learned.learned,
                                     learned.coarse, learned.shared, learned.unknown, learned.rejected, learned.saves};
  for (const auto& [id, client] : clients_) {
    const ClientIdentity& who = client->identity();
    status.clients.push_back(ClientStatus{
        id, who.peer.pid, who.peer.uid, who.peer.gid, who.job, who.priority, who.device, client->state(),
        client->segment_name(), client->posted_ops(), client->granted_ops(), client->completed_ops(),
        client->marks(), client->last_seq(), client->granted_through(), client->current_wait_ns(now_ns),
        client->kernel_name_count()});
    status.clients.back().claimed_priority = who.claimed_priority;
    for (std::uint32_t d = 0; d < 64; ++d) {
      if (ipc::device_in(client->devices_posted(), d)) status.clients.back().devices.push_back(d);
    }
    status.clients.back().held = held_op(*client);
    for (const auto& [ordinal, uuid] : client->unscheduled_devices()) {
      status.clients.back().unscheduled.push_back(
          {ordinal, uuid == DeviceTable::Uuid{} ? std::string() : DeviceTable::uuid_text(uuid)});
    }
  }
  qos_status(status, now_ns);
  return status;
}

}  // namespace gpuqos::scheduler

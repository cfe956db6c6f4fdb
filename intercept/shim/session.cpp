// Session: posting ops, waiting for grants, reporting completions, noticing that the daemon is gone.
#include "session.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/ipc/validate.h"

namespace gpuqos::intercept {

Session::FileId Session::file_of(int fd) noexcept {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return {};
  return {st.st_dev, st.st_ino};
}

namespace {

// The descriptors of the sessions alive, for a forked child to close (close_inherited). An entry is
// claimed by its descriptor, then says which file that is: a child that finds a descriptor with no
// file or another's (a fork in between) leaves it open, as before there were entries.
struct Inherited {
  std::atomic<int> fd{-1};
  std::atomic<dev_t> device{0};
  std::atomic<ino_t> inode{0};
};
std::array<Inherited, 16> inherited;  // two per session (socket and doorbell); more go unlisted

}  // namespace

void Session::list_inherited(int fd, FileId id) noexcept {
  if (fd < 0 || id.inode == 0) return;
  for (Inherited& entry : inherited) {
    int free = -1;
    if (!entry.fd.compare_exchange_strong(free, fd, std::memory_order_acq_rel)) continue;
    entry.device.store(id.device, std::memory_order_release);
    entry.inode.store(id.inode, std::memory_order_release);
    return;
  }
}

void Session::unlist_inherited(int fd, FileId id) noexcept {
  if (fd < 0) return;
  for (Inherited& entry : inherited) {
    // This file's entry: another of the same number may be a newer session's (the program closed
    // ours, and the number came back).
    if (entry.fd.load(std::memory_order_acquire) != fd || entry.inode.load(std::memory_order_acquire) != id.inode ||
        entry.device.load(std::memory_order_acquire) != id.device) {
      continue;
    }
    int listed = fd;
    if (entry.fd.compare_exchange_strong(listed, -1, std::memory_order_acq_rel)) return;
  }
}

void Session::close_inherited() noexcept {
  for (Inherited& entry : inherited) {
    const int fd = entry.fd.exchange(-1, std::memory_order_acquire);
    if (fd < 0) continue;
    const FileId id{entry.device.load(std::memory_order_acquire), entry.inode.load(std::memory_order_acquire)};
    if (id.inode != 0 && file_of(fd) == id) ::close(fd);  // still ours: not a number the program reused
  }
}

Session::Session(std::uint32_t id, int fd, std::uint32_t client_number, ipc::Segment segment, Terms terms,
                 int doorbell)
    : id_(id),
      fd_(fd),
      doorbell_(doorbell),
      fd_id_(file_of(fd)),
      doorbell_id_(file_of(doorbell)),
      client_number_(client_number),
      terms_(terms),
      segment_(std::move(segment)) {
  list_inherited(fd_, fd_id_);
  list_inherited(doorbell_, doorbell_id_);
}

bool Session::managed_by_uuid(std::uint32_t device, const std::array<std::uint8_t, 16>& uuid) const noexcept {
  if (device >= by_uuid_.size()) return false;
  const std::uint8_t known = by_uuid_[device].load(std::memory_order_relaxed);
  if (known != 0) return known == 1;
  if (std::all_of(uuid.begin(), uuid.end(), [](std::uint8_t byte) { return byte == 0; })) return false;  // asked again
  bool named = false;
  try {
    const std::string hex = ipc::uuid_hex(uuid);
    named = std::any_of(terms_.managed_uuids.begin(), terms_.managed_uuids.end(),
                                 [&](const std::string& prefix) { return hex.starts_with(prefix); });
  } catch (...) {  // out of memory: not managed this time, asked again
    return false;
  }
  by_uuid_[device].store(named ? 1 : 2, std::memory_order_relaxed);
  return named;
}

Session::~Session() {
  unlist_inherited(fd_, fd_id_);
  unlist_inherited(doorbell_, doorbell_id_);
  // A descriptor the program closed (and may use the number of) is not ours to close.
  if (ours(fd_, fd_id_, fd_disowned_)) ::close(fd_);
  if (ours(doorbell_, doorbell_id_, doorbell_disowned_)) ::close(doorbell_);
}

bool Session::ours(int fd, FileId id, const std::atomic<bool>& disowned) const noexcept {
  if (fd < 0 || disowned.load(std::memory_order_acquire)) return false;
  const FileId now = file_of(fd);
  return now.inode != 0 && now == id;
}

bool Session::still_ours() noexcept {
  const bool socket = ours(fd_, fd_id_, fd_disowned_);
  const bool doorbell = doorbell_ < 0 || ours(doorbell_, doorbell_id_, doorbell_disowned_);
  if (socket && doorbell) {
    checked_ns_.store(ipc::monotonic_ns(), std::memory_order_relaxed);
    return true;
  }
  // The program closed a descriptor of ours (a loop closing every descriptor, a double close) and
  // the number may be its own file now: that one is never read, written, shut down or closed again.
  // The other still is ours: lose() shuts the socket down, so gpuqosd drops this registration, and
  // the destructor closes it. A new registration gets new ones.
  if (!socket) fd_disowned_.store(true, std::memory_order_release);
  if (!doorbell) doorbell_disowned_.store(true, std::memory_order_release);
  if (!told_disowned_.exchange(true, std::memory_order_acq_rel)) {
    try {
      lose("this process closed the descriptor of its gpuqosd connection (" +
           std::to_string(socket ? doorbell_ : fd_) + ")");
    } catch (...) {  // no memory for the reason
      lose("this process closed a descriptor of its gpuqosd connection");
    }
  }
  return false;
}

bool Session::check_heartbeat() noexcept {
  const std::uint64_t beat = segment_.daemon_heartbeat_ns();  // read before now: never later, unless garbage
  const auto now = static_cast<std::uint64_t>(on_daemon_clock(ipc::monotonic_ns()));
  const auto error = 2 * static_cast<std::uint64_t>(terms_.clock_uncertainty_ns);  // now is that early at most
  if (beat > now + error) {
    lose(kFutureHeartbeat);
    return false;
  }
  if (now > beat && now - beat > static_cast<std::uint64_t>(kHeartbeatLimitNs)) {
    lose(kStaleHeartbeat);
    return false;
  }
  return true;
}

void Session::publish() noexcept {
  { std::lock_guard lock(state_mutex_); }  // a waiter between its check and its sleep sees the change
  state_cv_.notify_all();
}

void Session::lose(std::string_view why) noexcept {
  try {
    std::lock_guard lock(state_mutex_);
    if (lost_reason_.empty()) lost_reason_.assign(why);
  } catch (...) {  // no memory for the reason: still lost
  }
  if (alive_.exchange(false, std::memory_order_acq_rel) && ours(fd_, fd_id_, fd_disowned_)) ::shutdown(fd_, SHUT_RDWR);
  publish();
}

std::string Session::lost_reason() const {
  std::lock_guard lock(state_mutex_);
  return lost_reason_;
}

std::optional<std::string> Session::lost_reason_if_free() const noexcept {
  try {
    std::unique_lock lock(state_mutex_, std::try_to_lock);
    if (lock.owns_lock()) return lost_reason_;
  } catch (...) {  // out of memory for the copy
  }
  return std::nullopt;
}

bool Session::send_or_lose(std::span<const std::byte> record, const char* what) noexcept {
  // The socket is non-blocking: a full send buffer means the daemon stopped reading.
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (!still_ours()) return false;
    if (ipc::send_record(fd_, record)) return true;
    pollfd writable{fd_, POLLOUT, 0};
    const int ready = ::poll(&writable, 1, 5);
    if ((ready < 0 && errno != EINTR) || (ready > 0 && (writable.revents & (POLLERR | POLLHUP)))) break;
  }
  try {
    lose(std::string("cannot send ") + what + " to gpuqosd");
  } catch (...) {  // no memory for the reason: lost all the same
    lose("cannot send to gpuqosd");
  }
  return false;
}

bool Session::send_kernel_name(std::uint32_t id, const KernelRegistry& kernels, bool may_wait) noexcept {
  try {
    if (id < named_.size() && named_[id]) return true;
    auto record = ipc::encode_kernel_name(id, kernels.name_of(id));
    if (!record) return false;
    // A high-priority process never waits for gpuqosd: a full socket (gpuqosd not reading) leaves
    // the op unposted and the name to send with the kernel's next launch. Retrying here held
    // post_mutex_, and every thread of the process posting, for up to ~100 ms (a review).
    if (!may_wait) {
      if (!still_ours() || !ipc::send_record(fd_, record.value())) {
        full_ring_ops_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    } else if (!send_or_lose(record.value(), "a kernel name")) {
      return false;
    }
    if (named_.size() <= id) named_.resize(id + 1024);
    named_[id] = true;
    return true;
  } catch (...) {
    lose("out of memory sending a kernel name");
  }
  return false;
}

void Session::tell_unscheduled(std::uint32_t device, const std::array<std::uint8_t, 16>& uuid) noexcept {
  std::lock_guard lock(post_mutex_);
  if (!alive() || !unscheduled_to_tell(device)) return;
  try {
    if (send_or_lose(ipc::encode_unscheduled_device(device, uuid), "an unscheduled device")) {
      told_unscheduled_.fetch_or(std::uint64_t{1} << device, std::memory_order_relaxed);
    }
  } catch (...) {  // no memory for the record: said on a later op
  }
}

bool Session::push_op(const ipc::OpDescriptor& local, bool may_wait) noexcept {
  // On the launch path: a copy only when there is a clock to convert to (another time namespace).
  ipc::OpDescriptor converted;
  const ipc::OpDescriptor* op = &local;
  if (terms_.clock_offset_ns != 0) {
    converted = local;
    converted.posted_ns = on_daemon_clock(local.posted_ns);
    converted.arrived_ns = on_daemon_clock(local.arrived_ns);
    op = &converted;
  }
  while (!push(segment_.ops(), *op)) {
    if (!may_wait) full_ring_ops_.fetch_add(1, std::memory_order_relaxed);
    if (!may_wait || !alive()) return false;
    if (!check_heartbeat()) return false;
    segment_.ops().wait_for_space(kWaitSliceNs);
  }
  return true;
}

bool Session::post(ipc::OpDescriptor& op, const KernelRegistry& kernels, bool may_wait, std::uint32_t keep_free) noexcept {
  std::lock_guard lock(post_mutex_);
  if (!alive()) return false;
  if (keep_free > 0 && ipc::kOpsRingCapacity - segment_.ops().size_approx() <= keep_free) return false;
  op.seq = next_seq_;
  if (!ipc::validate_op(op, next_seq_ - 1, ipc::kMaxDevices)) return false;
  // (A graph's kernel_id is its number in the process, not a named kernel.)
  if (op.kind == ipc::OpKind::kernel && op.kernel_id != 0 && !send_kernel_name(op.kernel_id, kernels, may_wait)) {
    return false;
  }
  if (!push_op(op, may_wait)) return false;
  ++next_seq_;
  return true;
}

void Session::drain_grants() noexcept {
  ipc::GrantDescriptor grant{};
  std::uint64_t highest = granted_.load(std::memory_order_relaxed);
  bool detach = false, changed = false;
  while (segment_.grants().try_pop(grant)) {
    detach = detach || (grant.flags & ipc::kGrantDetach) != 0;
    if (grant.granted_through_seq > highest) highest = grant.granted_through_seq, changed = true;
  }
  // Garbage in the ring's indices: no grant can be read again, and the daemon cannot tell (to it
  // the ring looks full). Only this thread pops, so the check cannot race a pop.
  if (segment_.grants().corrupted()) lose("the grants ring is corrupted (garbage in its indices)");
  if (changed) {
    granted_.store(highest, std::memory_order_release);
    publish();
  }
  if (detach) lose("gpuqosd asked its clients to detach");
}

bool Session::wait_for_grant(std::uint64_t seq) noexcept {
  const auto slice = std::chrono::nanoseconds(kWaitSliceNs);
  while (granted_.load(std::memory_order_acquire) < seq) {
    if (!alive()) return false;
    std::unique_lock pop(pop_mutex_, std::defer_lock);
    if (!monitor_wants_pop_.load(std::memory_order_acquire)) (void)pop.try_lock();
    if (pop.owns_lock()) {  // this thread reads the grants ring for everyone
      drain_grants();
      if (granted_.load(std::memory_order_acquire) >= seq) break;
      check_heartbeat();
      if (alive()) segment_.grants().wait_for_items(kWaitSliceNs);
      drain_grants();
      continue;
    }
    std::unique_lock lock(state_mutex_);
    state_cv_.wait_for(lock, slice, [&] { return granted_.load(std::memory_order_acquire) >= seq || !alive(); });
  }
  publish();  // whoever waits next may have to take over reading the grants ring
  return alive() || granted_.load(std::memory_order_acquire) >= seq;
}

void Session::ring_doorbell() noexcept {
  // The daemon's loop sleeps in epoll, not on the rings' futexes: one datagram tells it. Never
  // blocks (EAGAIN: the loop has rings to read already). Not into a descriptor number the program
  // closed and reused: checked if not within kDescriptorCheckNs (an fstat can cost as much as the
  // send, and a grant round trip rings once).
  if (doorbell_disowned_.load(std::memory_order_acquire)) return;
  if (const std::int64_t now = ipc::monotonic_ns(); now - checked_ns_.load(std::memory_order_relaxed) > kDescriptorCheckNs) {
    if (!still_ours()) return;
  }
  const char ring = 1;
  [[maybe_unused]] const ssize_t sent = ::send(doorbell_, &ring, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

bool Session::push_completion(const ipc::CompletionDescriptor& local) noexcept {
  ipc::CompletionDescriptor completion = local;
  completion.start_ns = on_daemon_clock(completion.start_ns);
  completion.end_ns = on_daemon_clock(completion.end_ns);
  // The loop asks for completions (arms the ring) while it holds ops a completion may release.
  return alive() && push(segment_.completions(), completion);
}

bool Session::watch(int timeout_ms) noexcept {
  if (!alive() || !still_ours()) return false;
  pollfd socket{fd_, POLLIN | POLLRDHUP, 0};
  const int ready = ::poll(&socket, 1, timeout_ms);
  if (ready > 0 && !still_ours()) return false;  // closed by the program while polled (POLLNVAL)
  if (ready > 0 && (socket.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
    // A gpuqosd shutting down says so with a detach grant before it hangs up: read it first, so the
    // reason is that, not the hang-up (a high-priority client, which never waits, reads it only here).
    // Blocking: a waiter holds the lock for at most one wait slice (5 ms), and may be reading it.
    monitor_wants_pop_.store(true, std::memory_order_release);
    {
      std::lock_guard pop(pop_mutex_);
      monitor_wants_pop_.store(false, std::memory_order_release);
      if (alive()) drain_grants();
    }
    lose("gpuqosd closed the connection");
  } else if (ready > 0 && (socket.revents & POLLIN)) {
    std::array<char, 256> ignored;  // the daemon sends nothing after its reply; read what it sends
    if (::recv(fd_, ignored.data(), ignored.size(), MSG_DONTWAIT) == 0) lose("gpuqosd closed the connection");
  }
  if (alive()) check_heartbeat();
  if (std::unique_lock pop(pop_mutex_, std::try_to_lock); pop.owns_lock() && alive()) drain_grants();
  return alive();
}

}  // namespace gpuqos::intercept

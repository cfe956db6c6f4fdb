// Session::open: registration with gpuqosd. Non-blocking connect to its SOCK_SEQPACKET socket, Hello,
// HelloReply (with timeouts: the class the daemon runs us as and the copy chunk size), then the
// segment it names.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/ipc/registration.h"
#include "session.h"

// A job name the settings take must reach gpuqosd whole: the config matches jobs by it.
static_assert(gpuqos::intercept::kMaxJobNameBytes == gpuqos::ipc::kJobNameBytes - 1);

namespace gpuqos::intercept {
namespace {

constexpr int kConnectTimeoutMs = 250;
constexpr int kReplyTimeoutMs = 1000;

// Closes the descriptor unless released (the registration's socket, the doorbell): every failure
// path below just returns. Listed for a child forked meanwhile to close (Session::close_inherited):
// the Hello exchange can take a second and a half, and a child holding the socket kept the
// registration it makes open after the parent was gone (a review); the Session lists its own.
struct SocketGuard {
  int fd = -1;
  Session::FileId id{};
  ~SocketGuard() {
    if (fd >= 0) {
      Session::unlist_inherited(fd, id);
      ::close(fd);
    }
  }
  void take(int made) {
    fd = made;
    id = Session::file_of(fd);
    Session::list_inherited(fd, id);
  }
  int release() {
    Session::unlist_inherited(fd, id);
    return std::exchange(fd, -1);
  }
};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// The descriptor moved to a number in the upper half of the process's limit (kept if there is
// none free): a program gets the lowest free number when it opens a file, so after closing ours
// by mistake (a loop closing every descriptor) it rarely takes these back. Session still checks.
int move_high(int fd) {
  rlimit limit{};
  if (fd < 0 || ::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return fd;
  const auto floor = static_cast<int>(std::min<rlim_t>(limit.rlim_cur / 2, 4096));
  if (fd >= floor || floor < 64) return fd;
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (high < 0) return fd;
  ::close(fd);
  return high;
}

// At most timeout_ms in all: a signal (a program's interval timer) restarts the wait for the time
// left only, or it could restart for ever while gpuqosd is stopped (a user's job hung in its first
// CUDA call).
bool wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int ready;
  int left_ms = timeout_ms;
  while ((ready = ::poll(&p, 1, left_ms)) < 0 && errno == EINTR) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    left_ms = static_cast<int>(left.count());
  }
  return ready > 0 && (p.revents & events);
}

bool connect_socket(const std::string& path, SocketGuard& socket, std::string& why) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof address.sun_path) return why = "socket path too long or empty", false;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  socket.take(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (socket.fd < 0) return why = errno_text("socket"), false;
  if (::connect(socket.fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return true;
  // On a Unix socket EAGAIN is no connect in progress: the daemon's queue of connections not yet
  // accepted is full (a flood of them), and nothing is connected. A user test read the credentials
  // of that unconnected socket and called the daemon untrusted. Retried a second later like no daemon.
  if (errno == EAGAIN) return why = "gpuqosd's queue of new connections at " + path + " is full", false;
  if (errno != EINPROGRESS) return why = ipc::connect_failure(path, errno), false;
  int error = 0;
  socklen_t length = sizeof error;
  if (!wait_for(socket.fd, POLLOUT, kConnectTimeoutMs)) return why = "connect timed out", false;
  if (::getsockopt(socket.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
    return why = ipc::connect_failure(path, error), false;
  }
  return true;
}

// The uid the kernel shows for a user it cannot map into this user namespace (a daemon of the
// host's root seen from a rootless container): /proc/sys/kernel/overflowuid, 65534 by default.
// None in the initial user namespace (its uid_map is the identity "0 0 4294967295"), where that
// uid is an account (nobody) like any other.
std::optional<std::uint32_t> overflow_uid() {
  if (std::FILE* map = std::fopen("/proc/self/uid_map", "re")) {
    unsigned inside = 1, outside = 1, count = 0;
    const bool identity = std::fscanf(map, "%u %u %u", &inside, &outside, &count) == 3 && inside == 0 &&
                          outside == 0 && count == 4294967295u;
    std::fclose(map);
    if (identity) return std::nullopt;
  }
  std::uint32_t uid = 65534;
  if (std::FILE* file = std::fopen("/proc/sys/kernel/overflowuid", "re")) {
    unsigned value = 0;
    if (std::fscanf(file, "%u", &value) == 1) uid = value;
    std::fclose(file);
  }
  return uid;
}

// Why the daemon at the other end is not trusted with this job's work, or "" when it is: it runs
// as root or as this job's own user (one serving other users must be root anyway: it hands each
// client's segment to its user). A user test: another user's gpuqosd, started first on a socket
// path in a shared directory, registered every job that came and could have held their work.
std::string untrusted_daemon(int fd, const std::string& path) {
  auto peer = ipc::peer_credentials(fd);
  if (!peer) return "cannot tell who runs gpuqosd at " + path + ": " + peer.error();
  if (peer->pid == 0) return "";  // not connected after all: the Hello fails, and is asked again as usual
  const std::uint32_t own = ::geteuid();
  if (peer->uid == 0 || peer->uid == own || peer->uid == overflow_uid()) return "";  // nullopt never equals
  return "the gpuqosd at " + path + " runs as uid " + std::to_string(peer->uid) + " (pid " + std::to_string(peer->pid) +
         "), neither root nor this job's user (uid " + std::to_string(own) + "): not trusted with its work";
}

// The Hello's round trip on this process's clock: the daemon made its reply in between.
struct RoundTrip {
  std::int64_t sent_ns = 0, received_ns = 0;
};

// The descriptors passed with the HelloReply, closed unless taken: from a daemon of 1.10 or later
// the segment and then the doorbell; from one of 1.6 to 1.9 the doorbell.
struct PassedDescriptors {
  std::vector<int> fds;
  ~PassedDescriptors() {
    for (const int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  // The i-th, now the caller's (-1: none came).
  int take(std::size_t i) { return i < fds.size() ? std::exchange(fds[i], -1) : -1; }
};

ipc::Result<ipc::HelloReply> exchange_hello(int fd, const Settings& settings, RoundTrip& trip, PassedDescriptors& passed) {
  const auto priority = settings.priority == Priority::high ? ipc::Priority::high : ipc::Priority::low;
  auto hello = ipc::make_hello(priority, 0, ipc::sanitize_job_name(settings.job));
  if (!hello) return ipc::Error{hello.error()};
  trip.sent_ns = ipc::monotonic_ns();
  if (ipc::Status sent = ipc::send_record(fd, ipc::encode(hello.value())); !sent) return ipc::Error{sent.error()};
  if (!wait_for(fd, POLLIN, kReplyTimeoutMs)) return ipc::Error{"no answer to Hello within 1 s"};
  std::vector<std::byte> record;
  if (ipc::Status received = ipc::receive_record(fd, record, passed.fds); !received) return ipc::Error{received.error()};
  trip.received_ns = ipc::monotonic_ns();
  return ipc::decode_hello_reply(record);
}

// An offset beyond this (decades) is no clock's: garbage, and nothing is converted by it.
constexpr std::int64_t kMaxClockOffsetNs = 1'000'000'000'000'000'000;

// How far the daemon's CLOCK_MONOTONIC is ahead of ours (negative: behind), and how far off that may
// be. The same clock, as it is unless the two run in different time namespaces, puts the reply
// within the round trip: 0, exactly, so nothing is converted. Otherwise the reply is taken as made
// halfway through, which is off by at most half the round trip (microseconds, unless a thread was
// preempted): the heartbeat check allows that much. Nothing from a daemon older than 1.4.
void clock_offset(const ipc::HelloReply& reply, const RoundTrip& trip, Session::Terms& terms) {
  if (reply.version_minor < 4 || reply.daemon_clock_ns <= 0) return;
  if (reply.daemon_clock_ns >= trip.sent_ns && reply.daemon_clock_ns <= trip.received_ns) return;
  const std::int64_t half_trip = (trip.received_ns - trip.sent_ns) / 2;
  const std::int64_t offset = reply.daemon_clock_ns - (trip.sent_ns + half_trip);
  if (offset > kMaxClockOffsetNs || offset < -kMaxClockOffsetNs) return;
  terms.clock_offset_ns = offset;
  // The rest of the trip (half of it, rounded up): offset - uncertainty is then exactly the least
  // offset the trip allows, reply - received (never a nanosecond late).
  terms.clock_uncertainty_ns = (trip.received_ns - trip.sent_ns) - half_trip;
}

// The class and chunk size the reply gives. A 1.0 daemon says neither: the claim stands and
// nothing is split. A daemon may only lower a claim, never raise it.
Session::Terms terms_of(const ipc::HelloReply& reply, Priority claimed, const RoundTrip& trip) {
  const bool claimed_low = claimed == Priority::low;
  Session::Terms terms;
  terms.low_priority = claimed_low;
  if (reply.version_minor < 1) return terms;
  terms.low_priority = claimed_low || reply.effective_priority == ipc::Priority::low;
  terms.copy_chunk_bytes = reply.copy_chunk_bytes == 0 ? 0 : std::max(reply.copy_chunk_bytes, ipc::kMinCopyChunkBytes);
  terms.takes_arrivals = reply.version_minor >= 2;
  terms.takes_unscheduled = reply.version_minor >= 9;
  if (reply.version_minor >= 3) terms.managed_devices = reply.managed_devices;
  terms.managed_uuids = ipc::managed_uuids(reply);  // none before 1.8
  clock_offset(reply, trip, terms);
  return terms;
}

}  // namespace

Session::Opened Session::open(const Settings& settings, std::uint32_t id) {
  Opened opened;
  SocketGuard socket;
  if (!connect_socket(settings.socket_path, socket, opened.why)) return opened;
  if (std::string why = untrusted_daemon(socket.fd, settings.socket_path); !why.empty()) {
    opened.refused = true;
    opened.why = std::move(why);
    return opened;
  }
  RoundTrip trip;
  PassedDescriptors passed;
  auto reply = exchange_hello(socket.fd, settings, trip, passed);
  if (!reply) {
    opened.why = reply.error();
    return opened;
  }
  if (reply->status != ipc::HelloStatus::ok) {
    opened.refused = true;
    opened.why = std::string(reply->status == ipc::HelloStatus::version_mismatch ? "version mismatch" : "refused") +
                 ": " + std::string(reply->message, ::strnlen(reply->message, sizeof reply->message));
    return opened;
  }
  // From 1.10 the segment comes as a descriptor, before the doorbell; before, only the doorbell.
  const bool segment_passed = reply->version_minor >= 10;
  SocketGuard passed_segment{segment_passed ? passed.take(0) : -1};  // closed once mapped
  SocketGuard doorbell{passed.take(segment_passed ? 1 : 0)};  // closed unless the session takes it
  const std::string name(reply->segment_name, ::strnlen(reply->segment_name, sizeof reply->segment_name));
  auto segment = segment_passed ? ipc::Segment::open_passed(passed_segment.fd, name) : ipc::Segment::open(name);
  if (std::error_code error; !segment && !segment_passed && !std::filesystem::exists("/dev/shm" + name, error)) {
    // A named segment not found where gpuqosd made it: this process has a /dev/shm of its own (a
    // container's), and will not find the next one either. Asked again less and less often, as a
    // refusal (it re-registered every second, unmanaged for good).
    opened.refused = true;
    opened.why = segment.error() + " (does this process have a /dev/shm of its own? gpuqosd 1.10 or later passes "
                                   "the segment instead of naming it)";
    return opened;
  }
  if (!segment) {
    opened.why = segment.error();
    return opened;
  }
  const Session::Terms terms = terms_of(reply.value(), settings.priority, trip);
  opened.lowered = settings.priority == Priority::high && terms.low_priority;
  // A descriptor with an older reply is not a doorbell of this protocol, nor is one that is not a
  // socket: closed, not rung (gpuqosd then has a thread on the ops ring, or reads it at its tick).
  struct stat kind {};
  const bool is_socket = doorbell.fd >= 0 && ::fstat(doorbell.fd, &kind) == 0 && S_ISSOCK(kind.st_mode);
  const int ring_with = reply->version_minor >= 6 && is_socket ? doorbell.release() : -1;
  opened.session = std::make_shared<Session>(id, move_high(socket.release()), reply->client_number,
                                             std::move(segment.value()), terms, move_high(ring_with));
  return opened;
}

}  // namespace gpuqos::intercept

// A stand-in for gpuqosd inside a test process, speaking the real ipc protocol: accepts clients on a
// SOCK_SEQPACKET socket, answers Hello with a Segment::create'd segment, drains ops, completions
// and kernel names, publishes heartbeats every 2 ms, and grants on command (or everything at once).
// Its HelloReply echoes the claimed priority unless told to lower every claim, and carries the copy
// chunk size it is given (0 by default: copies are not split) and the protocol's minor version,
// unless told to speak an older one.
// stop() is what a crash looks like to the shim: heartbeats stop and every socket closes.
// heartbeat_from_future() and corrupt_grants() are a daemon (or a stray write) gone wrong while the
// socket stays open.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/ipc/segment.h"
#include "gpuqos/ipc/validate.h"

namespace gpuqos::testing {

struct FakeClient {
  ipc::PeerCredentials peer;
  ipc::Hello hello{};
  std::int64_t registered_ns = 0;
  std::vector<ipc::OpDescriptor> ops;
  std::vector<std::uint32_t> unscheduled;  // the ordinals of its UnscheduledDevice records (1.9)
  std::vector<std::int64_t> popped_ns;  // when each op was popped
  std::vector<ipc::CompletionDescriptor> completions;
  std::vector<std::int64_t> completion_popped_ns;  // when each completion was popped
  std::map<std::uint32_t, std::string> names;
  std::vector<std::string> problems;  // invalid ops, names sent after their first op, ...
  bool hung_up = false;
  std::int64_t hung_up_ns = 0;  // when the daemon saw it
};

class FakeDaemon {
 public:
  explicit FakeDaemon(std::string socket_path) : path_(std::move(socket_path)) {}
  ~FakeDaemon() { stop(); }
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  void start() {
    listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof address.sun_path - 1);
    ::unlink(path_.c_str());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(listen_fd_, 16) != 0) {
      throw std::runtime_error("fake daemon cannot listen on " + path_);
    }
    running_ = true;
    thread_ = std::thread([this] { run(); });
  }

  // Crash: no more heartbeats, every socket closed, segments unlinked.
  void stop() {
    if (!running_.exchange(false)) return;
    {
      // As a crash does, at once: the clients see the hang-up now, not once the loop (which may be
      // starved of CPU under a parallel ctest) ends its turn and is joined; their heartbeat limit
      // would release them first (seen at 103 ms, 14 runs in 25 beside two busy loops).
      std::lock_guard lock(mutex_);
      for (const auto& connection : connections_) ::shutdown(connection.fd, SHUT_RDWR);
    }
    thread_.join();
    for (auto& connection : connections_) {
      ::close(connection.fd);
      if (connection.doorbell >= 0) ::close(connection.doorbell);
    }
    for (auto& connection : connections_) ipc::Segment::remove(connection.segment.name());
    connections_.clear();
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }

  void set_auto_grant(bool on) { auto_grant_ = on; }
  void grant_through(std::uint64_t seq) { grant_target_ = seq; }
  // Grants this many seqs beyond what it granted otherwise, as gpuqosd's credit: they go unasked.
  void give_credit(std::uint64_t ops) { credit_ = ops; }
  void freeze_heartbeat() { heartbeat_frozen_ = true; }
  // A daemon that falls behind its clients (heartbeats go on): no op or completion is read while paused.
  void pause_ops(bool paused) { ops_paused_ = paused; }
  // A daemon that stops reading its clients' sockets (kernel names; heartbeats and rings go on), so
  // their send buffers fill.
  void pause_socket(bool paused) { socket_paused_ = paused; }
  // A stalled loop (CPU starvation, SIGSTOP): from now on, for `how_long`, no heartbeat, no grant,
  // no Hello answered (the listen backlog still takes connections).
  void stall_for(std::chrono::milliseconds how_long) {
    stall_until_ns_ = ipc::monotonic_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(how_long).count();
  }
  // Heartbeats stamped an hour ahead of the clock its replies said: garbage, or a clock that jumped.
  void heartbeat_from_future() { heartbeat_offset_ns_ = 3'600'000'000'000; }
  // A daemon in another time namespace: its CLOCK_MONOTONIC this far ahead of the test's (negative:
  // behind), in its replies to registrations from now on and in its heartbeats from now on.
  void set_clock_offset(std::int64_t ns) { heartbeat_offset_ns_ = clock_offset_ns_ = ns; }
  // Sends each reply this long after making it (and stamping its clock): a slow return leg. Or, with
  // `stamp_late`, makes it this long after the Hello came and sends it at once: a slow outward leg.
  void delay_replies(std::chrono::milliseconds delay, bool stamp_late = false) {
    reply_delay_ms_ = delay.count();
    stamp_late_ = stamp_late;
  }
  // The grants ring's producer index made impossible (more items than slots), grants stop.
  void corrupt_grants() { corrupt_grants_ = true; }
  // For registrations from now on: answer every claim with low priority / this chunk size.
  void lower_every_claim() { lower_claims_ = true; }
  // Answers the next `count` Hellos with a refusal (as gpuqosd does when it cannot make a segment).
  void refuse_next(int count) { refusals_left_ = count; }
  void set_copy_chunk_bytes(std::uint64_t bytes) { copy_chunk_bytes_ = bytes; }
  void speak_minor(std::uint16_t minor) { minor_ = minor; }
  // Hands each client of protocol 1.6 or later a doorbell with its reply, as gpuqosd does (never
  // armed, so never rung: the shim just holds it).
  void give_doorbells() { give_doorbells_ = true; }
  void set_managed_devices(std::uint64_t mask) { managed_devices_ = mask; }
  // [devices] uuids (1.8): UUID prefixes as ipc::set_managed_uuids takes them.
  void set_managed_uuids(std::vector<std::string> prefixes) {
    std::lock_guard lock(mutex_);
    managed_uuids_ = std::move(prefixes);
  }

  int refused() const {
    std::lock_guard lock(mutex_);
    return refused_;
  }

  std::vector<FakeClient> clients() const {
    std::lock_guard lock(mutex_);
    return clients_;
  }

  // Polls `condition` on a copy of the clients until it holds or `timeout` passes.
  bool wait_until(const std::function<bool(const std::vector<FakeClient>&)>& condition,
                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (condition(clients())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return condition(clients());
  }

 private:
  struct Connection {
    int fd;
    int doorbell;  // the daemon's end of the client's doorbell, or -1
    ipc::Segment segment;
    std::size_t client;  // index in clients_
    std::uint64_t last_seq = 0, granted = 0;
  };

  void run() {
    while (running_) {
      if (const std::int64_t stalled = stall_until_ns_ - ipc::monotonic_ns(); stalled > 0) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(stalled));
      }
      accept_one();
      for (auto& connection : connections_) serve(connection);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void accept_one() {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 1) <= 0) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    std::vector<std::byte> record;
    pollfd hello{fd, POLLIN, 0};
    if (::poll(&hello, 1, 2000) <= 0 || !ipc::receive_record(fd, record)) return void(::close(fd));
    auto decoded = ipc::decode_hello(record);
    auto peer = ipc::peer_credentials(fd);
    static std::atomic<int> counter{0};
    const std::string name = "/gpuqos-fake-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    // As gpuqosd: a sealed memfd passed with the reply when both sides speak 1.10, else a named one.
    const bool pass_segment = decoded && minor_ >= 10 && decoded->hello.version_minor >= 10;
    auto segment = !peer ? ipc::Result<ipc::Segment>(ipc::Error{"no peer"})
                   : pass_segment
                       ? ipc::Segment::create_sealed(name, peer->uid, static_cast<std::uint32_t>(peer->pid))
                       : ipc::Segment::create(name, peer->uid, static_cast<std::uint32_t>(peer->pid));
    if (!decoded || !peer || !segment) return void(::close(fd));
    if (refusals_left_ > 0) {
      --refusals_left_;
      ipc::Segment::remove(name);
      (void)ipc::send_record(fd, ipc::encode(ipc::make_hello_reply(ipc::HelloStatus::refused, 0, "", "no room today",
                                                                   ipc::Priority::low, 0)));
      std::lock_guard lock(mutex_);
      ++refused_;
      return void(::close(fd));
    }
    const auto number = static_cast<std::uint32_t>(counter.load());
    const ipc::Priority effective = lower_claims_ ? ipc::Priority::low : decoded->hello.priority;
    const auto delay = std::chrono::milliseconds(reply_delay_ms_.load());
    if (stamp_late_) std::this_thread::sleep_for(delay);
    ipc::HelloReply reply = ipc::make_hello_reply(ipc::HelloStatus::ok, number, name, "", effective, copy_chunk_bytes_,
                                                  managed_devices_, clock_offset_ns_);
    {
      std::lock_guard lock(mutex_);
      if (!ipc::set_managed_uuids(reply, managed_uuids_)) return void(::close(fd));
    }
    reply.version_minor = minor_;
    std::vector<std::byte> bytes = ipc::encode(reply);
    if (!stamp_late_) std::this_thread::sleep_for(delay);
    if (minor_ <= 7) {  // as it was
      bytes.resize(minor_ == 0   ? ipc::kHelloReplyBytesV1_0
                   : minor_ <= 2 ? ipc::kHelloReplyBytesV1_2
                   : minor_ == 3 ? ipc::kHelloReplyBytesV1_3
                                 : ipc::kHelloReplyBytesV1_7);
    }
    int doorbell[2] = {-1, -1};
    std::vector<int> passed;
    if (const int segment_fd = segment->take_descriptor(); segment_fd >= 0) passed.push_back(segment_fd);
    if (give_doorbells_ && minor_ >= 6 &&
        ::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, doorbell) == 0) {
      passed.push_back(doorbell[1]);
    }
    (void)(passed.empty() ? ipc::send_record(fd, bytes) : ipc::send_record(fd, bytes, passed));
    for (const int sent : passed) ::close(sent);
    std::lock_guard lock(mutex_);
    clients_.push_back({.peer = peer.value(), .hello = decoded->hello, .registered_ns = ipc::monotonic_ns()});
    connections_.push_back({fd, doorbell[0], std::move(segment.value()), clients_.size() - 1});
  }

  void serve(Connection& connection) {
    if (!heartbeat_frozen_) {
      connection.segment.publish_heartbeat(static_cast<std::uint64_t>(ipc::monotonic_ns() + heartbeat_offset_ns_));
    }
    if (corrupt_grants_) {  // the producer index sits on the ring's second cache line
      auto* ring = reinterpret_cast<std::byte*>(&connection.segment.grants());
      reinterpret_cast<std::atomic<std::uint32_t>*>(ring + ipc::kCacheLineBytes)->store(0xfffffff0u);
    }
    std::lock_guard lock(mutex_);
    FakeClient& client = clients_[connection.client];
    drain_socket(connection, client);
    ipc::OpDescriptor op;
    while (!ops_paused_ && connection.segment.ops().try_pop(op)) {
      if (auto valid = ipc::validate_op(op, connection.last_seq, 1); !valid) client.problems.push_back(valid.error());
      if (op.kernel_id && !client.names.contains(op.kernel_id)) client.problems.push_back("op before its kernel name");
      connection.last_seq = op.seq;
      client.ops.push_back(op);
      client.popped_ns.push_back(ipc::monotonic_ns());
    }
    ipc::CompletionDescriptor completion;
    while (!ops_paused_ && connection.segment.completions().try_pop(completion)) {
      if (auto valid = ipc::validate_completion(completion, connection.last_seq); !valid) {
        client.problems.push_back(valid.error());
      }
      client.completions.push_back(completion);
      client.completion_popped_ns.push_back(ipc::monotonic_ns());
    }
    const std::uint64_t target =
        (auto_grant_ ? connection.last_seq : std::min<std::uint64_t>(grant_target_, connection.last_seq)) + credit_;
    if (target > connection.granted && connection.segment.grants().try_push({.granted_through_seq = target})) {
      connection.granted = target;
    }
  }

  void drain_socket(Connection& connection, FakeClient& client) {
    if (socket_paused_) return;
    pollfd p{connection.fd, POLLIN, 0};
    while (!client.hung_up && ::poll(&p, 1, 0) > 0) {
      std::vector<std::byte> record;
      if (!ipc::receive_record(connection.fd, record)) {
        client.hung_up = true;
        client.hung_up_ns = ipc::monotonic_ns();
        return;
      }
      if (auto name = ipc::decode_kernel_name(record)) client.names[name->kernel_id] = name->name;
      if (auto device = ipc::decode_unscheduled_device(record)) client.unscheduled.push_back(device->ordinal);
    }
  }

  const std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> running_{false}, auto_grant_{true}, heartbeat_frozen_{false}, corrupt_grants_{false};
  std::atomic<bool> ops_paused_{false};
  std::atomic<bool> socket_paused_{false};
  std::atomic<std::int64_t> heartbeat_offset_ns_{0}, clock_offset_ns_{0}, reply_delay_ms_{0}, stall_until_ns_{0};
  std::atomic<bool> stamp_late_{false};
  std::atomic<std::uint64_t> grant_target_{0}, credit_{0};
  std::atomic<bool> lower_claims_{false};
  std::atomic<int> refusals_left_{0};
  int refused_ = 0;  // under mutex_
  std::atomic<std::uint64_t> copy_chunk_bytes_{0};
  std::atomic<std::uint64_t> managed_devices_{ipc::kAllDevices};
  std::vector<std::string> managed_uuids_;  // under mutex_
  std::atomic<std::uint16_t> minor_{ipc::kProtocolVersionMinor};
  std::atomic<bool> give_doorbells_{false};
  std::thread thread_;
  std::vector<Connection> connections_;  // the thread's (and stop()'s once it is joined)
  mutable std::mutex mutex_;
  std::vector<FakeClient> clients_;
};

}  // namespace gpuqos::testing

// Integration-test helpers: a private gpuqosd (temp dir, unique socket, killed and cleaned up by
// its destructor) and a fake client written with ipc alone (no CUDA, no shim).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/ipc/segment.h"
#include "gpuqos/scheduler/status.h"
#include "gpuqos/scheduler/unix_socket.h"
#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::testing {

using namespace std::chrono_literals;

inline std::string bin(const std::string& name) { return std::string(GPUQOS_BUILD_DIR) + "/bin/" + name; }

// Polls condition every millisecond until it holds or timeout passes.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = 2s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

inline bool segment_exists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }
// A segment gpuqosd still has: named in /dev/shm, or a sealed memfd it maps (protocol 1.10).
inline bool segment_held(pid_t daemon, const std::string& name) {
  if (segment_exists(name)) return true;
  std::ifstream maps("/proc/" + std::to_string(daemon) + "/maps");
  const std::string memfd = "/memfd:" + name.substr(1) + " ";
  for (std::string line; std::getline(maps, line);) {
    if (line.find(memfd) != std::string::npos || line.ends_with(memfd.substr(0, memfd.size() - 1))) return true;
  }
  return false;
}

class DaemonProcess {
 public:
  explicit DaemonProcess(std::vector<std::string> extra_args = {})
      : dir_("gpuqosd-test"), socket_((dir_.path() / "gpuqosd.sock").string()) {
    std::vector<std::string> argv = {bin("gpuqosd"), "--socket", socket_, "--log-level", "debug"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    process_.emplace(argv, std::map<std::string, std::string>{}, log_path());
    if (!eventually([&] { return scheduler::connect_unix(socket_).ok() || !process_->running(); }, 10s) ||
        !process_->running()) {
      throw std::runtime_error("gpuqosd did not come up:\n" + log());
    }
    pid_ = status()["daemon"]["pid"].get<pid_t>();
  }
  ~DaemonProcess() {
    if (process_) process_->stop();  // SIGTERM (it drains and cleans up), SIGKILL after 5 s
    // Whatever a killed daemon left behind: its socket and its segments (/gpuqos-<pid>-<n>).
    std::error_code ignored;
    std::filesystem::remove(socket_, ignored);
    const std::string prefix = "gpuqos-" + std::to_string(pid_) + "-";
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ignored)) {
      if (entry.path().filename().string().starts_with(prefix)) std::filesystem::remove(entry.path(), ignored);
    }
  }

  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }  // gpuqosd's, as its status reports it
  std::filesystem::path log_path() const { return dir_.path() / "gpuqosd.log"; }
  std::string log() const {
    std::ifstream in(log_path());
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  ChildProcess& process() { return *process_; }
  const std::filesystem::path& dir() const { return dir_.path(); }

  nlohmann::json status() const {
    auto text = scheduler::request_status(socket_);
    if (!text) throw std::runtime_error("status: " + text.error());
    return nlohmann::json::parse(text.value());
  }
  // The status entry of the client with this pid, or null.
  nlohmann::json client_with_pid(pid_t pid) const {
    const nlohmann::json now = status();
    for (const auto& client : now["clients"]) {
      if (client["pid"] == pid) return client;
    }
    return nullptr;
  }

 private:
  TempDir dir_;
  std::string socket_;
  std::optional<ChildProcess> process_;
  pid_t pid_ = 0;
};

// A forked child process, SIGKILLed and reaped by the destructor even when a test fails.
class ForkedChild {
 public:
  explicit ForkedChild(pid_t pid) : pid_(pid) {}
  ~ForkedChild() { kill(); }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;
  pid_t pid() const { return pid_; }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

class FakeClient {
 public:
  // A client of protocol 1.`minor` (the current one by default: it rings its ops ring's doorbell).
  FakeClient(const std::string& socket, ipc::Priority priority, const std::string& job,
             std::uint16_t minor = ipc::kProtocolVersionMinor) {
    auto fd = scheduler::connect_unix(socket);
    if (!fd) throw std::runtime_error(fd.error());
    socket_ = std::move(fd.value());
    auto hello = ipc::make_hello(priority, 0, job);
    hello.value().version_minor = minor;
    if (!ipc::send_record(socket_.get(), ipc::encode(hello.value()))) throw std::runtime_error("send hello");
    std::vector<std::byte> record;
    std::vector<int> passed;
    const ipc::Status received = ipc::receive_record(socket_.get(), record, passed);
    // A shim of 1.10 or later is passed its segment first, then the doorbell; an older one the doorbell.
    const bool segment_passed = minor >= 10;
    segment_fd_ = scheduler::FileDescriptor(segment_passed && !passed.empty() ? passed[0] : -1);
    const std::size_t doorbell_at = segment_passed ? 1 : 0;
    doorbell_ = scheduler::FileDescriptor(passed.size() > doorbell_at ? passed[doorbell_at] : -1);
    for (std::size_t i = doorbell_at + 1; i < passed.size(); ++i) ::close(passed[i]);
    if (!received) throw std::runtime_error("no hello reply");
    auto reply = ipc::decode_hello_reply(record);
    if (!reply || reply->status != ipc::HelloStatus::ok) throw std::runtime_error("hello refused");
    reply_ = reply.value();
    client_number_ = reply->client_number;
    segment_name_ = reply->segment_name;
    auto segment = segment_passed ? ipc::Segment::open_passed(segment_fd_.get(), segment_name_) : ipc::Segment::open(segment_name_);
    if (!segment) throw std::runtime_error(segment.error());
    segment_passed_ = segment_passed;
    segment_.emplace(std::move(segment.value()));
  }

  static ipc::OpDescriptor kernel(std::uint64_t seq, std::uint32_t kernel_id = 1) {
    ipc::OpDescriptor op{};
    op.seq = seq;
    op.posted_ns = ipc::monotonic_ns();  // when posted, as the shim stamps it
    op.kind = ipc::OpKind::kernel;
    op.kernel_id = kernel_id;
    op.grid[0] = op.grid[1] = op.grid[2] = 1;
    op.block[0] = 32;
    op.block[1] = op.block[2] = 1;
    return op;
  }

  void name_kernel(std::uint32_t id, const std::string& name) {
    if (!ipc::send_record(socket_.get(), ipc::encode_kernel_name(id, name).value())) throw std::runtime_error("send name");
  }
  // Pushes op as the shim does: ringing the doorbell when the daemon's loop said it sleeps. True
  // when it rang.
  bool post(const ipc::OpDescriptor& op) {
    if (!push(segment_->ops(), op)) throw std::runtime_error("ops ring full");
    return rang_;
  }
  bool has_doorbell() const { return doorbell_.valid(); }
  int doorbell_fd() const { return doorbell_.get(); }

  template <class Ring, class Item>
  bool push(Ring& ring, const Item& item) {
    rang_ = false;
    const auto ring_it = [&] {
      const char ring = 1;
      rang_ = ::send(doorbell_.get(), &ring, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
    };
    return doorbell_.valid() ? ring.try_push(item, ring_it) : ring.try_push(item);
  }
  // As post(): true when it rang the doorbell (the loop asked for completions).
  bool complete(std::uint64_t seq, std::int64_t start_ns = 100, std::int64_t end_ns = 200,
                std::uint32_t flags = ipc::kCompletionExact) {
    if (!push(segment_->completions(), ipc::CompletionDescriptor{seq, start_ns, end_ns, 0, flags})) {
      throw std::runtime_error("completions ring full");
    }
    return rang_;
  }
  // An exact completion of an op that ran duration_ns and ended just now, as a shim reports one
  // (gpuqosd learns no span that begins before its op can have started).
  bool complete_just_now(std::uint64_t seq, std::int64_t duration_ns) {
    const std::int64_t end = ipc::monotonic_ns();
    return complete(seq, end - duration_ns, end);
  }
  // Pops grants until one covers seq; false after timeout.
  bool wait_granted(std::uint64_t seq, std::chrono::milliseconds timeout = 2s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (granted_through_ < seq) {
      ipc::GrantDescriptor grant;
      while (segment_->grants().try_pop(grant)) {
        granted_through_ = std::max(granted_through_, grant.granted_through_seq);
        last_flags_ = grant.flags;
      }
      if (granted_through_ >= seq) break;
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= 0ns) return false;
      segment_->grants().wait_for_items(std::min<std::int64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(left).count(), 5'000'000));
    }
    return true;
  }
  // True once the daemon closed the socket.
  bool disconnected(std::chrono::milliseconds timeout = 2s) {
    return eventually([&] {
      std::byte byte;
      const ssize_t got = ::recv(socket_.get(), &byte, 1, MSG_DONTWAIT);
      return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }, timeout);
  }

  ipc::Segment& segment() { return *segment_; }
  const std::string& segment_name() const { return segment_name_; }
  // Passed as a sealed memfd (protocol 1.10), not named in /dev/shm.
  bool segment_passed() const { return segment_passed_; }
  // The descriptor it was passed (kept, where the shim closes it once mapped; -1: named).
  int segment_fd() const { return segment_fd_.get(); }
  std::uint32_t client_number() const { return client_number_; }
  const ipc::HelloReply& reply() const { return reply_; }
  std::uint64_t granted_through() const { return granted_through_; }
  std::uint32_t last_flags() const { return last_flags_; }
  int socket_fd() const { return socket_.get(); }

 private:
  scheduler::FileDescriptor socket_;
  scheduler::FileDescriptor doorbell_;  // from a daemon of 1.6 or later
  bool rang_ = false;                    // by the last push
  ipc::HelloReply reply_{};
  std::uint32_t client_number_ = 0;
  std::string segment_name_;
  bool segment_passed_ = false;
  scheduler::FileDescriptor segment_fd_;
  std::optional<ipc::Segment> segment_;
  std::uint64_t granted_through_ = 0;
  std::uint32_t last_flags_ = 0;
};

// A stand-in gpuqosd on a socket of its own that answers every control request with `text` (status
// ok): what a broken daemon, or one of another build, may say to the CLI. Its thread ends and its
// socket goes with it, even when a test fails.
class FakeControlDaemon {
 public:
  explicit FakeControlDaemon(std::string text)
      : dir_("fake-gpuqosd"), socket_((dir_.path() / "gpuqosd.sock").string()), text_(std::move(text)) {
    auto listening = scheduler::listen_unix(socket_);
    if (!listening) throw std::runtime_error(listening.error());
    listener_ = std::move(listening.value());
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeControlDaemon() {
    stop_ = true;
    thread_.join();
  }
  FakeControlDaemon(const FakeControlDaemon&) = delete;
  FakeControlDaemon& operator=(const FakeControlDaemon&) = delete;

  const std::string& socket() const { return socket_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd listener{listener_.get(), POLLIN, 0};
      if (::poll(&listener, 1, 20) <= 0) continue;
      scheduler::FileDescriptor peer(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      std::vector<std::byte> record;
      if (!peer.valid() || !ipc::receive_record(peer.get(), record)) continue;
      if (auto reply = ipc::encode_control_reply(ipc::ControlStatus::ok, text_)) {
        [[maybe_unused]] const auto sent = ipc::send_record(peer.get(), reply.value());
      }
    }
  }

  TempDir dir_;
  std::string socket_;
  std::string text_;
  scheduler::FileDescriptor listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Two low-priority clients of a gpuqosd that grants one op at a time (--max-outstanding 1): the
// holder's op granted, the waiter's posted and held behind it (false if the holder was not granted).
inline bool hold_one_behind_another(FakeClient& holder, FakeClient& waiter) {
  holder.name_kernel(1, "k");
  waiter.name_kernel(1, "k");
  holder.post(FakeClient::kernel(1));
  if (!holder.wait_granted(1)) return false;
  waiter.post(FakeClient::kernel(1));
  return true;
}

}  // namespace gpuqos::testing

// simgpud's device server: one thread, one epoll loop, the engine driven by the monotonic clock.
//
// Model time is CLOCK_MONOTONIC ns since the server started. A timerfd armed for the engine's
// next event runs what is due and sends what finished to its owners. Work a client submits
// takes effect when the client made the call (its message is stamped), not when this loop got
// round to reading it, so server scheduling delays do not stretch the device timeline. SIGTERM/SIGINT (read from a signalfd, so the caller must
// have blocked them) end run() cleanly: clients closed, socket file removed.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "decode.h"
#include "gpuqos/simgpu/catalog.h"
#include "gpuqos/simgpu/engine.h"
#include "gpuqos/simgpu/profile.h"
#include "session.h"

namespace gpuqos::simgpu::server {

struct ServerOptions {
  std::string socket_path;
  mode_t socket_mode = 0600;  // a per-user device; --shared makes it 0666
};

class Server {
 public:
  Server(std::vector<DeviceProfile> devices, KernelCatalog catalog, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the socket and sets up epoll, timerfd and signalfd. Throws std::runtime_error.
  void open();
  // Serves until SIGTERM or SIGINT; returns the exit code.
  int run();

 private:
  // The event loop (server.cpp).
  Nanos now_ns() const;
  void advance_due();
  void advance_to_sent(std::int64_t sent_monotonic_ns);
  void deliver(const EngineEvents& events);
  void rearm_timer();
  void accept_clients();
  void on_readable(Session& session);
  void on_writable(Session& session);
  void send(Session& session, wire::MsgType type, const void* head, std::size_t head_bytes,
            const void* tail = nullptr, std::size_t tail_bytes = 0);
  void set_writable_interest(Session& session, bool want);
  void doom(Session& session, const std::string& why);
  void reap();
  void close_session(Session& session);
  void shutdown();

  // Requests (handlers.cpp).
  void on_message(Session& session, std::span<const std::byte> message);
  void handle(Session& session, const wire::Hello& msg);
  void handle(Session& session, const wire::CreateContext& msg);
  void handle(Session& session, const wire::DestroyContext& msg);
  void handle(Session& session, const wire::CreateStream& msg);
  void handle(Session& session, const wire::DestroyStream& msg);
  void handle(Session& session, const RegisterKernelRequest& msg);
  void handle(Session& session, const SubmitRequest& msg);
  void handle(Session& session, const wire::HostFuncDone& msg);
  void handle(Session& session, const wire::MemAlloc& msg);
  void handle(Session& session, const wire::MemFree& msg);
  void handle(Session& session, const wire::MemInfo& msg);
  void handle(Session& session, const wire::StatsRequest& msg);
  Nanos kernel_duration_ns(Session& session, const wire::WireOp& op);
  OpSpec to_op_spec(Session& session, const wire::WireOp& op);
  void reply(Session& session, std::uint64_t request, wire::ReplyStatus status, std::uint64_t value0 = 0,
             std::uint64_t value1 = 0);
  std::uint32_t device_count() const { return static_cast<std::uint32_t>(engine_.device_count()); }

  Engine engine_;
  KernelCatalog catalog_;
  ServerOptions options_;
  std::vector<std::uint64_t> memory_used_bytes_;  // per device, over all sessions
  std::set<std::string> warned_kernel_names_;

  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  int signal_fd_ = -1;
  bool socket_bound_ = false;
  bool stopping_ = false;
  std::int64_t start_monotonic_ns_ = 0;

  std::uint32_t next_session_ = 1;
  std::map<std::uint32_t, std::unique_ptr<Session>> sessions_;
  std::vector<std::uint32_t> doomed_;
  std::vector<std::byte> recv_buffer_;  // one record: header + the largest payload
};

}  // namespace gpuqos::simgpu::server

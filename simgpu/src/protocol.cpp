// Helpers shared by both ends of the simgpu wire protocol.
#include "gpuqos/simgpu/protocol.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>

namespace gpuqos::simgpu::wire {

std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::string default_socket_path() {
  if (const char* env = std::getenv("SIMGPU_SOCKET"); env && *env) return env;
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    return std::string(runtime) + "/simgpu.sock";
  }
  return "/tmp/simgpu-" + std::to_string(::getuid()) + ".sock";
}

bool send_message(int fd, MsgType type, const void* head, std::size_t head_bytes, const void* tail,
                  std::size_t tail_bytes) {
  MsgHeader header{type, static_cast<std::uint32_t>(head_bytes + tail_bytes)};
  iovec iov[3] = {{&header, sizeof header},
                  {const_cast<void*>(head), head_bytes},
                  {const_cast<void*>(tail), tail_bytes}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = tail_bytes ? 3 : (head_bytes ? 2 : 1);
  while (true) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) return true;
    if (errno != EINTR) return false;
  }
}

}  // namespace gpuqos::simgpu::wire

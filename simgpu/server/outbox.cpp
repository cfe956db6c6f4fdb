// Ordered, non-blocking delivery of server messages to one client.
#include "outbox.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace gpuqos::simgpu::server {

Outbox::Result Outbox::send(int fd, wire::MsgType type, const void* head, std::size_t head_bytes,
                            const void* tail, std::size_t tail_bytes) {
  if (queue_.empty()) {
    if (wire::send_message(fd, type, head, head_bytes, tail, tail_bytes)) return Result::sent;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Result::failed;
  }
  wire::MsgHeader header{type, static_cast<std::uint32_t>(head_bytes + tail_bytes)};
  std::vector<std::byte> record(sizeof header + head_bytes + tail_bytes);
  std::memcpy(record.data(), &header, sizeof header);
  if (head_bytes) std::memcpy(record.data() + sizeof header, head, head_bytes);
  if (tail_bytes) std::memcpy(record.data() + sizeof header + head_bytes, tail, tail_bytes);
  queued_bytes_ += record.size();
  queue_.push_back(std::move(record));
  return Result::queued;
}

bool Outbox::flush(int fd) {
  while (!queue_.empty()) {
    const auto& record = queue_.front();
    ssize_t n = ::send(fd, record.data(), record.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    queued_bytes_ -= record.size();
    queue_.pop_front();
  }
  return true;
}

}  // namespace gpuqos::simgpu::server

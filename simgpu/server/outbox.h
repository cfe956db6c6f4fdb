// Messages to one client that its socket could not take yet, sent in order when it drains.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "gpuqos/simgpu/protocol.h"

namespace gpuqos::simgpu::server {

class Outbox {
 public:
  enum class Result { sent, queued, failed };

  // Sends the message now if nothing is queued and the (non-blocking) socket takes it, else
  // queues a copy. failed: the socket is broken (errno set); the client should be dropped.
  Result send(int fd, wire::MsgType type, const void* head, std::size_t head_bytes, const void* tail = nullptr,
              std::size_t tail_bytes = 0);
  // Sends queued messages until the socket would block. False on a socket error.
  bool flush(int fd);

  bool empty() const { return queue_.empty(); }
  std::size_t queued_bytes() const { return queued_bytes_; }

 private:
  std::deque<std::vector<std::byte>> queue_;
  std::size_t queued_bytes_ = 0;
};

}  // namespace gpuqos::simgpu::server

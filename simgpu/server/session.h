// One client connection of simgpud: its ids, registered kernels, memory and pending output.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpuqos/simgpu/catalog.h"
#include "gpuqos/simgpu/engine.h"
#include "outbox.h"

namespace gpuqos::simgpu::server {

// Client ids are put into the engine's id spaces per session, so clients cannot collide:
// contexts and streams as (session << 32 | id), ops as (session << 40 | op).
inline constexpr int kOpIdBits = 40;
inline constexpr std::uint64_t kOpIdMask = (std::uint64_t{1} << kOpIdBits) - 1;
inline constexpr std::uint32_t kMaxSessionNumber = (1u << (64 - kOpIdBits)) - 1;

struct Session {
  std::uint32_t number = 0;
  int fd = -1;
  pid_t pid = 0;  // from SO_PEERCRED: what log lines name
  bool greeted = false;
  bool observer = false;
  bool closing = false;         // doomed: dropped once the current event is handled
  bool waiting_writable = false;  // EPOLLOUT armed for the outbox
  std::set<std::uint32_t> contexts;  // client context ids alive in the engine
  std::unordered_map<std::uint32_t, KernelModel> kernels;  // register_kernel results
  std::unordered_set<std::uint32_t> warned_kernel_ids;     // unregistered ids already logged
  std::vector<std::uint64_t> memory_bytes;                 // allocated, per device
  Outbox outbox;

  ContextId context_id(std::uint32_t ctx) const { return std::uint64_t{number} << 32 | ctx; }
  StreamId stream_id(std::uint32_t stream) const { return std::uint64_t{number} << 32 | stream; }
  OpId op_id(std::uint64_t op) const { return std::uint64_t{number} << kOpIdBits | (op & kOpIdMask); }
};

inline std::uint32_t session_of_op(OpId op) { return static_cast<std::uint32_t>(op >> kOpIdBits); }
inline std::uint64_t client_op(OpId op) { return op & kOpIdMask; }

}  // namespace gpuqos::simgpu::server

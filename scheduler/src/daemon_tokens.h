// The epoll tokens of gpuqosd's loop: fixed ones for its own descriptors, ClientId for clients,
// and a range for connections that have not sent their first record yet.
#pragma once

#include <cstdint>

namespace gpuqos::scheduler::tokens {

inline constexpr std::uint64_t kListener = std::uint64_t{1} << 62;
inline constexpr std::uint64_t kSignals = kListener + 1;
inline constexpr std::uint64_t kTimer = kListener + 2;
inline constexpr std::uint64_t kWake = kListener + 3;
inline constexpr std::uint64_t kPendingBase = std::uint64_t{1} << 40;  // above every ClientId

inline bool is_pending(std::uint64_t token) { return token >= kPendingBase && token < kListener; }

}  // namespace gpuqos::scheduler::tokens

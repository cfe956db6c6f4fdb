// The epoll tokens of gpuqosd's loop: fixed ones for its own descriptors, ClientId for clients,
// a range for connections that have not sent their first record yet, one for clients' pidfds and
// one for their ops rings' doorbells.
#pragma once

#include <cstdint>

namespace gpuqos::scheduler::tokens {

inline constexpr std::uint64_t kListener = std::uint64_t{1} << 62;
inline constexpr std::uint64_t kSignals = kListener + 1;
inline constexpr std::uint64_t kTimer = kListener + 2;
inline constexpr std::uint64_t kWake = kListener + 3;
inline constexpr std::uint64_t kPendingBase = std::uint64_t{1} << 40;  // above every ClientId
inline constexpr std::uint64_t kPidfdBase = std::uint64_t{1} << 52;    // + ClientId: its process's pidfd
inline constexpr std::uint64_t kDoorbellBase = std::uint64_t{1} << 56;  // + ClientId: its ops ring's doorbell

inline bool is_pending(std::uint64_t token) { return token >= kPendingBase && token < kPidfdBase; }
inline bool is_pidfd(std::uint64_t token) { return token >= kPidfdBase && token < kDoorbellBase; }
inline bool is_doorbell(std::uint64_t token) { return token >= kDoorbellBase && token < kListener; }

}  // namespace gpuqos::scheduler::tokens

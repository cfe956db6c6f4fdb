// CLOCK_MONOTONIC in ns: the clock both ends stamp descriptors and the daemon heartbeat with.
#pragma once

#include <cstdint>

namespace gpuqos::ipc {

std::int64_t monotonic_ns() noexcept;

}  // namespace gpuqos::ipc

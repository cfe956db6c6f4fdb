// monotonic_ns: one clock for both processes on the machine.
#include "gpuqos/ipc/clock.h"

#include <ctime>

namespace gpuqos::ipc {

std::int64_t monotonic_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

}  // namespace gpuqos::ipc

// What the predictor knows about one operation: a kernel's name and launch shape, or a copy's
// direction, host memory kind and size; built from the daemon's OpDescriptor.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "gpuqos/ipc/descriptor.h"

namespace gpuqos::predictor {

inline constexpr std::size_t kMaxArgs = ipc::kMaxScalarArgs;

// Scalar args at or above 2^40 are taken for pointers or handles, not sizes: they never enter a
// feature (a 1 TiB extent is implausible; a device address always is this large).
inline constexpr std::uint64_t kMaxNumericArg = std::uint64_t{1} << 40;

// A kernel launch's configuration, as the shim sees it at cuLaunchKernel.
struct LaunchShape {
  std::array<std::uint32_t, 3> grid{1, 1, 1};
  std::array<std::uint32_t, 3> block{1, 1, 1};
  std::uint32_t shared_bytes = 0;               // dynamic shared memory per block
  std::uint8_t arg_count = 0;                   // meaningful entries of args, <= kMaxArgs
  std::array<std::uint64_t, kMaxArgs> args{};   // scalar args (M, N, K, ...); the rest zero
  bool operator==(const LaunchShape&) const = default;
};

// A kernel to predict. `name` is not owned: it only has to outlive the call it is passed to.
struct KernelFeatures {
  std::string_view name;
  LaunchShape shape;
};

enum class CopyDirection : std::uint8_t { h2d, d2h, d2d, memset };
enum class HostMemory : std::uint8_t { none, pinned, pageable };
inline constexpr std::size_t kCopyDirectionCount = 4;
inline constexpr std::size_t kHostMemoryCount = 3;

struct CopyFeatures {
  CopyDirection direction = CopyDirection::d2d;
  HostMemory host_memory = HostMemory::none;  // only h2d/d2h say pinned or pageable
  std::uint64_t bytes = 0;
};

enum class OpClass : std::uint8_t { kernel, copy, unsupported };

struct OpFeatures {
  OpClass op_class = OpClass::unsupported;
  KernelFeatures kernel;  // op_class == kernel
  CopyFeatures copy;      // op_class == copy (memsets included)
};

// Features of a validated descriptor. Kernels take `kernel_name` (the name registered for
// op.kernel_id); a graph launch is predicted as one opaque kernel keyed by whatever name the
// caller gives it (e.g. "graph:<id>") with an empty shape; copies and memsets ignore the name;
// sync and query marks are `unsupported` (they occupy no engine).
OpFeatures features_of(const ipc::OpDescriptor& op, std::string_view kernel_name);

const char* to_string(CopyDirection direction);
const char* to_string(HostMemory memory);

}  // namespace gpuqos::predictor

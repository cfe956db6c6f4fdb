// What the daemon learns of one piece of GPU work: an Operation made into an ipc::OpDescriptor.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/intercept/gate.h"
#include "gpuqos/ipc/descriptor.h"
#include "gpuqos/ipc/registration.h"
#include "kernel_registry.h"

namespace gpuqos::intercept {

// The stream value the descriptor carries (and the completion tracker queues by): the handle, or
// for the per-thread default stream (a null stream of a _ptsz/_ptds call, or CU_STREAM_PER_THREAD
// named) the calling thread's per_thread_stream_key(). The legacy default stream keeps its handle
// (0, or CU_STREAM_LEGACY). A key with kPerThreadStreamKeyBit is no handle: never pass it to the driver.
std::uint64_t stream_key(const Operation& op) noexcept;

// The calling thread's per-thread default stream: a serial of its own, with kPerThreadStreamKeyBit.
inline constexpr std::uint64_t kPerThreadStreamKeyBit = std::uint64_t{1} << 63;
std::uint64_t per_thread_stream_key() noexcept;

// Fills everything but seq for a launch, graph launch, copy or memset on `device`. Kernel
// arguments are read through op.kernel_params; host memory is pinned when the driver says so
// (cuMemHostGetFlags, else cuPointerGetAttribute), pageable otherwise. Host-to-host copies
// return false (not GPU work the daemon schedules); so does anything else that is not GPU work.
bool describe(const Operation& op, std::uint32_t device, std::int64_t posted_ns, KernelRegistry& kernels,
              ipc::OpDescriptor& out);

// Whether a copy moves bytes between host and device memory, as describe() would post it (h2d or
// d2h): only those are split into chunks. Chunks are there so a query's transfer can slip in
// between on PCIe; a copy within device memory (or between GPUs) runs at the device's bandwidth
// (a 367-MB device-to-device copy is well under a millisecond on an A100), so in 4-MiB chunks it
// only made the call wait for a grant per chunk: the whole copy on a real GPU, where a synchronous
// device-to-device copy does not make the host wait.
bool crosses_host_link(const Operation& op) noexcept;

// A copy's direction as describe() posts it (d2d for device-local and peer copies; none for a
// host-to-host copy, which is not posted).
std::optional<ipc::CopyDirection> posted_copy_direction(const Operation& op) noexcept;

// A naming call returned (cuModuleGetFunction, cuLibraryGetKernel, cuKernelGetFunction...): remember
// the name of the handle it wrote, so launches of it carry the kernel's identity.
void learn_kernel_name(const Operation& op, KernelRegistry& kernels) noexcept;

// Lifetime calls by what they end, whichever ABI (the one before _v2 or _v2) the program called.
bool instantiates_graph(HookId hook) noexcept;  // cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams
bool destroys_stream(HookId hook) noexcept;
bool destroys_context(HookId hook) noexcept;
bool destroys_green_context(HookId hook) noexcept;
bool resets_primary(HookId hook) noexcept;
bool releases_primary(HookId hook) noexcept;
// Is the device's primary context active (cuDevicePrimaryCtxGetState; false when it cannot say)?
bool primary_active(CUdevice device) noexcept;

// The device ordinal of each context seen (cuCtxGetDevice once per context; 0 when it fails), and
// each device's SM count and UUID (asked once; 0 and all zero when the driver cannot say).
class ContextDevices {
 public:
  using Uuid = std::array<std::uint8_t, 16>;

  std::uint32_t of(CUcontext context) noexcept;
  // A context that may have ended: its handle may come back for a context of another device.
  void forget(CUcontext context) noexcept;
  void forget_all() noexcept;
  std::uint32_t sm_count(std::uint32_t device) noexcept;
  // cuDeviceGetUuid_v2 (else cuDeviceGetUuid, before CUDA 11.4) of the ordinal: what tells the
  // daemon which of the node's GPUs it is, whatever this process numbers it. Asked until the driver
  // answers, at most kUuidTries times kUuidRetryNs apart (all zero until then, and after, or
  // without the functions).
  Uuid uuid(std::uint32_t device) noexcept;
  // Has the shim stopped asking for the ordinal's UUID (the driver said it, has no function, or
  // failed every try)?
  bool uuid_settled(std::uint32_t device) const noexcept;
  static constexpr std::uint8_t kUuidTries = 10;
  static constexpr std::int64_t kUuidRetryNs = 100'000'000;

 private:
  static constexpr std::uint32_t kUnknown = ~std::uint32_t{0};
  std::mutex mutex_;
  std::vector<std::pair<CUcontext, std::uint32_t>> devices_;  // at most 256 remembered
  std::array<std::atomic<std::uint32_t>, ipc::kMaxDevices> sm_counts_{};  // 0: not asked yet
  // Written once under uuid_mutex_, then read after uuid_tries_ says kUuidSettled (release/acquire).
  static constexpr std::uint8_t kUuidSettled = 0xff;
  std::mutex uuid_mutex_;
  std::array<std::atomic<std::uint8_t>, ipc::kMaxDevices> uuid_tries_{};
  std::array<std::atomic<std::int64_t>, ipc::kMaxDevices> uuid_next_try_ns_{};  // after a failure
  std::array<Uuid, ipc::kMaxDevices> uuids_{};
};

}  // namespace gpuqos::intercept

// describe(): the kind, shape, sizes and arguments of one operation, for its descriptor.
#include "describe.h"

#include <atomic>
#include <cstring>
#include <optional>

#include "gpuqos/ipc/clock.h"
#include "shim.h"

namespace gpuqos::intercept {
namespace {

using CtxGetDevice = CUresult (*)(CUdevice*);
using MemHostGetFlags = CUresult (*)(unsigned int*, void*);
using PointerGetAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

ipc::HostMemory host_memory_of(const void* host) {
  void* pointer = const_cast<void*>(host);
  unsigned flags = 0;
  if (const auto get_flags = driver<MemHostGetFlags>(DriverHelper::mem_host_get_flags)) {
    if (get_flags(&flags, pointer) == CUDA_SUCCESS) return ipc::HostMemory::pinned;
  }
  if (const auto get_attribute = driver<PointerGetAttribute>(DriverHelper::pointer_get_attribute)) {
    CUmemorytype type{};
    if (get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(pointer)) ==
            CUDA_SUCCESS &&
        type == CU_MEMORYTYPE_HOST) {
      return ipc::HostMemory::pinned;
    }
  }
  return ipc::HostMemory::pageable;
}

// Where a unified address lives, as the driver knows it: device memory, page-locked host memory,
// or (the driver does not know it) pageable host memory.
enum class Residence { device, pinned_host, pageable_host };

Residence residence_of(CUdeviceptr address) {
  CUmemorytype type{};
  const auto get_attribute = driver<PointerGetAttribute>(DriverHelper::pointer_get_attribute);
  if (!get_attribute || get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address) != CUDA_SUCCESS) {
    return Residence::pageable_host;
  }
  return type == CU_MEMORYTYPE_HOST ? Residence::pinned_host : Residence::device;
}

// A unified-address copy classified by its pointers; false for host-to-host.
bool classify_unified(const Operation& op, ipc::OpDescriptor& out) {
  const Residence src = residence_of(op.src_ptr), dst = residence_of(op.dst_ptr);
  const bool src_host = src != Residence::device, dst_host = dst != Residence::device;
  if (src_host && dst_host) return false;
  out.direction = src_host ? ipc::CopyDirection::h2d : dst_host ? ipc::CopyDirection::d2h : ipc::CopyDirection::d2d;
  const Residence host = src_host ? src : dst;
  out.host_memory = !src_host && !dst_host ? ipc::HostMemory::none
                    : host == Residence::pinned_host ? ipc::HostMemory::pinned
                                                     : ipc::HostMemory::pageable;
  return true;
}

// A 2-D/3-D copy with one CU_MEMORYTYPE_UNIFIED side (its pointer in src_ptr or dst_ptr) and one of
// a declared type: the host's (host_ptr) or the device's. Both were posted as device-to-device, so
// a real PCIe transfer took no transfer slot and did not wait for a high-priority one (a review).
// False for a host-to-host copy.
bool classify_half_unified(const Operation& op, ipc::OpDescriptor& out) {
  const bool unified_src = op.src_ptr != 0;
  const Residence unified = residence_of(unified_src ? op.src_ptr : op.dst_ptr);
  const bool unified_host = unified != Residence::device, other_host = op.host_ptr != nullptr;
  const bool src_host = unified_src ? unified_host : other_host, dst_host = unified_src ? other_host : unified_host;
  if (src_host && dst_host) return false;
  if (!src_host && !dst_host) {
    out.direction = ipc::CopyDirection::d2d;
    return true;
  }
  out.direction = src_host ? ipc::CopyDirection::h2d : ipc::CopyDirection::d2h;
  const bool host_is_unified = unified_src == src_host;  // the unified side is the host side
  out.host_memory = host_is_unified ? (unified == Residence::pinned_host ? ipc::HostMemory::pinned : ipc::HostMemory::pageable)
                                    : host_memory_of(op.host_ptr);
  return true;
}

void describe_kernel(const Operation& op, KernelRegistry& kernels, ipc::OpDescriptor& out) {
  out.kind = ipc::OpKind::kernel;
  const KernelLaunchInfo info = kernels.launch_info(op.function);
  out.kernel_id = info.id;
  out.grid[0] = op.grid.x, out.grid[1] = op.grid.y, out.grid[2] = op.grid.z;
  out.block[0] = op.block.x, out.block[1] = op.block.y, out.block[2] = op.block.z;
  out.shared_bytes = op.shared_mem_bytes;
  out.param_bytes = info.param_bytes;
  out.arg_count = read_scalar_args(info, op.kernel_params, out.args);
}

// False for a host-to-host copy.
bool describe_copy(const Operation& op, ipc::OpDescriptor& out) {
  out.kind = ipc::OpKind::copy;
  out.bytes = op.bytes;
  switch (op.direction) {
    case CopyDirection::host_to_device: out.direction = ipc::CopyDirection::h2d; break;
    case CopyDirection::device_to_host: out.direction = ipc::CopyDirection::d2h; break;
    case CopyDirection::host_to_host: return false;
    case CopyDirection::unknown:
      if (op.src_ptr != 0 && op.dst_ptr != 0) return classify_unified(op, out);
      if (op.src_ptr != 0 || op.dst_ptr != 0) return classify_half_unified(op, out);
      out.direction = ipc::CopyDirection::d2d;  // array batches and the like: nothing to classify
      return true;
    // Peer copies run on the copy engines like device-to-device ones.
    default: out.direction = ipc::CopyDirection::d2d; return true;
  }
  out.host_memory = op.host_ptr ? host_memory_of(op.host_ptr) : ipc::HostMemory::pageable;
  return true;
}

}  // namespace

std::optional<ipc::CopyDirection> posted_copy_direction(const Operation& op) noexcept {
  switch (op.direction) {
    case CopyDirection::host_to_device: return ipc::CopyDirection::h2d;
    case CopyDirection::device_to_host: return ipc::CopyDirection::d2h;
    case CopyDirection::host_to_host: return std::nullopt;
    case CopyDirection::unknown: {
      ipc::OpDescriptor out{};
      out.direction = ipc::CopyDirection::d2d;  // array batches and the like: nothing to classify
      if (op.src_ptr != 0 && op.dst_ptr != 0 && !classify_unified(op, out)) return std::nullopt;
      if ((op.src_ptr != 0) != (op.dst_ptr != 0) && !classify_half_unified(op, out)) return std::nullopt;
      return out.direction;
    }
    default: return ipc::CopyDirection::d2d;
  }
}

bool crosses_host_link(const Operation& op) noexcept {
  const auto direction = posted_copy_direction(op);
  return direction == ipc::CopyDirection::h2d || direction == ipc::CopyDirection::d2h;
}

std::uint64_t per_thread_stream_key() noexcept {
  // Serials from 1, set apart by bit 63: no user-space address has it (a CUstream is one), nor do
  // the special handles 0, 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD). A serial, not the
  // thread's id: an id comes back for a later thread while ops of the earlier one may be pending.
  static std::atomic<std::uint64_t> next_serial{1};
  thread_local const std::uint64_t key =
      kPerThreadStreamKeyBit | next_serial.fetch_add(1, std::memory_order_relaxed);
  return key;
}

std::uint64_t stream_key(const Operation& op) noexcept {
  // Every thread's per-thread default stream is a stream of its own (as CU_STREAM_PER_THREAD is a
  // different stream on each thread): one key for all of them queued every thread's ops in one
  // FIFO, so one thread's long op hid the others' finished ones from gpuqosd, which kept them in
  // flight (holding the other threads' best-effort copies) and charged them to one stream's bound.
  if ((op.stream == nullptr && op.per_thread) || op.stream == CU_STREAM_PER_THREAD) return per_thread_stream_key();
  return reinterpret_cast<std::uint64_t>(op.stream);
}

bool describe(const Operation& op, std::uint32_t device, std::int64_t posted_ns, KernelRegistry& kernels,
              ipc::OpDescriptor& out) {
  out = ipc::OpDescriptor{};
  out.stream = stream_key(op);
  out.posted_ns = posted_ns;
  out.device = device;
  switch (op.category) {
    case Category::launch: describe_kernel(op, kernels, out); return true;
    case Category::graph_launch:
      out.kind = ipc::OpKind::graph;
      out.kernel_id = kernels.graph_id(op.graph_exec);
      return true;
    case Category::copy: return describe_copy(op, out);
    case Category::memset:
      out.kind = ipc::OpKind::memset;
      out.bytes = op.bytes;
      out.direction = ipc::CopyDirection::memset;
      return true;
    default: return false;
  }
}

void learn_kernel_name(const Operation& op, KernelRegistry& kernels) noexcept {
  try {
    if (op.hook == HookId::hook_cuModuleUnload || op.hook == HookId::hook_cuLibraryUnload) {
      kernels.forget_module(op.module, op.hook == HookId::hook_cuLibraryUnload);
      return;
    }
    if (op.hook == HookId::hook_cuGraphExecDestroy) {
      kernels.forget_graph(op.graph_exec);
      return;
    }
    if (!op.out_handle) return;
    if (instantiates_graph(op.hook)) {
      kernels.graph_instantiated(*static_cast<CUgraphExec*>(op.out_handle));
      return;
    }
    const void* handle = *static_cast<void* const*>(op.out_handle);  // CUfunction* or CUkernel*
    if (op.hook == HookId::hook_cuKernelGetFunction) {
      kernels.alias(handle, op.kernel);
    } else if (op.name) {
      kernels.name_handle(handle, op.name, op.module, op.hook == HookId::hook_cuLibraryGetKernel);
    }
  } catch (...) {  // unnamed: launches ask the driver for the name instead
  }
}

std::uint32_t ContextDevices::of(CUcontext context) noexcept {
  std::lock_guard lock(mutex_);
  for (const auto& [known, device] : devices_) {
    if (known == context) return device;
  }
  CUdevice device = 0;
  const auto get_device = driver<CtxGetDevice>(DriverHelper::ctx_get_device);
  if (!get_device || get_device(&device) != CUDA_SUCCESS || device < 0) device = 0;
  try {
    if (devices_.size() < 256) devices_.emplace_back(context, static_cast<std::uint32_t>(device));
  } catch (...) {  // out of memory: asked again next time
  }
  return static_cast<std::uint32_t>(device);
}

void ContextDevices::forget(CUcontext context) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(devices_, [context](const auto& known) { return known.first == context; });
}

void ContextDevices::forget_all() noexcept {
  std::lock_guard lock(mutex_);
  devices_.clear();
}

std::uint32_t ContextDevices::sm_count(std::uint32_t device) noexcept {
  if (device >= sm_counts_.size()) return 0;
  std::uint32_t known = sm_counts_[device].load(std::memory_order_relaxed);
  if (known == 0) {
    using GetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
    const auto get_attribute = driver<GetAttribute>(DriverHelper::device_get_attribute);
    int sms = 0;
    const bool said = get_attribute &&
                      get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, static_cast<CUdevice>(device)) ==
                          CUDA_SUCCESS &&
                      sms > 0;
    known = said ? static_cast<std::uint32_t>(sms) : kUnknown;  // not asked again either way
    sm_counts_[device].store(known, std::memory_order_relaxed);
  }
  return known == kUnknown ? 0 : known;
}

bool ContextDevices::uuid_settled(std::uint32_t device) const noexcept {
  return device >= uuid_tries_.size() || uuid_tries_[device].load(std::memory_order_acquire) == kUuidSettled;
}

ContextDevices::Uuid ContextDevices::uuid(std::uint32_t device) noexcept {
  if (device >= uuids_.size()) return {};
  if (uuid_tries_[device].load(std::memory_order_acquire) == kUuidSettled) return uuids_[device];
  const std::int64_t now_ns = ipc::monotonic_ns();
  if (now_ns < uuid_next_try_ns_[device].load(std::memory_order_relaxed)) return {};  // failed lately
  std::lock_guard lock(uuid_mutex_);
  std::uint8_t tries = uuid_tries_[device].load(std::memory_order_relaxed);
  if (tries == kUuidSettled) return uuids_[device];
  if (now_ns < uuid_next_try_ns_[device].load(std::memory_order_relaxed)) return {};  // another thread just asked
  using GetUuid = CUresult (*)(CUuuid*, CUdevice);
  CUuuid said{};
  bool asked = false, known = false;
  for (const DriverHelper helper : {DriverHelper::device_get_uuid_v2, DriverHelper::device_get_uuid}) {
    const auto get_uuid = driver<GetUuid>(helper);
    if (!get_uuid) continue;
    asked = true;
    if (get_uuid(&said, static_cast<CUdevice>(device)) == CUDA_SUCCESS) {
      known = true;
      break;
    }
  }
  if (known) std::memcpy(uuids_[device].data(), said.bytes, uuids_[device].size());
  // A driver without the functions is not asked again; one that failed is, a few times over a second
  // (a call made while the device was being reset, say).
  tries = known || !asked || tries + 1 >= kUuidTries ? kUuidSettled : static_cast<std::uint8_t>(tries + 1);
  if (tries != kUuidSettled) uuid_next_try_ns_[device].store(now_ns + kUuidRetryNs, std::memory_order_relaxed);
  uuid_tries_[device].store(tries, std::memory_order_release);
  return uuids_[device];
}

bool instantiates_graph(HookId hook) noexcept {
  switch (hook) {
    case HookId::hook_cuGraphInstantiateWithFlags:
    case HookId::hook_cuGraphInstantiateWithParams:
    case HookId::hook_cuGraphInstantiateWithParams_ptsz: return true;
    default: return false;
  }
}

bool destroys_stream(HookId hook) noexcept {
  return hook == HookId::hook_cuStreamDestroy || hook == HookId::hook_cuStreamDestroy_v2;
}
bool destroys_context(HookId hook) noexcept {
  return hook == HookId::hook_cuCtxDestroy || hook == HookId::hook_cuCtxDestroy_v2;
}
bool destroys_green_context(HookId hook) noexcept { return hook == HookId::hook_cuGreenCtxDestroy; }
bool resets_primary(HookId hook) noexcept {
  return hook == HookId::hook_cuDevicePrimaryCtxReset || hook == HookId::hook_cuDevicePrimaryCtxReset_v2;
}
bool releases_primary(HookId hook) noexcept {
  return hook == HookId::hook_cuDevicePrimaryCtxRelease || hook == HookId::hook_cuDevicePrimaryCtxRelease_v2;
}

bool primary_active(CUdevice device) noexcept {
  using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
  const auto get_state = driver<PrimaryCtxGetState>(DriverHelper::primary_ctx_get_state);
  unsigned int flags = 0;
  int active = 0;
  return get_state && get_state(device, &flags, &active) == CUDA_SUCCESS && active != 0;
}

}  // namespace gpuqos::intercept

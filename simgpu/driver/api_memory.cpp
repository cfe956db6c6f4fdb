// Driver API: device and page-locked memory, copies and memsets.
//
// Device memory is host memory of this process (mmap'ed without reserving swap, so an 80 GB
// device costs only the pages a program touches); simgpud accounts for capacity. A copy moves
// its bytes after simgpud reports it complete (driver.h: Driver::moves), so its timing and
// ordering are the device's.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <iterator>

#include "activity.h"
#include "driver.h"

using namespace gpuqos::simgpu::driver;
namespace wire = gpuqos::simgpu::wire;

namespace {

enum class Direction { any, h2d, d2h, d2d };

// Waits until no pending op or unapplied move would still write into or read from
// [base, base+bytes). With the connection lost the pending ops never run, but a move may be running.
void wait_range_idle(std::unique_lock<std::mutex>& lock, std::uintptr_t base, std::size_t bytes) {
  Driver& d = driver();
  auto pending_touches = [&] {
    for (const auto& [id, op] : d.pending) {
      for (const HostAction& a : op.actions) {
        if (touches(a, base, bytes)) return true;
      }
    }
    return false;
  };
  d.cv.wait(lock, [&] { return !d.moving_range(base, bytes) && (d.connection_lost || !pending_touches()); });
}

// Classifies and checks a copy; device ranges must lie inside one allocation.
CUresult classify(const void* dst, const void* src, std::size_t bytes, Direction want, wire::WireEngine* engine,
                  bool* host_side_pageable) {
  bool dst_dev = find_allocation(addr(dst), bytes) != nullptr;
  bool src_dev = find_allocation(addr(src), bytes) != nullptr;
  switch (want) {
    case Direction::h2d:
      if (!dst_dev) return CUDA_ERROR_INVALID_VALUE;
      break;
    case Direction::d2h:
      if (!src_dev) return CUDA_ERROR_INVALID_VALUE;
      break;
    case Direction::d2d:
      if (!dst_dev || !src_dev) return CUDA_ERROR_INVALID_VALUE;
      break;
    case Direction::any:
      break;
  }
  if (dst_dev && src_dev) {
    *engine = wire::WireEngine::local;
    *host_side_pageable = false;
  } else if (dst_dev) {
    *engine = wire::WireEngine::h2d;
    *host_side_pageable = !is_pinned(src, bytes);
  } else if (src_dev) {
    *engine = wire::WireEngine::d2h;
    *host_side_pageable = !is_pinned(dst, bytes);
  } else {
    *engine = wire::WireEngine::local;  // host to host through unified addressing
    *host_side_pageable = false;
  }
  return CUDA_SUCCESS;
}

// Submits a checked copy (`action`: its rows, `op`: its engine and bytes) and waits where the driver
// would: synchronous copies, async copies into pageable memory, and async copies between host
// memory (`host_only`: "fully synchronous with respect to the host", the driver API's notes) return
// once the data is there.
CUresult submit_copy(std::unique_lock<std::mutex>& lock, CUstream_st* stream, wire::WireOp op, HostAction action,
                     bool async, bool host_only) {
  const std::size_t bytes = action.bytes * action.height * action.depth;
  // A pageable source may be reused as soon as an async call returns: stage it now, as the
  // real driver does through its staging buffers (rows contiguous, slice after slice).
  if (async && op.pageable && op.engine == wire::WireEngine::h2d && !stream->capture) {
    auto staged = std::make_shared<std::vector<unsigned char>>(bytes);
    for (std::size_t slice = 0; slice < action.depth; ++slice) {
      const auto* from = static_cast<const unsigned char*>(action.src) + slice * action.src_slice_pitch;
      unsigned char* into = staged->data() + slice * action.height * action.bytes;
      for (std::size_t row = 0; row < action.height; ++row) {
        std::memcpy(into + row * action.bytes, from + row * action.src_pitch, action.bytes);
      }
    }
    action.staged = std::move(staged);
  }
  void* dst = action.dst;
  const void* src = action.src;
  std::uint64_t op_id = 0;
  if (CUresult r = submit(stream, op, std::move(action), nullptr, {}, nullptr, &op_id); r != CUDA_SUCCESS) return r;
  report_copy(op_id, *stream, dst, src, bytes, async);
  bool wait = !async || host_only || (op.pageable && op.engine == wire::WireEngine::d2h);
  if (!wait || stream->capture) return CUDA_SUCCESS;
  return wait_op(lock, stream, stream->submitted);
}

CUresult do_copy(void* dst, const void* src, std::size_t bytes, CUstream hstream, bool async, bool per_thread,
              Direction want) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (bytes == 0) return CUDA_SUCCESS;
  wire::WireOp op{};
  op.kind = wire::WireOpKind::copy;
  bool pageable = false;
  if (CUresult r = classify(dst, src, bytes, want, &op.engine, &pageable); r != CUDA_SUCCESS) return r;
  op.pageable = pageable;
  const bool host_only = op.engine == wire::WireEngine::local && find_allocation(addr(dst), bytes) == nullptr &&
                         find_allocation(addr(src), bytes) == nullptr;
  op.bytes = bytes;
  HostAction action;
  action.kind = HostAction::Kind::copy;
  action.dst = dst;
  action.src = src;
  action.bytes = bytes;
  return submit_copy(lock, stream, op, std::move(action), async, host_only);
}

// Whether [ptr, ptr + bytes) overlaps any device allocation (mu held).
bool overlaps_allocation(std::uintptr_t ptr, std::size_t bytes) {
  const auto& allocations = driver().allocations;
  auto it = allocations.lower_bound(ptr + bytes);  // the first starting at or after the range's end
  if (it == allocations.begin()) return false;
  --it;
  return it->first + it->second.bytes > ptr;
}

// One side of a 2D or 3D copy as the call gives it: its memory, its first byte's (X, Y, Z), its
// pitch and (3D) the rows of each of its slices.
struct PitchedSide {
  CUmemorytype type{};
  const void* host = nullptr;
  CUdeviceptr device = 0;
  std::size_t x = 0, y = 0, z = 0, pitch = 0, slice_rows = 0;
};

// A 2D or 3D copy: Depth slices of Height rows of WidthInBytes, each side from its (X, Y, Z) at its
// pitch, its slices slice_rows rows apart. Host, device and unified sides (CUDA arrays are refused
// before). As the driver: a pitch of more than one row's need covers WidthInBytes + X and is at
// most CU_DEVICE_ATTRIBUTE_MAX_PITCH; a slice height, where given (it must be for more than one
// slice), covers Height + Y; a side that touches device memory lies within one allocation,
// whatever its type says; anything that would wrap the address space is CUDA_ERROR_INVALID_VALUE.
CUresult do_copy_pitched(const PitchedSide& from, const PitchedSide& to, std::size_t width, std::size_t height,
                         std::size_t depth, CUstream hstream, bool async, bool per_thread) {
  constexpr std::size_t kMaxPitch = 2147483647;  // api_device.cpp's CU_DEVICE_ATTRIBUTE_MAX_PITCH
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (width == 0 || height == 0 || depth == 0) return CUDA_SUCCESS;
  std::size_t total = 0;
  if (__builtin_mul_overflow(width, height, &total) || __builtin_mul_overflow(total, depth, &total)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // One side: its first byte, what it spans, the bytes between its slices, and whether it is device
  // memory (checked against its type).
  struct Side {
    unsigned char* first = nullptr;
    std::size_t span = 0, slice_pitch = 0;
    bool device = false;
  };
  const auto side = [&](const PitchedSide& given, Side* out) {
    const std::size_t pitch = given.pitch;
    if ((height > 1 || depth > 1) && (pitch > kMaxPitch || pitch < width || pitch - width < given.x)) return false;
    if ((depth > 1 || given.slice_rows != 0) && (given.slice_rows < height || given.slice_rows - height < given.y)) {
      return false;
    }
    const std::uintptr_t base = given.type == CU_MEMORYTYPE_HOST ? addr(given.host) : static_cast<std::uintptr_t>(given.device);
    std::size_t offset = 0, rows = 0, end = 0;
    if (base == 0 || __builtin_mul_overflow(given.slice_rows, pitch, &out->slice_pitch) ||
        __builtin_mul_overflow(given.z, out->slice_pitch, &offset) ||
        __builtin_mul_overflow(given.y, pitch, &rows) || __builtin_add_overflow(offset, rows, &offset) ||
        __builtin_add_overflow(offset, given.x, &offset) ||
        __builtin_mul_overflow(depth - 1, out->slice_pitch, &out->span) ||
        __builtin_mul_overflow(height - 1, pitch, &rows) || __builtin_add_overflow(out->span, rows, &out->span) ||
        __builtin_add_overflow(out->span, width, &out->span) || __builtin_add_overflow(base, offset, &end) ||
        __builtin_add_overflow(end, out->span, &end)) {
      return false;
    }
    out->first = reinterpret_cast<unsigned char*>(base + offset);
    out->device = find_allocation(addr(out->first), 1) != nullptr;
    if (out->device) {  // within one allocation, or nothing of it moves
      return find_allocation(addr(out->first), out->span) != nullptr && given.type != CU_MEMORYTYPE_HOST;
    }
    return given.type != CU_MEMORYTYPE_DEVICE && !overlaps_allocation(addr(out->first), out->span);
  };
  Side src, dst;
  if (!side(from, &src) || !side(to, &dst)) return CUDA_ERROR_INVALID_VALUE;
  wire::WireOp op{};
  op.kind = wire::WireOpKind::copy;
  op.bytes = total;
  op.engine = dst.device && src.device ? wire::WireEngine::local
              : dst.device             ? wire::WireEngine::h2d
              : src.device             ? wire::WireEngine::d2h
                                       : wire::WireEngine::local;  // host to host
  if (op.engine == wire::WireEngine::h2d) op.pageable = !is_pinned(src.first, src.span);
  if (op.engine == wire::WireEngine::d2h) op.pageable = !is_pinned(dst.first, dst.span);
  HostAction action;
  action.kind = HostAction::Kind::copy;
  action.dst = dst.first;
  action.src = src.first;
  action.bytes = width;
  action.height = height;
  action.pitch = to.pitch;
  action.src_pitch = from.pitch;
  action.depth = depth;
  action.slice_pitch = dst.slice_pitch;
  action.src_slice_pitch = src.slice_pitch;
  return submit_copy(lock, stream, op, std::move(action), async, !dst.device && !src.device);
}

// A 2D copy (CUDA_MEMCPY2D): one slice. CUDA arrays are not modelled (CUDA_ERROR_NOT_SUPPORTED, said once).
CUresult do_copy_2d(const CUDA_MEMCPY2D* copy, CUstream hstream, bool async, bool per_thread) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  if (copy->srcMemoryType == CU_MEMORYTYPE_ARRAY || copy->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    log_once("cuMemcpy2D: CUDA arrays are not supported by simgpu");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const PitchedSide from{copy->srcMemoryType, copy->srcHost, copy->srcDevice, copy->srcXInBytes, copy->srcY, 0,
                         copy->srcPitch, 0};
  const PitchedSide to{copy->dstMemoryType, copy->dstHost, copy->dstDevice, copy->dstXInBytes, copy->dstY, 0,
                       copy->dstPitch, 0};
  return do_copy_pitched(from, to, copy->WidthInBytes, copy->Height, 1, hstream, async, per_thread);
}

// A 3D copy (CUDA_MEMCPY3D): Depth slices, each side's srcHeight/dstHeight rows apart. As the
// driver, the LODs must be 0 and the reserved pointers null; CUDA arrays are not modelled.
CUresult do_copy_3d(const CUDA_MEMCPY3D* copy, CUstream hstream, bool async, bool per_thread) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  if (copy->srcMemoryType == CU_MEMORYTYPE_ARRAY || copy->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    log_once("cuMemcpy3D: CUDA arrays are not supported by simgpu");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (copy->srcLOD != 0 || copy->dstLOD != 0 || copy->reserved0 || copy->reserved1) return CUDA_ERROR_INVALID_VALUE;
  const PitchedSide from{copy->srcMemoryType, copy->srcHost, copy->srcDevice, copy->srcXInBytes, copy->srcY,
                         copy->srcZ,          copy->srcPitch, copy->srcHeight};
  const PitchedSide to{copy->dstMemoryType, copy->dstHost, copy->dstDevice, copy->dstXInBytes, copy->dstY,
                       copy->dstZ,          copy->dstPitch, copy->dstHeight};
  return do_copy_pitched(from, to, copy->WidthInBytes, copy->Height, copy->Depth, hstream, async, per_thread);
}

CUresult do_fill(CUdeviceptr dst, std::size_t pitch, std::uint32_t value, unsigned element_size, std::size_t width,
                std::size_t height, CUstream hstream, bool async, bool per_thread) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  std::size_t row_bytes = width * element_size;
  if (pitch && pitch < row_bytes) return CUDA_ERROR_INVALID_VALUE;
  std::size_t span = (height - 1) * (pitch ? pitch : row_bytes) + row_bytes;
  if (!find_allocation(dst, span) || dst % element_size != 0) return CUDA_ERROR_INVALID_VALUE;
  wire::WireOp op{};
  op.kind = wire::WireOpKind::memset;
  op.engine = wire::WireEngine::local;
  op.bytes = row_bytes * height;
  HostAction action;
  action.kind = HostAction::Kind::memset;
  action.dst = reinterpret_cast<void*>(dst);
  action.value = value;
  action.element_size = element_size;
  action.pitch = pitch;
  action.width = width;
  action.height = height;
  std::uint64_t op_id = 0;
  if (CUresult r = submit(stream, op, std::move(action), nullptr, {}, nullptr, &op_id); r != CUDA_SUCCESS) return r;
  report_memset(op_id, *stream, op.bytes, value, async);
  if (async || stream->capture) return CUDA_SUCCESS;
  return wait_op(lock, stream, stream->submitted);
}

void* ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

}  // namespace

// An allocation of `bytes` on `ctx`'s device (mu held as `lock`).
static CUresult allocate_locked(std::unique_lock<std::mutex>& lock, CUdeviceptr* dptr, size_t bytes, CUctx_st* ctx) {
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  wire::MemAlloc msg{0, d.wire_device(ctx->device), 0, bytes};
  auto reply = d.request(lock, wire::MsgType::mem_alloc, &msg, sizeof msg, &msg.request);
  if (!reply) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  if (reply->status != wire::ReplyStatus::ok) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    wire::MemFree undo{msg.device, 0, bytes};
    d.send(wire::MsgType::mem_free, &undo, sizeof undo);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  d.allocations[addr(p)] = {bytes, ctx->device};
  *dptr = addr(p);
  return CUDA_SUCCESS;
}

// cuMemAlloc_v2's body, also cuMemAllocPitch_v2's: called by name through the PLT, a preloaded
// library's cuMemAlloc_v2 (the gpuqos shim's hook) would see a second allocation inside the first.
static CUresult allocate(CUdeviceptr* dptr, size_t bytes) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  return allocate_locked(lock, dptr, bytes, ctx);
}

SIMGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) { return allocate(dptr, bytes); }

// Rows padded to 512 bytes, as a GPU's pitched allocations are (its texture pitch alignment or more).
SIMGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                          unsigned int element_bytes) {
  constexpr std::size_t kPitchAlignment = 512;
  if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t padded = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (padded < width || height > SIZE_MAX / padded) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = allocate(dptr, padded * height); r != CUDA_SUCCESS) return r;
  *pitch = padded;
  return CUDA_SUCCESS;
}

// cuMemFree_v2's body, also cuMemFreeAsync's (mu held as `lock`).
static CUresult release_locked(std::unique_lock<std::mutex>& lock, CUdeviceptr dptr) {
  Driver& d = driver();
  auto it = d.allocations.find(dptr);
  if (it == d.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  DeviceMemory mem = it->second;
  // Like the real driver, freeing waits for work still using the memory.
  wait_range_idle(lock, dptr, mem.bytes);
  d.allocations.erase(dptr);
  ::munmap(ptr(dptr), mem.bytes);
  wire::MemFree msg{d.wire_device(mem.device), 0, mem.bytes};
  d.send(wire::MsgType::mem_free, &msg, sizeof msg);
  // mem_free has no reply, and simgpud does not order messages of different clients: return only
  // once it has applied the free (it answers one client's messages in order), so another process
  // told "freed" can allocate the memory, as with the real driver.
  wire::MemInfo barrier{0, msg.device, 0};
  d.request(lock, wire::MsgType::mem_info, &barrier, sizeof barrier, &barrier.request);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == 0) return CUDA_SUCCESS;
  return release_locked(lock, dptr);
}

// Stream-ordered allocation (CUDA 11.2; what the runtime's cudaMallocAsync and cudaFreeAsync call),
// from the default pool of the stream's device. The memory is the program's only from the call's
// place in the stream on, so simgpu allocates it at the call. A free is checked at the call, then
// waits, as cuMemFree does, for the queued copies and memsets that use the memory and frees it,
// where the real driver returns at once and frees it in stream order: a program whose queued work
// on that memory waits for something its host does only after the free (a host function waiting
// for a flag) would hang here and not on a GPU. Not in a stream capture (a graph's allocation nodes
// are not simulated): CUDA_ERROR_NOT_SUPPORTED. Pools (cuMemPool*) are not simulated either, and
// CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED reads 0.
static CUresult stream_ordered(CUstream hstream, bool per_thread, CUstream_st** stream) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  const bool default_stream = hstream == nullptr || hstream == CU_STREAM_LEGACY || hstream == CU_STREAM_PER_THREAD;
  if (default_stream) {
    if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  }
  *stream = resolve_stream(hstream, per_thread);
  if (!*stream || !d.contexts.contains((*stream)->ctx)) return CUDA_ERROR_INVALID_HANDLE;
  return (*stream)->capture ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
}

#define SIMGPU_STREAM_ORDERED_ALLOCATION(SUFFIX, PT)                                                     \
  SIMGPU_EXPORT CUresult cuMemAllocAsync##SUFFIX(CUdeviceptr* dptr, size_t bytes, CUstream s) {         \
    Driver& d = driver();                                                                                 \
    std::unique_lock lock(d.mu);                                                                          \
    CUstream_st* stream = nullptr;                                                                        \
    if (CUresult r = stream_ordered(s, PT, &stream); r != CUDA_SUCCESS) return r;                         \
    return allocate_locked(lock, dptr, bytes, stream->ctx);                                               \
  }                                                                                                       \
  SIMGPU_EXPORT CUresult cuMemFreeAsync##SUFFIX(CUdeviceptr dptr, CUstream s) {                          \
    Driver& d = driver();                                                                                 \
    std::unique_lock lock(d.mu);                                                                          \
    CUstream_st* stream = nullptr;                                                                        \
    if (CUresult r = stream_ordered(s, PT, &stream); r != CUDA_SUCCESS) return r;                         \
    return dptr == 0 ? CUDA_ERROR_INVALID_VALUE : release_locked(lock, dptr);                             \
  }

SIMGPU_STREAM_ORDERED_ALLOCATION(, false)
SIMGPU_STREAM_ORDERED_ALLOCATION(_ptsz, true)

SIMGPU_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  wire::MemInfo msg{0, d.wire_device(ctx->device), 0};
  auto reply = d.request(lock, wire::MsgType::mem_info, &msg, sizeof msg, &msg.request);
  if (!reply) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  if (free_bytes) *free_bytes = reply->value0;
  if (total_bytes) *total_bytes = reply->value1;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  auto it = d.allocations.upper_bound(dptr);
  if (it == d.allocations.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (dptr >= it->first + it->second.bytes) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = it->first;
  if (size) *size = it->second.bytes;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  d.pinned[addr(p)] = bytes;
  *pp = p;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

SIMGPU_EXPORT CUresult cuMemFreeHost(void* p) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  auto it = d.pinned.find(addr(p));
  if (it == d.pinned.end()) return CUDA_ERROR_INVALID_VALUE;
  wait_range_idle(lock, it->first, it->second);
  d.pinned.erase(it);
  std::free(p);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (is_pinned(p, 1) || is_pinned(static_cast<char*>(p) + bytes - 1, 1)) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  d.pinned[addr(p)] = bytes;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostUnregister(void* p) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.pinned.erase(addr(p))) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!flags || !is_pinned(p, 1)) return CUDA_ERROR_INVALID_VALUE;
  *flags = 0;
  return CUDA_SUCCESS;
}

// The attributes a program (or the gpuqos shim) asks to tell device, page-locked and pageable
// memory apart. A pointer simgpu knows nothing about is CUDA_ERROR_INVALID_VALUE, as on a GPU.
SIMGPU_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  const DeviceMemory* device = find_allocation(p, 1);
  bool host = !device && is_pinned(ptr(p), 1);
  if (!device && !host) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<CUmemorytype*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = p;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = ptr(p);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = device ? device->device : (current_context() ? current_context()->device : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
      if (!device) return CUDA_ERROR_NOT_SUPPORTED;  // pinned host ranges: not modelled
      const auto allocation = std::prev(d.allocations.upper_bound(p));  // the one find_allocation found
      if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
        *static_cast<CUdeviceptr*>(data) = allocation->first;
      } else {
        *static_cast<std::size_t*>(data) = allocation->second.bytes;
      }
      return CUDA_SUCCESS;
    }
    default:
      log_once("cuPointerGetAttribute: attribute " + std::to_string(attribute) + " is not supported by simgpu");
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

SIMGPU_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!pdptr || !is_pinned(p, 1)) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = addr(p);
  return CUDA_SUCCESS;
}

// Copies: every form, sync and async, default-stream and per-thread-default-stream flavours.
#define SIMGPU_COPIES(SUFFIX, PT)                                                                                   \
  SIMGPU_EXPORT CUresult cuMemcpyHtoD_v2##SUFFIX(CUdeviceptr dst, const void* src, size_t n) {                       \
    return do_copy(ptr(dst), src, n, nullptr, false, PT, Direction::h2d);                                               \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpyDtoH_v2##SUFFIX(void* dst, CUdeviceptr src, size_t n) {                             \
    return do_copy(dst, ptr(src), n, nullptr, false, PT, Direction::d2h);                                               \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpyDtoD_v2##SUFFIX(CUdeviceptr dst, CUdeviceptr src, size_t n) {                       \
    return do_copy(ptr(dst), ptr(src), n, nullptr, false, PT, Direction::d2d);                                          \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpy##SUFFIX(CUdeviceptr dst, CUdeviceptr src, size_t n) {                              \
    return do_copy(ptr(dst), ptr(src), n, nullptr, false, PT, Direction::any);                                          \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpyPeer##SUFFIX(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {    \
    return do_copy(ptr(dst), ptr(src), n, nullptr, false, PT, Direction::d2d);                                          \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD8_v2##SUFFIX(CUdeviceptr dst, unsigned char v, size_t n) {                         \
    return do_fill(dst, 0, v, 1, n, 1, nullptr, false, PT);                                                           \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD16_v2##SUFFIX(CUdeviceptr dst, unsigned short v, size_t n) {                       \
    return do_fill(dst, 0, v, 2, n, 1, nullptr, false, PT);                                                           \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD32_v2##SUFFIX(CUdeviceptr dst, unsigned int v, size_t n) {                         \
    return do_fill(dst, 0, v, 4, n, 1, nullptr, false, PT);                                                           \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD2D8_v2##SUFFIX(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h) { \
    return do_fill(dst, pitch, v, 1, w, h, nullptr, false, PT);                                                       \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD2D16_v2##SUFFIX(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w,         \
                                                  size_t h) {                                                        \
    return do_fill(dst, pitch, v, 2, w, h, nullptr, false, PT);                                                       \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD2D32_v2##SUFFIX(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h) { \
    return do_fill(dst, pitch, v, 4, w, h, nullptr, false, PT);                                                       \
  }

#define SIMGPU_ASYNC_COPIES(SUFFIX, PT)                                                                             \
  SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync_v2##SUFFIX(CUdeviceptr dst, const void* src, size_t n, CUstream s) {      \
    return do_copy(ptr(dst), src, n, s, true, PT, Direction::h2d);                                                      \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync_v2##SUFFIX(void* dst, CUdeviceptr src, size_t n, CUstream s) {            \
    return do_copy(dst, ptr(src), n, s, true, PT, Direction::d2h);                                                      \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpyDtoDAsync_v2##SUFFIX(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {      \
    return do_copy(ptr(dst), ptr(src), n, s, true, PT, Direction::d2d);                                                 \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpyAsync##SUFFIX(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {             \
    return do_copy(ptr(dst), ptr(src), n, s, true, PT, Direction::any);                                                 \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpyPeerAsync##SUFFIX(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n, \
                                                   CUstream s) {                                                     \
    return do_copy(ptr(dst), ptr(src), n, s, true, PT, Direction::d2d);                                                 \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD8Async##SUFFIX(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {           \
    return do_fill(dst, 0, v, 1, n, 1, s, true, PT);                                                                  \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD16Async##SUFFIX(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {         \
    return do_fill(dst, 0, v, 2, n, 1, s, true, PT);                                                                  \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD32Async##SUFFIX(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {           \
    return do_fill(dst, 0, v, 4, n, 1, s, true, PT);                                                                  \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD2D8Async##SUFFIX(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w,         \
                                                   size_t h, CUstream s) {                                           \
    return do_fill(dst, pitch, v, 1, w, h, s, true, PT);                                                              \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD2D16Async##SUFFIX(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w,       \
                                                    size_t h, CUstream s) {                                          \
    return do_fill(dst, pitch, v, 2, w, h, s, true, PT);                                                              \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemsetD2D32Async##SUFFIX(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w,         \
                                                    size_t h, CUstream s) {                                          \
    return do_fill(dst, pitch, v, 4, w, h, s, true, PT);                                                              \
  }

#define SIMGPU_COPIES_2D(SUFFIX, ASYNC_SUFFIX, PT)                                                                 \
  SIMGPU_EXPORT CUresult cuMemcpy2D_v2##SUFFIX(const CUDA_MEMCPY2D* copy) {                                          \
    return do_copy_2d(copy, nullptr, false, PT);                                                                      \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpy2DUnaligned_v2##SUFFIX(const CUDA_MEMCPY2D* copy) {                                 \
    return do_copy_2d(copy, nullptr, false, PT);                                                                      \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpy2DAsync_v2##ASYNC_SUFFIX(const CUDA_MEMCPY2D* copy, CUstream s) {                    \
    return do_copy_2d(copy, s, true, PT);                                                                             \
  }

SIMGPU_COPIES(, false)
SIMGPU_COPIES(_ptds, true)
#define SIMGPU_COPIES_3D(SUFFIX, ASYNC_SUFFIX, PT)                                                                 \
  SIMGPU_EXPORT CUresult cuMemcpy3D_v2##SUFFIX(const CUDA_MEMCPY3D* copy) {                                          \
    return do_copy_3d(copy, nullptr, false, PT);                                                                      \
  }                                                                                                                  \
  SIMGPU_EXPORT CUresult cuMemcpy3DAsync_v2##ASYNC_SUFFIX(const CUDA_MEMCPY3D* copy, CUstream s) {                    \
    return do_copy_3d(copy, s, true, PT);                                                                             \
  }

SIMGPU_COPIES_2D(, , false)
SIMGPU_COPIES_2D(_ptds, _ptsz, true)
SIMGPU_COPIES_3D(, , false)
SIMGPU_COPIES_3D(_ptds, _ptsz, true)
SIMGPU_ASYNC_COPIES(, false)
SIMGPU_ASYNC_COPIES(_ptsz, true)

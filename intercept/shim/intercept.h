// What the generated hook definitions (hooks.cpp) are made of: the typed real functions, the
// helpers that describe arguments, and intercept<>, the one body every gated hook shares.
//
// Included only by hooks.cpp, which is compiled with __CUDA_API_VERSION_INTERNAL so that cuda.h and
// cudaTypedefs.h declare every ABI (legacy, _v2, _ptds, _ptsz) and the compiler checks each hook's
// signature against the driver's own declaration of the symbol.
#pragma once

#ifndef __CUDA_API_VERSION_INTERNAL
#error "intercept.h needs __CUDA_API_VERSION_INTERNAL (set for hooks.cpp in intercept/CMakeLists.txt)"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "shim.h"

#define GPUQOS_HOOK_EXPORT __attribute__((visibility("default")))

namespace gpuqos::intercept {

// The driver's function type of each hook (PFN_* from cudaTypedefs.h).
template <HookId id>
struct HookTraits;
#define GPUQOS_PFN(symbol, pfn)            \
  template <>                              \
  struct HookTraits<HookId::hook_##symbol> {\
    using Function = pfn;                  \
  };
#include "gpuqos/intercept/hook_pfn.inc"
#undef GPUQOS_PFN

template <HookId id>
typename HookTraits<id>::Function real_function() noexcept {
  return reinterpret_cast<typename HookTraits<id>::Function>(real_function_address(id));
}

// What every hook's operation says about the hook itself.
template <HookId id>
void stamp(Operation& op) noexcept {
  op.hook = id;
  op.category = hook_category(id);
  op.captured = issued_into_capture(op);
}

// Ask the gate, call the driver, tell the gate: one operation (a whole call, or a chunk of one).
template <class Real, class... Args>
CUresult gated_call(Gate& g, const Operation& op, Real real, Args... args) noexcept {
  const Ticket ticket = g.before(op);
  const CUresult result = real(args...);
  g.after(op, ticket, result);
  return result;
}

// The body of every hook but the resolvers: describe, ask the gate, call the driver, tell the gate.
template <HookId id, class... Args>
CUresult intercept(Operation op, Args... args) noexcept {
  const NoCancel no_cancel;  // first: looking the driver up may log, and logging may register
  const auto real = real_function<id>();
  if (!real) return missing_real_function(id);
  stamp<id>(op);
  return gated_call(gate(), op, real, args...);
}

// `pointer` (a host pointer or a device address) moved on by `bytes`.
template <class Pointer>
Pointer advanced(Pointer pointer, std::uint64_t bytes) noexcept {
  if constexpr (std::is_pointer_v<Pointer>) {
    return reinterpret_cast<Pointer>(reinterpret_cast<std::uintptr_t>(pointer) + bytes);
  } else {
    return static_cast<Pointer>(pointer + bytes);
  }
}

// Whether the `bytes` from `pointer` lie within one allocation, as far as the driver says. The driver
// refuses a copy that overruns its allocation before moving a byte; chunks would move the ones
// before the overrun, so such a copy goes whole. A host pointer, or an address the driver does not
// describe (pageable memory in a unified copy), is taken as fitting unless its last byte is one the
// driver describes (the range runs into an allocation).
template <class Pointer>
bool fits_allocation(Pointer pointer, std::uint64_t bytes) noexcept {
  if constexpr (std::is_pointer_v<Pointer>) {
    return true;
  } else {
    using GetAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
    const auto get = reinterpret_cast<GetAttribute>(driver_helper(DriverHelper::pointer_get_attribute));
    const auto address = static_cast<CUdeviceptr>(pointer);
    CUdeviceptr start = 0;
    std::size_t size = 0;
    if (!get) return true;
    if (get(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address) != CUDA_SUCCESS ||
        get(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, address) != CUDA_SUCCESS) {
      CUdeviceptr last = 0;
      return bytes == 0 || (!__builtin_add_overflow(address, bytes - 1, &last) &&
                            get(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, last) != CUDA_SUCCESS);
    }
    return address >= start && address - start <= size && bytes <= size - (address - start);
  }
}

// The operation of a chunk of `op`: `bytes` of it, its host side `host_offset` bytes on and its
// unified sides `src_offset` and `dst_offset` on.
inline Operation chunk_of(const Operation& op, std::uint64_t bytes, std::uint64_t host_offset, std::uint64_t src_offset,
                          std::uint64_t dst_offset) noexcept {
  Operation part = op;
  part.bytes = bytes;
  if (part.host_ptr) part.host_ptr = advanced(part.host_ptr, host_offset);
  if (part.src_ptr) part.src_ptr = advanced(part.src_ptr, src_offset);
  if (part.dst_ptr) part.dst_ptr = advanced(part.dst_ptr, dst_offset);
  return part;
}

// A 1-D copy too large for the gate's chunk size: one describe/ask/call/tell per chunk, with the
// pointers moved on. The program sees one call: the first failure is returned and nothing after
// it is issued. A gate that lost the daemon meanwhile lets the remaining chunks straight through.
template <HookId id, class Dst, class Src, class Count, class... Rest>
CUresult intercept_in_chunks(Gate& g, const Operation& op, std::uint64_t chunk_bytes, Dst dst, Src src, Count bytes,
                             Rest... rest) noexcept {
  const auto real = real_function<id>();
  const std::uint64_t total = static_cast<std::uint64_t>(bytes);
  for (std::uint64_t done = 0; done < total; done += chunk_bytes) {
    const std::uint64_t part_bytes = std::min(chunk_bytes, total - done);
    const CUresult result = gated_call(g, chunk_of(op, part_bytes, done, done, done), real, advanced(dst, done),
                                       advanced(src, done), static_cast<Count>(part_bytes), rest...);
    if (result != CUDA_SUCCESS) return result;
  }
  return CUDA_SUCCESS;
}

// The body of the 1-D copy hooks (dst, src, ByteCount[, stream]: cuMemcpyHtoD/DtoH/DtoD, cuMemcpy
// and their Async, _v2 and per-thread forms): intercept<>, except that a copy larger than the
// gate's chunk size (low priority under a daemon that asks for it) goes in chunks. Launches never
// come here, so the check costs them nothing; a high-priority copy pays one relaxed load.
template <HookId id, class Dst, class Src, class Count, class... Rest>
CUresult intercept_copy(Operation op, Dst dst, Src src, Count bytes, Rest... rest) noexcept {
  const NoCancel no_cancel;  // first, as in intercept(); over the chunks too
  const auto real = real_function<id>();
  if (!real) return missing_real_function(id);
  stamp<id>(op);
  Gate& g = gate();
  const std::uint64_t chunk_bytes = g.copy_chunk_bytes();
  // Captured copies only record a graph node: one node, as the program asked.
  if (chunk_bytes != 0 && static_cast<std::uint64_t>(bytes) > chunk_bytes && !op.captured &&
      fits_allocation(dst, static_cast<std::uint64_t>(bytes)) && fits_allocation(src, static_cast<std::uint64_t>(bytes))) {
    return intercept_in_chunks<id>(g, op, chunk_bytes, dst, src, bytes, rest...);
  }
  return gated_call(g, op, real, dst, src, bytes, rest...);
}

// Whether a 2-D copy may go in bands as it would go whole: each side's pitch covers WidthInBytes
// plus its X and is at most the largest any GPU allows (CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2^31 - 1: the
// driver checks both of a copy of more than one row, and a band may be of one row, which it would
// not check), nothing of it wraps the address space, and its device sides (device or unified memory)
// lie within their allocations, as fits_allocation() tells. An array side goes whole (the driver
// checks it).
template <class Copy>
bool fits_allocations_2d(const Copy* copy) noexcept {
  constexpr std::uint64_t kMaxPitch = 2147483647;
  const auto fits = [&](CUmemorytype type, CUdeviceptr device, std::uint64_t x, std::uint64_t y, std::uint64_t pitch) {
    if (type == CU_MEMORYTYPE_ARRAY) return false;
    if (pitch > kMaxPitch || pitch < copy->WidthInBytes || pitch - copy->WidthInBytes < x) return false;
    // A band's first row must fit the struct's field (32 bits in the legacy CUDA_MEMCPY2D_v1).
    if (y + copy->Height - 1 > std::numeric_limits<std::remove_cvref_t<decltype(copy->srcY)>>::max()) return false;
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) return true;
    std::uint64_t span = 0, first = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(copy->Height) - 1, pitch, &span) ||
        __builtin_add_overflow(span, static_cast<std::uint64_t>(copy->WidthInBytes), &span) ||
        __builtin_mul_overflow(y, pitch, &first) || __builtin_add_overflow(first, x, &first) ||
        __builtin_add_overflow(first, static_cast<std::uint64_t>(device), &first)) {
      return false;
    }
    return fits_allocation(static_cast<CUdeviceptr>(first), span);
  };
  return fits(copy->srcMemoryType, copy->srcDevice, copy->srcXInBytes, copy->srcY, copy->srcPitch) &&
         fits(copy->dstMemoryType, copy->dstDevice, copy->dstXInBytes, copy->dstY, copy->dstPitch);
}

// The body of the 2-D copy hooks (a CUDA_MEMCPY2D[, stream]): as intercept_copy, a copy larger than
// the gate's chunk size goes in bands of whole rows, each at most the chunk size (at least one row),
// each a copy of its own from its first row (srcY and dstY moved on). A copy from or into a CUDA
// array, one whose pitch is short of its width, or one whose device side overruns its allocation
// goes whole (the driver refuses it whole), as do captured ones.
template <HookId id, class Copy, class... Rest>
CUresult intercept_copy_2d(Operation op, const Copy* copy, Rest... rest) noexcept {
  const NoCancel no_cancel;  // first, as in intercept(); over the bands too
  const auto real = real_function<id>();
  if (!real) return missing_real_function(id);
  stamp<id>(op);
  Gate& g = gate();
  const std::uint64_t chunk_bytes = g.copy_chunk_bytes();
  if (chunk_bytes == 0 || !copy || op.captured || op.bytes <= chunk_bytes || copy->WidthInBytes == 0 ||
      copy->Height < 2 || !fits_allocations_2d(copy)) {
    return gated_call(g, op, real, copy, rest...);
  }
  const std::uint64_t width = copy->WidthInBytes, height = copy->Height;
  const std::uint64_t band_rows = std::max<std::uint64_t>(1, chunk_bytes / width);
  const std::uint64_t host_pitch = copy->srcMemoryType == CU_MEMORYTYPE_HOST ? copy->srcPitch : copy->dstPitch;
  for (std::uint64_t done = 0; done < height; done += band_rows) {
    Copy band = *copy;
    band.Height = static_cast<decltype(band.Height)>(std::min(band_rows, height - done));
    band.srcY = static_cast<decltype(band.srcY)>(copy->srcY + done);
    band.dstY = static_cast<decltype(band.dstY)>(copy->dstY + done);
    const Operation part = chunk_of(op, width * band.Height, done * host_pitch, done * copy->srcPitch, done * copy->dstPitch);
    const CUresult result = gated_call(g, part, real, &band, rest...);
    if (result != CUDA_SUCCESS) return result;
  }
  return CUDA_SUCCESS;
}

// ---- Describing arguments. Every pointer may be null or invalid in a bad call: the driver rejects
// it after us, so we read through pointers only after a null check and never past a count.

inline CUstream launch_stream(const CUlaunchConfig* config) { return config ? config->hStream : nullptr; }
inline Dim3 launch_grid(const CUlaunchConfig* config) {
  return config ? Dim3{config->gridDimX, config->gridDimY, config->gridDimZ} : Dim3{};
}
inline Dim3 launch_block(const CUlaunchConfig* config) {
  return config ? Dim3{config->blockDimX, config->blockDimY, config->blockDimZ} : Dim3{};
}
inline unsigned launch_shared_mem_bytes(const CUlaunchConfig* config) { return config ? config->sharedMemBytes : 0; }

inline CopyDirection direction_of(CUmemorytype src, CUmemorytype dst) {
  const bool src_host = src == CU_MEMORYTYPE_HOST, dst_host = dst == CU_MEMORYTYPE_HOST;
  const bool src_device = src == CU_MEMORYTYPE_DEVICE || src == CU_MEMORYTYPE_ARRAY;
  const bool dst_device = dst == CU_MEMORYTYPE_DEVICE || dst == CU_MEMORYTYPE_ARRAY;
  if (src_host && dst_device) return CopyDirection::host_to_device;
  if (src_device && dst_host) return CopyDirection::device_to_host;
  if (src_device && dst_device) return CopyDirection::device_to_device;
  if (src_host && dst_host) return CopyDirection::host_to_host;
  return CopyDirection::unknown;  // unified addressing: the pointers tell, not the call
}

// CUDA_MEMCPY2D, CUDA_MEMCPY3D (legacy and _v2) and CUDA_MEMCPY3D_PEER.
template <class Copy>
std::uint64_t copy_bytes(const Copy* copy) {
  if (!copy) return 0;
  std::uint64_t bytes = static_cast<std::uint64_t>(copy->WidthInBytes) * copy->Height;
  if constexpr (requires { copy->Depth; }) bytes *= copy->Depth;
  return bytes;
}
template <class Copy>
CopyDirection copy_direction(const Copy* copy) {
  return copy ? direction_of(copy->srcMemoryType, copy->dstMemoryType) : CopyDirection::unknown;
}

// The host side of a 2D/3D copy between host and device memory; nullptr otherwise.
template <class Copy>
const void* copy_host_ptr(const Copy* copy) {
  if (!copy) return nullptr;
  if constexpr (requires { copy->srcHost; }) {
    if (copy->srcMemoryType == CU_MEMORYTYPE_HOST) return copy->srcHost;
    if (copy->dstMemoryType == CU_MEMORYTYPE_HOST) return copy->dstHost;
  }
  return nullptr;
}

// The addresses of a 2D/3D copy's CU_MEMORYTYPE_UNIFIED sides (0 for the others).
template <class Copy>
CUdeviceptr copy_unified_src(const Copy* copy) {
  return copy && copy->srcMemoryType == CU_MEMORYTYPE_UNIFIED ? copy->srcDevice : 0;
}
template <class Copy>
CUdeviceptr copy_unified_dst(const Copy* copy) {
  return copy && copy->dstMemoryType == CU_MEMORYTYPE_UNIFIED ? copy->dstDevice : 0;
}
inline CUdeviceptr first_ptr(const CUdeviceptr* pointers, size_t count) {
  return pointers && count > 0 ? pointers[0] : 0;
}

inline std::uint64_t batch_bytes(const size_t* sizes, size_t count) {
  std::uint64_t bytes = 0;
  for (size_t i = 0; sizes && i < count; ++i) bytes += sizes[i];
  return bytes;
}
// Extents of array copies are in elements, not bytes: an estimate for those.
inline std::uint64_t batch_bytes(const CUDA_MEMCPY3D_BATCH_OP* ops, size_t count) {
  std::uint64_t bytes = 0;
  for (size_t i = 0; ops && i < count; ++i) bytes += ops[i].extent.width * ops[i].extent.height * ops[i].extent.depth;
  return bytes;
}

}  // namespace gpuqos::intercept

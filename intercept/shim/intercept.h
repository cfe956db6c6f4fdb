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

#include "describe.h"
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

// Whether an async copy's stream has nothing queued (cuStreamQuery: done). Chunks are granted one
// after another, each once the one before is done (one best-effort transfer in flight, say), so the
// call returns only when all but its last chunk ran: onto a stream with work queued it waited for
// that work, and onto one waiting for something the program does after the call, about 2 s a chunk
// (gpuqosd's limit for a stuck op; a review). Such a copy goes whole, as the program asked.
// CUDA's implicit synchronisation counts too: a blocking stream (created without
// CU_STREAM_NON_BLOCKING) and the per-thread default stream wait for the legacy default stream's
// work, so they are idle only when it is too; the legacy stream waits for every blocking stream's,
// which no query can see, so it never is (a review: a 64-MiB copy onto a blocking stream behind a
// legacy host function took 30 s, 0.0 ms without the shim).
// The queries are made in relaxed capture mode: in the default (global) one, while this thread or
// another captures a graph, they are "potentially unsafe" calls that would invalidate the capture.
// And the legacy stream is not queried while a blocking stream of the context captures (then such a
// stream is taken as busy): it is unusable then, and using it invalidates that capture whatever the
// mode (a review: a large async copy onto one blocking stream broke the graph another thread was
// capturing on another). cuStreamIsCapturing is the one question it takes without harm. A capture
// begun between the two calls is still exposed (a window of one driver call).
inline bool stream_is_idle(const Operation& op) noexcept {
  using StreamQuery = CUresult (*)(CUstream);
  using StreamGetFlags = CUresult (*)(CUstream, unsigned int*);
  using StreamIsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  const auto query = driver<StreamQuery>(DriverHelper::stream_query);
  if (query == nullptr) return false;
  const bool per_thread = op.stream == CU_STREAM_PER_THREAD || (op.stream == nullptr && op.per_thread);
  if (!per_thread && (op.stream == nullptr || op.stream == CU_STREAM_LEGACY)) return false;
  const CUstream stream = per_thread ? CU_STREAM_PER_THREAD : op.stream;
  const RelaxedCaptureMode relaxed;
  if (!relaxed.active() || query(stream) != CUDA_SUCCESS) return false;
  unsigned int flags = 0;
  const auto get_flags = driver<StreamGetFlags>(DriverHelper::stream_get_flags);
  const bool non_blocking = !per_thread && get_flags && get_flags(stream, &flags) == CUDA_SUCCESS &&
                            (flags & CU_STREAM_NON_BLOCKING) != 0;
  if (non_blocking) return true;
  const auto is_capturing = driver<StreamIsCapturing>(DriverHelper::stream_is_capturing);
  CUstreamCaptureStatus legacy = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing && is_capturing(CU_STREAM_LEGACY, &legacy) == CUDA_SUCCESS &&
         legacy == CU_STREAM_CAPTURE_STATUS_NONE && query(CU_STREAM_LEGACY) == CUDA_SUCCESS;
}

// The body of the 1-D copy hooks (dst, src, ByteCount[, stream]: cuMemcpyHtoD/DtoH/DtoD, cuMemcpy
// and their Async, _v2 and per-thread forms): intercept<>, except that a copy between host and
// device memory (crosses_host_link) larger than the gate's chunk size (low priority under a daemon
// that asks for it) goes in chunks: a synchronous one always, an async one only onto a stream with
// nothing queued (stream_is_idle). A synchronous copy that succeeded is told to the gate when it
// returns (Gate::synchronous_copy_returned). Launches never come here, so the check costs them
// nothing; a high-priority copy pays one relaxed load.
template <HookId id, class Dst, class Src, class Count, class... Rest>
CUresult intercept_copy(Operation op, Dst dst, Src src, Count bytes, Rest... rest) noexcept {
  constexpr bool kAsync = sizeof...(Rest) > 0;  // its stream, the one argument after ByteCount
  const NoCancel no_cancel;  // first, as in intercept(); over the chunks too
  const auto real = real_function<id>();
  if (!real) return missing_real_function(id);
  stamp<id>(op);
  op.synchronous = !kAsync;
  Gate& g = gate();
  const std::uint64_t chunk_bytes = g.copy_chunk_bytes();
  // Captured copies only record a graph node: one node, as the program asked.
  const CUresult result =
      chunk_bytes != 0 && static_cast<std::uint64_t>(bytes) > chunk_bytes && !op.captured && crosses_host_link(op) &&
              fits_allocation(dst, static_cast<std::uint64_t>(bytes)) &&
              fits_allocation(src, static_cast<std::uint64_t>(bytes)) && (!kAsync || stream_is_idle(op))
          ? intercept_in_chunks<id>(g, op, chunk_bytes, dst, src, bytes, rest...)
          : gated_call(g, op, real, dst, src, bytes, rest...);
  if (!kAsync && result == CUDA_SUCCESS) g.synchronous_copy_returned(op);
  return result;
}

// A 3-D copy's struct (CUDA_MEMCPY3D, legacy and _v2); a 2-D one is one slice with no Z.
template <class Copy>
concept ThreeDimensionalCopy = requires(const Copy& copy) {
  copy.Depth;
  copy.srcZ;
  copy.srcHeight;
};

// A side of a 2-D or 3-D copy: its memory, base address (the host pointer's for host memory), first
// byte's (X, Y, Z), pitch and rows per slice (0 for a 2-D copy, which has one slice).
struct PitchedSide {
  CUmemorytype type;
  std::uint64_t base, x, y, z, pitch, rows;
};
inline std::uint64_t side_base(CUmemorytype type, const void* host, std::uint64_t device) noexcept {
  return type == CU_MEMORYTYPE_HOST ? reinterpret_cast<std::uintptr_t>(host) : device;
}
template <class Copy>
PitchedSide source_side(const Copy& copy) noexcept {
  PitchedSide side{copy.srcMemoryType, side_base(copy.srcMemoryType, copy.srcHost, copy.srcDevice),
                   copy.srcXInBytes,   copy.srcY, 0, copy.srcPitch, 0};
  if constexpr (ThreeDimensionalCopy<Copy>) side.z = copy.srcZ, side.rows = copy.srcHeight;
  return side;
}
template <class Copy>
PitchedSide destination_side(const Copy& copy) noexcept {
  PitchedSide side{copy.dstMemoryType, side_base(copy.dstMemoryType, copy.dstHost, copy.dstDevice),
                   copy.dstXInBytes,   copy.dstY, 0, copy.dstPitch, 0};
  if constexpr (ThreeDimensionalCopy<Copy>) side.z = copy.dstZ, side.rows = copy.dstHeight;
  return side;
}
template <class Copy>
std::uint64_t depth_of(const Copy& copy) noexcept {
  if constexpr (ThreeDimensionalCopy<Copy>) {
    return copy.Depth;
  } else {
    return 1;
  }
}

// The offset from a side's first byte of row `row` of slice `slice` of the copy (no overflow: the
// whole copy's span was checked).
inline std::uint64_t pitched_offset(const PitchedSide& side, std::uint64_t slice, std::uint64_t row) noexcept {
  return (slice * side.rows + row) * side.pitch;
}

// Whether a 2-D or 3-D copy may go in bands as it would go whole: each side's pitch covers
// WidthInBytes plus its X and is at most the largest any GPU allows (CU_DEVICE_ATTRIBUTE_MAX_PITCH,
// 2^31 - 1: the driver checks it, and a band may be of one row, which it would not check); each
// side's slice height, where given (more than one slice needs it), covers Height plus its Y (the
// driver checks that too, and a band of one slice needs none); a 3-D copy's levels of detail are 0
// and its reserved pointers null; nothing of either side wraps the address space; a band's first
// row and slice fit the struct's fields (32 bits in the legacy structs); and each side lies within
// its allocation, or a host side that is none runs into none, as fits_allocation() tells. An array
// side goes whole (the driver checks it).
template <class Copy>
bool fits_allocations_pitched(const Copy* copy) noexcept {
  constexpr std::uint64_t kMaxPitch = 2147483647;
  using Field = std::remove_cvref_t<decltype(copy->srcY)>;
  const std::uint64_t width = copy->WidthInBytes, height = copy->Height, depth = depth_of(*copy);
  if constexpr (ThreeDimensionalCopy<Copy>) {
    if (copy->srcLOD != 0 || copy->dstLOD != 0 || copy->reserved0 != nullptr || copy->reserved1 != nullptr) return false;
  }
  const auto fits = [&](const PitchedSide& side) {
    if (side.type == CU_MEMORYTYPE_ARRAY) return false;
    if (side.pitch > kMaxPitch || side.pitch < width || side.pitch - width < side.x) return false;
    if ((depth > 1 || side.rows != 0) && (side.rows < height || side.rows - height < side.y)) return false;
    std::uint64_t last_row = 0, last_slice = 0;
    if (__builtin_add_overflow(side.y, height - 1, &last_row) || last_row > std::numeric_limits<Field>::max() ||
        __builtin_add_overflow(side.z, depth - 1, &last_slice) || last_slice > std::numeric_limits<Field>::max()) {
      return false;
    }
    std::uint64_t span = 0, rows = 0, first = 0, end = 0;
    if (__builtin_mul_overflow(depth - 1, side.rows, &rows) || __builtin_add_overflow(rows, height - 1, &rows) ||
        __builtin_mul_overflow(rows, side.pitch, &span) || __builtin_add_overflow(span, width, &span) ||
        __builtin_mul_overflow(side.z, side.rows, &first) || __builtin_add_overflow(first, side.y, &first) ||
        __builtin_mul_overflow(first, side.pitch, &first) || __builtin_add_overflow(first, side.x, &first) ||
        __builtin_add_overflow(first, side.base, &first) || __builtin_add_overflow(first, span, &end)) {
      return false;
    }
    // A host side is an address too: one the driver describes (page-locked) must fit its range, and
    // pageable memory must not run into a device allocation (the driver refuses either whole).
    return fits_allocation(static_cast<CUdeviceptr>(first), span);
  };
  return fits(source_side(*copy)) && fits(destination_side(*copy));
}

// A 2-D or 3-D copy (a CUDA_MEMCPY2D or CUDA_MEMCPY3D[, stream]) through the gate: as
// intercept_copy, a copy larger than the gate's chunk size goes in bands, each at most the chunk
// size and a copy of its own from its first row and slice (srcY/dstY and srcZ/dstZ moved on): slabs
// of whole slices when a slice fits a chunk, else bands of whole rows of one slice (at least one
// row). Only a copy between host and device memory is split (crosses_host_link). A copy from or
// into a CUDA array, one whose pitch or slice height is short of what it
// copies, or one whose device side overruns its allocation goes whole (the driver refuses it
// whole), as do captured ones and async ones onto a stream with work queued (stream_is_idle).
template <HookId id, class Copy, class... Rest>
CUresult copy_pitched_in_bands(Gate& g, const Operation& op, const Copy* copy, Rest... rest) noexcept {
  const auto real = real_function<id>();
  const std::uint64_t chunk_bytes = g.copy_chunk_bytes();
  std::uint64_t slice_bytes = 0, total = 0;
  if (chunk_bytes == 0 || !copy || op.captured || copy->WidthInBytes == 0 || copy->Height == 0 ||
      depth_of(*copy) == 0 || __builtin_mul_overflow(copy->WidthInBytes, copy->Height, &slice_bytes) ||
      __builtin_mul_overflow(slice_bytes, depth_of(*copy), &total) || total <= chunk_bytes ||
      copy->Height * depth_of(*copy) < 2 || !crosses_host_link(op) || !fits_allocations_pitched(copy) ||
      (sizeof...(Rest) > 0 && !stream_is_idle(op))) {  // an async one onto queued work: whole
    return gated_call(g, op, real, copy, rest...);
  }
  const std::uint64_t width = copy->WidthInBytes, height = copy->Height, depth = depth_of(*copy);
  const PitchedSide src = source_side(*copy), dst = destination_side(*copy);
  const PitchedSide& host = src.type == CU_MEMORYTYPE_HOST ? src : dst;
  // One band: `slices` slices from slice `slice`, each `rows` rows from row `row`.
  const auto band_of = [&](std::uint64_t slice, std::uint64_t slices, std::uint64_t row, std::uint64_t rows) {
    Copy band = *copy;
    band.Height = static_cast<decltype(band.Height)>(rows);
    band.srcY = static_cast<decltype(band.srcY)>(src.y + row);
    band.dstY = static_cast<decltype(band.dstY)>(dst.y + row);
    if constexpr (ThreeDimensionalCopy<Copy>) {
      band.Depth = static_cast<decltype(band.Depth)>(slices);
      band.srcZ = static_cast<decltype(band.srcZ)>(src.z + slice);
      band.dstZ = static_cast<decltype(band.dstZ)>(dst.z + slice);
    }
    const Operation part = chunk_of(op, width * rows * slices, pitched_offset(host, slice, row),
                                    pitched_offset(src, slice, row), pitched_offset(dst, slice, row));
    return gated_call(g, part, real, &band, rest...);
  };
  if (depth > 1 && slice_bytes <= chunk_bytes) {
    const std::uint64_t slab = chunk_bytes / slice_bytes;
    for (std::uint64_t slice = 0; slice < depth; slice += slab) {
      if (const CUresult result = band_of(slice, std::min(slab, depth - slice), 0, height); result != CUDA_SUCCESS) {
        return result;
      }
    }
    return CUDA_SUCCESS;
  }
  const std::uint64_t band_rows = std::max<std::uint64_t>(1, chunk_bytes / width);
  for (std::uint64_t slice = 0; slice < depth; ++slice) {
    for (std::uint64_t row = 0; row < height; row += band_rows) {
      if (const CUresult result = band_of(slice, 1, row, std::min(band_rows, height - row)); result != CUDA_SUCCESS) {
        return result;
      }
    }
  }
  return CUDA_SUCCESS;
}

// The body of the 2-D and 3-D copy hooks: copy_pitched_in_bands, and as intercept_copy, the gate
// told of a synchronous one that returned.
template <HookId id, class Copy, class... Rest>
CUresult intercept_copy_pitched(Operation op, const Copy* copy, Rest... rest) noexcept {
  const NoCancel no_cancel;  // first, as in intercept(); over the bands too
  if (!real_function<id>()) return missing_real_function(id);
  stamp<id>(op);
  op.synchronous = sizeof...(Rest) == 0;
  Gate& g = gate();
  const CUresult result = copy_pitched_in_bands<id>(g, op, copy, rest...);
  if (sizeof...(Rest) == 0 && result == CUDA_SUCCESS) g.synchronous_copy_returned(op);
  return result;
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

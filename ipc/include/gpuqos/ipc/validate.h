// Validation of the descriptors a client writes into its segment: the one place they are checked.
//
// Everything in a client's rings is untrusted (a buggy or hostile process can write any bytes).
// The daemon pops a descriptor (which copies it out of shared memory, so it cannot change under
// the check), validates the copy here, and disconnects the client on the first failure. The
// functions have no side effects; reserved bytes are ignored.
#pragma once

#include <cstdint>

#include "gpuqos/ipc/descriptor.h"
#include "gpuqos/ipc/result.h"

namespace gpuqos::ipc {

// CUDA's limits on a launch (compute capability 9.0).
inline constexpr std::uint32_t kMaxGridX = 2'147'483'647;
inline constexpr std::uint32_t kMaxGridYZ = 65'535;
inline constexpr std::uint32_t kMaxBlockXY = 1024;
inline constexpr std::uint32_t kMaxBlockZ = 64;
inline constexpr std::uint32_t kMaxThreadsPerBlock = 1024;
inline constexpr std::uint32_t kMaxSharedBytesPerBlock = 227 * 1024;  // opt-in maximum
inline constexpr std::uint32_t kMaxParamBytes = 32'764;               // CUDA 12.1 and later
inline constexpr std::uint32_t kMaxSmCount = 4096;                     // no GPU has a tenth of it
inline constexpr std::uint64_t kMaxOpBytes = std::uint64_t{1} << 48;  // no device holds more

// An op is valid when: kind is an enumerator; seq > previous_seq (0 before the first op);
// device < device_count; posted_ns > 0; a kernel has a registered id (!= 0), grid and block
// within CUDA's limits, shared and parameter bytes within limits, arg_count <= 8, no copy fields;
// a copy has direction h2d/d2h (host memory pinned or pageable) or d2d (host memory none); a
// memset has direction memset; a graph, sync or query mark has neither; only kernels carry
// launch geometry or arguments (a graph may carry an id).
Status validate_op(const OpDescriptor& op, std::uint64_t previous_seq, std::uint32_t device_count);

// A completion is valid when 1 <= seq <= highest_posted_seq and 0 <= start_ns <= end_ns. (It may
// arrive out of order across streams; duplicates are the daemon's bookkeeping to ignore.)
Status validate_completion(const CompletionDescriptor& completion, std::uint64_t highest_posted_seq);

}  // namespace gpuqos::ipc

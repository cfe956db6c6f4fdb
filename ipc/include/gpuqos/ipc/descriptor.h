// The fixed-size descriptors that travel through a client's shared-memory rings.
//
// client -> daemon: OpDescriptor (every kernel launch, copy, memset, graph launch, draining
// synchronisation and explicit query mark) and CompletionDescriptor (when it ran on the device).
// daemon -> client: GrantDescriptor (which posted ops may go).
//
// Both processes are on one machine and built from one tree: fixed-width, native-endian,
// trivially copyable, standard-layout structs whose size and offsets are pinned below. The daemon
// copies a descriptor out of the ring before it looks at it and then validates the copy
// (validate.h): the client can rewrite the slot at any moment. Enums have a fixed underlying type,
// so any bit pattern read from another process is a valid object; validation rejects the values
// that are not enumerators. Reserved bytes are written as zero and ignored when read, so a minor
// version can give them meaning.
//
// Kernel names do not travel here: the shim registers each name once on the registration socket
// (registration.h, KernelName) *before* it posts the first op that uses its id, so by the time the
// daemon pops that op the name is already in its socket's receive queue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gpuqos::ipc {

enum class OpKind : std::uint8_t {
  kernel = 0,   // cuLaunchKernel and friends
  copy,         // every cuMemcpy* form
  memset,       // every cuMemset* form
  graph,        // cuGraphLaunch: scheduled as one unit
  sync,         // a synchronisation call that drains work (stream == 0: the whole context)
  query_begin,  // explicit query mark (a job that does not rely on inferred boundaries)
  query_end,
  query_arrived,  // a request arrived (posted_ns: when); the next query_begin starts it. Minor 2
};
inline constexpr std::uint8_t kOpKindCount = 8;

enum class CopyDirection : std::uint8_t { none = 0, h2d, d2h, d2d, memset };
inline constexpr std::uint8_t kCopyDirectionCount = 5;

enum class HostMemory : std::uint8_t { none = 0, pinned, pageable };
inline constexpr std::uint8_t kHostMemoryCount = 3;

inline constexpr std::uint32_t kMaxScalarArgs = 8;
// A graph launch's identity (OpDescriptor::kernel_id): the shim numbers a process's live graph execs
// from 1, the lowest free first, up to this many; gpuqosd keeps a model per job and number.
inline constexpr std::uint32_t kMaxGraphIds = 64;

// One operation posted by the shim. 192 bytes: the fields need 140, so 128 could not hold them;
// three whole cache lines keep neighbouring ring slots from sharing a line.
struct OpDescriptor {
  std::uint64_t seq;            // per client, strictly increasing from 1
  std::uint64_t stream;         // opaque stream id: the CUstream handle value (0: legacy default
                                // stream), or with bit 63 set one thread's per-thread default stream
  std::int64_t posted_ns;       // CLOCK_MONOTONIC when the program made the call
  std::uint64_t bytes;          // copy, memset: bytes moved or set
  std::uint32_t device;         // CUDA device ordinal
  std::uint32_t kernel_id;      // kernel: id registered with KernelName; graph: which of the
                                // process's graphs (1..kMaxGraphIds; 0: not said); else 0
  std::uint32_t grid[3];        // kernel: gridDim x, y, z
  std::uint32_t block[3];       // kernel: blockDim x, y, z
  std::uint32_t shared_bytes;   // kernel: dynamic shared memory
  std::uint32_t param_bytes;    // kernel: total size of the kernel's parameters
  OpKind kind;
  CopyDirection direction;      // copy: h2d, d2h or d2d; memset: memset; else none
  HostMemory host_memory;       // copy h2d/d2h: pinned or pageable; else none
  std::uint8_t arg_count;       // kernel: how many of args are meaningful, <= kMaxScalarArgs
  // kernel (1.5): the SM count of the device it runs on, as the driver says; 0: not said (an older
  // shim). The daemon's predictor counts a launch's waves by it.
  std::uint32_t sm_count;
  std::uint64_t args[kMaxScalarArgs];  // kernel: scalar arguments, zero-extended to 64 bits
  // query_begin (1.2): the posted_ns of the query_arrived mark of the request it begins (<= 0: none
  // said). The shim pairs them, so a mark lost on the way cannot pair later requests wrongly.
  std::int64_t arrived_ns;
  // (1.7) The UUID of the device `device` names, as cuDeviceGetUuid says (all zero: not said: an
  // older shim, a mark from a thread with no context, or a driver that could not say). Ordinals
  // are each process's own numbering (CUDA_VISIBLE_DEVICES); the daemon tells devices apart by this.
  std::uint8_t device_uuid[16];
  std::uint8_t reserved[24];
};

enum CompletionFlags : std::uint32_t {
  kCompletionExact = 0,
  // The times bound a batch of ops on the stream that finished together (one event for several),
  // not this op alone: good for the backlog, not for learning this op's duration.
  kCompletionCoarse = 1u << 0,
};

// The device times of one op, reported by the shim once it has finished.
struct CompletionDescriptor {
  std::uint64_t seq;       // the op's seq
  std::int64_t start_ns;   // device timeline (as the shim's completion source reports it)
  std::int64_t end_ns;
  std::int32_t status;     // 0: ran; otherwise the driver's error code (nothing ran)
  std::uint32_t flags;     // CompletionFlags; unknown bits are ignored
};

enum GrantFlags : std::uint32_t {
  kGrantNone = 0,
  kGrantDetach = 1u << 0,  // the daemon is going away: run unmanaged, re-register later
};

// The daemon's answer: every op with seq <= granted_through_seq may be issued.
struct GrantDescriptor {
  std::uint64_t granted_through_seq;
  std::int64_t credit_ns;   // optional budget of predicted device time the shim may spend alone
  std::uint32_t flags;      // GrantFlags
  std::uint32_t reserved0;
  std::uint64_t reserved1;
};

#define GPUQOS_IPC_WIRE_STRUCT(T, bytes)                                                     \
  static_assert(std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>, #T " must be POD"); \
  static_assert(sizeof(T) == (bytes), #T " changed size: bump the segment version")
GPUQOS_IPC_WIRE_STRUCT(OpDescriptor, 192);
GPUQOS_IPC_WIRE_STRUCT(CompletionDescriptor, 32);
GPUQOS_IPC_WIRE_STRUCT(GrantDescriptor, 32);
#undef GPUQOS_IPC_WIRE_STRUCT

static_assert(offsetof(OpDescriptor, device) == 32);
static_assert(offsetof(OpDescriptor, grid) == 40);
static_assert(offsetof(OpDescriptor, block) == 52);
static_assert(offsetof(OpDescriptor, shared_bytes) == 64);
static_assert(offsetof(OpDescriptor, kind) == 72);
static_assert(offsetof(OpDescriptor, arg_count) == 75);
static_assert(offsetof(OpDescriptor, args) == 80);
static_assert(offsetof(OpDescriptor, arrived_ns) == 144);
static_assert(offsetof(OpDescriptor, device_uuid) == 152);
static_assert(offsetof(OpDescriptor, reserved) == 168);
static_assert(offsetof(CompletionDescriptor, status) == 24);
static_assert(offsetof(GrantDescriptor, flags) == 16);

}  // namespace gpuqos::ipc

// The private interface between simgpu's libcuda.so.1 and simgpu's libcupti.so: activity hooks.
//
// libcupti finds simgpuActivitySubscribe with dlsym on libcuda.so.1 and hands it a table of hooks.
// The driver then reports each kernel launch, copy and memset it sends to simgpud twice: on the
// submitting thread when it is submitted, and on the driver's receiver thread when simgpud says it
// completed, with the device's own start and end times. A graph launch is reported as its kernel,
// copy and memset nodes (those captured while a subscriber listened), each with the launch's
// correlation id and the graph's id, and completed as one: the device times a graph as one unit,
// not node by node. Event records, waits and host functions are not reported.
//
// Contract for the hooks: both are called with the driver's lock held, so they must be short,
// must not block and must never call into the driver. For one correlation id, submitted() is
// called before completed() (the lock orders them); a graph launch's nodes all share one
// correlation id and one completed(). A correlation id is the driver's op id:
// unique in the process and increasing. With no subscriber the driver pays one relaxed atomic load
// per submitted op.
//
// Both libraries are built from one tree: fixed-width fields, version checked at subscription.
#pragma once

#include <cstdint>

namespace gpuqos::simgpu::activity {

inline constexpr std::uint32_t kVersion = 2;

enum class OpKind : std::uint32_t { kernel = 1, memcpy, memset };
enum class CopyKind : std::uint32_t { unknown = 0, htod, dtoh, dtod, htoh };
enum class MemoryKind : std::uint32_t { unknown = 0, pageable, pinned, device };

// One submitted op. Pointers are valid for the duration of the call only.
struct SubmittedOp {
  OpKind kind;
  std::uint32_t device;   // CUDA device ordinal
  std::uint32_t context;  // the driver's context id
  std::uint32_t stream;   // the driver's stream id
  std::uint64_t correlation;
  std::uint32_t async;    // copy, memset: an *Async call
  std::uint32_t pad0;
  // kernel
  const char* name;
  std::uint32_t grid[3];
  std::uint32_t block[3];
  std::uint32_t dynamic_shared_bytes;
  std::uint32_t static_shared_bytes;
  // memcpy, memset
  std::uint64_t bytes;
  CopyKind copy_kind;
  MemoryKind src_memory;  // memcpy
  MemoryKind dst_memory;  // memcpy; memset: where it sets
  std::uint32_t memset_value;
  // A node of a graph launch: its graph's id (0: not a graph's) and its place among the launch's
  // reported nodes (0: the first, which alone stands for the launch's API call).
  std::uint32_t graph_id;
  std::uint32_t graph_node;
};

// When the device ran it, in CLOCK_MONOTONIC ns. status != 0: the device refused it, nothing ran.
struct Completion {
  std::uint64_t correlation;
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::int32_t status;
  std::uint32_t pad0;
};

struct Hooks {
  std::uint32_t version;  // kVersion
  std::uint32_t pad0;
  void (*submitted)(const SubmittedOp* op);
  void (*completed)(const Completion* completion);
};

// simgpuActivitySubscribe(hooks): from now on the driver calls `hooks` (nullptr: stop calling).
// The table and its functions must stay valid for the life of the process (libcupti is loaded
// RTLD_NODELETE). Returns 0, or -1 when hooks->version is not kVersion.
inline constexpr const char* kSubscribeSymbol = "simgpuActivitySubscribe";
using SubscribeFunction = int (*)(const Hooks* hooks);

}  // namespace gpuqos::simgpu::activity

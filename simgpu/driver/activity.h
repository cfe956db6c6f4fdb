// The driver's side of the activity hooks (gpuqos/simgpu/activity.h): what libcupti is told.
//
// Every report_* function is called with the driver's lock held; it costs one relaxed atomic load
// when nobody subscribed. The submit reports go right after submit() gave the op its id and before
// anything may release the lock, so the completion report of the same op always comes after.
#pragma once

#include <cstddef>
#include <cstdint>

#include <string>

#include "driver.h"
#include "gpuqos/simgpu/activity.h"

namespace gpuqos::simgpu::driver {

struct KernelShape {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
};

// What a graph launch reports of a node captured while a subscriber listened (GraphNode::report).
struct NodeReport {
  activity::SubmittedOp op{};  // correlation, stream, context, device and graph set at each launch
  std::string name;            // a kernel's (op.name points into it at each launch)
};

// op_id 0: captured into a graph (then kept as the node's report, while a subscriber listens), or
// not submitted: nothing is reported.
void report_kernel(std::uint64_t op_id, const CUfunc_st& fn, const CUstream_st& stream, const KernelShape& shape);
void report_copy(std::uint64_t op_id, const CUstream_st& stream, const void* dst, const void* src, std::size_t bytes,
                 bool async);
void report_memset(std::uint64_t op_id, const CUstream_st& stream, std::size_t bytes, std::uint32_t value, bool async);

// A graph launch submitted as op_id: each of its nodes that has a report.
void report_graph_launch(std::uint64_t op_id, const CUstream_st& stream, const GraphExec& exec);

// simgpud's completion of any op (those never reported at submit are ignored by the subscriber).
void report_completion(const wire::CompletionMsg& msg);

}  // namespace gpuqos::simgpu::driver

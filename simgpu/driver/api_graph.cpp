// Driver API: stream capture and graphs. A captured graph is the linear list of the kernels,
// copies and memsets its stream saw; a launch runs them in order as one unit on the device.
#include <utility>

#include "activity.h"
#include "driver.h"

using namespace gpuqos::simgpu::driver;
namespace wire = gpuqos::simgpu::wire;

namespace {

CUresult begin_capture(CUstream hstream, CUstreamCaptureMode mode, bool per_thread) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (hstream == nullptr && !per_thread) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // legacy stream
  if (hstream == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  stream->capture = new Graph();
  stream->capture_mode = mode;
  return CUDA_SUCCESS;
}

CUresult end_capture(CUstream hstream, CUgraph* graph, bool per_thread) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (!stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* g = stream->capture;
  stream->capture = nullptr;
  if (std::exchange(stream->capture_invalidated, false)) {
    delete g;
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  d.graphs.insert(g);
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream hstream, CUstreamCaptureStatus* status, bool per_thread) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream == stream->ctx->legacy && blocking_stream_captures(stream->ctx, /*invalidate=*/false)) {
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  *status = !stream->capture               ? CU_STREAM_CAPTURE_STATUS_NONE
            : stream->capture_invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                          : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

CUresult graph_launch(CUgraphExec hexec, CUstream hstream, bool per_thread) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  auto* exec = reinterpret_cast<GraphExec*>(hexec);
  if (!d.graph_execs.contains(exec)) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (exec->nodes.size() > wire::kMaxGraphNodes) {
    log_once("graph with more than " + std::to_string(wire::kMaxGraphNodes) + " nodes is not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  wire::WireOp op{};
  op.kind = wire::WireOpKind::graph;
  std::uint64_t op_id = 0;
  if (CUresult r = submit(stream, op, {}, nullptr, {}, &exec->nodes, &op_id); r != CUDA_SUCCESS) return r;
  report_graph_launch(op_id, *stream, *exec);
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return begin_capture(s, mode, false);
}
SIMGPU_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return begin_capture(s, mode, true);
}
// The calling thread's capture interaction mode, swapped with *mode. simgpu records it for the
// caller's sake only: it does not invalidate captures for calls another thread makes.
SIMGPU_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  switch (*mode) {
    case CU_STREAM_CAPTURE_MODE_GLOBAL:
    case CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
    case CU_STREAM_CAPTURE_MODE_RELAXED:
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::swap(thread_mode, *mode);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* g) { return end_capture(s, g, false); }
SIMGPU_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) { return end_capture(s, g, true); }
SIMGPU_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* st) { return is_capturing(s, st, false); }
SIMGPU_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* st) {
  return is_capturing(s, st, true);
}
SIMGPU_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return graph_launch(exec, s, false); }
SIMGPU_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return graph_launch(exec, s, true); }

SIMGPU_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  if (!graph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  auto* g = new Graph();
  d.graphs.insert(g);
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  auto* g = reinterpret_cast<Graph*>(graph);
  if (!d.graphs.contains(g)) return CUDA_ERROR_INVALID_HANDLE;
  auto* e = new GraphExec{g->nodes, d.next_graph_id++};
  d.graph_execs.insert(e);
  *exec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  auto* g = reinterpret_cast<Graph*>(graph);
  if (!d.graphs.erase(g)) return CUDA_ERROR_INVALID_HANDLE;
  delete g;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  auto* e = reinterpret_cast<GraphExec*>(exec);
  if (!d.graph_execs.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
  delete e;
  return CUDA_SUCCESS;
}

// Driver API: streams, events, host functions and kernel launches.
#include <algorithm>
#include <cstring>

#include "activity.h"
#include "driver.h"

using namespace gpuqos::simgpu::driver;
namespace wire = gpuqos::simgpu::wire;

namespace {

wire::WireOp simple_op(wire::WireOpKind kind) {
  wire::WireOp op{};
  op.kind = kind;
  return op;
}

CUresult stream_create(CUstream* out, unsigned flags, int priority) {
  if (!out || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  auto kind = (flags & CU_STREAM_NON_BLOCKING) ? wire::WireStreamKind::non_blocking : wire::WireStreamKind::blocking;
  *out = create_stream_locked(ctx, flags, std::clamp(priority, -5, 0), kind);
  return CUDA_SUCCESS;
}

CUresult stream_synchronize(CUstream hstream, bool per_thread) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return wait_stream(lock, stream);
}

CUresult stream_query(CUstream hstream, bool per_thread) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream == stream->ctx->legacy && blocking_stream_captures(stream->ctx, /*invalidate=*/true)) {
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (d.connection_lost) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  return stream->completed >= stream->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_wait_event(CUstream hstream, CUevent event, unsigned flags, bool per_thread) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (dead_event("cuStreamWaitEvent", event) || !stream || !d.events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0 && flags != CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  if (event->op == 0 || event->done) return CUDA_SUCCESS;  // nothing to wait for
  return submit(stream, simple_op(wire::WireOpKind::wait), {}, nullptr, {event->op});
}

CUresult event_record(CUevent event, CUstream hstream, bool per_thread) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (dead_event("cuEventRecord", event) || !stream || !d.events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (event->ctx != stream->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) return submit(stream, simple_op(wire::WireOpKind::event_record), {});
  std::uint64_t op = 0;
  if (CUresult r = submit(stream, simple_op(wire::WireOpKind::event_record), {}, event, {}, nullptr, &op);
      r != CUDA_SUCCESS) {
    return r;
  }
  event->op = op;
  event->done = false;
  return CUDA_SUCCESS;
}

CUresult launch_host_func(CUstream hstream, CUhostFn fn, void* user_data, bool per_thread) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  HostAction action;
  action.kind = HostAction::Kind::host_func;
  action.fn = fn;
  action.user_data = user_data;
  return submit(stream, simple_op(wire::WireOpKind::host_func), std::move(action));
}

// Reads the parameter the catalog takes the duration from, if the launch passes it.
std::optional<std::uint64_t> duration_arg(const CUfunc_st& fn, void** params, void** extra) {
  if (fn.duration_arg < 0) return std::nullopt;
  std::size_t index = static_cast<std::size_t>(fn.duration_arg);
  std::size_t size = sizeof(std::uint64_t);
  std::size_t offset = 0;
  if (fn.entry.params_known) {
    if (index >= fn.entry.params.size()) return std::nullopt;
    size = std::min<std::size_t>(fn.entry.params[index].size, sizeof(std::uint64_t));
    offset = fn.entry.params[index].offset;
  }
  std::uint64_t value = 0;
  if (params) {
    if (!params[index]) return std::nullopt;
    std::memcpy(&value, params[index], size);
    return value;
  }
  // extra = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END}
  const unsigned char* buffer = nullptr;
  std::size_t buffer_size = 0;
  for (std::size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<const unsigned char*>(extra[i + 1]);
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) buffer_size = *static_cast<std::size_t*>(extra[i + 1]);
  }
  if (!buffer || !fn.entry.params_known || offset + size > buffer_size) return std::nullopt;
  std::memcpy(&value, buffer + offset, size);
  return value;
}

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared_bytes, CUstream hstream, void** params, void** extra, bool per_thread) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (CUresult r = require_context(nullptr); r != CUDA_SUCCESS) return r;
  CUfunc_st* fn = nullptr;
  if (CUresult r = resolve_function_locked(lock, f, &fn); r != CUDA_SUCCESS) return r;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<std::uint64_t>(bx) * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (shared_bytes > 227 * 1024) return CUDA_ERROR_INVALID_VALUE;
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  if (fn->module->ctx != current_context()) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* stream = resolve_stream(hstream, per_thread);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  wire::WireOp op{};
  op.kind = wire::WireOpKind::kernel;
  op.kernel = fn->kernel_id;
  op.blocks = static_cast<std::uint64_t>(gx) * gy * gz;
  if (auto value = duration_arg(*fn, params, extra)) {
    op.has_duration_arg = 1;
    op.duration_arg = *value;
  }
  std::uint64_t op_id = 0;
  if (CUresult r = submit(stream, op, {}, nullptr, {}, nullptr, &op_id); r != CUDA_SUCCESS) return r;
  report_kernel(op_id, *fn, *stream, {{gx, gy, gz}, {bx, by, bz}, shared_bytes});
  return CUDA_SUCCESS;
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, bool per_thread) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->sharedMemBytes, config->hStream, params, extra, per_thread);
}

}  // namespace

SIMGPU_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) { return stream_create(stream, flags, 0); }

SIMGPU_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return stream_create(stream, flags, priority);
}

static CUresult stream_destroy(CUstream hstream) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!d.streams.contains(hstream) || hstream->ctx->legacy == hstream || hstream->per_thread) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  destroy_stream_locked(hstream);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuStreamDestroy_v2(CUstream hstream) { return stream_destroy(hstream); }

// The ABI before _v2 (cuda.h maps the name to _v2): the same call in simgpu (not through the
// exported _v2, which an LD_PRELOADed interposer would answer).
#undef cuStreamDestroy
SIMGPU_EXPORT CUresult cuStreamDestroy(CUstream hstream) { return stream_destroy(hstream); }

SIMGPU_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  auto* e = new CUevent_st();
  e->ctx = ctx;
  e->flags = flags;
  d.events.insert(e);
  *event = e;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (dead_event("cuEventDestroy", event) || !d.events.erase(event)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [id, op] : d.pending) {
    if (op.event == event) op.event = nullptr;
  }
  delete event;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuEventQuery(CUevent event) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (dead_event("cuEventQuery", event) || !d.events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (!event->done && d.connection_lost) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  return event->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIMGPU_EXPORT CUresult cuEventSynchronize(CUevent event) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (dead_event("cuEventSynchronize", event) || !d.events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  d.cv.wait(lock, [&] { return !d.events.contains(event) || event->done || d.connection_lost; });
  if (!d.events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  return event->done ? CUDA_SUCCESS : CUDA_ERROR_DEVICE_UNAVAILABLE;
}

SIMGPU_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (dead_event("cuEventElapsedTime", start) || dead_event("cuEventElapsedTime", end)) return CUDA_ERROR_INVALID_HANDLE;
  if (!d.events.contains(start) || !d.events.contains(end)) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (start->op == 0 || end->op == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->done || !end->done) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(static_cast<double>(end->time_ns - start->time_ns) / 1e6);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuStreamGetFlags(CUstream hstream, unsigned int* flags) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUstream_st* stream = resolve_stream(hstream, false);
  if (!stream || !flags) return stream ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
  *flags = stream->flags;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuStreamGetPriority(CUstream hstream, int* priority) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUstream_st* stream = resolve_stream(hstream, false);
  if (!stream || !priority) return stream ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
  *priority = stream->priority;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuStreamGetCtx(CUstream hstream, CUcontext* pctx) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUstream_st* stream = resolve_stream(hstream, false);
  if (!stream || !pctx) return stream ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
  *pctx = stream->ctx;
  return CUDA_SUCCESS;
}

// Entry points that exist in a default-stream and a per-thread-default-stream (_ptsz) flavour.
#define SIMGPU_STREAM_API(SUFFIX, PT)                                                                              \
  SIMGPU_EXPORT CUresult cuStreamSynchronize##SUFFIX(CUstream s) { return stream_synchronize(s, PT); }              \
  SIMGPU_EXPORT CUresult cuStreamQuery##SUFFIX(CUstream s) { return stream_query(s, PT); }                          \
  SIMGPU_EXPORT CUresult cuStreamWaitEvent##SUFFIX(CUstream s, CUevent e, unsigned int flags) {                     \
    return stream_wait_event(s, e, flags, PT);                                                                      \
  }                                                                                                                 \
  SIMGPU_EXPORT CUresult cuEventRecord##SUFFIX(CUevent e, CUstream s) { return event_record(e, s, PT); }            \
  SIMGPU_EXPORT CUresult cuEventRecordWithFlags##SUFFIX(CUevent e, CUstream s, unsigned int) {                      \
    return event_record(e, s, PT);                                                                                  \
  }                                                                                                                 \
  SIMGPU_EXPORT CUresult cuLaunchHostFunc##SUFFIX(CUstream s, CUhostFn fn, void* data) {                            \
    return launch_host_func(s, fn, data, PT);                                                                       \
  }                                                                                                                 \
  SIMGPU_EXPORT CUresult cuLaunchKernel##SUFFIX(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,    \
                                                unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm, \
                                                CUstream s, void** params, void** extra) {                          \
    return launch(f, gx, gy, gz, bx, by, bz, shm, s, params, extra, PT);                                            \
  }                                                                                                                 \
  SIMGPU_EXPORT CUresult cuLaunchCooperativeKernel##SUFFIX(CUfunction f, unsigned int gx, unsigned int gy,          \
                                                           unsigned int gz, unsigned int bx, unsigned int by,       \
                                                           unsigned int bz, unsigned int shm, CUstream s,           \
                                                           void** params) {                                         \
    return launch(f, gx, gy, gz, bx, by, bz, shm, s, params, nullptr, PT);                                          \
  }                                                                                                                 \
  SIMGPU_EXPORT CUresult cuLaunchKernelEx##SUFFIX(const CUlaunchConfig* config, CUfunction f, void** params,        \
                                                  void** extra) {                                                   \
    return launch_ex(config, f, params, extra, PT);                                                                 \
  }

SIMGPU_STREAM_API(, false)
SIMGPU_STREAM_API(_ptsz, true)

// Driver API: primary and created contexts, the per-thread context stack, synchronisation.
#include "driver.h"

#include <algorithm>
#include <set>

using namespace gpuqos::simgpu::driver;
namespace wire = gpuqos::simgpu::wire;

namespace {

// Contexts below the current one on this thread's stack (the current one is current_context()).
std::vector<CUctx_st*>& context_stack() {
  thread_local std::vector<CUctx_st*> stack;
  return stack;
}

CUresult check_device(CUdevice dev) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || static_cast<std::size_t>(dev) >= d.devices.size()) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

CUresult create_context(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = create_context_locked(dev, flags, false);
  if (current_context()) context_stack().push_back(current_context());
  current_context() = ctx;
  *pctx = ctx;
  return CUDA_SUCCESS;
}

}  // namespace

static void primary_retain_locked(CUdevice dev) {
  Driver& d = driver();
  if (!d.primary[dev]) d.primary[dev] = create_context_locked(dev, d.primary_flags[dev], true);
  ++d.primary_refs[dev];
}

// For tests of a caller's failure paths: SIMGPU_FAIL_PRIMARY_RETAIN_AFTER=N makes every
// cuDevicePrimaryCtxRetain of the process after its first N fail with CUDA_ERROR_OUT_OF_MEMORY, as
// a real driver's may on a device out of memory or in a sticky error. Unset: never.
static bool primary_retain_fails(std::uint64_t& retains) {
  static const std::uint64_t limit = env_number("SIMGPU_FAIL_PRIMARY_RETAIN_AFTER", UINT64_MAX);
  return retains++ >= limit;
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  static std::uint64_t retains = 0;  // guarded by d.mu
  if (primary_retain_fails(retains)) return CUDA_ERROR_OUT_OF_MEMORY;
  primary_retain_locked(dev);
  *pctx = d.primary[dev];
  return CUDA_SUCCESS;
}

static CUresult primary_release_locked(CUdevice dev) {
  Driver& d = driver();
  if (d.primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--d.primary_refs[dev] == 0 && d.primary[dev]) {
    destroy_context_locked(d.primary[dev]);
    d.primary[dev] = nullptr;
  }
  return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(driver().mu);
  return primary_release_locked(dev);
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }

static CUresult primary_reset(CUdevice dev) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.primary[dev]) {
    destroy_context_locked(d.primary[dev]);
    d.primary[dev] = nullptr;
  }
  d.primary_refs[dev] = 0;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  *flags = d.primary_flags[dev];
  *active = d.primary[dev] != nullptr;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  d.primary_flags[dev] = flags;
  if (d.primary[dev]) d.primary[dev]->flags = flags;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  if (params && (params->execAffinityParams || params->cigParams)) {
    log_once("cuCtxCreate: execution affinity and CIG parameters are not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return create_context(pctx, flags, dev);
}

// The CUDA 11/12 entry point, for programs built against older headers.
SIMGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_context(pctx, flags, dev);
}

static CUresult context_destroy(CUcontext ctx) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!d.contexts.contains(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  std::erase(context_stack(), ctx);
  bool was_current = current_context() == ctx;
  destroy_context_locked(ctx);
  if (was_current && !context_stack().empty()) {
    current_context() = context_stack().back();
    context_stack().pop_back();
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return context_destroy(ctx); }

SIMGPU_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (ctx && !d.contexts.contains(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  current_context() = ctx;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!driver().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  *pctx = current_context();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!d.contexts.contains(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (current_context()) context_stack().push_back(current_context());
  current_context() = ctx;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (!driver().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = current_context();
  current_context() = nullptr;
  if (!context_stack().empty()) {
    current_context() = context_stack().back();
    context_stack().pop_back();
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

// As the real driver's (CUDA 12.0): an id no other context of the process ever has, a primary
// context made again after its last release included; a null ctx is the current context.
SIMGPU_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctx_id) {
  if (!ctx_id) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!ctx && require_context(&ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  if (!d.contexts.contains(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx_id = ctx->id;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!ctx) ctx = current_context();
  if (!d.contexts.contains(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 12000;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSynchronize() {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  // Snapshot: streams created or work submitted by other threads meanwhile are not waited for.
  std::vector<std::pair<CUstream_st*, std::uint64_t>> targets;
  for (CUstream_st* s : ctx->streams) targets.emplace_back(s, s->submitted);
  for (auto [stream, seq] : targets) {
    if (!d.streams.contains(stream)) continue;
    if (CUresult r = wait_op(lock, stream, seq); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (!driver().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

// The ABIs before _v2 (cuda.h maps the names to _v2), which programs built against an older
// runtime and cuGetProcAddress for an older version still reach. What changed at _v2 (a context
// need no longer be current to be destroyed; a release no longer fails for a context reset
// meanwhile) does not apply to simgpu's contexts: the same calls. Not through the exported _v2
// symbols, which an LD_PRELOADed interposer (gpuqos's shim) would answer, as a real driver's legacy
// entry points are not.
#undef cuCtxDestroy
SIMGPU_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return context_destroy(ctx); }
#undef cuDevicePrimaryCtxRelease
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
#undef cuDevicePrimaryCtxReset
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }

// Green contexts. A green context is a context of its own (cuCtxFromGreenCtx's, on which its
// streams run) that holds a reference to its device's primary context, released when it is
// destroyed. simgpu does not partition the device: the SMs a descriptor names are recorded, not
// enforced, so a green context's kernels run as any context's do.
struct CUdevResourceDesc_st {
  unsigned sms = 0;
};

struct CUgreenCtx_st {
  CUctx_st* ctx = nullptr;
  CUdevice device = 0;
  unsigned sms = 0;
};

namespace {

std::set<CUgreenCtx_st*>& green_contexts() {  // guarded by driver().mu
  static std::set<CUgreenCtx_st*> contexts;
  return contexts;
}

}  // namespace

SIMGPU_EXPORT CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource* resource, CUdevResourceType type) {
  if (!resource) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  *resource = CUdevResource{};
  resource->type = CU_DEV_RESOURCE_TYPE_SM;
  resource->sm.smCount = driver().devices[dev].sms;
  resource->sm.minSmPartitionSize = 1;
  resource->sm.smCoscheduledAlignment = 1;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc* desc, CUdevResource* resources, unsigned int count) {
  if (!desc || !resources || count == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!driver().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  unsigned sms = 0;
  for (unsigned i = 0; i < count; ++i) {
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    sms += resources[i].sm.smCount;
  }
  *desc = new CUdevResourceDesc_st{sms};  // a real driver keeps descriptors for the process's life too
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx* green, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  if (!green || !desc || !(flags & CU_GREEN_CTX_DEFAULT_STREAM)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  primary_retain_locked(dev);
  auto* created = new CUgreenCtx_st{create_context_locked(dev, 0, false), dev, desc->sms};
  green_contexts().insert(created);
  *green = created;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxFromGreenCtx(CUcontext* pctx, CUgreenCtx green) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!green_contexts().contains(green)) return CUDA_ERROR_INVALID_CONTEXT;
  *pctx = green->ctx;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGreenCtxStreamCreate(CUstream* stream, CUgreenCtx green, unsigned int flags, int priority) {
  if (!stream || flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!green_contexts().contains(green)) return CUDA_ERROR_INVALID_CONTEXT;
  *stream = create_stream_locked(green->ctx, flags, std::clamp(priority, -5, 0), wire::WireStreamKind::non_blocking);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx green) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!green_contexts().erase(green)) return CUDA_ERROR_INVALID_CONTEXT;
  std::erase(context_stack(), green->ctx);
  if (current_context() == green->ctx) current_context() = nullptr;
  destroy_context_locked(green->ctx);
  const CUresult released = primary_release_locked(green->device);
  delete green;
  return released;
}

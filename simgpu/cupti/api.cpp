// The CUPTI entry points simgpu's libcupti implements, with the toolkit's own declarations (cupti.h),
// so the compiler checks every signature. Everything else of CUPTI is absent: a program that needs
// more fails to find the symbol rather than getting records that are not there.
#include <cupti.h>
#include <time.h>

#include <cstring>

#include "collector.h"
#include "records.h"

#define SIMGPU_CUPTI_EXPORT extern "C" __attribute__((visibility("default")))

using gpuqos::simgpu::cupti::Collector;
using gpuqos::simgpu::cupti::external_id_stacks;
using gpuqos::simgpu::cupti::record_size;

namespace {

bool valid_external_kind(CUpti_ExternalCorrelationKind kind) {
  return kind > CUPTI_EXTERNAL_CORRELATION_KIND_INVALID && kind < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE;
}

const char* result_name(CUptiResult result) {
  switch (result) {
#define SIMGPU_CUPTI_RESULT(name) \
  case name: return #name;
    SIMGPU_CUPTI_RESULT(CUPTI_SUCCESS)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_INVALID_PARAMETER)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_INVALID_DEVICE)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_INVALID_CONTEXT)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_INVALID_OPERATION)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_OUT_OF_MEMORY)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_API_NOT_IMPLEMENTED)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_MAX_LIMIT_REACHED)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_NOT_READY)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_NOT_COMPATIBLE)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_NOT_INITIALIZED)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_QUEUE_EMPTY)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_INVALID_HANDLE)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_INVALID_STREAM)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_INVALID_KIND)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_DISABLED)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_NOT_SUPPORTED)
    SIMGPU_CUPTI_RESULT(CUPTI_ERROR_UNKNOWN)
#undef SIMGPU_CUPTI_RESULT
    default: return nullptr;
  }
}

}  // namespace

SIMGPU_CUPTI_EXPORT CUptiResult cuptiGetVersion(uint32_t* version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;  // the layouts of the records are this version's
  return CUPTI_SUCCESS;
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  const char* name = result_name(result);
  if (!name) return CUPTI_ERROR_INVALID_PARAMETER;
  *str = name;
  return CUPTI_SUCCESS;
}

// CLOCK_MONOTONIC: the clock the records' start and end are on (simgpu's device time moved to it).
SIMGPU_CUPTI_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  *timestamp = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
  return CUPTI_SUCCESS;
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  return Collector::instance().enable(kind);
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  return Collector::instance().disable(kind);
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                               CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  return Collector::instance().register_callbacks(funcBufferRequested, funcBufferCompleted);
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t) { return Collector::instance().flush_all(); }

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityFlush(CUcontext, uint32_t, uint32_t) {
  return Collector::instance().flush_all();  // deprecated: context and stream are ignored, as in CUPTI
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t time) {
  return Collector::instance().set_flush_period(time);
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes,
                                                           CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  std::size_t at = 0;
  if (*record) {
    const auto* previous = reinterpret_cast<const uint8_t*>(*record);
    if (previous < buffer || previous >= buffer + validBufferSizeBytes) return CUPTI_ERROR_INVALID_PARAMETER;
    at = static_cast<std::size_t>(previous - buffer) + record_size((*record)->kind);
  }
  if (at + sizeof(CUpti_Activity) > validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  CUpti_ActivityKind kind{};
  std::memcpy(&kind, buffer + at, sizeof kind);
  const std::size_t size = record_size(kind);
  if (size == 0 || at + size > validBufferSizeBytes) return CUPTI_ERROR_INVALID_KIND;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + at);
  return CUPTI_SUCCESS;
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = Collector::instance().take_dropped();
  return CUPTI_SUCCESS;
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                       uint64_t id) {
  if (!valid_external_kind(kind)) return CUPTI_ERROR_INVALID_KIND;
  try {
    external_id_stacks()[kind].push_back(id);
  } catch (const std::bad_alloc&) {
    return CUPTI_ERROR_OUT_OF_MEMORY;
  }
  return CUPTI_SUCCESS;
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                      uint64_t* lastId) {
  if (!valid_external_kind(kind)) return CUPTI_ERROR_INVALID_KIND;
  auto& stack = external_id_stacks()[kind];
  if (stack.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (lastId) *lastId = stack.back();
  stack.pop_back();
  return CUPTI_SUCCESS;
}

SIMGPU_CUPTI_EXPORT CUptiResult cuptiFinalize(void) {
  Collector::instance().finalize();
  return CUPTI_SUCCESS;
}

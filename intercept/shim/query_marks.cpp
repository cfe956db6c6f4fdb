// gpuqosQueryArrived / gpuqosQueryBegin / gpuqosQueryEnd / gpuqosQueryDropped: what gpuqos/query.h
// finds in a process the shim is loaded into.
#include "shim.h"

#define GPUQOS_QUERY_EXPORT extern "C" __attribute__((visibility("default")))

using QueryMark = gpuqos::intercept::Gate::QueryMark;

namespace {

void mark(QueryMark which) noexcept {
  const gpuqos::intercept::NoCancel no_cancel;
  gpuqos::intercept::gate().mark_query(which);
}

}  // namespace

GPUQOS_QUERY_EXPORT void gpuqosQueryArrived(void) noexcept { mark(QueryMark::arrived); }

GPUQOS_QUERY_EXPORT void gpuqosQueryBegin(void) noexcept { mark(QueryMark::begin); }

GPUQOS_QUERY_EXPORT void gpuqosQueryEnd(void) noexcept { mark(QueryMark::end); }

GPUQOS_QUERY_EXPORT void gpuqosQueryDropped(void) noexcept { mark(QueryMark::dropped); }

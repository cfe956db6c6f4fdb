// Driver API: cuGetProcAddress, answered from the version table generated from cudaTypedefs.h.
#include <dlfcn.h>

#include <cstring>

#include "driver.h"

using namespace gpuqos::simgpu::driver;

namespace {

struct ProcEntry {
  const char* api;
  int version;
  int variant;  // 0 default stream, 1 _ptds, 2 _ptsz
  const char* symbol;
};

constexpr ProcEntry kProcTable[] = {
#include "proc_table.inc"
};

// This library's own handle, so lookups find our symbols even if another libcuda is loaded too.
void* self_handle() {
  static void* handle = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&self_handle), &info) == 0 || !info.dli_fname) return RTLD_DEFAULT;
    void* h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    return h ? h : RTLD_DEFAULT;
  }();
  return handle;
}

// Not found (no such entry point, or none as old as `version`) is *pfn = nullptr with the reason in
// *status; `not_found` is what the call returns then: CUDA_SUCCESS for cuGetProcAddress_v2, as
// cuda.h documents since CUDA 12, CUDA_ERROR_NOT_FOUND for the CUDA 11 form without a status.
CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status,
                CUresult not_found) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const ProcEntry* best = nullptr;
  const ProcEntry* best_variant = nullptr;
  bool known = false;
  for (const ProcEntry& e : kProcTable) {
    if (std::strcmp(e.api, symbol) != 0) continue;
    known = true;
    if (e.version > version) continue;
    const ProcEntry*& slot = e.variant ? best_variant : best;
    if (!slot || e.version >= slot->version) slot = &e;
  }
  if (per_thread && best_variant) best = best_variant;
  if (!best) {
    if (status) *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return not_found;
  }
  *pfn = dlsym(self_handle(), best->symbol);
  if (status) *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn ? CUDA_SUCCESS : not_found;
}

}  // namespace

SIMGPU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, version, flags, status, CUDA_SUCCESS);
}

// The CUDA 11.3 form, without the status out-parameter (cuda.h maps the name to _v2).
#undef cuGetProcAddress
SIMGPU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return lookup(symbol, pfn, version, flags, nullptr, CUDA_ERROR_NOT_FOUND);
}

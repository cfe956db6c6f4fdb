// cuGetProcAddress interposition: the CUDA runtime (and any modern program) reaches the driver
// through it, so its answers must be our hooks too, for the right version and stream flavour.
#include "shim.h"

namespace gpuqos::intercept {
namespace {

// Our hook for what the driver answered to (symbol, version, flags), or nullptr to keep its answer.
void* hook_for_answer(const char* symbol, int version, cuuint64_t flags, void* answer) {
  const ProcAddressSymbols candidates = proc_address_symbols(symbol, version);
  const auto legacy = find_hook(candidates.legacy);
  const auto per_thread = find_hook(candidates.per_thread);
  // The driver's own answer tells which flavour it chose when it is the exported function (or our
  // hook already: simgpu looks its answers up with dlsym); otherwise go by the flags as documented.
  for (const auto candidate : {per_thread, legacy}) {
    if (candidate && (answer == real_function_address(*candidate) || answer == hook_address(*candidate))) {
      return hook_address(*candidate);
    }
  }
  const bool wants_per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const auto chosen = wants_per_thread && !candidates.per_thread.empty() ? per_thread : legacy;
  return chosen ? hook_address(*chosen) : nullptr;
}

void substitute_hook(CUresult result, const char* symbol, void** pfn, int version, cuuint64_t flags) {
  if (result != CUDA_SUCCESS || !symbol || !pfn || !*pfn) return;
  if (void* hook = hook_for_answer(symbol, version, flags, *pfn)) *pfn = hook;
}

}  // namespace

CUresult answer_proc_address(PFN_cuGetProcAddress_v11030 real, const char* symbol, void** pfn, int version,
                             cuuint64_t flags) noexcept {
  if (!real) return missing_real_function(HookId::hook_cuGetProcAddress);
  const CUresult result = real(symbol, pfn, version, flags);
  substitute_hook(result, symbol, pfn, version, flags);
  return result;
}

CUresult answer_proc_address(PFN_cuGetProcAddress_v12000 real, const char* symbol, void** pfn, int version,
                             cuuint64_t flags, CUdriverProcAddressQueryResult* found) noexcept {
  if (!real) return missing_real_function(HookId::hook_cuGetProcAddress_v2);
  const CUresult result = real(symbol, pfn, version, flags, found);
  substitute_hook(result, symbol, pfn, version, flags);
  return result;
}

}  // namespace gpuqos::intercept

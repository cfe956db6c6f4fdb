// A driver newer than the shim, preloaded after it (LD_PRELOAD=libgpuqos.so:this): its
// cuGetProcAddress answers cuLaunchKernel asked for at kFutureCudaVersion with a function of another
// ABI (future_abi.h), found by no name; everything else is the real driver's answer.
#include <dlfcn.h>

#include <cstring>

#include "future_abi.h"

namespace {

CUresult future_launch_kernel(FutureLaunch* launch) {
  if (!launch) return CUDA_ERROR_INVALID_VALUE;
  launch->done = kFutureLaunchDone;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                                               int version, cuuint64_t flags,
                                                                               CUdriverProcAddressQueryResult* found) {
  if (symbol && pfn && version >= kFutureCudaVersion && std::strcmp(symbol, "cuLaunchKernel") == 0) {
    *pfn = reinterpret_cast<void*>(&future_launch_kernel);
    if (found) *found = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  using Real = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  const auto real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "cuGetProcAddress_v2"));
  return real ? real(symbol, pfn, version, flags, found) : CUDA_ERROR_NOT_FOUND;
}

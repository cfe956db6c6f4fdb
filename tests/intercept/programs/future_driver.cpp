// A driver newer than the shim, preloaded after it (LD_PRELOAD=libgpuqos.so:this): its
// cuGetProcAddress answers cuLaunchKernel asked for at kFutureCudaVersion with a function of another
// ABI (future_abi.h), found by no name; cuMemsetD32 at any version with a function of its own, found
// by no name either, of the ABI the shim knows (as a real driver may answer internal entry points);
// everything else is the real driver's answer.
#include <dlfcn.h>

#include <cstring>

#include "future_abi.h"

namespace {

CUresult future_launch_kernel(FutureLaunch* launch) {
  if (!launch) return CUDA_ERROR_INVALID_VALUE;
  launch->done = kFutureLaunchDone;
  return CUDA_SUCCESS;
}

using Resolve = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

Resolve real_resolver() { return reinterpret_cast<Resolve>(dlsym(RTLD_NEXT, "cuGetProcAddress_v2")); }

CUresult private_memset_d32(CUdeviceptr at, unsigned int value, size_t count) {
  void* real = nullptr;
  CUdriverProcAddressQueryResult found{};
  const Resolve resolve = real_resolver();
  if (!resolve || resolve("cuMemsetD32", &real, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || !real)
    return CUDA_ERROR_NOT_FOUND;
  return reinterpret_cast<CUresult (*)(CUdeviceptr, unsigned int, size_t)>(real)(at, value, count);
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
  if (symbol && pfn && version >= 3020 && std::strcmp(symbol, "cuMemsetD32") == 0) {
    *pfn = reinterpret_cast<void*>(&private_memset_d32);
    if (found) *found = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  const Resolve real = real_resolver();
  return real ? real(symbol, pfn, version, flags, found) : CUDA_ERROR_NOT_FOUND;
}

// The made-up "CUDA 90.0" ABI of cuLaunchKernel that future_driver answers cuGetProcAddress with:
// one argument, a pointer, where the ABI the shim knows takes eleven.
#pragma once

#include <cuda.h>

inline constexpr int kFutureCudaVersion = 90000;
inline constexpr unsigned kFutureLaunchDone = 0x600d;

struct FutureLaunch {
  unsigned done = 0;  // kFutureLaunchDone once the future driver has had it
};
using FutureLaunchKernel = CUresult (*)(FutureLaunch*);

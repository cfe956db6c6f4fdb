// A library that defines a hooked driver name of its own (as a tracing wrapper does) and does not
// link libcuda: dlopen_client `handles` opens it RTLD_LOCAL, and dlsym on its handle must answer
// its definition, not the shim's hook.
#include <cuda.h>

extern "C" __attribute__((visibility("default"))) CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned,
                                                                          unsigned, unsigned, unsigned, unsigned,
                                                                          CUstream, void**, void**) {
  return static_cast<CUresult>(999);  // says "the wrapper's own", and touches no device
}

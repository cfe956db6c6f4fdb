// A library that links libcuda and defines no driver name: dlsym on its handle searches its
// dependencies too, finds the driver's definition, and must answer the shim's hook for it.
#include <cuda.h>

extern "C" __attribute__((visibility("default"))) int gpuqos_test_linked_driver_version() {
  int version = 0;
  return cuDriverGetVersion(&version) == CUDA_SUCCESS ? version : -1;  // a reference: libcuda stays NEEDED
}

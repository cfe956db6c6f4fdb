// Checked CUDA driver calls: a failure throws CudaError naming the call and cuGetErrorName's answer.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace gpuqos::replay {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check_cuda(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown CUresult";
  if (cuGetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) text = "";
  throw CudaError(std::string(call) + " failed: " + name + " (" + std::to_string(static_cast<int>(result)) +
                  (*text ? ", " + std::string(text) : std::string()) + ")");
}

}  // namespace gpuqos::replay

#define GQ_CU_CHECK(call) ::gpuqos::replay::check_cuda((call), #call)

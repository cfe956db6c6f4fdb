// What the test CUDA programs share: a PTX module whose `spin` kernel takes its duration in
// microseconds from its first argument (the tests' simgpu catalogs say so), and check macros.
#pragma once

#include <cstdio>

constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 spin_duration_us) { ret; }
)";

// Prints the failed call and its result, and makes main() return 1.
#define CHECK_CU(call)                                                                  \
  do {                                                                                  \
    const CUresult check_result_ = (call);                                              \
    if (check_result_ != CUDA_SUCCESS) {                                                \
      std::printf("FAILED line %d: %s returned %d\n", __LINE__, #call, int(check_result_)); \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

#define CHECK(condition)                                              \
  do {                                                                \
    if (!(condition)) {                                               \
      std::printf("FAILED line %d: %s\n", __LINE__, #condition);      \
      return 1;                                                       \
    }                                                                 \
  } while (0)

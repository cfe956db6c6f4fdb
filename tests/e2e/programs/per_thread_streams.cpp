// A CUDA driver-API program for the end-to-end tests, built with per-thread default streams
// (CUDA_API_PER_THREAD_DEFAULT_STREAM: every call below is its _ptsz/_ptds form), run under
// libgpuqos.so against the real gpuqosd on simgpu.
//   <null|handle> <memset bytes> <copy bytes>
// Thread A sets <memset bytes> on its per-thread default stream (a long memset on a slow simgpu
// device) and records an event after it. Once A's call returned, thread B copies <copy bytes> from
// pinned host memory to the device on its own per-thread default stream, synchronises that stream,
// and makes a second such copy, timing the call. `null` names the streams as NULL, `handle` as
// CU_STREAM_PER_THREAD. Prints "second copy call ms <ms>" and "memset running <0|1>" (A's event
// still not done when B's second call returned), then, after both threads, "per-thread ok" when
// every byte is right. The two threads' streams are independent: B never waits for A's memset.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gpuqos/testing/spin_program.h"

namespace {

constexpr unsigned char kMemsetValue = 0x5a;

struct Shared {
  CUcontext context = nullptr;
  CUstream stream = nullptr;  // NULL or CU_STREAM_PER_THREAD: each thread's own
  CUdeviceptr memset_target = 0;
  std::size_t memset_bytes = 0;
  CUdeviceptr copy_target = 0;
  std::size_t copy_bytes = 0;
  CUevent memset_done = nullptr;
  std::promise<void> memset_issued;
};

int issue_memset(Shared& shared) {
  CHECK_CU(cuCtxSetCurrent(shared.context));
  CHECK_CU(cuMemsetD8Async(shared.memset_target, kMemsetValue, shared.memset_bytes, shared.stream));
  CHECK_CU(cuEventRecord(shared.memset_done, shared.stream));
  return 0;
}

int finish_memset(Shared& shared) {
  CHECK_CU(cuStreamSynchronize(shared.stream));
  unsigned char first = 0, last = 0;
  CHECK_CU(cuMemcpyDtoH(&first, shared.memset_target, 1));
  CHECK_CU(cuMemcpyDtoH(&last, shared.memset_target + shared.memset_bytes - 1, 1));
  CHECK(first == kMemsetValue && last == kMemsetValue);
  return 0;
}

int two_copies(Shared& shared) {
  CHECK_CU(cuCtxSetCurrent(shared.context));
  void* host = nullptr;
  CHECK_CU(cuMemAllocHost(&host, shared.copy_bytes));
  auto* bytes = static_cast<unsigned char*>(host);
  for (std::size_t i = 0; i < shared.copy_bytes; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  CHECK_CU(cuMemcpyHtoDAsync(shared.copy_target, host, shared.copy_bytes, shared.stream));
  CHECK_CU(cuStreamSynchronize(shared.stream));
  const auto before = std::chrono::steady_clock::now();
  CHECK_CU(cuMemcpyHtoDAsync(shared.copy_target, host, shared.copy_bytes, shared.stream));
  const auto after = std::chrono::steady_clock::now();
  const CUresult memset_state = cuEventQuery(shared.memset_done);
  std::printf("second copy call ms %lld\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(after - before).count()));
  std::printf("memset running %d\n", memset_state == CUDA_ERROR_NOT_READY ? 1 : 0);
  CHECK_CU(cuStreamSynchronize(shared.stream));
  std::vector<unsigned char> back(shared.copy_bytes);
  CHECK_CU(cuMemcpyDtoH(back.data(), shared.copy_target, shared.copy_bytes));
  CHECK(std::memcmp(back.data(), host, shared.copy_bytes) == 0);
  CHECK_CU(cuMemFreeHost(host));
  return 0;
}

int run(Shared& shared) {
  int memset_result = 1, copies_result = 1;
  std::future<void> issued = shared.memset_issued.get_future();
  std::thread memset_thread([&] {
    memset_result = issue_memset(shared);
    shared.memset_issued.set_value();  // B starts once A's memset is on the device (or A failed)
    if (memset_result == 0) memset_result = finish_memset(shared);
  });
  issued.wait();
  std::thread copy_thread([&] { copies_result = two_copies(shared); });
  copy_thread.join();
  memset_thread.join();
  CHECK(memset_result == 0);
  CHECK(copies_result == 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 4 || (std::strcmp(argv[1], "null") != 0 && std::strcmp(argv[1], "handle") != 0)) {
    std::printf("usage: %s null|handle <memset bytes> <copy bytes>\n", argv[0]);
    return 2;
  }
  Shared shared;
  shared.stream = std::strcmp(argv[1], "null") == 0 ? nullptr : CU_STREAM_PER_THREAD;
  shared.memset_bytes = std::strtoull(argv[2], nullptr, 10);
  shared.copy_bytes = std::strtoull(argv[3], nullptr, 10);
  CUdevice device = 0;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&shared.context, device));
  CHECK_CU(cuCtxSetCurrent(shared.context));
  CHECK_CU(cuMemAlloc(&shared.memset_target, shared.memset_bytes));
  CHECK_CU(cuMemAlloc(&shared.copy_target, shared.copy_bytes));
  CHECK_CU(cuEventCreate(&shared.memset_done, CU_EVENT_DISABLE_TIMING));
  if (run(shared) != 0) return 1;
  CHECK_CU(cuEventDestroy(shared.memset_done));
  CHECK_CU(cuMemFree(shared.memset_target));
  CHECK_CU(cuMemFree(shared.copy_target));
  std::printf("per-thread ok\n");
  CHECK_CU(cuDevicePrimaryCtxRelease(device));
  return 0;
}

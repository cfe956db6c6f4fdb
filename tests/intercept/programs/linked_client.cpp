// A CUDA driver-API program linked against libcuda: `direct` calls the driver by name (launches,
// copies, a memset, syncs, a captured launch and a graph launch); `proc` launches and copies through
// pointers from cuGetProcAddress; `future` asks cuGetProcAddress for a CUDA newer than the shim knows
// (run with future_driver preloaded after the shim). Exit status 0 when every result is right.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "future_abi.h"
#include "gpuqos/testing/spin_program.h"

namespace {

constexpr std::size_t kBytes = 4096;

bool in_shim(void* fn) {
  Dl_info info{};
  return dladdr(fn, &info) != 0 && info.dli_fname && std::strstr(info.dli_fname, "libgpuqos.so");
}

int open_device(CUfunction* spin) {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  CHECK_CU(cuModuleLoadData(&module, kPtx));
  CHECK_CU(cuModuleGetFunction(spin, module, "spin"));
  return 0;
}

CUresult launch(CUfunction spin, CUstream stream) {
  std::uint64_t duration_us = 20;
  void* params[] = {&duration_us};
  return cuLaunchKernel(spin, 2, 1, 1, 64, 1, 1, 0, stream, params, nullptr);
}

int run_direct() {
  CUfunction spin = nullptr;
  if (open_device(&spin) != 0) return 1;
  std::vector<unsigned char> source(kBytes), result(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) source[i] = static_cast<unsigned char>(i * 7);
  CUdeviceptr device = 0;
  CHECK_CU(cuMemAlloc(&device, kBytes));
  CHECK_CU(cuMemcpyHtoD(device, source.data(), kBytes));
  CHECK_CU(launch(spin, nullptr));
  CHECK_CU(launch(spin, nullptr));
  CHECK_CU(cuMemsetD32(device + 1024, 0x01020304u, 256));  // bytes 1024..2047
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(result.data(), device, kBytes));
  for (std::size_t i = 0; i < kBytes; ++i) {
    const unsigned char want = i >= 1024 && i < 2048 ? static_cast<unsigned char>(4 - i % 4) : source[i];
    CHECK(result[i] == want);
  }

  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuMemcpyHtoDAsync(device, source.data(), kBytes, stream));
  CHECK_CU(launch(spin, stream));
  CHECK_CU(cuStreamSynchronize(stream));

  // A launch into a capturing stream records a node; the graph launch is the GPU work.
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CHECK_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  CHECK_CU(launch(spin, stream));
  CHECK_CU(cuStreamEndCapture(stream, &graph));
  CHECK_CU(cuGraphInstantiate(&exec, graph, 0));
  CHECK_CU(cuGraphLaunch(exec, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemFree(device));
  std::printf("direct ok\n");
  return 0;
}

int run_proc() {
  CUfunction spin = nullptr;
  if (open_device(&spin) != 0) return 1;
  CUdriverProcAddressQueryResult found{};
  void* fn = nullptr;

  CHECK_CU(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(fn && in_shim(fn));
  auto launch_kernel = reinterpret_cast<decltype(&cuLaunchKernel)>(fn);
  std::uint64_t duration_us = 20;
  void* params[] = {&duration_us};
  CHECK_CU(launch_kernel(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));

  CHECK_CU(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
  CHECK(fn && in_shim(fn));
  CHECK_CU(reinterpret_cast<decltype(&cuLaunchKernel)>(fn)(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));

  CUdeviceptr device = 0;
  CHECK_CU(cuMemAlloc(&device, kBytes));
  std::vector<unsigned char> source(kBytes, 42), result(kBytes);
  CHECK_CU(cuGetProcAddress("cuMemcpyHtoD", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(fn && in_shim(fn));
  CHECK_CU(reinterpret_cast<decltype(&cuMemcpyHtoD)>(fn)(device, source.data(), kBytes));

  // cuGetProcAddress found through itself is ours too, so later lookups stay intercepted.
  CHECK_CU(cuGetProcAddress("cuGetProcAddress", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(fn && in_shim(fn));
  void* sync = nullptr;
  CHECK_CU(reinterpret_cast<decltype(&cuGetProcAddress)>(fn)("cuStreamSynchronize", &sync, 12000,
                                                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
  CHECK(sync && in_shim(sync));
  CHECK_CU(reinterpret_cast<decltype(&cuStreamSynchronize)>(sync)(nullptr));

  // An entry point we do not hook keeps the driver's answer.
  CHECK_CU(cuGetProcAddress("cuDeviceGetCount", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(fn && !in_shim(fn));

  CHECK_CU(cuMemcpyDtoH(result.data(), device, kBytes));
  CHECK(result == source);
  std::printf("proc ok\n");
  return 0;
}

// A driver newer than the shim answers cuLaunchKernel with an ABI the shim has no hook for: the
// program must get the driver's function, not our hook of the older ABI (which it would call with
// the new ABI's arguments). An answer the shim recognises is still its hook, whatever the version.
int run_future() {
  CUfunction spin = nullptr;
  if (open_device(&spin) != 0) return 1;
  CUdriverProcAddressQueryResult found{};
  void* fn = nullptr;
  CHECK_CU(cuGetProcAddress("cuLaunchKernel", &fn, kFutureCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(fn && !in_shim(fn));
  FutureLaunch launch;
  CHECK_CU(reinterpret_cast<FutureLaunchKernel>(fn)(&launch));
  CHECK(launch.done == kFutureLaunchDone);

  CHECK_CU(cuGetProcAddress("cuMemcpyHtoD", &fn, kFutureCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(fn && in_shim(fn));  // the driver answered its exported cuMemcpyHtoD_v2: an ABI we know

  // A function of the driver's own, the same it answers for the newest version the shim knows: that
  // ABI has not changed, so it is hooked (a runtime newer than the shim asks with its own version).
  CHECK_CU(cuGetProcAddress("cuMemsetD32", &fn, kFutureCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(fn && in_shim(fn));
  CUdeviceptr words = 0;
  CHECK_CU(cuMemAlloc(&words, 16));
  CHECK_CU(reinterpret_cast<decltype(&cuMemsetD32)>(fn)(words, 0x600du, 4));
  unsigned int read_back[4] = {};
  CHECK_CU(cuMemcpyDtoH(read_back, words, sizeof read_back));
  CHECK(read_back[0] == 0x600du && read_back[3] == 0x600du);
  std::printf("future ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "direct") return run_direct();
  if (mode == "proc") return run_proc();
  if (mode == "future") return run_future();
  std::printf("usage: %s direct|proc|future\n", argv[0]);
  return 2;
}

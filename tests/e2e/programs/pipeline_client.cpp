// A CUDA driver-API program for the end-to-end tests (tests/e2e/pipeline_itest.cpp), run under
// libgpuqos.so against the real gpuqosd on simgpu. Exit status 0 only when every result is right.
//   streams <rounds> <us>  two streams, each round on each: copy h2d, spin(us), memset, copy d2d,
//                          spin(us), copy d2h into a buffer of its own; then every byte is checked,
//                          which fails if any stream ran its operations out of order
//   loop <n> <us>          n times: spin(us) and synchronise, 20 ms apart ("iteration <i>" each)
//   pair <us>              spin(us) on two streams at once, then synchronise both
//   copies <bytes>         one cuMemcpyHtoD of <bytes> (pageable), then cuMemcpyDtoH back; every byte
//                          checked (the shim may split each into chunks: the data must not tell)
//   behind <bytes> <us>    spin(us) on a stream, then cuMemcpyHtoDAsync of <bytes> (pinned) on it
//                          ("returned in <ms> ms": how long the async call took), then back; checked
//   release <us>           spin(us) on a stream inside a retain and release of the primary context
//                          (a helper's reference: the program's own still holds it), released while
//                          the kernel runs ("released while running"), then synchronised
// Prints "ops <n>" (the operations it issued) and "<mode> ok"; releases its primary context last.
#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpuqos/testing/spin_program.h"

namespace {

constexpr std::size_t kBytes = 4096;
constexpr std::size_t kMemsetBytes = kBytes / 4;

CUfunction g_spin = nullptr;
CUdevice g_device = 0;

int open_device() {
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&g_device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, g_device));
  CHECK_CU(cuCtxSetCurrent(context));
  CHECK_CU(cuModuleLoadData(&module, kPtx));
  CHECK_CU(cuModuleGetFunction(&g_spin, module, "spin"));
  return 0;
}

CUresult spin(std::uint64_t duration_us, CUstream stream) {
  void* params[] = {&duration_us};
  return cuLaunchKernel(g_spin, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
}

unsigned char pattern(int round, int stream, std::size_t i) {
  return static_cast<unsigned char>(round * 31 + stream * 101 + i * 7 + 1);
}
unsigned char memset_value(int round, int stream) { return static_cast<unsigned char>(200 + round * 3 + stream); }

int run_streams(int rounds, std::uint64_t duration_us) {
  constexpr int kStreams = 2;
  std::vector<std::vector<unsigned char>> in(rounds * kStreams), out(rounds * kStreams);
  CUstream streams[kStreams] = {};
  CUdeviceptr a[kStreams] = {}, b[kStreams] = {};
  for (int s = 0; s < kStreams; ++s) {
    CHECK_CU(cuStreamCreate(&streams[s], CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuMemAlloc(&a[s], kBytes));
    CHECK_CU(cuMemAlloc(&b[s], kBytes));
  }
  int ops = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int s = 0; s < kStreams; ++s) {
      auto& src = in[r * kStreams + s];
      auto& dst = out[r * kStreams + s];
      src.resize(kBytes);
      dst.assign(kBytes, 0);
      for (std::size_t i = 0; i < kBytes; ++i) src[i] = pattern(r, s, i);
      CHECK_CU(cuMemcpyHtoDAsync(a[s], src.data(), kBytes, streams[s]));
      CHECK_CU(spin(duration_us, streams[s]));
      CHECK_CU(cuMemsetD8Async(a[s], memset_value(r, s), kMemsetBytes, streams[s]));
      CHECK_CU(cuMemcpyDtoDAsync(b[s], a[s], kBytes, streams[s]));
      CHECK_CU(spin(duration_us, streams[s]));
      CHECK_CU(cuMemcpyDtoHAsync(dst.data(), b[s], kBytes, streams[s]));
      ops += 6;
    }
  }
  for (CUstream stream : streams) CHECK_CU(cuStreamSynchronize(stream));
  int wrong = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int s = 0; s < kStreams; ++s) {
      const auto& dst = out[r * kStreams + s];
      for (std::size_t i = 0; i < kBytes; ++i) {
        const unsigned char want = i < kMemsetBytes ? memset_value(r, s) : pattern(r, s, i);
        if (dst[i] != want && wrong++ < 5) {
          std::printf("WRONG round %d stream %d byte %zu: %d, want %d\n", r, s, i, dst[i], want);
        }
      }
    }
  }
  for (int s = 0; s < kStreams; ++s) {
    CHECK_CU(cuMemFree(a[s]));
    CHECK_CU(cuMemFree(b[s]));
    CHECK_CU(cuStreamDestroy(streams[s]));
  }
  std::printf("ops %d\n", ops);
  if (wrong > 0) {
    std::printf("FAILED: %d wrong bytes\n", wrong);
    return 1;
  }
  std::printf("streams ok\n");
  return 0;
}

int run_loop(int count, std::uint64_t duration_us) {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < count; ++i) {
    CHECK_CU(spin(duration_us, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    std::printf("iteration %d\n", i);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("ops %d\nloop ok\n", count);
  return 0;
}

// `count` requests, each a synchronous upload, a kernel of duration_us on the legacy stream and a
// synchronous download: the runtime's plain cudaMemcpy loop, which never calls a synchronisation.
int run_copy_back(int count, std::uint64_t duration_us) {
  constexpr std::size_t kBytes = 4096;
  std::vector<unsigned char> host(kBytes, 1);
  CUdeviceptr device = 0;
  CHECK_CU(cuMemAlloc(&device, kBytes));
  for (int i = 0; i < count; ++i) {
    CHECK_CU(cuMemcpyHtoD(device, host.data(), kBytes));
    CHECK_CU(spin(duration_us, nullptr));
    CHECK_CU(cuMemcpyDtoH(host.data(), device, kBytes));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::printf("copy-back ok\n");
  return 0;
}

int run_pair(std::uint64_t duration_us) {
  CUstream first = nullptr, second = nullptr;
  CHECK_CU(cuStreamCreate(&first, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&second, CU_STREAM_NON_BLOCKING));
  CHECK_CU(spin(duration_us, first));
  std::printf("first launched\n");
  CHECK_CU(spin(duration_us, second));
  std::printf("second launched\n");
  CHECK_CU(cuStreamSynchronize(first));
  CHECK_CU(cuStreamSynchronize(second));
  std::printf("ops 2\npair ok\n");
  return 0;
}

int run_copies(std::size_t bytes) {
  std::vector<unsigned char> in(bytes), out(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 131 + i / 4093 + 7);
  CUdeviceptr device = 0;
  CHECK_CU(cuMemAlloc(&device, bytes));
  CHECK_CU(cuMemcpyHtoD(device, in.data(), bytes));
  CHECK_CU(cuMemcpyDtoH(out.data(), device, bytes));
  CHECK(in == out);
  std::printf("ops 2\ncopies ok\n");
  return 0;
}

int run_behind(std::size_t bytes, std::uint64_t duration_us) {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  void* in = nullptr;
  void* out = nullptr;
  CHECK_CU(cuMemAllocHost(&in, bytes));
  CHECK_CU(cuMemAllocHost(&out, bytes));
  auto* up = static_cast<unsigned char*>(in);
  for (std::size_t i = 0; i < bytes; ++i) up[i] = static_cast<unsigned char>(i * 131 + i / 4093 + 7);
  CUdeviceptr device = 0;
  CHECK_CU(cuMemAlloc(&device, bytes));
  CHECK_CU(spin(duration_us, stream));
  const auto called = std::chrono::steady_clock::now();
  CHECK_CU(cuMemcpyHtoDAsync(device, in, bytes, stream));
  const auto returned = std::chrono::steady_clock::now();
  std::printf("returned in %.1f ms\n", std::chrono::duration<double, std::milli>(returned - called).count());
  CHECK_CU(cuMemcpyDtoHAsync(out, device, bytes, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK(std::memcmp(in, out, bytes) == 0);
  std::printf("ops 3\nbehind ok\n");
  return 0;
}

int run_release(std::uint64_t duration_us) {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUcontext helper = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&helper, g_device));
  CHECK_CU(spin(duration_us, stream));
  CHECK_CU(cuDevicePrimaryCtxRelease(g_device));  // not the last reference: the context lives on
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  std::printf("released while running\n");
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuStreamDestroy(stream));
  std::printf("ops 1\nrelease ok\n");
  return 0;
}

int run(const std::string& mode, int argc, char** argv) {
  const auto arg = [&](int i, long fallback) { return argc > i ? std::atol(argv[i]) : fallback; };
  if (mode == "streams") return run_streams(static_cast<int>(arg(2, 10)), static_cast<std::uint64_t>(arg(3, 200)));
  if (mode == "loop") return run_loop(static_cast<int>(arg(2, 10)), static_cast<std::uint64_t>(arg(3, 1000)));
  if (mode == "pair") return run_pair(static_cast<std::uint64_t>(arg(2, 1000)));
  if (mode == "copy-back") return run_copy_back(static_cast<int>(arg(2, 10)), static_cast<std::uint64_t>(arg(3, 1000)));
  if (mode == "copies") return run_copies(static_cast<std::size_t>(arg(2, 1 << 20)));
  if (mode == "behind") {
    return run_behind(static_cast<std::size_t>(arg(2, 16 << 20)), static_cast<std::uint64_t>(arg(3, 1'000'000)));
  }
  if (mode == "release") return run_release(static_cast<std::uint64_t>(arg(2, 1000)));
  std::printf("usage: %s streams|loop|pair|copies|behind|release ...\n", argv[0]);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the test reads progress while the program runs
  if (open_device() != 0) return 1;
  const int code = run(argc > 1 ? argv[1] : "", argc, argv);
  if (code == 0) CHECK_CU(cuDevicePrimaryCtxRelease(g_device));  // where hold_at_release may hold it
  return code;
}

// simgpu's own costs on this machine: a kernel launch call, a launch-to-completion round trip,
// synchronisation and copies, through the real libcuda.so.1 and a simgpud this program starts.
//
// Run: build/bin/simgpu-bench [--benchmark_filter=...]. Kernels take 0 us on the simulated
// device (catalog entry below), so each figure is simgpu's overhead alone; copies report the
// wall time next to the device time the profile gives them, and their ratio.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry empty_kernel(.param .u64 unused) { ret; }
)";

CUfunction g_kernel = nullptr;
CUstream g_stream = nullptr;

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "simgpu-bench: %s failed: %s\n", what, name);
  std::exit(1);
}

void launch() {
  unsigned long long unused = 0;
  void* params[] = {&unused};
  check(cuLaunchKernel(g_kernel, 1, 1, 1, 32, 1, 1, 0, g_stream, params, nullptr), "cuLaunchKernel");
}

void BM_LaunchKernel(benchmark::State& state) {
  std::int64_t n = 0;
  for (auto _ : state) {
    launch();
    if (++n % 4096 == 0) {
      state.PauseTiming();
      check(cuStreamSynchronize(g_stream), "cuStreamSynchronize");
      state.ResumeTiming();
    }
  }
  check(cuStreamSynchronize(g_stream), "cuStreamSynchronize");
}
BENCHMARK(BM_LaunchKernel);

void BM_LaunchAndSynchronize(benchmark::State& state) {
  for (auto _ : state) {
    launch();
    check(cuStreamSynchronize(g_stream), "cuStreamSynchronize");
  }
}
BENCHMARK(BM_LaunchAndSynchronize)->UseRealTime();

void BM_SynchronizeIdleStream(benchmark::State& state) {
  for (auto _ : state) check(cuStreamSynchronize(g_stream), "cuStreamSynchronize");
}
BENCHMARK(BM_SynchronizeIdleStream);

void BM_EventRecordSynchronize(benchmark::State& state) {
  CUevent event;
  check(cuEventCreate(&event, 0), "cuEventCreate");
  for (auto _ : state) {
    check(cuEventRecord(event, g_stream), "cuEventRecord");
    check(cuEventSynchronize(event), "cuEventSynchronize");
  }
  cuEventDestroy(event);
}
BENCHMARK(BM_EventRecordSynchronize)->UseRealTime();

// Synchronous pinned host-to-device copy; device time from the default H100 profile
// (25 GB/s, 2 us latency) is reported next to the wall time.
void BM_MemcpyHtoD(benchmark::State& state) {
  auto bytes = static_cast<std::size_t>(state.range(0));
  void* host = nullptr;
  CUdeviceptr dev = 0;
  check(cuMemAllocHost(&host, bytes), "cuMemAllocHost");
  check(cuMemAlloc(&dev, bytes), "cuMemAlloc");
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) check(cuMemcpyHtoD(dev, host, bytes), "cuMemcpyHtoD");
  std::chrono::duration<double, std::micro> wall = std::chrono::steady_clock::now() - start;
  double device_us = 2.0 + static_cast<double>(bytes) / 25e3;
  state.counters["device_us"] = device_us;
  state.counters["wall_over_device"] = wall.count() / static_cast<double>(state.iterations()) / device_us;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  cuMemFree(dev);
  cuMemFreeHost(host);
}
BENCHMARK(BM_MemcpyHtoD)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();

// Starts simgpud on a private socket; stops it at exit.
struct Device {
  std::filesystem::path dir;
  pid_t pid = -1;

  bool start() {
    char tmpl[] = "/tmp/simgpu-bench-XXXXXX";
    if (!mkdtemp(tmpl)) return false;
    dir = tmpl;
    std::ofstream(dir / "catalog.json") << R"({"kernels": [{"match": "^empty_kernel$", "model": "fixed", "us": 0}]})";
    std::string socket = (dir / "simgpu.sock").string();
    std::string exe = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "simgpud").string();
    std::string catalog = (dir / "catalog.json").string();
    pid = fork();
    if (pid == 0) {
      execl(exe.c_str(), "simgpud", "--socket", socket.c_str(), "--catalog", catalog.c_str(), "--log-level", "warn",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    setenv("SIMGPU_SOCKET", socket.c_str(), 1);
    for (int i = 0; i < 200; ++i) {
      if (std::filesystem::exists(socket)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  ~Device() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Device device;
  if (!device.start()) {
    std::fprintf(stderr, "simgpu-bench: could not start simgpud\n");
    return 1;
  }
  check(cuInit(0), "cuInit");
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule module;
  check(cuModuleLoadData(&module, kPtx), "cuModuleLoadData");
  check(cuModuleGetFunction(&g_kernel, module, "empty_kernel"), "cuModuleGetFunction");
  check(cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

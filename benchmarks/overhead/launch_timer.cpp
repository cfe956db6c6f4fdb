// gpuqos-overhead-launch-timer: times N cuLaunchKernel calls of a 0-us kernel one by one and writes
// them as JSON; gpuqos-overhead runs it directly on simgpu and under libgpuqos.so.
//
// Usage: gpuqos-overhead-launch-timer --launches N --warmup W --out FILE [--stream own|legacy]
// (`own`, the default: a non-blocking stream of its own; `legacy`: the legacy default stream, which
// a program that names no stream, PyTorch's default stream among them, launches on).
// It is a plain CUDA driver-API program (linked against the toolkit's stub); the environment picks
// the driver (LD_LIBRARY_PATH) and the shim (LD_PRELOAD). The kernel must take 0 us in simgpu's
// catalog (`^gpuqos_overhead_empty$`) so that the figures are call costs alone.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry gpuqos_overhead_empty(.param .u64 unused) { ret; }
)";

// Launches between two synchronisations (untimed), so the device queue stays short.
constexpr int kSyncEvery = 256;

struct Options {
  long launches = 10000;
  long warmup = 500;
  std::string out_path;
  bool legacy = false;  // --stream legacy
};

bool check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "gpuqos-overhead-launch-timer: %s failed: %s\n", what, name);
  return false;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--launches") o.launches = std::atol(argv[i + 1]);
    else if (key == "--warmup") o.warmup = std::atol(argv[i + 1]);
    else if (key == "--out") o.out_path = argv[i + 1];
    else if (key == "--stream" && std::strcmp(argv[i + 1], "own") == 0) o.legacy = false;
    else if (key == "--stream" && std::strcmp(argv[i + 1], "legacy") == 0) o.legacy = true;
    else return false;
  }
  return argc % 2 == 1 && o.launches > 0 && o.warmup >= 0 && !o.out_path.empty();
}

// Each launch's call time in ns; the first `warmup` launches are not kept.
bool time_launches(CUfunction kernel, CUstream stream, const Options& o, std::vector<std::int64_t>& call_ns) {
  unsigned long long unused = 0;
  void* params[] = {&unused};
  call_ns.reserve(static_cast<std::size_t>(o.launches));
  for (long i = 0; i < o.warmup + o.launches; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const CUresult r = cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
    const auto end = std::chrono::steady_clock::now();
    if (!check(r, "cuLaunchKernel")) return false;
    if (i >= o.warmup) call_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
    if ((i + 1) % kSyncEvery == 0 && !check(cuStreamSynchronize(stream), "cuStreamSynchronize")) return false;
  }
  return check(cuStreamSynchronize(stream), "cuStreamSynchronize");
}

double percentile_us(std::vector<std::int64_t> sorted_ns, double q) {
  const auto index = static_cast<std::size_t>(q * static_cast<double>(sorted_ns.size() - 1) + 0.5);
  return static_cast<double>(sorted_ns[index]) / 1000.0;
}

// {"p50_us", "p99_us", "call_ns": [...]}: the orchestrator pools call_ns across runs.
bool write_json(const std::string& path, std::vector<std::int64_t> call_ns) {
  std::vector<std::int64_t> sorted = call_ns;
  std::sort(sorted.begin(), sorted.end());
  std::ofstream out(path);
  out << "{\"launches\": " << call_ns.size() << ", \"p50_us\": " << percentile_us(sorted, 0.50)
      << ", \"p99_us\": " << percentile_us(sorted, 0.99) << ", \"call_ns\": [";
  for (std::size_t i = 0; i < call_ns.size(); ++i) out << (i ? "," : "") << call_ns[i];
  out << "]}\n";
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: gpuqos-overhead-launch-timer --launches N --warmup W --out FILE [--stream own|legacy]\n");
    return 2;
  }
  CUdevice device;
  CUcontext context;
  CUmodule module;
  CUfunction kernel;
  CUstream stream;
  if (!check(cuInit(0), "cuInit") || !check(cuDeviceGet(&device, 0), "cuDeviceGet") ||
      !check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain") ||
      !check(cuCtxSetCurrent(context), "cuCtxSetCurrent") ||
      !check(cuModuleLoadData(&module, kPtx), "cuModuleLoadData") ||
      !check(cuModuleGetFunction(&kernel, module, "gpuqos_overhead_empty"), "cuModuleGetFunction") ||
      !check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    return 1;
  }
  std::vector<std::int64_t> call_ns;
  if (!time_launches(kernel, o.legacy ? CU_STREAM_LEGACY : stream, o, call_ns)) return 1;
  if (!write_json(o.out_path, std::move(call_ns))) {
    std::fprintf(stderr, "gpuqos-overhead-launch-timer: cannot write %s\n", o.out_path.c_str());
    return 1;
  }
  cuStreamDestroy(stream);
  cuModuleUnload(module);
  cuDevicePrimaryCtxRelease(device);
  return 0;
}

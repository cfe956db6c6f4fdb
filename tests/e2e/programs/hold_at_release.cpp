// An LD_PRELOAD for the end-to-end tests: when E2E_HOLD_UNTIL names a file, a program that has
// released its primary context waits at exit (up to 60 s) until that file exists. A CUDA program
// releases its context when its work is done and synchronised, so the test reads gpuqosd's final
// accounting of the program while it is still connected, then lets it finish by creating the file.
// At exit, not inside the release: the shim (first in LD_PRELOAD, as `gpuqos run` puts it) keeps
// the completions of a context that a call may end until the call returns, so a program held
// inside its release would still owe the daemon the completions of its last ops.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace {

using Release = CUresult (*)(CUdevice);

void hold() {
  const char* file = std::getenv("E2E_HOLD_UNTIL");
  if (file == nullptr || *file == '\0') return;
  std::fprintf(stderr, "e2e-hold: holding\n");
  std::fflush(stderr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::access(file, F_OK) != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "e2e-hold: released\n");
  std::fflush(stderr);
}

// The driver's own function (the shim does not hook it): found in libcuda.so.1 directly so that no
// dlsym interposer is asked.
Release real_release() {
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  return driver ? reinterpret_cast<Release>(::dlsym(driver, "cuDevicePrimaryCtxRelease_v2")) : nullptr;
}

}  // namespace

// cuda.h maps cuDevicePrimaryCtxRelease to this _v2 symbol.
extern "C" CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  static const Release real = real_release();
  const CUresult result = real ? real(device) : CUDA_ERROR_NOT_INITIALIZED;
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(hold); });  // runs before the shim's own exit handlers
  return result;
}

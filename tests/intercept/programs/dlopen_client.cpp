// A CUDA program that does not link libcuda: it dlopen()s libcuda.so.1 (RTLD_LOCAL, as the CUDA
// runtime does) and looks each entry point up with dlsym. `dlsym` runs kernels and copies that way;
// `absent` expects no driver at all and calls hooks found with dlsym(RTLD_DEFAULT), which must fail
// cleanly with CUDA_ERROR_NOT_INITIALIZED; `handles` looks a hooked name up on the handles of two
// other libraries beside this program (test_wrapper.cpp, test_linked.cpp); `late` loads the driver
// by its path after a hook was reached without one; `dlerror` checks a hooked lookup leaves no error.
#include <cuda.h>
#include <dlfcn.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gpuqos/testing/spin_program.h"

namespace {

template <class Function>
Function* symbol(void* handle, const char* name) {
  return reinterpret_cast<Function*>(dlsym(handle, name));
}

std::string object_of(void* fn) {
  Dl_info info{};
  return dladdr(fn, &info) != 0 && info.dli_fname ? info.dli_fname : "?";
}

// Device 0's primary context made current, through the driver's handle.
int open_primary(void* driver) {
  auto init = symbol<decltype(cuInit)>(driver, "cuInit");
  auto device_get = symbol<decltype(cuDeviceGet)>(driver, "cuDeviceGet");
  auto retain = symbol<decltype(cuDevicePrimaryCtxRetain)>(driver, "cuDevicePrimaryCtxRetain");
  auto set_current = symbol<decltype(cuCtxSetCurrent)>(driver, "cuCtxSetCurrent");
  CHECK(init && device_get && retain && set_current);
  CUdevice device = 0;
  CUcontext context = nullptr;
  CHECK_CU(init(0));
  CHECK_CU(device_get(&device, 0));
  CHECK_CU(retain(&context, device));
  CHECK_CU(set_current(context));
  return 0;
}

int run_dlsym() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(driver != nullptr);
  auto init = symbol<decltype(cuInit)>(driver, "cuInit");
  auto load = symbol<decltype(cuModuleLoadData)>(driver, "cuModuleLoadData");
  auto get_function = symbol<decltype(cuModuleGetFunction)>(driver, "cuModuleGetFunction");
  auto launch = symbol<decltype(cuLaunchKernel)>(driver, "cuLaunchKernel");
  auto alloc = symbol<decltype(cuMemAlloc_v2)>(driver, "cuMemAlloc_v2");
  auto free = symbol<decltype(cuMemFree_v2)>(driver, "cuMemFree_v2");
  auto to_device = symbol<decltype(cuMemcpyHtoD_v2)>(driver, "cuMemcpyHtoD_v2");
  auto to_host = symbol<decltype(cuMemcpyDtoH_v2)>(driver, "cuMemcpyDtoH_v2");
  auto synchronize = symbol<decltype(cuCtxSynchronize)>(driver, "cuCtxSynchronize");
  CHECK(init && load && get_function && launch && alloc && free && to_device && to_host && synchronize);
  // Hooked names answer the shim's hooks, the others the driver's functions.
  CHECK(object_of(reinterpret_cast<void*>(launch)).find("libgpuqos.so") != std::string::npos);
  CHECK(object_of(reinterpret_cast<void*>(init)).find("libcuda.so") != std::string::npos);
  CHECK(dlsym(driver, "cuNoSuchEntryPoint") == nullptr && dlerror() != nullptr);

  CUmodule module = nullptr;
  CUfunction spin = nullptr;
  if (open_primary(driver) != 0) return 1;
  CHECK_CU(load(&module, kPtx));
  CHECK_CU(get_function(&spin, module, "spin"));
  std::uint64_t duration_us = 20;
  void* params[] = {&duration_us};
  CHECK_CU(launch(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  CUdeviceptr buffer = 0;
  std::vector<unsigned char> source(512, 7), result(512);
  CHECK_CU(alloc(&buffer, source.size()));
  CHECK_CU(to_device(buffer, source.data(), source.size()));
  CHECK_CU(synchronize());
  CHECK_CU(to_host(result.data(), buffer, result.size()));
  CHECK(result == source);
  CHECK_CU(free(buffer));
  std::printf("dlsym ok\n");
  return 0;
}

// A library built beside this program.
std::string beside_me(const char* file) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / file).string();
}

int run_handles() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(driver != nullptr);
  // A library's own definition of a hooked name is its answer: the program asked for that one.
  void* wrapper = dlopen(beside_me("libintercept_test_wrapper.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  CHECK(wrapper != nullptr);
  auto wrapped = symbol<decltype(cuLaunchKernel)>(wrapper, "cuLaunchKernel");
  CHECK(wrapped != nullptr);
  CHECK(object_of(reinterpret_cast<void*>(wrapped)).find("libintercept_test_wrapper.so") != std::string::npos);
  CHECK(wrapped(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == static_cast<CUresult>(999));
  // A library that links the driver finds the driver's definition among its dependencies: the hook.
  void* linked = dlopen(beside_me("libintercept_test_linked.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  CHECK(linked != nullptr);
  void* through_linked = dlsym(linked, "cuLaunchKernel");
  CHECK(through_linked != nullptr);
  CHECK(object_of(through_linked).find("libgpuqos.so") != std::string::npos);
  CHECK(through_linked == dlsym(driver, "cuLaunchKernel"));
  CHECK(dlsym(wrapper, "cuNoSuchEntryPoint") == nullptr && dlerror() != nullptr);
  std::printf("handles ok\n");
  return 0;
}

int run_absent() {
  CHECK(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) == nullptr);
  auto launch = symbol<decltype(cuLaunchKernel)>(RTLD_DEFAULT, "cuLaunchKernel");
  auto to_device = symbol<decltype(cuMemcpyHtoD_v2)>(RTLD_DEFAULT, "cuMemcpyHtoD_v2");
  CHECK(launch && to_device);  // the preloaded shim's hooks
  for (int i = 0; i < 2; ++i) {
    CHECK(launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_ERROR_NOT_INITIALIZED);
  }
  char byte = 0;
  CHECK(to_device(0, &byte, 1) == CUDA_ERROR_NOT_INITIALIZED);
  std::printf("absent ok\n");
  return 0;
}

// No driver on the library path at first: a hook reached then fails cleanly; once the program has
// loaded the driver by its path (a compat directory), the same functions work, the hook too.
int run_late(const char* driver_path) {
  CHECK(driver_path != nullptr);
  CHECK(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) == nullptr);
  auto hooked_memset = symbol<decltype(cuMemsetD8_v2)>(RTLD_DEFAULT, "cuMemsetD8_v2");
  CHECK(hooked_memset != nullptr);
  CHECK(hooked_memset(0, 1, 64) == CUDA_ERROR_NOT_INITIALIZED);
  void* driver = dlopen(driver_path, RTLD_NOW | RTLD_LOCAL);
  CHECK(driver != nullptr);
  auto alloc = symbol<decltype(cuMemAlloc_v2)>(driver, "cuMemAlloc_v2");
  auto memset = symbol<decltype(cuMemsetD8_v2)>(driver, "cuMemsetD8_v2");
  auto synchronize = symbol<decltype(cuCtxSynchronize)>(driver, "cuCtxSynchronize");
  CHECK(alloc && memset && synchronize);
  if (open_primary(driver) != 0) return 1;
  CUdeviceptr buffer = 0;
  CHECK_CU(alloc(&buffer, 64));
  CHECK_CU(memset(buffer, 1, 64));
  CHECK_CU(hooked_memset(buffer, 2, 64));
  CHECK_CU(synchronize());
  std::printf("late ok\n");
  return 0;
}

// Started by a bare name (argv[0] without a slash, as a shell finds a program on PATH): it runs
// itself again so. A successful dlsym leaves dlerror() empty (a review: the shim's lookup of its
// caller's object tried to dlopen that bare name, and the failure stayed for the program to read).
int run_dlerror(char** argv) {
  if (std::strchr(argv[0], '/') != nullptr) {
    char* again[] = {const_cast<char*>("intercept_dlopen_client"), argv[1], nullptr};
    ::execv(argv[0], again);
    std::printf("cannot run itself again\n");
    return 1;
  }
  dlerror();
  void* hook = dlsym(RTLD_DEFAULT, "cuLaunchKernel");
  const char* error = dlerror();
  std::printf("found %s, dlerror %s\n", hook ? "yes" : "no", error ? error : "none");
  CHECK(hook != nullptr && error == nullptr);
  std::printf("dlerror ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "dlsym") return run_dlsym();
  if (mode == "absent") return run_absent();
  if (mode == "handles") return run_handles();
  if (mode == "late") return run_late(std::getenv("DRIVER_PATH"));
  if (mode == "dlerror") return run_dlerror(argv);
  std::printf("usage: %s dlsym|absent|handles|late|dlerror\n", argv[0]);
  return 2;
}

// Resolution of the driver's real functions: each looked up once, on first use, in one function.
//
// Slots are atomics rather than a std::call_once: a lookup may dlopen libcuda, whose initialisers
// could re-enter a hook on this thread, which a once-flag would deadlock. Two threads racing on an
// empty slot both look it up and store the same answer: harmless.
#include <dlfcn.h>
#include <link.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <string>

#include "shim.h"

namespace gpuqos::intercept {
namespace {

// Marks a slot whose symbol was looked up and not found (nullptr marks "not looked up yet").
char missing_marker;
void* const kMissing = &missing_marker;

// Part of the hook table: one slot per hook, then the helpers.
std::array<std::atomic<void*>, kHookCount> hook_slots{};
std::array<std::atomic<void*>, kDriverHelperCount> helper_slots{};

// Indexed by DriverHelper.
constexpr std::array<const char*, kDriverHelperCount> kHelperNames = {
    "cuStreamIsCapturing", "cuStreamIsCapturing_ptsz", "cuCtxGetCurrent",      "cuCtxGetDevice",
    "cuFuncGetParamInfo",  "cuFuncGetName",            "cuMemHostGetFlags",    "cuPointerGetAttribute",
    "cuEventCreate",       "cuEventDestroy_v2",        "cuEventRecord",        "cuEventRecord_ptsz",
    "cuEventQuery",        "cuCtxSetCurrent",          "cuThreadExchangeStreamCaptureMode",
    "cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
    "cuDeviceGetAttribute",        "cuEventElapsedTime_v2",        "cuEventElapsedTime",  "cuDeviceGetCount",
    "cuDeviceGetUuid_v2",          "cuDeviceGetUuid",              "cuStreamQuery",        "cuCtxGetId",
    "cuStreamGetFlags"};

// How many objects the dynamic loader has loaded so far (glibc's dlpi_adds; 0 if it cannot say).
// One object is read: the count is the process's, the same in each.
unsigned long long loads_so_far() noexcept {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t size, void* out) {
        if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) {
          *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        }
        return 1;
      },
      &adds);
  return adds;
}

// The loads_so_far() at which a lookup last found no driver (0: none did). Until the program loads
// something more, another lookup would find none again: it is not made. A failed dlopen searches
// the library path (about 10 opens, 75 us a query mark before CUDA was loaded, in a review).
std::atomic<unsigned long long> no_driver_at_loads{0};

// The driver's definition of `name`, or nullptr; `no_driver`: none is loaded, nor could be.
void* look_up(const char* name, bool& no_driver) {
  DlsymFunction real = real_dlsym();
  // 1. The next definition after libgpuqos.so in the global scope: libcuda when the program links it
  //    or dlopen()ed it RTLD_GLOBAL (or another interposer after us, which then chains to libcuda).
  //    Fails when libcuda is not global: dlopen()ed RTLD_LOCAL, as the CUDA runtime and most
  //    frameworks do, or not loaded yet.
  if (void* fn = real(RTLD_NEXT, name)) return fn;
  // 2. A libcuda that is loaded, however it was loaded. RTLD_NOLOAD fails when it is not loaded.
  void* driver = dlopen(kDriverSoname, RTLD_NOW | RTLD_NOLOAD);
  // 3. Load it ourselves: a hook reached through dlsym(RTLD_DEFAULT) before the program loaded the
  //    driver. Fails when this machine has no driver (or no simgpu on LD_LIBRARY_PATH).
  if (!driver) driver = dlopen(kDriverSoname, RTLD_LAZY);
  no_driver = driver == nullptr;
  if (!driver) return nullptr;
  // Fails when this driver is older than the entry point (a symbol of a newer CUDA). The handle is
  // kept open on purpose: the function must stay valid for the life of the process.
  return real(driver, name);
}

// `report_missing`: log the first failed lookup (hooks: calls to it fail; helpers: the shim copes).
void* resolve(std::atomic<void*>& slot, const char* name, bool report_missing = true) {
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    const unsigned long long loads = loads_so_far();
    if (loads != 0 && no_driver_at_loads.load(std::memory_order_relaxed) == loads) return nullptr;
    bool no_driver = false;
    void* found = look_up(name, no_driver);
    if (no_driver) {
      no_driver_at_loads.store(loads, std::memory_order_relaxed);
      // Not cached: the program may load the driver later, by a path its soname does not find (a
      // compat directory). Cached, a hook reached before then failed for the life of the process,
      // and a query mark made before (the helpers it resolves) left every op of the job unposted.
      static std::atomic<bool> said{false};
      if (report_missing && !said.exchange(true)) {
        try {
          log_message(LogLevel::error, std::string("no CUDA driver is loaded, and ") + kDriverSoname +
                                           " cannot be loaded: calls to " + name + " and the like fail until one is");
        } catch (...) {  // out of memory for the message: the error code still tells
        }
      }
      return nullptr;
    }
    fn = found ? found : kMissing;
    void* expected = nullptr;
    if (slot.compare_exchange_strong(expected, fn, std::memory_order_acq_rel) && !found && report_missing) {
      try {
        log_message(LogLevel::error, std::string("the driver has no ") + name + "; calls to it fail");
      } catch (...) {  // out of memory for the message: the error code still tells
      }
    }
  }
  return fn == kMissing ? nullptr : fn;
}

bool driver_loaded() {
  void* driver = dlopen(kDriverSoname, RTLD_NOW | RTLD_NOLOAD);
  if (driver) dlclose(driver);  // NOLOAD took a reference
  return driver != nullptr;
}

}  // namespace

void* real_function_address(HookId id) noexcept {
  return resolve(hook_slots[index_of(id)], hook_name(id).data());  // names are NUL-terminated literals
}

void* resolved_real_function_address(HookId id) noexcept {
  void* fn = hook_slots[index_of(id)].load(std::memory_order_acquire);
  return fn == kMissing ? nullptr : fn;
}

void* driver_helper(DriverHelper helper) noexcept {
  const auto index = static_cast<std::size_t>(helper);
  return resolve(helper_slots[index], kHelperNames[index], /*report_missing=*/false);
}

CUresult missing_real_function(HookId) noexcept {
  return driver_loaded() ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace gpuqos::intercept

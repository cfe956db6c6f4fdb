// Loading libcupti: dlopen by name, the functions by the shim's real dlsym, the API version checked.
#include "cupti_library.h"

#include <dlfcn.h>

#include <cstdint>

#include "shim.h"

namespace gpuqos::intercept {
namespace {

// CUPTI API versions: 13xxyy from CUDA 13 on; before it a small number per release (v28: CUDA 12.9).
constexpr std::uint32_t kHeaderMajor = CUPTI_API_VERSION / 10000;

std::uint32_t cuda_major_of(std::uint32_t api_version) { return api_version >= 10000 ? api_version / 10000 : 0; }

template <class Function>
bool resolve(void* library, const char* name, Function& out, std::string& missing) {
  out = reinterpret_cast<Function>(real_dlsym()(library, name));  // ours would answer hooks: never plain dlsym
  if (!out && missing.empty()) missing = name;
  return out != nullptr;
}

}  // namespace

std::vector<std::string> CuptiLibrary::candidates(const std::string& requested) {
  if (!requested.empty()) return {requested};
  return {"libcupti.so", "libcupti.so." + std::to_string(kHeaderMajor)};
}

std::optional<CuptiLibrary> CuptiLibrary::load(const std::string& requested, std::string& why) {
  void* library = nullptr;
  CuptiLibrary cupti;
  std::string tried;
  for (const std::string& name : candidates(requested)) {
    library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library) {
      cupti.loaded_as = name;
      break;
    }
    const char* error = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(error ? error : name.c_str());
  }
  if (!library) {
    why = "cannot load libcupti (" + tried + ")";
    return std::nullopt;
  }
  std::string missing;
  resolve(library, "cuptiGetVersion", cupti.get_version, missing);
  resolve(library, "cuptiGetResultString", cupti.get_result_string, missing);
  resolve(library, "cuptiActivityEnable", cupti.enable, missing);
  resolve(library, "cuptiActivityDisable", cupti.disable, missing);
  resolve(library, "cuptiActivityRegisterCallbacks", cupti.register_callbacks, missing);
  resolve(library, "cuptiActivityFlushAll", cupti.flush_all, missing);
  resolve(library, "cuptiActivityGetNextRecord", cupti.get_next_record, missing);
  resolve(library, "cuptiActivityPushExternalCorrelationId", cupti.push_external_id, missing);
  resolve(library, "cuptiActivityPopExternalCorrelationId", cupti.pop_external_id, missing);
  if (!missing.empty()) {
    why = cupti.loaded_as + " has no " + missing;
    return std::nullopt;
  }
  std::uint32_t version = 0;
  if (cupti.get_version(&version) != CUPTI_SUCCESS || cuda_major_of(version) != kHeaderMajor) {
    why = cupti.loaded_as + " speaks CUPTI API version " + std::to_string(version) + ", but this libgpuqos.so reads " +
          "the records of version " + std::to_string(CUPTI_API_VERSION) + " (CUDA " + std::to_string(kHeaderMajor) +
          "); set GPUQOS_CUPTI_LIBRARY to a matching libcupti";
    return std::nullopt;
  }
  return cupti;
}

std::string CuptiLibrary::describe(CUptiResult result) const {
  const char* name = nullptr;
  if (!get_result_string || get_result_string(result, &name) != CUPTI_SUCCESS || !name) name = "CUPTI error";
  return std::string(name) + " (" + std::to_string(static_cast<int>(result)) + ")";
}

}  // namespace gpuqos::intercept

// The CUPTI activity API as the shim finds it at run time: libgpuqos.so never links libcupti.
//
// On a GPU machine it is the toolkit's libcupti; on simgpu, simgpu's (build/lib/simgpu, next to its
// libcuda.so.1). The shim reads records with the struct layouts of the cupti_activity.h it was
// built with, which change between CUDA major versions, so a libcupti of another major version is
// refused rather than misread.
#pragma once

#include <cupti.h>

#include <optional>
#include <string>
#include <vector>

namespace gpuqos::intercept {

struct CuptiLibrary {
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) get_result_string = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) get_next_record = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_external_id = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_external_id = nullptr;
  std::string loaded_as;  // the name or path dlopen found it by

  // The names tried, in order: `requested` alone when it is set, else "libcupti.so" and then the
  // versioned name of the headers' CUDA major version ("libcupti.so.13").
  static std::vector<std::string> candidates(const std::string& requested);

  // Loads the first candidate that dlopen finds and resolves every function above; nullopt and
  // `why` (one sentence) when none loads, a function is missing or its API version does not match.
  // The library is never unloaded.
  static std::optional<CuptiLibrary> load(const std::string& requested, std::string& why);

  // "CUPTI_ERROR_UNKNOWN (999)".
  std::string describe(CUptiResult result) const;
};

}  // namespace gpuqos::intercept

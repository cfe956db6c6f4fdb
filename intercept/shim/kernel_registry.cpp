// KernelRegistry: names to ids, handles to launch info, parameter layouts from cuFuncGetParamInfo.
#include "kernel_registry.h"

#include <cstring>
#include <mutex>

#include "gpuqos/ipc/registration.h"
#include "shim.h"

namespace gpuqos::intercept {
namespace {

using FuncGetParamInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
using FuncGetName = CUresult (*)(const char**, CUfunction);

// CUDA allows at most 32 764 bytes of parameters, so this bounds the loop on a misbehaving driver.
constexpr std::size_t kMaxParams = 4096;

void query_layout(CUfunction function, KernelLaunchInfo& info) {
  info.layout_known = true;
  const auto param_info = driver<FuncGetParamInfo>(DriverHelper::func_get_param_info);
  if (!param_info) return;
  for (std::size_t index = 0; index < kMaxParams; ++index) {
    size_t offset = 0, bytes = 0;
    if (param_info(function, index, &offset, &bytes) != CUDA_SUCCESS) return;
    info.param_bytes = static_cast<std::uint32_t>(offset + bytes);
    if (bytes <= 8 && info.scalar_count < ipc::kMaxScalarArgs && index < 256) {
      info.scalar_index[info.scalar_count] = static_cast<std::uint8_t>(index);
      info.scalar_bytes[info.scalar_count] = static_cast<std::uint8_t>(bytes);
      ++info.scalar_count;
    }
  }
}

std::string driver_name_of(CUfunction function) {
  const char* name = nullptr;
  const auto get_name = driver<FuncGetName>(DriverHelper::func_get_name);
  if (get_name && get_name(&name, function) == CUDA_SUCCESS && name && *name) return name;
  return "unnamed";
}

}  // namespace

std::uint32_t KernelRegistry::id_for_locked(std::string_view name) {
  std::string key = ipc::wire_kernel_name(name);  // gpuqosd refuses a record of other bytes
  if (const auto it = ids_.find(key); it != ids_.end()) return it->second;
  names_.push_back(key);
  const auto id = static_cast<std::uint32_t>(names_.size());
  ids_.emplace(std::move(key), id);
  return id;
}

void KernelRegistry::name_handle(const void* handle, std::string_view name, const void* module, bool of_library) {
  if (!handle || name.empty()) return;
  std::unique_lock lock(mutex_);
  // A handle value may be reused for another kernel after an unload: all of it is new.
  handles_[handle] = Handle{.info = KernelLaunchInfo{.id = id_for_locked(name)}, .module = module, .of_library = of_library};
}

void KernelRegistry::alias(const void* function, const void* kernel) {
  if (!function) return;
  std::unique_lock lock(mutex_);
  const auto it = handles_.find(kernel);
  if (it == handles_.end()) return;
  handles_[function] = Handle{.info = KernelLaunchInfo{.id = it->second.info.id}, .module = it->second.module};
}

void KernelRegistry::forget_module(const void* module, bool library) {
  std::unique_lock lock(mutex_);
  std::erase_if(handles_, [module, library](const auto& entry) {
    const Handle& handle = entry.second;
    return handle.module == module || handle.module == nullptr || (library && !handle.of_library);
  });
}

void KernelRegistry::forget_context_bound() {
  std::unique_lock lock(mutex_);
  std::erase_if(handles_, [](const auto& entry) { return !entry.second.of_library; });
  graph_ids_.clear();  // a context's graph execs end with it
}

std::uint32_t KernelRegistry::graph_id(CUgraphExec exec) {
  {
    std::shared_lock lock(mutex_);
    const auto it = graph_ids_.find(exec);
    if (it != graph_ids_.end()) return it->second;
  }
  std::unique_lock lock(mutex_);
  if (const auto it = graph_ids_.find(exec); it != graph_ids_.end()) return it->second;
  return number_graph_locked(exec);  // instantiated before the shim saw it (or by a call not hooked)
}

void KernelRegistry::graph_instantiated(CUgraphExec exec) {
  std::unique_lock lock(mutex_);
  graph_ids_.erase(exec);  // a handle given again
  number_graph_locked(exec);
}

std::uint32_t KernelRegistry::number_graph_locked(CUgraphExec exec) {
  std::array<bool, kMaxGraphIds + 1> taken{};
  std::uint32_t numbered = 0;
  for (const auto& [other, id] : graph_ids_) {
    taken[id] = true;
    numbered += id != 0;
  }
  std::uint32_t id = 0;
  if (numbered < kMaxGraphIds) {
    id = 1;
    while (taken[id]) ++id;
  }
  // Past kMaxGraphIds, 0 for good (not a number freed later: it would change models mid-life);
  // remembered too, so its launches find it under the shared lock.
  if (graph_ids_.size() < kMaxGraphEntries) {
    try {
      graph_ids_.emplace(exec, id);
    } catch (...) {  // out of memory: the job's shared model
      return 0;
    }
  }
  return id;
}

void KernelRegistry::forget_graph(CUgraphExec exec) {
  std::unique_lock lock(mutex_);
  graph_ids_.erase(exec);
}

KernelLaunchInfo KernelRegistry::launch_info(CUfunction function) {
  {
    std::shared_lock lock(mutex_);
    const auto it = handles_.find(function);
    if (it != handles_.end() && it->second.info.layout_known) return it->second.info;
  }
  // First launch of this handle: ask the driver without holding the lock.
  KernelLaunchInfo info;
  query_layout(function, info);
  std::string name;
  {
    std::shared_lock lock(mutex_);
    if (!handles_.contains(function)) name = driver_name_of(function);
  }
  std::unique_lock lock(mutex_);
  KernelLaunchInfo& stored = handles_[function].info;
  info.id = stored.id ? stored.id : id_for_locked(name.empty() ? driver_name_of(function) : name);
  stored = info;
  return info;
}

std::string KernelRegistry::name_of(std::uint32_t id) const {
  std::shared_lock lock(mutex_);
  return id >= 1 && id <= names_.size() ? names_[id - 1] : std::string();
}

std::uint8_t read_scalar_args(const KernelLaunchInfo& info, void** kernel_params,
                              std::uint64_t (&args)[ipc::kMaxScalarArgs]) noexcept {
  if (!kernel_params) return 0;  // arguments packed in `extra`: not read
  for (std::uint8_t i = 0; i < info.scalar_count; ++i) {
    const void* value = kernel_params[info.scalar_index[i]];
    if (!value) return i;
    args[i] = 0;
    std::memcpy(&args[i], value, info.scalar_bytes[i]);  // little-endian: zero-extended
  }
  return info.scalar_count;
}

}  // namespace gpuqos::intercept

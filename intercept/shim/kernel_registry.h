// Kernel identity for the daemon: the id the shim gives each kernel name (sent once per registration
// as an ipc KernelName record), and the parameter layout a launch reads its scalar arguments with.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpuqos/ipc/descriptor.h"

namespace gpuqos::intercept {

// What a launch of one kernel needs: its id and where its scalar (<= 8-byte) parameters are.
struct KernelLaunchInfo {
  std::uint32_t id = 0;           // 0 only when the registry could not store a name (out of memory)
  std::uint32_t param_bytes = 0;  // 0 when the driver cannot tell (no cuFuncGetParamInfo)
  std::uint8_t scalar_count = 0;  // how many of the first parameters below are read, <= 8
  std::array<std::uint8_t, ipc::kMaxScalarArgs> scalar_index{};  // parameter index of each scalar
  std::array<std::uint8_t, ipc::kMaxScalarArgs> scalar_bytes{};
  bool layout_known = false;  // the driver was asked (answered or not)
};

// Thread-safe; lives as long as the process (ids survive re-registrations with the daemon).
class KernelRegistry {
 public:
  // Naming hooks: `handle` (a CUfunction or CUkernel) is the kernel `name`, got from `module` (a
  // CUmodule or CUlibrary); a CUkernel (`of_library`) outlives contexts. Names share one id.
  void name_handle(const void* handle, std::string_view name, const void* module, bool of_library);
  // cuKernelGetFunction: `function` is the same kernel as `kernel` (if that one is known).
  void alias(const void* function, const void* kernel);
  // `module` was unloaded: its handles, and every handle first seen at a launch (of no module
  // known), may be given again to other kernels. Forgotten: their next launch asks the driver. A
  // library's unload also frees the modules cuLibraryGetModule gave (their functions were named
  // by the module): every handle but another library's kernels goes then.
  void forget_module(const void* module, bool library);
  // A context ended: the functions of its modules went with it (a cuCtxDestroy or a primary
  // context's reset unloads them without an unload call). Every handle but the CUkernels goes.
  void forget_context_bound();
  // A launch of `function`. A function never seen being named gets its name from the driver
  // (cuFuncGetName) or "unnamed": the daemon refuses kernel id 0, so every launch has an id.
  KernelLaunchInfo launch_info(CUfunction function);
  // "" for an unknown id.
  std::string name_of(std::uint32_t id) const;

  // A graph launch's identity for the daemon (its descriptor's kernel_id, which gpuqosd keys the
  // graph's model by): 1 to kMaxGraphIds, the lowest not held by another live CUgraphExec, given at
  // its instantiation (cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams), in program
  // order, not at its first launch, whose order is the traffic's (a review); 0 (the job's one
  // shared model) past kMaxGraphIds live, for that exec's whole life, or out of memory. So a program
  // that instantiates the same graphs in the same order gets the same ids run after run (a server's
  // graphs per batch size), and one that instantiates a graph anew each step keeps reusing id 1. An
  // exec not seen instantiated gets its id at its first launch. An exec destroyed
  // (cuGraphExecDestroy), or every exec when a context ends, frees its id.
  static constexpr std::uint32_t kMaxGraphIds = ipc::kMaxGraphIds;
  static constexpr std::size_t kMaxGraphEntries = 4096;  // execs remembered, numbered or not
  std::uint32_t graph_id(CUgraphExec exec);
  void graph_instantiated(CUgraphExec exec);
  void forget_graph(CUgraphExec exec);

 private:
  std::uint32_t id_for_locked(std::string_view name);
  std::uint32_t number_graph_locked(CUgraphExec exec);

  struct Handle {
    KernelLaunchInfo info;
    const void* module = nullptr;  // nullptr: first seen at a launch
    bool of_library = false;       // a CUkernel of cuLibraryGetKernel (not bound to a context)
  };

  mutable std::shared_mutex mutex_;
  std::unordered_map<const void*, Handle> handles_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<std::string> names_;  // names_[id - 1]
  std::unordered_map<const void*, std::uint32_t> graph_ids_;  // live CUgraphExec -> its id (graph_id)
};

// Scalar arguments of a launch as the descriptor carries them (zero-extended); the count read.
std::uint8_t read_scalar_args(const KernelLaunchInfo& info, void** kernel_params,
                              std::uint64_t (&args)[ipc::kMaxScalarArgs]) noexcept;

}  // namespace gpuqos::intercept

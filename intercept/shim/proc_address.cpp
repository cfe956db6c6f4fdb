// cuGetProcAddress interposition: the CUDA runtime (and any modern program) reaches the driver
// through it, so its answers must be our hooks too, for the right version and stream flavour.
#include <atomic>
#include <string>

#include "shim.h"

namespace gpuqos::intercept {
namespace {

// Says once a process that a hooked entry point was asked for at a CUDA version newer than ours,
// and answered with a function we do not know: its calls through that pointer are not scheduled.
void say_kept_newer_abi(const char* symbol, int version) noexcept {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  try {
    log_message(LogLevel::warn, std::string("cuGetProcAddress(\"") + symbol + "\", " + std::to_string(version) +
                                    ") asks for a CUDA newer than the " + std::to_string(newest_known_cuda_version()) +
                                    " this gpuqos knows, and the driver answered a function it does not recognise, "
                                    "not the one it answers for " + std::to_string(newest_known_cuda_version()) +
                                    ": that answer is kept, and work launched through it (or any such answer) is not "
                                    "scheduled");
  } catch (...) {  // out of memory: unsaid
  }
}

// Our hook for what the driver answered to (symbol, version, flags), or nullptr to keep its answer.
// ask(v): what the driver answers for (symbol, v, flags), asked again; nullptr when nothing.
template <class AskAgain>
void* hook_for_answer(const char* symbol, int version, cuuint64_t flags, void* answer, const AskAgain& ask) noexcept {
  const ProcAddressSymbols candidates = proc_address_symbols(symbol, version);
  // The driver's own answer tells which ABI and flavour it chose when it is the exported function
  // (or our hook already: simgpu looks its answers up with dlsym), whatever the version asked.
  for (const auto& name : {candidates.per_thread, candidates.legacy}) {
    const auto candidate = find_hook(name);
    if (candidate && (answer == real_function_address(*candidate) || answer == hook_address(*candidate))) {
      return hook_address(*candidate);
    }
  }
  // Otherwise by the version and flags, as documented, for versions whose ABIs we know; for a newer
  // one, when the driver answers the very same function for the newest version we know: its ABI
  // has not changed since (a runtime newer than our headers asks with its own version).
  const bool wants_per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const int newest = newest_known_cuda_version();
  const int as_of = version > newest && ask(newest) == answer ? newest : version;
  if (const auto chosen = hook_for_unrecognised_answer(symbol, as_of, wants_per_thread)) return hook_address(*chosen);
  if (!candidates.legacy.empty() || !candidates.per_thread.empty()) say_kept_newer_abi(symbol, version);
  return nullptr;
}

template <class AskAgain>
void substitute_hook(CUresult result, const char* symbol, void** pfn, int version, cuuint64_t flags,
                     const AskAgain& ask) noexcept {
  if (result != CUDA_SUCCESS || !symbol || !pfn || !*pfn) return;
  if (void* hook = hook_for_answer(symbol, version, flags, *pfn, ask)) *pfn = hook;
}

}  // namespace

CUresult answer_proc_address(PFN_cuGetProcAddress_v11030 real, const char* symbol, void** pfn, int version,
                             cuuint64_t flags) noexcept {
  const NoCancel no_cancel;  // a warning may be written
  if (!real) return missing_real_function(HookId::hook_cuGetProcAddress);
  const CUresult result = real(symbol, pfn, version, flags);
  substitute_hook(result, symbol, pfn, version, flags, [&](int as_of) -> void* {
    void* again = nullptr;
    return real(symbol, &again, as_of, flags) == CUDA_SUCCESS ? again : nullptr;
  });
  return result;
}

CUresult answer_proc_address(PFN_cuGetProcAddress_v12000 real, const char* symbol, void** pfn, int version,
                             cuuint64_t flags, CUdriverProcAddressQueryResult* found) noexcept {
  const NoCancel no_cancel;  // a warning may be written
  if (!real) return missing_real_function(HookId::hook_cuGetProcAddress_v2);
  const CUresult result = real(symbol, pfn, version, flags, found);
  substitute_hook(result, symbol, pfn, version, flags, [&](int as_of) -> void* {
    void* again = nullptr;
    CUdriverProcAddressQueryResult status{};
    return real(symbol, &again, as_of, flags, &status) == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS
               ? again
               : nullptr;
  });
  return result;
}

}  // namespace gpuqos::intercept

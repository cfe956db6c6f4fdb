// The hook table: the id, name and category of every hooked driver entry point, from hooks.def.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gpuqos::intercept {

// What a hooked call is to the scheduler. launch, graph_launch, copy and memset are GPU work the
// gate may hold back; sync marks query boundaries; naming gives kernels their identity; alloc is
// for memory accounting; resolver is cuGetProcAddress, which hands out hooks; lifetime (stream and
// context destruction) is where work the shim still tracks must be settled before handles die;
// context (a primary context's retain) tells which context a later release or reset may end.
enum class Category : std::uint8_t { launch, graph_launch, copy, memset, sync, naming, alloc, resolver, lifetime, context };
inline constexpr std::size_t kCategoryCount = 10;

// HookId::hook_<symbol>. The prefix is not decoration: cuda.h #defines many API names to their
// current symbol (cuMemcpy2D -> cuMemcpy2D_v2), which would silently rename a bare `symbol`
// enumerator; a pasted name is never one of those macros.
enum class HookId : std::uint16_t {
#define GPUQOS_HOOK(category, symbol) hook_##symbol,
#include "hooks.def"
#undef GPUQOS_HOOK
};

inline constexpr std::size_t kHookCount = 0
#define GPUQOS_HOOK(category, symbol) +1
#include "hooks.def"
#undef GPUQOS_HOOK
    ;

constexpr std::size_t index_of(HookId id) { return static_cast<std::size_t>(id); }

// The exported symbol of `id`, e.g. "cuMemcpyHtoD_v2_ptds".
std::string_view hook_name(HookId id) noexcept;
Category hook_category(HookId id) noexcept;
std::string_view category_name(Category category) noexcept;
// True for the categories the gate may hold back (launch, graph_launch, copy, memset).
bool is_gpu_work(Category category) noexcept;

// The hook of an exported symbol; nullopt when it is not hooked. No allocation: dlsym calls this.
std::optional<HookId> find_hook(std::string_view symbol) noexcept;

// What cuGetProcAddress(api, version, flags) answers, as data (the CUDA-version -> symbol-variant
// map generated from cudaTypedefs.h): the newest symbol of `api` no newer than `version`, for the
// legacy default stream and, if `api` has one, for the per-thread default stream. Empty views when
// there is none (an API we know nothing of, or a version older than its first).
struct ProcAddressSymbols {
  std::string_view legacy;
  std::string_view per_thread;
};
ProcAddressSymbols proc_address_symbols(std::string_view api, int version) noexcept;

// The CUDA version this shim was built against (cuda.h's CUDA_VERSION): the newest whose ABIs it knows.
int newest_known_cuda_version() noexcept;

// Our hook for cuGetProcAddress(api, version, flags) when the driver answered with a function that
// is none of the ones we know: the newest ABI no newer than `version`, per stream flavour, as the
// driver documents. nullopt keeps the driver's answer: `api` is not hooked, or `version` is newer
// than newest_known_cuda_version(), when the answer may be an ABI we have no hook for (a hook of
// the older ABI called with the new one's arguments would crash the program).
std::optional<HookId> hook_for_unrecognised_answer(std::string_view api, int version, bool per_thread) noexcept;

}  // namespace gpuqos::intercept

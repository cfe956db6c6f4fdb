// The hook table's lookups: names, categories, symbol -> hook, and cuGetProcAddress's version map.
#include <algorithm>
#include <array>
#include <cstring>

#include <cuda.h>

#include "gpuqos/intercept/hooks.h"

namespace gpuqos::intercept {
namespace {

struct HookRow {
  std::string_view name;
  Category category;
};

constexpr HookRow kHooks[] = {
#define GPUQOS_HOOK(category, symbol) {#symbol, Category::category},
#include "hooks.def"
#undef GPUQOS_HOOK
};
static_assert(std::size(kHooks) == kHookCount);

// Hook ids sorted by name, computed by the compiler: find_hook is a binary search, no allocation.
constexpr std::array<HookId, kHookCount> kByName = [] {
  std::array<HookId, kHookCount> ids{};
  for (std::size_t i = 0; i < kHookCount; ++i) ids[i] = static_cast<HookId>(i);
  std::sort(ids.begin(), ids.end(), [](HookId a, HookId b) { return kHooks[index_of(a)].name < kHooks[index_of(b)].name; });
  return ids;
}();

struct ProcRow {
  std::string_view api;
  int version;
  int variant;  // 0 default stream, 1 _ptds, 2 _ptsz
  std::string_view symbol;
};

constexpr ProcRow kProcTable[] = {
#include "gpuqos/intercept/proc_table.inc"
};

}  // namespace

std::string_view hook_name(HookId id) noexcept { return kHooks[index_of(id)].name; }
Category hook_category(HookId id) noexcept { return kHooks[index_of(id)].category; }

std::string_view category_name(Category category) noexcept {
  constexpr std::string_view kNames[] = {"launch", "graph_launch", "copy", "memset", "sync",
                                         "naming", "alloc",  "resolver", "lifetime", "context"};
  static_assert(std::size(kNames) == kCategoryCount);
  return kNames[static_cast<std::size_t>(category)];
}

bool is_gpu_work(Category category) noexcept {
  return category == Category::launch || category == Category::graph_launch || category == Category::copy ||
         category == Category::memset;
}

std::optional<HookId> find_hook(std::string_view symbol) noexcept {
  const auto it = std::lower_bound(kByName.begin(), kByName.end(), symbol,
                                   [](HookId id, std::string_view name) { return hook_name(id) < name; });
  if (it == kByName.end() || hook_name(*it) != symbol) return std::nullopt;
  return *it;
}

// The same choice simgpu/driver/proc_address.cpp makes, and the driver documents: the newest ABI no
// newer than the caller's version, per stream flavour.
ProcAddressSymbols proc_address_symbols(std::string_view api, int version) noexcept {
  const ProcRow* legacy = nullptr;
  const ProcRow* per_thread = nullptr;
  for (const ProcRow& row : kProcTable) {
    if (row.api != api || row.version > version) continue;
    const ProcRow*& best = row.variant ? per_thread : legacy;
    if (!best || row.version >= best->version) best = &row;
  }
  return {legacy ? legacy->symbol : std::string_view{}, per_thread ? per_thread->symbol : std::string_view{}};
}

int newest_known_cuda_version() noexcept { return CUDA_VERSION; }

std::optional<HookId> hook_for_unrecognised_answer(std::string_view api, int version, bool per_thread) noexcept {
  if (version > newest_known_cuda_version()) return std::nullopt;
  const ProcAddressSymbols symbols = proc_address_symbols(api, version);
  const std::string_view chosen = per_thread && !symbols.per_thread.empty() ? symbols.per_thread : symbols.legacy;
  return chosen.empty() ? std::nullopt : find_hook(chosen);
}

}  // namespace gpuqos::intercept

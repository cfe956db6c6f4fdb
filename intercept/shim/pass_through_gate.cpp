// The pass-through gate and its debug counts.
#include "pass_through_gate.h"

#include <cstdio>

#include "shim.h"

namespace gpuqos::intercept {

Ticket PassThroughGate::before(const Operation& op) noexcept {
  if (counts_path_.empty()) return {};
  by_category_[static_cast<std::size_t>(op.category)].fetch_add(1, std::memory_order_relaxed);
  by_hook_[index_of(op.hook)].fetch_add(1, std::memory_order_relaxed);
  if (op.captured) captured_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void PassThroughGate::after(const Operation&, Ticket, CUresult result) noexcept {
  if (!counts_path_.empty() && result != CUDA_SUCCESS) failed_.fetch_add(1, std::memory_order_relaxed);
}

// Lines "category <name> <n>", "captured <n>", "failed <n>", "hook <symbol> <n>" (hooks seen only).
void PassThroughGate::shutdown() noexcept {
  if (counts_path_.empty() || written_.exchange(true)) return;
  std::FILE* out = std::fopen(counts_path_.c_str(), "w");
  if (!out) {
    log_message(LogLevel::error, "cannot write GPUQOS_DEBUG_COUNTS file");
    return;
  }
  for (std::size_t c = 0; c < kCategoryCount; ++c) {
    std::fprintf(out, "category %s %llu\n", category_name(static_cast<Category>(c)).data(),
                 static_cast<unsigned long long>(by_category_[c].load()));
  }
  std::fprintf(out, "captured %llu\nfailed %llu\n", static_cast<unsigned long long>(captured_.load()),
               static_cast<unsigned long long>(failed_.load()));
  for (std::size_t h = 0; h < kHookCount; ++h) {
    if (const auto n = by_hook_[h].load()) {
      std::fprintf(out, "hook %s %llu\n", hook_name(static_cast<HookId>(h)).data(), static_cast<unsigned long long>(n));
    }
  }
  std::fclose(out);
}

}  // namespace gpuqos::intercept

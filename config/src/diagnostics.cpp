// Load errors: formatting and file-order sorting.
#include "diagnostics.h"

#include <algorithm>

namespace gpuqos::config::detail {

std::string Diagnostics::place(const toml::source_position& where) const {
  if (where.line == 0) return source_name_;
  return source_name_ + ":" + std::to_string(where.line) + ":" + std::to_string(where.column);
}

void Diagnostics::error(const toml::source_position& where, std::string_view key, std::string_view message) {
  std::string text = place(where) + ": ";
  if (!key.empty()) text.append(key).append(": ");
  text.append(message);
  entries_.push_back({where.line, where.column, std::move(text)});
}

std::vector<std::string> Diagnostics::messages() const {
  std::vector<Entry> sorted = entries_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  std::vector<std::string> texts;
  for (auto& entry : sorted) texts.push_back(std::move(entry.text));
  return texts;
}

}  // namespace gpuqos::config::detail

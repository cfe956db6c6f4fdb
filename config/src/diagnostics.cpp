// Load errors: formatting and file-order sorting.
#include "diagnostics.h"

#include <algorithm>

namespace gpuqos::config::detail {

std::string Diagnostics::place(const toml::source_position& where) const {
  if (where.line == 0) return source_name_;
  return source_name_ + ":" + std::to_string(where.line) + ":" + std::to_string(where.column);
}

void Diagnostics::error(const toml::source_position& where, std::string_view key, std::string_view message) {
  const std::uint64_t found = total();
  const Entry place_only{where.line, where.column, found, {}};
  if (entries_.size() >= kMaxMessages) {
    ++left_out_;
    if (!earlier(place_only, entries_.front())) return;  // later in the file than every one kept
    std::pop_heap(entries_.begin(), entries_.end(), earlier);
    entries_.pop_back();
  }
  std::string text = place(where) + ": ";
  if (!key.empty()) text.append(key).append(": ");
  text.append(message);
  entries_.push_back({where.line, where.column, found, std::move(text)});
  if (entries_.size() == kMaxMessages && left_out_ == 0) {
    std::make_heap(entries_.begin(), entries_.end(), earlier);
  } else if (entries_.size() >= kMaxMessages) {
    std::push_heap(entries_.begin(), entries_.end(), earlier);
  }
}

std::vector<std::string> Diagnostics::messages() const {
  std::vector<Entry> sorted = entries_;
  std::sort(sorted.begin(), sorted.end(), earlier);  // at one place, in the order found
  std::vector<std::string> texts;
  for (auto& entry : sorted) texts.push_back(std::move(entry.text));
  if (left_out_ > 0) {
    texts.push_back(source_name_ + ": and " + std::to_string(left_out_) + " more problems after these (only the first " +
                    std::to_string(kMaxMessages) + " are listed)");
  }
  return texts;
}

}  // namespace gpuqos::config::detail

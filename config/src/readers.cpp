// Typed reads with range checks.
#include "readers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

namespace gpuqos::config::detail {

void read_number(Section& section, std::string_view key, Bound bound, double minimum, double& out) {
  const auto value = section.number(key);
  if (!value) return;
  const bool ok = bound == Bound::at_least ? *value >= minimum : *value > minimum;
  if (ok) {
    out = *value;
    return;
  }
  const char* relation = bound == Bound::at_least ? ">= " : "> ";
  section.error(key, "must be " + (relation + format_number(minimum)) + " (got " + format_number(*value) + ")");
}

void read_number_up_to(Section& section, std::string_view key, Bound bound, double minimum, double maximum,
                       double& out, std::string_view note) {
  double value = std::numeric_limits<double>::quiet_NaN();  // stays NaN when absent or reported
  read_number(section, key, bound, minimum, value);
  if (std::isnan(value)) return;
  if (value > maximum) {
    section.error(key, "must be <= " + format_number(maximum) + std::string(note) + " (got " + format_number(value) +
                           ")");
    return;
  }
  out = value;
}

void read_bool(Section& section, std::string_view key, bool& out) {
  if (const auto value = section.boolean(key)) out = *value;
}

void read_string(Section& section, std::string_view key, std::string& out) {
  if (auto value = section.string(key)) out = std::move(*value);
}

bool check_integer_range(Section& section, std::string_view key, std::int64_t value, std::int64_t minimum,
                         std::int64_t maximum) {
  if (value < minimum) {
    section.error(key, "must be >= " + std::to_string(minimum) + " (got " + std::to_string(value) + ")");
    return false;
  }
  if (value > maximum) {
    section.error(key, "must be <= " + std::to_string(maximum) + " (got " + std::to_string(value) + ")");
    return false;
  }
  return true;
}

bool read_integer_list(Section& section, std::string_view key, std::int64_t minimum, std::int64_t maximum,
                       std::vector<std::int64_t>& out) {
  const toml::array* array = section.array(key);
  if (array == nullptr) return section.find(key) != nullptr;
  std::unordered_set<std::int64_t> listed(out.begin(), out.end());  // a search of `out` made 140k ids take 3 s
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = *array->get(i);
    const auto* integer = element.as_integer();
    std::string problem;
    if (integer == nullptr) {
      problem = "must be an integer (got " + std::string(type_phrase(element.type())) + ")";
    } else if (integer->get() < minimum || integer->get() > maximum) {
      problem = "must be " + std::to_string(minimum) + " to " + std::to_string(maximum) + " (got " +
                std::to_string(integer->get()) + ")";
    } else if (!listed.insert(integer->get()).second) {
      problem = std::to_string(integer->get()) + " is listed twice";
    } else {
      out.push_back(integer->get());
      continue;
    }
    const std::string element_key = section.key_path(key) + "[" + std::to_string(i) + "]";
    section.diagnostics().error(element.source().begin, element_key, problem);
  }
  return true;
}

bool check_choice(Section& section, std::string_view key, const std::string& value,
                  std::span<const std::string_view> names, std::size_t& index) {
  for (index = 0; index < names.size(); ++index)
    if (names[index] == value) return true;
  std::string list;
  for (const auto name : names) list += (list.empty() ? "" : ", ") + quoted(name);
  std::string hint = did_you_mean(value, names);
  section.error(key, "must be one of " + list + " (got " + quoted(value) + ")" + hint);
  return false;
}

}  // namespace gpuqos::config::detail

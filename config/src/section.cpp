// Reading one TOML table against its schema.
#include "section.h"

#include <algorithm>
#include <cmath>

#include "names.h"
#include "values.h"

namespace gpuqos::config::detail {

Section::Section(Diagnostics& diagnostics, const toml::table& table, std::string path,
                 std::initializer_list<std::string_view> known_keys)
    : Section(diagnostics, table, std::move(path), std::vector<std::string_view>(known_keys)) {}

Section::Section(Diagnostics& diagnostics, const toml::table& table, std::string path,
                 std::vector<std::string_view> known_keys)
    : diagnostics_(diagnostics), table_(table), path_(std::move(path)) {
  report_unknown_keys(known_keys);
}

std::string Section::key_path(std::string_view key) const {
  // A key that is not bare is written as TOML writes it, quoted and escaped: its control characters
  // must not reach a terminal or split a log line (a review found them raw in unknown-key errors).
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  // A long one is cut as quoted() cuts values (a review: a 500-KB bare key made a 500-KB error line).
  const std::string shown = bare && key.size() <= 80 ? std::string(key) : quoted(key);
  return path_.empty() ? shown : path_ + "." + shown;
}

namespace {

// The tables that have `key` (never the one being read: the key is unknown there): a key written
// after the wrong header ("timeslice_ms" appended at the end of a file, under [access]). For a
// section, the header it would have under them ("[baymax]": "[policy.baymax]").
std::string homes_of(std::string_view key, bool section) {
  std::string homes;
  for (const TableKeys& table : kTables) {
    if (std::find(table.keys.begin(), table.keys.end(), key) == table.keys.end()) continue;
    std::string home(table.header);
    if (section) home.insert(home.size() - 1, "." + std::string(key));
    homes += (homes.empty() ? "" : " or ") + home;
  }
  return homes;
}

}  // namespace

void Section::report_unknown_keys(const std::vector<std::string_view>& known_keys) {
  for (const auto& [key, value] : table_) {
    if (std::find(known_keys.begin(), known_keys.end(), key.str()) != known_keys.end()) continue;
    // An inline table (key = { ... }) is a key's value; only a [header] or [[header]] is a section.
    const bool section = (value.is_table() && !value.as_table()->is_inline()) || value.is_array_of_tables();
    const std::string homes = homes_of(key.str(), section);
    const std::string hint = homes.empty() ? did_you_mean(key.str(), known_keys)
                             : section     ? " (did you mean " + homes + "?)"
                                           : " (a key of " + homes + ": a key belongs to the table whose header is above it)";
    diagnostics_.error(key.source().begin, key_path(key.str()),
                       std::string(section ? "unknown section" : "unknown key") + hint);
  }
}

void Section::error(std::string_view key, std::string_view message) {
  diagnostics_.error(table_.get(key)->source().begin, key_path(key), message);
}

void Section::error_at_table(std::string_view key, std::string_view message) {
  diagnostics_.error(table_.source().begin, key_path(key), message);
}

bool Section::expect(std::string_view key, const toml::node& node, toml::node_type type, std::string_view expected) {
  if (node.type() == type) return true;
  error(key, "must be " + std::string(expected) + " (got " + std::string(type_phrase(node.type())) + ")");
  return false;
}

std::optional<std::string> Section::string(std::string_view key) {
  const toml::node* node = find(key);
  if (node == nullptr || !expect(key, *node, toml::node_type::string, "a string")) return std::nullopt;
  return node->as_string()->get();
}

std::optional<bool> Section::boolean(std::string_view key) {
  const toml::node* node = find(key);
  if (node == nullptr || !expect(key, *node, toml::node_type::boolean, "true or false")) return std::nullopt;
  return node->as_boolean()->get();
}

std::optional<std::int64_t> Section::integer(std::string_view key) {
  const toml::node* node = find(key);
  if (node == nullptr || !expect(key, *node, toml::node_type::integer, "an integer")) return std::nullopt;
  return node->as_integer()->get();
}

std::optional<double> Section::number(std::string_view key) {
  const toml::node* node = find(key);
  if (node == nullptr) return std::nullopt;
  if (const auto* integer = node->as_integer()) return static_cast<double>(integer->get());
  if (const auto* text = node->as_string()) {
    if (const std::string hint = unit_hint(key, text->get()); !hint.empty()) {
      error(key, "must be a number (got a string)" + hint);
      return std::nullopt;
    }
  }
  if (!expect(key, *node, toml::node_type::floating_point, "a number")) return std::nullopt;
  const double value = node->as_floating_point()->get();
  if (std::isfinite(value)) return value;
  error(key, "must be a finite number (got " + format_number(value) + ")");
  return std::nullopt;
}

const toml::table* Section::table(std::string_view key) {
  const toml::node* node = find(key);
  if (node == nullptr || !expect(key, *node, toml::node_type::table, "a table")) return nullptr;
  return node->as_table();
}

const toml::array* Section::array(std::string_view key) {
  const toml::node* node = find(key);
  if (node == nullptr || !expect(key, *node, toml::node_type::array, "an array")) return nullptr;
  return node->as_array();
}

}  // namespace gpuqos::config::detail

// One TOML table read against its schema: unknown keys, wrong types and bad values are reported
// to Diagnostics at the value's line and column, under the key's full path.
#pragma once

#include <toml++/toml.h>

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "diagnostics.h"

namespace gpuqos::config::detail {

class Section {
 public:
  // Reports every key of `table` not in `known_keys` at once. `path` names the table in messages
  // ("policy.baymax", "job[2]"; "" for the document root).
  Section(Diagnostics& diagnostics, const toml::table& table, std::string path,
          std::initializer_list<std::string_view> known_keys);
  // The same with keys known only at run time (a table keyed by device ordinal).
  Section(Diagnostics& diagnostics, const toml::table& table, std::string path, std::vector<std::string_view> known_keys);
  // A table of names.h's schema (kTables).
  Section(Diagnostics& diagnostics, const toml::table& table, std::string path, std::span<const std::string_view> known_keys)
      : Section(diagnostics, table, std::move(path), std::vector<std::string_view>(known_keys.begin(), known_keys.end())) {}

  std::string key_path(std::string_view key) const;  // path + "." + key
  const toml::node* find(std::string_view key) const { return table_.get(key); }
  Diagnostics& diagnostics() { return diagnostics_; }

  // At the value of `key`, which must be present.
  void error(std::string_view key, std::string_view message);
  // At the table itself (its header), for keys that are missing.
  void error_at_table(std::string_view key, std::string_view message);

  // Typed reads. Absent: nullopt, nothing reported. Wrong type: reported, nullopt.
  std::optional<std::string> string(std::string_view key);
  std::optional<bool> boolean(std::string_view key);
  std::optional<std::int64_t> integer(std::string_view key);
  std::optional<double> number(std::string_view key);  // an integer or a finite float
  const toml::table* table(std::string_view key);
  const toml::array* array(std::string_view key);

 private:
  void report_unknown_keys(const std::vector<std::string_view>& known_keys);
  // Reports "must be <expected> (got <type>)" when `node` is not of the expected type.
  bool expect(std::string_view key, const toml::node& node, toml::node_type type, std::string_view expected);

  Diagnostics& diagnostics_;
  const toml::table& table_;
  std::string path_;
};

}  // namespace gpuqos::config::detail

// Collects load errors with their place in the file and prints them in file order.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuqos::config::detail {

class Diagnostics {
 public:
  explicit Diagnostics(std::string_view source_name) : source_name_(source_name) {}

  // Records "<source>:<line>:<column>: <key>: <message>".
  void error(const toml::source_position& where, std::string_view key, std::string_view message);

  // "<source>:<line>:<column>", or "<source>" when `where` has no position.
  std::string place(const toml::source_position& where) const;

  bool empty() const noexcept { return entries_.empty(); }
  // Every message, ordered by line and column (toml++ iterates tables by name, not file order).
  std::vector<std::string> messages() const;

 private:
  struct Entry {
    std::uint32_t line;
    std::uint32_t column;
    std::string text;
  };
  std::string source_name_;
  std::vector<Entry> entries_;
};

}  // namespace gpuqos::config::detail

// Collects load errors with their place in the file and prints them in file order.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
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
  // The messages, ordered by line and column (toml++ iterates tables by name, not file order): the
  // first kMaxMessages of the file, then one that counts the rest. gpuqosd reloads on its loop: a
  // 1-MiB file of 340,000 bad array elements took 250 ms to report, past the shims' heartbeat.
  static constexpr std::size_t kMaxMessages = 1000;
  std::vector<std::string> messages() const;
  std::size_t total() const noexcept { return entries_.size() + left_out_; }

 private:
  struct Entry {
    std::uint32_t line;
    std::uint32_t column;
    std::uint64_t found;  // how many were found before it: at one place, the order they were found in
    std::string text;
  };
  static bool earlier(const Entry& a, const Entry& b) {
    return std::tie(a.line, a.column, a.found) < std::tie(b.line, b.column, b.found);
  }
  std::string source_name_;
  std::vector<Entry> entries_;  // a heap by earlier() (the latest on top) once it is full
  std::size_t left_out_ = 0;
};

}  // namespace gpuqos::config::detail

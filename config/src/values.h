// Parsing and printing of the value forms the config file uses beyond plain TOML types: byte
// sizes ("4MiB"), listen addresses, percentiles ("p99"), job names, and "did you mean" hints.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "gpuqos/config/config.h"

namespace gpuqos::config::detail {

// Shortest text that reads back as `value`: "-1", "0.5", "inf".
std::string format_number(double value);
// `text` in double quotes (for "got ..." in messages; long values are cut).
std::string quoted(std::string_view text);
// "a string", "an integer", "a floating-point number", ...
std::string_view type_phrase(toml::node_type type) noexcept;

// "4194304", "4MiB", "64 KiB", "1GiB", "512B": units B, KiB, MiB, GiB, TiB (powers of 1024). nullopt
// when malformed or over 2^64 - 1.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);

// "host:port" (host: IPv4, [IPv6] or a DNS name; port 1-65535) into `out`; otherwise the reason.
std::optional<std::string> parse_listen_address(std::string_view text, ListenAddress& out);

// "99", "99.9", "p99", "P99.9" as a number (range not checked).
std::optional<double> parse_percentile(std::string_view text);

// 1 to 63 of A-Z a-z 0-9 . _ -: the rule intercept applies to GPUQOS_JOB.
bool is_valid_job_name(std::string_view name) noexcept;

// `text` without the spaces, tabs and carriage returns at either end.
std::string_view trim(std::string_view text);

// " (the unit is in the key's name: write target_ms = 20)" when `key` ends in _ms or _s and `text`
// is a number with a unit after it ("20ms", "20 ms", "1.5s"), else "".
std::string unit_hint(std::string_view key, std::string_view text);

// " (did you mean \"policy\"?)" when one candidate is within a small edit distance, else "".
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates);

}  // namespace gpuqos::config::detail

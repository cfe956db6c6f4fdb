// Value forms beyond plain TOML types: sizes, listen addresses, percentiles, names, hints.
#include "values.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <vector>

namespace gpuqos::config::detail {
namespace {

bool all_of_chars(std::string_view text, bool (*allowed)(char)) {
  return std::all_of(text.begin(), text.end(), allowed);
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_host_char(char c) { return is_alnum(c) || c == '.' || c == '-'; }
bool is_ipv4_char(char c) { return is_digit(c) || c == '.'; }

// Decimal digits only, without overflow.
std::optional<std::uint64_t> parse_unsigned(std::string_view digits) {
  std::uint64_t value = 0;
  if (digits.empty() || !all_of_chars(digits, is_digit)) return std::nullopt;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::optional<unsigned> unit_shift(std::string_view unit) {
  static constexpr std::array<std::pair<std::string_view, unsigned>, 6> kUnits{
      {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}}};
  for (const auto& [name, shift] : kUnits)
    if (name == unit) return shift;
  return std::nullopt;
}

std::optional<std::string> check_host(std::string_view host) {
  unsigned char address[16];
  if (host.empty()) return "the host is missing (use 0.0.0.0 for every interface)";
  if (host.front() == '[') {
    if (host.size() < 2 || host.back() != ']') return "bad IPv6 address";
    // A zone (the interface of a scoped address) after '%': [fe80::1%eth0].
    const std::string_view inside = host.substr(1, host.size() - 2);
    const std::size_t percent = inside.find('%');
    const std::string bare(inside.substr(0, percent));
    if (::inet_pton(AF_INET6, bare.c_str(), address) != 1) return "bad IPv6 address";
    const bool link_local = address[0] == 0xfe && (address[1] & 0xc0) == 0x80;  // fe80::/10
    if (percent == std::string_view::npos) {
      if (link_local) return "a link-local address needs its interface, like \"[" + bare + "%eth0]:9400\"";
      return std::nullopt;
    }
    // An interface's name (IFNAMSIZ: 15 bytes; one starting with a digit would be read as an index)
    // or its index (1 on).
    const std::string_view zone = inside.substr(percent + 1);
    const auto is_zone_char = [](char c) { return is_host_char(c) || c == '_'; };
    if (zone.size() > 2 && zone.starts_with("25") && !is_digit(zone[2]))
      return "'%25' is how a URL writes '%': write the interface after a plain '%', like \"[" + bare + "%" +
             std::string(zone.substr(2)) + "]\"";
    const bool index = all_of_chars(zone, is_digit);
    if (zone.empty() || zone.size() > 15 || !all_of_chars(zone, is_zone_char) || (index && zone.find_first_not_of('0') == std::string_view::npos) ||
        (!index && is_digit(zone.front())))
      return "bad interface after '%' (an interface's name, or its index)";
    if (!link_local) return "only a link-local address (fe80::/10) takes an interface after '%'";
    return std::nullopt;
  }
  if (host.find(':') != std::string_view::npos) return "an IPv6 address goes in brackets, like \"[::1]:9400\"";
  if (all_of_chars(host, is_ipv4_char)) {
    if (::inet_pton(AF_INET, std::string(host).c_str(), address) != 1) return "bad IPv4 address";
    return std::nullopt;
  }
  if (host.size() > 253 || !all_of_chars(host, is_host_char)) return "bad host name";
  return std::nullopt;
}

std::string lower_case(std::string_view text) {
  std::string lower(text);
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return lower;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

}  // namespace

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

std::string format_number(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string quoted(std::string_view text) {
  // Escaped as a TOML basic string: a value echoed into a message must not carry a newline (it would
  // read as a second problem, and cut the status line short) or a terminal's escape sequences.
  constexpr std::size_t kMaxShown = 80;
  std::string out = "\"";
  const auto escape = [&out](unsigned char code) {
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\u%04X", static_cast<unsigned>(code));
    out += escaped;
  };
  const std::string_view shown = text.substr(0, kMaxShown);
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const char c = shown[i];
    // U+0080-U+009F (UTF-8 C2 80-9F): C1 controls, which terminals take for CSI and the like.
    if (static_cast<unsigned char>(c) == 0xC2 && i + 1 < shown.size() &&
        static_cast<unsigned char>(shown[i + 1]) >= 0x80 && static_cast<unsigned char>(shown[i + 1]) <= 0x9F) {
      escape(static_cast<unsigned char>(shown[++i]));
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          escape(static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + (text.size() > kMaxShown ? "...\"" : "\"");
}

std::string_view type_phrase(toml::node_type type) noexcept {
  switch (type) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  text = trim(text);
  const std::size_t digits_end = std::min(text.find_first_not_of("0123456789"), text.size());
  const auto count = parse_unsigned(text.substr(0, digits_end));
  const auto shift = unit_shift(trim(text.substr(digits_end)));
  if (!count || !shift) return std::nullopt;
  if (*shift > 0 && *count > (~std::uint64_t{0} >> *shift)) return std::nullopt;
  return *count << *shift;
}

std::optional<std::string> parse_listen_address(std::string_view text, ListenAddress& out) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || text.back() == ']')
    return "must be host:port, like \"127.0.0.1:9400\", or \"\" (off)";
  const std::string_view host = text.substr(0, colon);
  const auto port = parse_unsigned(text.substr(colon + 1));
  if (!port || *port == 0 || *port > 65535) return "the port must be 1 to 65535";
  if (auto why = check_host(host)) return why;
  const bool bracketed = host.front() == '[';
  out.host = std::string(bracketed ? host.substr(1, host.size() - 2) : host);
  out.port = static_cast<std::uint16_t>(*port);
  return std::nullopt;
}

std::optional<double> parse_percentile(std::string_view text) {
  if (!text.empty() && (text.front() == 'p' || text.front() == 'P')) text.remove_prefix(1);
  if (text.empty() || !(is_digit(text.front()))) return std::nullopt;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool is_valid_job_name(std::string_view name) noexcept {
  constexpr std::size_t kMaxJobNameBytes = 63;  // what registration carries (ipc::kJobNameBytes, with its NUL)
  return !name.empty() && name.size() <= kMaxJobNameBytes &&
         all_of_chars(name, [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; });
}

std::string did_you_mean(std::string_view typed, std::span<const std::string_view> candidates) {
  const std::string word = lower_case(typed);  // "INFO" for "info"
  std::string_view best;
  std::size_t best_distance = ~std::size_t{0};
  for (const auto candidate : candidates) {
    // A typo: at most 2 edits, a quarter of a long name, or a prefix either way.
    const std::size_t allowed = std::max<std::size_t>(2, candidate.size() / 4);
    const bool prefix = std::min(word.size(), candidate.size()) >= 3 &&
                        (word.starts_with(candidate) || candidate.starts_with(word));  // "warning" for "warn"
    const std::size_t distance = prefix ? 1 : edit_distance(word, candidate);
    if (distance <= allowed && distance < candidate.size() && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best.empty() ? "" : " (did you mean " + quoted(best) + "?)";
}

std::string unit_hint(std::string_view key, std::string_view text) {
  const std::size_t dot = key.rfind('.');
  const std::string_view name = dot == std::string_view::npos ? key : key.substr(dot + 1);
  const bool in_ms = name.ends_with("_ms");
  if (!in_ms && !name.ends_with("_s")) return "";
  text = trim(text);
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) != 0 || text[digits] == '.')) {
    ++digits;
  }
  const std::string_view unit = trim(text.substr(digits));
  double number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + digits, number);
  if (digits == 0 || error != std::errc{} || end != text.data() + digits || unit.empty()) return "";
  static constexpr std::pair<std::string_view, double> kUnitsNs[] = {
      {"ns", 1}, {"us", 1e3}, {"\xC2\xB5s", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"sec", 1e9}, {"min", 60e9}, {"h", 3600e9}};
  const std::string in_key = in_ms ? "milliseconds" : "seconds";
  for (const auto& [written, ns] : kUnitsNs) {
    if (unit != written) continue;
    return " (the unit is in the key's name, " + in_key + ": write " + std::string(name) + " = " +
           format_number(number * ns / (in_ms ? 1e6 : 1e9)) + ")";
  }
  if (!std::all_of(unit.begin(), unit.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; })) {
    return "";
  }
  return " (the unit is in the key's name: a number of " + in_key + ")";
}

}  // namespace gpuqos::config::detail

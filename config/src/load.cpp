// parse_config and load_config_file: TOML text into a validated Config, or every problem found.
#include "gpuqos/config/load.h"

#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "names.h"
#include "section.h"
#include "sections.h"
#include "values.h"

namespace gpuqos::config {
namespace {

using detail::Diagnostics;
using detail::Section;

void read_job_list(Section& root, Diagnostics& diagnostics, std::vector<JobConfig>& out) {
  const toml::node* jobs = root.find("job");
  if (jobs == nullptr) return;
  if (!jobs->is_array()) {
    root.error("job", "must be an array of tables, written [[job]] (got " +
                          std::string(detail::type_phrase(jobs->type())) + ")");
    return;
  }
  detail::read_jobs(diagnostics, *jobs->as_array(), out);
}

Config read_document(Diagnostics& diagnostics, const toml::table& document) {
  Config config = default_config();
  detail::Section root(diagnostics, document, "", detail::kRootKeys);
  if (const toml::table* daemon = root.table("daemon")) detail::read_daemon(diagnostics, *daemon, config.daemon);
  if (const toml::table* devices = root.table("devices")) detail::read_devices(diagnostics, *devices, config.devices);
  if (const toml::table* policy = root.table("policy")) detail::read_policy(diagnostics, *policy, config.policy);
  read_job_list(root, diagnostics, config.jobs);
  if (const toml::table* access = root.table("access")) detail::read_access(diagnostics, *access, config.access);
  return config;
}

// toml++ says "Error while parsing value: ..."; the message reads better in lower case after "invalid TOML: ".
std::string syntax_message(const toml::parse_error& error) {
  std::string description(error.description());
  if (description.rfind("Error ", 0) == 0) description[0] = 'e';
  return "invalid TOML: " + description;
}

bool is_key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.'; }

// What toml++ leaves out of a syntax error: the key its line assigns, under the table whose header
// is above it ("daemon.log_level", "job[1].name"), and, when the value is a bare word, what a
// value looks like. A user test: "log_level = info" was only "error while parsing floating-point:
// expected value-terminator, saw 'o'" (info read as a broken inf), "name = fifo" a broken false.
// Read from the text line by line, skipping multi-line strings: a guide for the message, not a
// second parser (nothing is said when the line is not a plain key = value).
struct SyntaxPlace {
  std::string key;
  std::string hint;
};

// '[' less ']' on a line, outside its strings (escapes in basic ones read) and before any comment.
int bracket_balance(std::string_view line) {
  int balance = 0;
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == '\\' && quote == '"') {
        ++i;  // an escape in a basic string: the next character is its
      } else if (c == quote) {
        quote = 0;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      break;
    } else if (c == '[') {
      ++balance;
    } else if (c == ']') {
      --balance;
    }
  }
  return balance;
}

SyntaxPlace syntax_place(std::string_view text, std::uint32_t error_line) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
  std::string table;
  std::map<std::string, int> arrays;  // [[name]] headers seen so far
  std::string_view open_string;       // the delimiter of a multi-line string the line is in, if any
  std::string array_key;              // the key of an array still open at the end of a line
  int array_depth = 0;                // ... and how many of its brackets are open
  std::uint32_t number = 0;
  for (std::size_t at = 0; at <= text.size() && ++number <= error_line;) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = detail::trim(text.substr(at, end - at));
    at = end + 1;
    const bool in_string = !open_string.empty();
    for (std::size_t from = 0;;) {  // each """ or ''' opens or closes one
      const std::size_t basic = line.find("\"\"\"", from), literal = line.find("\'\'\'", from);
      const std::size_t next = open_string.empty() ? std::min(basic, literal)
                                                   : (open_string == "\"\"\"" ? basic : literal);
      if (next == std::string_view::npos) break;
      open_string = open_string.empty() ? line.substr(next, 3) : std::string_view();
      from = next + 3;
    }
    // A multi-line string within an array: its brackets are not counted, so the array's key is no
    // longer known (no key is better than a wrong one for every later error).
    if (!array_key.empty() && (in_string || line.find("\"\"\"") != std::string_view::npos ||
                               line.find("'''") != std::string_view::npos)) {
      array_key.clear();
    }
    if (in_string) {
      if (number == error_line) return {};
      continue;
    }
    // A header's table ("[[job]]": job, "[policy.fifo]": policy.fifo). At the error (a table defined
    // twice) it is what the error is about.
    const bool header = array_key.empty() && line.starts_with('[') && line.find(']') != std::string_view::npos;
    const bool array_header = header && line.starts_with("[[") && line.find("]]") != std::string_view::npos;
    const std::string name = array_header ? std::string(detail::trim(line.substr(2, line.find("]]") - 2)))
                             : header     ? std::string(detail::trim(line.substr(1, line.find(']') - 1)))
                                          : std::string();
    if (number == error_line && header) return {name, ""};
    // Within an array written over several lines: its key (brackets counted, strings in it not).
    if (!array_key.empty()) {
      if (number == error_line) return {array_key, ""};
      array_depth += bracket_balance(line);
      if (array_depth <= 0) array_key.clear();
      continue;
    }
    if (number < error_line) {
      if (array_header) {
        table = name + "[" + std::to_string(arrays[name]++) + "]";
      } else if (header) {
        table = name;
      } else if (const std::size_t equals = line.find('='); equals != std::string_view::npos) {
        const std::string_view key = detail::trim(line.substr(0, equals));
        const int depth = bracket_balance(line.substr(equals + 1));
        if (depth > 0 && !key.empty() && std::all_of(key.begin(), key.end(), is_key_char)) {
          array_key = table.empty() ? std::string(key) : table + "." + std::string(key);
          array_depth = depth;
        }
      }
      continue;
    }
    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) return {};
    const std::string_view key = detail::trim(line.substr(0, equals));
    if (key.empty() || !std::all_of(key.begin(), key.end(), is_key_char)) return {};
    SyntaxPlace place{table.empty() ? std::string(key) : table + "." + std::string(key), ""};
    std::string_view value = line.substr(equals + 1);
    value = detail::trim(value.substr(0, value.find('#')));
    const bool bare_word = !value.empty() && std::isalpha(static_cast<unsigned char>(value.front())) != 0 &&
                           std::all_of(value.begin(), value.end(), is_key_char) && value != "true" &&
                           value != "false" && value != "inf" && value != "nan";
    if (bare_word) {
      place.hint = " (a bare word is no value: a string needs quotes, " + std::string(key) + " = \"" +
                   std::string(value) + "\"; a boolean is true or false)";
    }
    if (place.hint.empty()) place.hint = detail::unit_hint(key, value);
    return place;
  }
  return {};
}

// The whole of a config file, or the reason it cannot be read. Only a regular file of at most
// kMaxConfigBytes: a FIFO, a device (/dev/zero) or a runaway file would block or never end, and
// gpuqosd reads this on its loop (SIGHUP). What the path names is looked at before it is opened
// (opening some devices does something: a watchdog; a terminal would become gpuqosd's controlling
// one), and opened non-blocking, so a FIFO put there in between does not stop the open either.
constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

std::optional<std::string> read_file(const std::filesystem::path& path, std::string& text) {
  const auto error_text = [] { return std::error_code(errno, std::generic_category()).message(); };
  const auto not_regular = [](const struct stat& st) -> std::optional<std::string> {
    if (S_ISDIR(st.st_mode)) return std::string("Is a directory");
    if (!S_ISREG(st.st_mode)) return std::string("not a regular file (a pipe, socket or device)");
    return std::nullopt;
  };
  struct stat named {};
  if (::stat(path.c_str(), &named) != 0) return error_text();
  if (auto odd = not_regular(named)) return odd;
  struct File {
    int fd;
    ~File() {
      if (fd >= 0) ::close(fd);
    }
  } const file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  const int fd = file.fd;
  if (fd < 0) return error_text();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return error_text();
  if (auto odd = not_regular(st)) return odd;
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxConfigBytes) {
    return std::to_string(st.st_size) + " bytes, more than a config file's limit of 1 MiB";
  }
  char buffer[8192];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return error_text();
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > kMaxConfigBytes) return std::string("grew past a config file's limit of 1 MiB while read");
  }
  return std::nullopt;
}

// What gpuqosd would refuse at the daemon's paths when it starts (or reloads), said with the key's
// place: found only as the daemon began to serve, they had no line to point at, and --check-config
// said "ok" (an audit). Relative paths are taken from this process's directory, as gpuqosd started
// here would.
void check_daemon_paths(Diagnostics& diagnostics, const toml::table& document, const DaemonConfig& daemon,
                        LoadOptions options) {
  const auto place = [&](std::string_view key) {
    const toml::node* node = document.at_path(key).node();
    return node != nullptr ? node->source().begin : toml::source_position{};
  };
  std::error_code error;
  // A missing directory is made: only an existing file on the way stops that.
  const auto file_on_the_way = [&](const std::filesystem::path& path) -> std::optional<std::filesystem::path> {
    for (std::filesystem::path up = path.parent_path(); !up.empty(); up = up.parent_path()) {
      const std::filesystem::file_status status = std::filesystem::status(up, error);
      if (status.type() == std::filesystem::file_type::not_found) {
        if (up == up.parent_path()) break;
        continue;
      }
      if (!error && status.type() != std::filesystem::file_type::directory) return up;
      break;
    }
    return std::nullopt;
  };
  const std::filesystem::path store = daemon.profile_store;
  if (options.check_store_path && !store.empty()) {
    if (std::filesystem::is_directory(store, error) || !store.has_filename()) {
      diagnostics.error(place("daemon.profile_store"), "daemon.profile_store",
                        "is a directory: give a file in it, e.g. " + (store / "gpuqosd.gqp").lexically_normal().string());
    } else if (const auto file = file_on_the_way(store)) {
      diagnostics.error(place("daemon.profile_store"), "daemon.profile_store",
                        file->string() + " is not a directory: the store cannot be made under it");
    }
  }
  if (options.check_socket_path && !daemon.socket_path.empty()) {
    const std::filesystem::path socket = daemon.socket_path;
    const std::filesystem::file_type type = std::filesystem::symlink_status(socket, error).type();
    if (!socket.has_filename() || type == std::filesystem::file_type::directory) {
      diagnostics.error(place("daemon.socket"), "daemon.socket",
                        "is a directory: give a socket file in it, e.g. " + (socket / "gpuqosd.sock").lexically_normal().string());
    } else if (type != std::filesystem::file_type::not_found && type != std::filesystem::file_type::none &&
               type != std::filesystem::file_type::socket) {
      // gpuqosd replaces a socket nobody answers on, and nothing else.
      diagnostics.error(place("daemon.socket"), "daemon.socket", "exists and is not a socket: gpuqosd would not replace it");
    } else if (const auto file = file_on_the_way(socket)) {
      diagnostics.error(place("daemon.socket"), "daemon.socket",
                        file->string() + " is not a directory: the socket cannot be made under it");
    }
  }
}

// toml++ reads a dotted key by recursion, a level per part, and its nesting limit does not count
// them: a key of 50,000 parts overflowed the stack (a review: `gpuqosd --check-config` and a SIGHUP
// reload died with SIGSEGV, the running config lost and nothing logged). No key of gpuqosd's has more
// than three parts, so a key or table header of more than kMaxKeyParts is refused before toml++
// reads the text. The scan knows strings (escapes, multi-line ones), comments, inline tables and
// arrays, so a dot in a value or a quoted key is no part.
constexpr int kMaxKeyParts = 16;

struct DeepKey {
  toml::source_position where;  // the key's first character
  std::string start;            // its first characters, for the message
};

std::optional<DeepKey> deep_key(std::string_view text) {
  enum class Open { inline_table, array };
  std::vector<Open> open;  // the inline tables and arrays of a value not yet closed
  bool in_key = true;      // reading a key or a table header, not a value
  int dots = 0;
  bool key_seen = false;  // its first character (the place said)
  toml::source_position at{1, 1}, key_at{1, 1};
  std::size_t key_from = 0;
  const auto start_key = [&] {
    in_key = true;
    dots = 0;
    key_seen = false;
  };
  const auto step = [&](char c) {
    if (c == '\n') {
      ++at.line;
      at.column = 1;
    } else {
      ++at.column;
    }
  };
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_key && !key_seen && c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '#') {
      key_seen = true;
      key_at = at;
      key_from = i;
    }
    if (c == '"' || c == '\'') {
      const std::size_t quotes = text.substr(i, 3) == std::string(3, c) ? 3 : 1;
      const std::string_view close = text.substr(i, quotes);
      for (std::size_t k = 0; k < quotes; ++k) step(text[i++]);
      while (i < text.size() && text.substr(i, quotes) != close) {
        if (c == '"' && text[i] == '\\' && i + 1 < text.size()) step(text[i++]);
        step(text[i++]);
      }
      // A multi-line string may end in one or two quotes of its own before its closing three (the
      // TOML spec's `""""This," she said, ...""""`): the whole run closes it (a review found the
      // scan out of step after one, and past the check again).
      std::size_t run = 0;
      while (i < text.size() && text[i] == c && run < (quotes == 3 ? 5u : 1u)) {
        step(text[i++]);
        ++run;
      }
      continue;
    }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') step(text[i++]);
      continue;
    }
    step(text[i++]);
    if (c == '\n') {
      if (open.empty()) start_key();
    } else if (in_key) {
      if (c == '.' && ++dots >= kMaxKeyParts) return DeepKey{key_at, std::string(text.substr(key_from, 40))};
      if (c == '=') in_key = false;
      if (c == '}' && !open.empty() && open.back() == Open::inline_table) {
        open.pop_back();  // an empty inline table, or a trailing comma
        in_key = false;
      }
    } else if (c == '{') {
      open.push_back(Open::inline_table);
      start_key();
    } else if (c == '[') {
      open.push_back(Open::array);
    } else if ((c == ']' || c == '}') && !open.empty()) {
      open.pop_back();
    } else if (c == ',' && !open.empty() && open.back() == Open::inline_table) {
      start_key();
    }
  }
  return std::nullopt;
}

}  // namespace

Result<Config> parse_config(std::string_view text, std::string_view source_name, LoadOptions options) {
  Diagnostics diagnostics(source_name);
  if (const std::optional<DeepKey> deep = deep_key(text)) {
    std::string key(detail::trim(deep->start));
    key = key.substr(0, std::min(key.find_first_of(" \t\r\n="), key.size()));
    while (key.ends_with('.')) key.pop_back();
    key += "...";
    diagnostics.error(deep->where, key,
                      "a key of more than " + std::to_string(kMaxKeyParts) +
                          " dotted parts (gpuqosd's have at most three): not read, a longer one could overflow the "
                          "parser's stack");
    return Errors{diagnostics.messages(), diagnostics.total()};
  }
  toml::table document;
  try {
    document = toml::parse(text, source_name);
  } catch (const toml::parse_error& error) {
    const SyntaxPlace place = syntax_place(text, error.source().begin.line);
    // The key is the file's text (a table header's, say): shown escaped unless plainly printable,
    // so a terminal's escape sequences in it reach no terminal (a review: ["a\x1b[2J"] cleared one).
    const bool printable = place.key.size() <= 80 && std::all_of(place.key.begin(), place.key.end(), [](char c) {
                             return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
                           });
    diagnostics.error(error.source().begin, printable ? place.key : detail::quoted(place.key),
                      syntax_message(error) + place.hint);
    return Errors{diagnostics.messages(), diagnostics.total()};
  }
  Config config = read_document(diagnostics, document);
  check_daemon_paths(diagnostics, document, config.daemon, options);
  if (options.for_gpuqosd && config.policy.name == PolicyName::none) {
    const toml::node* name = document.at_path("policy.name").node();
    diagnostics.error(name != nullptr ? name->source().begin : toml::source_position{}, "policy.name",
                      "\"none\" means running without gpuqosd (stop the daemon instead)");
  }
  if (!diagnostics.empty()) return Errors{diagnostics.messages(), diagnostics.total()};
  return config;
}

Result<Config> load_config_file(const std::filesystem::path& path, LoadOptions options) {
  std::string text;
  if (auto why = read_file(path, text)) return Errors{{path.string() + ": cannot read config file: " + *why}};
  return parse_config(text, path.string(), options);
}

}  // namespace gpuqos::config

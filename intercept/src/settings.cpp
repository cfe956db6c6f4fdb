// Parsing of the GPUQOS_* environment variables into Settings, with one message per bad value.
#include "gpuqos/intercept/settings.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

namespace gpuqos::intercept {
namespace {

constexpr std::size_t kMaxSocketPathBytes = 107;  // sockaddr_un::sun_path holds 108 with the NUL

// spdlog's names too (gpuqosd's --log takes them): a job's environment is often shared with it.
constexpr std::array<std::pair<std::string_view, LogLevel>, 9> kLogLevels = {
    {{"off", LogLevel::off},
     {"critical", LogLevel::error},
     {"error", LogLevel::error},
     {"err", LogLevel::error},
     {"warn", LogLevel::warn},
     {"warning", LogLevel::warn},
     {"info", LogLevel::info},
     {"debug", LogLevel::debug},
     {"trace", LogLevel::debug}}};

constexpr std::string_view kRunsAsLow = "this job runs as low priority";
constexpr std::string_view kRunsUnmanaged = "this job runs unmanaged (no gpuqosd is asked)";

// `value` as the warning shows it: quotes, backslashes and control characters escaped, so one
// value is one line on the job's stderr (a user test's GPUQOS_JOB=$'a\nb' split it in two).
std::string shown(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escape;
    } else {
      out += c;
    }
  }
  return out;
}

std::string problem(std::string_view variable, std::string_view value, std::string_view allowed,
                    std::string_view consequence = kRunsAsLow) {
  return std::string(variable) + "=\"" + shown(value) + "\" is not valid (allowed: " + std::string(allowed) +
         "); " + std::string(consequence);
}

bool job_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// `name` made a valid job name: other characters become '_', too long is cut, empty is "unknown".
std::string sanitized_job(std::string_view name) {
  std::string job(name.substr(0, kMaxJobNameBytes));
  std::replace_if(job.begin(), job.end(), [](char c) { return !job_char(c); }, '_');
  return job.empty() ? "unknown" : job;
}

}  // namespace

bool is_valid_job_name(std::string_view name) noexcept {
  return !name.empty() && name.size() <= kMaxJobNameBytes && std::all_of(name.begin(), name.end(), job_char);
}

ParsedSettings parse_settings(const std::function<const char*(const char*)>& getenv, std::string_view default_job,
                              std::string_view working_directory) {
  ParsedSettings parsed;
  Settings& s = parsed.settings;
  auto read = [&](const char* variable) -> std::string_view {
    const char* value = getenv(variable);
    return value ? value : "";
  };
  s.job = sanitized_job(default_job);

  if (const auto value = read("GPUQOS_PRIORITY"); value == "high") {
    s.priority = Priority::high;
  } else if (!value.empty() && value != "low") {
    parsed.problems.push_back(problem("GPUQOS_PRIORITY", value, "high, low"));
  }
  if (const auto value = read("GPUQOS_JOB"); is_valid_job_name(value)) {
    s.job = value;
  } else if (!value.empty()) {
    // Made a name as the executable's is, and the priority claim kept: a typo in the name must not
    // make an inference job best-effort where gpuqosd never sees it claim high (gpuqosd and its
    // [access] decide the claim; a [[job]] name is no more a credential than any other name).
    s.job = sanitized_job(value);
    parsed.notes.push_back(problem("GPUQOS_JOB", value.substr(0, 256), "1 to 63 characters of A-Z a-z 0-9 . _ -",
                                   "this job is named \"" + s.job + "\" instead"));
  } else if (getenv("GPUQOS_JOB") != nullptr) {
    // Set but empty: most likely GPUQOS_JOB=$NAME with NAME unset, which `gpuqos run --job ''` refuses.
    parsed.notes.push_back("GPUQOS_JOB is set but empty: the job is named \"" + s.job + "\" after its executable");
  } else if (s.job != default_job) {
    // The name a [[job]] entry must use is not the one the operator sees in ps: said once.
    parsed.notes.push_back("no GPUQOS_JOB: the job is named \"" + s.job + "\" after its executable \"" +
                           std::string(default_job.substr(0, 256)) +
                           "\" (other characters than A-Z a-z 0-9 . _ - become _, at most 63)");
  }
  if (const auto value = read("GPUQOS_SOCKET"); !value.empty()) {
    // Relative to the working directory the job started in, as gpuqosd's --socket and `gpuqos run
    // --socket` take it; made absolute here, so a later chdir does not move it.
    std::string path(value);
    const bool relative = !value.starts_with('/');
    if (relative && working_directory.starts_with('/')) {
      path = std::string(working_directory) + (working_directory.ends_with('/') ? "" : "/") + path;
    }
    if (path.starts_with('/') && path.size() <= kMaxSocketPathBytes) {
      s.socket_path = std::move(path);
    } else {
      std::string allowed = "a path, absolute or from the working directory, of at most 107 bytes";
      if (relative && path.starts_with('/')) allowed += "; from " + std::string(working_directory) + " it is " +
                                                        std::to_string(path.size());
      // Not the default socket instead: that may be another daemon than the one the job was meant for.
      s.socket_path.clear();
      parsed.problems.push_back(problem("GPUQOS_SOCKET", value, allowed, kRunsUnmanaged));
    }
  }
  if (const auto value = read("GPUQOS_LOG"); !value.empty()) {
    const auto it = std::find_if(kLogLevels.begin(), kLogLevels.end(), [&](const auto& l) { return l.first == value; });
    if (it != kLogLevels.end()) {
      s.log_level = it->second;
    } else {
      // Only how much the shim says: never a reason to change how the job is scheduled.
      parsed.notes.push_back(problem("GPUQOS_LOG", value, "off, error, warn, info, debug (or trace, warning, critical)",
                                     "logging at warn"));
    }
  }
  s.debug_counts_path = read("GPUQOS_DEBUG_COUNTS");
  s.profile_path = read("GPUQOS_PROFILE");        // any path: a bad one is reported when it is opened
  s.cupti_library = read("GPUQOS_CUPTI_LIBRARY");  // a name or a path, as dlopen takes it
  if (!parsed.problems.empty()) s.priority = Priority::low;
  return parsed;
}

}  // namespace gpuqos::intercept

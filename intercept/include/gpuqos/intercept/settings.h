// The shim's settings, from the environment of the program it is loaded into.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuqos::intercept {

enum class Priority { low, high };
enum class LogLevel { off, error, warn, info, debug };

inline constexpr const char* kDefaultSocketPath = "/run/gpuqos/gpuqosd.sock";
inline constexpr std::size_t kMaxJobNameBytes = 63;  // what registration carries: ipc::kJobNameBytes with its NUL

struct Settings {
  Priority priority = Priority::low;            // GPUQOS_PRIORITY=high|low
  std::string job;                              // GPUQOS_JOB, default: the executable's name
  std::string socket_path = kDefaultSocketPath; // GPUQOS_SOCKET: the daemon's registration socket (empty: a bad
                                                //   one, and no daemon is asked)
  LogLevel log_level = LogLevel::warn;          // GPUQOS_LOG=off|error|warn|info|debug (spdlog's names too)
  std::string debug_counts_path;                // GPUQOS_DEBUG_COUNTS: per-hook counts written at exit (tests)
  std::string profile_path;                     // GPUQOS_PROFILE: CUPTI training records written here at exit
  std::string cupti_library;                    // GPUQOS_CUPTI_LIBRARY: the libcupti to load (default: searched)
};

struct ParsedSettings {
  Settings settings;
  // One message per bad variable, naming it, its value and the allowed values. Any bad value makes
  // the job run as low priority: a misconfigured job must not take precedence over others. A bad
  // GPUQOS_SOCKET makes it run unmanaged: the daemon it names cannot be reached, and the default
  // socket may be another's.
  std::vector<std::string> problems;
  // One message per bad variable that changes nothing but itself (GPUQOS_LOG: the default is kept),
  // and one when the job's default name had to be made from its executable's.
  std::vector<std::string> notes;
};

// Reads GPUQOS_* through `getenv` (nullptr or "" = unset). `default_job` is used when GPUQOS_JOB is
// unset or bad; it is made a valid job name first. A relative GPUQOS_SOCKET is taken from
// `working_directory` (absolute; empty: unknown, and a relative socket is a bad value). Pure: no
// I/O, no logging, never throws for any input except std::bad_alloc.
ParsedSettings parse_settings(const std::function<const char*(const char*)>& getenv, std::string_view default_job,
                              std::string_view working_directory = {});

// A valid job name: 1 to kMaxJobNameBytes of A-Z a-z 0-9 . _ -
bool is_valid_job_name(std::string_view name) noexcept;

}  // namespace gpuqos::intercept

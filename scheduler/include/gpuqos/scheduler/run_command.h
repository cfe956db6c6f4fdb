// `gpuqos run`: the environment a managed job starts with, and the exec into it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gpuqos::scheduler {

struct RunOptions {
  std::optional<std::string> priority;  // high | low; unset: GPUQOS_PRIORITY's, else low
  std::optional<std::string> job;       // GPUQOS_JOB; unset: the shim uses the executable's name
  std::optional<std::string> socket;    // GPUQOS_SOCKET; unset: the shim's default
  std::vector<std::string> command;     // at least one word
};

// The shim that sits next to this executable: <dir of executable>/../lib/libgpuqos.so.
std::filesystem::path shim_next_to(const std::filesystem::path& executable);

// LD_PRELOAD with shim first (existing entries kept after it, shim not repeated).
std::string preload_with(const std::string& shim, const char* existing);

// Is the program execvp would run for `program` (PATH searched) set-user-ID or set-group-ID?
bool runs_set_id(const std::string& program);

// Sets GPUQOS_PRIORITY, GPUQOS_JOB, GPUQOS_SOCKET (each given; an unset priority only where the
// environment has none or an empty one, to low) and LD_PRELOAD (when shim is set; a shim whose path
// has a space or colon through a link to it in $XDG_RUNTIME_DIR/gpuqos-UID or /tmp/gpuqos-UID) in
// this process's environment and
// execvp's the command. Returns only when exec failed: the exit code
// a shell would give (127 not found, 126 otherwise), after printing why to stderr. A set-user-ID or
// set-group-ID command is run with a warning that it may run unmanaged.
int exec_managed(const RunOptions& options, const std::optional<std::filesystem::path>& shim);

}  // namespace gpuqos::scheduler

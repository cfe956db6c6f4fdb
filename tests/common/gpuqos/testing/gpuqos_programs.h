// How benchmarks and tests start gpuqos's own programs: their paths in the build tree, the
// environment a CUDA program needs to run on simgpu, the `gpuqos run` wrapper that puts it under
// gpuqosd, and waiting for a daemon's socket. One place, so gpuqos-overhead and gpuqos-bench
// start processes the same way. Needs GPUQOS_BUILD_DIR defined by the including target.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/simgpud_process.h"  // can_connect

namespace gpuqos::testing {

// What the shim logs (GPUQOS_LOG=info) once gpuqosd manages the process: without it in a job's
// output, the job ran unmanaged (fail-open) and its figures are not gpuqos's.
inline constexpr const char* kShimRegisteredMark = "registered with gpuqosd";
// The shim's line when it falls open to the driver (lost gpuqosd, or could not reach it), and
// gpuqosd's when its loop stalled past the shims' heartbeat limit (so they fell open).
inline constexpr const char* kShimUnmanagedMark = "; running unmanaged";
inline constexpr const char* kDaemonStalledMark = "gpuqosd's loop stalled for ";

// <build>/bin/<name>.
inline std::filesystem::path build_program(const std::string& name) {
  return std::filesystem::path(GPUQOS_BUILD_DIR) / "bin" / name;
}

// The environment a CUDA program needs to run on the simgpud serving `simgpu_socket`: simgpu's
// libcuda.so.1 first on the library path.
inline std::map<std::string, std::string> simgpu_client_env(const std::string& simgpu_socket) {
  return {{"LD_LIBRARY_PATH", (std::filesystem::path(GPUQOS_BUILD_DIR) / "lib" / "simgpu").string()},
          {"SIMGPU_SOCKET", simgpu_socket}};
}

// Removes from this process's environment, so from every child started after, what would change
// or break a benchmark's programs when inherited from the user's shell: LD_PRELOAD (an installed
// libgpuqos.so would wrap simgpud, gpuqosd and every replayer), GPUQOS_* (an exported
// GPUQOS_PROFILE or GPUQOS_SOCKET), SIMGPU_* (fault injection such as SIMGPU_FAIL_*, another
// SIMGPU_SOCKET) and CUDA_* (CUDA_VISIBLE_DEVICES and the like). The benchmark then sets what it
// means to set, per child. Returns the names removed, sorted, for its report.
// Contract: call before any thread starts (unsetenv is not thread-safe).
inline std::vector<std::string> remove_inherited_gpu_env() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    for (const char* prefix : {"GPUQOS_", "SIMGPU_", "CUDA_"}) {
      if (name.starts_with(prefix)) names.push_back(name);
    }
    if (name == "LD_PRELOAD") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const std::string& name : names) ::unsetenv(name.c_str());
  return names;
}

// `argv` run the documented way under gpuqosd: `gpuqos run --priority P --socket S --job J -- argv`
// (it sets LD_PRELOAD and GPUQOS_*). Add GPUQOS_LOG=info to the environment to see kShimRegisteredMark.
inline std::vector<std::string> under_gpuqos_run(std::vector<std::string> argv, const std::string& priority,
                                                 const std::string& gpuqosd_socket, const std::string& job) {
  std::vector<std::string> wrapped{build_program("gpuqos").string(), "run", "--priority", priority, "--socket",
                                   gpuqosd_socket, "--job", job, "--"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

// How waiting for a daemon to serve ended.
enum class DaemonStartup { serving, exited, timed_out };

// Waits until `socket` accepts connections (SOCK_SEQPACKET, as simgpud and gpuqosd listen), while
// `daemon` runs. Does not stop the daemon when it times out: the caller owns it.
inline DaemonStartup wait_until_serving(ChildProcess& daemon, const std::string& socket,
                                        std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!can_connect(socket)) {
    if (!daemon.running()) return DaemonStartup::exited;
    if (std::chrono::steady_clock::now() > deadline) return DaemonStartup::timed_out;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return DaemonStartup::serving;
}

}  // namespace gpuqos::testing

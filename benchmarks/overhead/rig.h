// The processes of one overhead run: a private simgpud and gpuqosd in one temp dir, and the
// programs measured, run directly on simgpu or under the shim (`gpuqos run`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/gpuqos_programs.h"
#include "gpuqos/testing/simgpud_process.h"

namespace gpuqos::overhead {

// How a measured program runs: straight on simgpu's libcuda, or under libgpuqos.so with gpuqosd.
// low: gpuqosd grants credit (its default); low_strict: a second gpuqosd with --credit-ops 0, so
// every op waits for its own grant (the round trip itself).
enum class Placement { direct, high, low, low_strict };
const char* placement_name(Placement placement);

// Contract: one thread; the destructor stops gpuqosd and simgpud and removes the temp dir, also
// when a measurement threw.
class Rig {
 public:
  Rig();
  ~Rig();
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  std::filesystem::path file(const std::string& name) const { return simgpud_.file(name); }
  static std::filesystem::path bin(const std::string& name);

  // Writes simgpud's catalog: the 0-us launch-timer kernel first, then `replay_catalog_json`'s
  // entries (the one gpuqos-trace2workload writes) and its defaults.
  void write_catalog(const std::string& replay_catalog_json) const;
  // Starts simgpud, then the two gpuqosd (fifo policy); throws with the log if one does not come up.
  void start();

  // Runs argv to completion under `placement`; returns its output, throws with it on failure or
  // when a program meant to run under gpuqosd ran unmanaged.
  std::string run(Placement placement, std::vector<std::string> argv, const std::string& log_name) const;

 private:
  void start_gpuqosd(std::optional<testing::ChildProcess>& daemon, const std::string& socket,
                     const std::string& credit_ops);

  testing::SimgpudProcess simgpud_;
  std::string gpuqosd_socket_, strict_socket_;
  std::optional<testing::ChildProcess> gpuqosd_, strict_gpuqosd_;
};

}  // namespace gpuqos::overhead

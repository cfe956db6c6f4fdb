// Rig: simgpud + gpuqosd on private sockets, and children run with the right environment.
#include "rig.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

namespace gpuqos::overhead {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr auto kChildTimeout = 300s;

// What the shim logs (GPUQOS_LOG=info) once it is managed by gpuqosd.
constexpr const char* kRegisteredMark = "registered with gpuqosd";

}  // namespace

const char* placement_name(Placement placement) {
  switch (placement) {
    case Placement::direct: return "direct";
    case Placement::high: return "high";
    case Placement::low: return "low";
  }
  return "?";
}

Rig::Rig() : simgpud_({.log_level = "warn", .dir_prefix = "gpuqos-overhead"}) {
  gpuqosd_socket_ = file("gpuqosd.sock").string();
}

Rig::~Rig() {
  if (gpuqosd_) gpuqosd_->terminate(10s);  // before simgpud_ and its temp dir go
}

fs::path Rig::bin(const std::string& name) { return fs::path(GPUQOS_BUILD_DIR) / "bin" / name; }

void Rig::write_catalog(const std::string& replay_catalog_json) const {
  nlohmann::json catalog = nlohmann::json::parse(replay_catalog_json);
  nlohmann::json kernels = nlohmann::json::array({{{"match", "^gpuqos_overhead_empty$"}, {"model", "fixed"}, {"us", 0}}});
  for (const auto& entry : catalog.value("kernels", nlohmann::json::array())) kernels.push_back(entry);
  catalog["kernels"] = kernels;
  std::ofstream(file("catalog.json")) << catalog.dump(2) << "\n";
}

void Rig::start() {
  simgpud_.start();
  start_gpuqosd();
}

void Rig::start_gpuqosd() {
  gpuqosd_.emplace(std::vector<std::string>{bin("gpuqosd").string(), "--socket", gpuqosd_socket_, "--policy", "fifo",
                                            "--log-level", "warn"},
                   std::map<std::string, std::string>{}, file("gpuqosd.log"));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!testing::can_connect(gpuqosd_socket_)) {
    if (!gpuqosd_->running() || std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("gpuqosd did not come up on " + gpuqosd_socket_ + ":\n" + gpuqosd_->output());
    }
    std::this_thread::sleep_for(5ms);
  }
}

std::string Rig::run(Placement placement, std::vector<std::string> argv, const std::string& log_name) const {
  std::map<std::string, std::string> env{{"LD_LIBRARY_PATH", (fs::path(GPUQOS_BUILD_DIR) / "lib" / "simgpu").string()},
                                         {"SIMGPU_SOCKET", simgpud_.socket()}};
  if (placement != Placement::direct) {
    // The documented way to run a job under gpuqosd: `gpuqos run` sets LD_PRELOAD and GPUQOS_*.
    std::vector<std::string> wrapper{bin("gpuqos").string(), "run",      "--priority", placement_name(placement),
                                     "--socket",             gpuqosd_socket_, "--job", log_name, "--"};
    argv.insert(argv.begin(), wrapper.begin(), wrapper.end());
    env["GPUQOS_LOG"] = "info";
  }
  testing::ChildProcess child(argv, env, file(log_name + ".log"));
  const auto code = child.wait(kChildTimeout);
  const std::string output = child.output();
  if (code != 0) {
    throw std::runtime_error(argv[0] + (code ? " exited with " + std::to_string(*code) : " timed out") + ":\n" +
                             output + "\nsimgpud log:\n" + simgpud_.log_text());
  }
  if (placement != Placement::direct && output.find(kRegisteredMark) == std::string::npos) {
    throw std::runtime_error(log_name + " ran unmanaged (no gpuqosd registration):\n" + output);
  }
  return output;
}

}  // namespace gpuqos::overhead

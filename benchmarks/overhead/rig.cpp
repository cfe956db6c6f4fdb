// Rig: simgpud + gpuqosd on private sockets, and children run with the right environment.
#include "rig.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <map>
#include <stdexcept>

namespace gpuqos::overhead {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr auto kChildTimeout = 300s;

}  // namespace

const char* placement_name(Placement placement) {
  switch (placement) {
    case Placement::direct: return "direct";
    case Placement::high: return "high";
    case Placement::low: return "low";
    case Placement::low_strict: return "low-strict";
  }
  return "?";
}

Rig::Rig() : simgpud_({.log_level = "warn", .dir_prefix = "gpuqos-overhead"}) {
  gpuqosd_socket_ = file("gpuqosd.sock").string();
  strict_socket_ = file("gpuqosd-strict.sock").string();
}

Rig::~Rig() {
  // Before simgpud_ and its temp dir go.
  if (gpuqosd_) gpuqosd_->terminate(10s);
  if (strict_gpuqosd_) strict_gpuqosd_->terminate(10s);
}

fs::path Rig::bin(const std::string& name) { return testing::build_program(name); }

void Rig::write_catalog(const std::string& replay_catalog_json) const {
  nlohmann::json catalog = nlohmann::json::parse(replay_catalog_json);
  nlohmann::json kernels = nlohmann::json::array({{{"match", "^gpuqos_overhead_empty$"}, {"model", "fixed"}, {"us", 0}}});
  for (const auto& entry : catalog.value("kernels", nlohmann::json::array())) kernels.push_back(entry);
  catalog["kernels"] = kernels;
  std::ofstream(file("catalog.json")) << catalog.dump(2) << "\n";
}

void Rig::start() {
  simgpud_.start();
  start_gpuqosd(gpuqosd_, gpuqosd_socket_, "32");
  start_gpuqosd(strict_gpuqosd_, strict_socket_, "0");
}

void Rig::start_gpuqosd(std::optional<testing::ChildProcess>& daemon, const std::string& socket,
                        const std::string& credit_ops) {
  daemon.emplace(std::vector<std::string>{bin("gpuqosd").string(), "--socket", socket, "--policy", "fifo",
                                          "--credit-ops", credit_ops, "--log-level", "warn"},
                 std::map<std::string, std::string>{}, file("gpuqosd-credit-" + credit_ops + ".log"));
  if (testing::wait_until_serving(*daemon, socket, 10s) != testing::DaemonStartup::serving) {
    throw std::runtime_error("gpuqosd did not come up on " + socket + ":\n" + daemon->output());
  }
}

std::string Rig::run(Placement placement, std::vector<std::string> argv, const std::string& log_name) const {
  std::map<std::string, std::string> env = testing::simgpu_client_env(simgpud_.socket());
  if (placement != Placement::direct) {
    const bool strict = placement == Placement::low_strict;
    argv = testing::under_gpuqos_run(std::move(argv), strict ? "low" : placement_name(placement),
                                     strict ? strict_socket_ : gpuqosd_socket_, log_name);
    env["GPUQOS_LOG"] = "info";
  }
  testing::ChildProcess child(argv, env, file(log_name + ".log"));
  const auto code = child.wait(kChildTimeout);
  const std::string output = child.output();
  if (code != 0) {
    throw std::runtime_error(argv[0] + (code ? " exited with " + std::to_string(*code) : " timed out") + ":\n" +
                             output + "\nsimgpud log:\n" + simgpud_.log_text());
  }
  if (placement != Placement::direct && output.find(testing::kShimRegisteredMark) == std::string::npos) {
    throw std::runtime_error(log_name + " ran unmanaged (no gpuqosd registration):\n" + output);
  }
  return output;
}

}  // namespace gpuqos::overhead

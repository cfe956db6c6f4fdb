// simgpud: the simulated GPU device process. Parses the command line, loads the device profile
// and kernel catalogs, and serves the device socket until SIGTERM/SIGINT.
#include <cmath>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "gpuqos/simgpu/catalog.h"
#include "gpuqos/simgpu/profile.h"
#include "gpuqos/simgpu/protocol.h"
#include "server.h"

namespace {

constexpr int kExitBadConfig = 2;

struct Options {
  std::string socket_path = gpuqos::simgpu::wire::default_socket_path();
  std::string profile_path;
  std::vector<std::string> catalog_paths;
  std::string log_level = "info";
  double time_scale = 0;  // 0: keep the profile's
  bool shared = false;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace gpuqos::simgpu;
  Options opt;
  CLI::App app{"simgpud: a simulated GPU for machines without one"};
  app.add_option("--socket", opt.socket_path, "Unix socket to serve (default: $SIMGPU_SOCKET, "
                                              "$XDG_RUNTIME_DIR/simgpu.sock or /tmp/simgpu-<uid>.sock)");
  app.add_option("--profile", opt.profile_path, "device profile (TOML); default: one H100");
  app.add_option("--catalog", opt.catalog_paths, "kernel catalog (JSON); repeatable, earlier entries match first");
  app.add_option("--log-level", opt.log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  // Not CLI::PositiveNumber: for a double it says its range as 300 digits.
  app.add_option("--time-scale", opt.time_scale, "override every device's time_scale")
      ->check(CLI::Validator(
          [](std::string& value) {
            char* end = nullptr;
            const double scale = std::strtod(value.c_str(), &end);
            return end != value.c_str() && *end == '\0' && scale > 0 && std::isfinite(scale)
                       ? std::string()
                       : "must be a positive number, got '" + value + "'";
          },
          "POSITIVE"));
  app.add_flag("--shared", opt.shared, "make the socket usable by every user (mode 0666 instead of 0600)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(opt.log_level));

  std::vector<DeviceProfile> devices;
  KernelCatalog catalog;
  try {
    devices = opt.profile_path.empty() ? default_profile() : load_profile_file(opt.profile_path);
    for (const auto& path : opt.catalog_paths) catalog.add_file(path);
  } catch (const std::exception& e) {  // ProfileError, CatalogError: the message names file and place
    spdlog::error("{}", e.what());
    return kExitBadConfig;
  }
  if (opt.time_scale > 0) {
    for (auto& device : devices) device.time_scale = opt.time_scale;
  }

  server::Server server(std::move(devices), std::move(catalog),
                        server::ServerOptions{opt.socket_path, static_cast<mode_t>(opt.shared ? 0666 : 0600)});
  try {
    server.open();
  } catch (const std::exception& e) {
    spdlog::error("simgpud: {}", e.what());
    return 1;
  }
  return server.run();
}

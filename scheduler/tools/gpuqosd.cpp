// gpuqosd: the gpuqos daemon. Parses its command line (and config file), sets up logging and runs
// the Daemon loop. Options given on the command line win over the config file's.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "version_text.h"
#include "gpuqos/config/load.h"
#include "gpuqos/config/summary.h"
#include "gpuqos/scheduler/daemon.h"
#include "gpuqos/scheduler/daemon_config.h"

namespace {

constexpr int kUsageError = 2;

// A count of ops: "--credit-ops: Value -1 not in range 0 to 4294967295", where the conversion alone
// said "Could not convert" (a user test).
const CLI::Range kCount(std::uint32_t{0}, std::numeric_limits<std::uint32_t>::max());

// Every problem of a config file on a line of its own, each said as gpuqosd's (only the first was).
void print_config_problems(const std::vector<std::string>& problems) {
  for (const std::string& problem : problems) std::cerr << "gpuqosd: " << problem << "\n";
}

// --check-config FILE: 0 when this gpuqosd would start with it, 1 with its problems printed (the
// first 1,000 in the file, and how many more).
int check_config(const std::string& path) {
  auto loaded = gpuqos::config::load_config_file(
      path, {.for_gpuqosd = true, .check_socket_path = true, .check_store_path = true});
  if (!loaded) {
    std::cerr << loaded.error() << "\n";
    return 1;
  }
  auto options = gpuqos::scheduler::options_from_config(loaded.value(), {});
  if (!options) {
    std::cerr << options.error() << "\n";  // it names the file, line and column
    return 1;
  }
  std::cout << path << ": ok\n" << gpuqos::config::render_summary(loaded.value());
  for (const auto& [key, value] : {std::pair{"daemon.socket", loaded->daemon.socket_path},
                                   std::pair{"daemon.profile_store", loaded->daemon.profile_store}}) {
    if (!value.empty() && !std::filesystem::path(value).is_absolute()) {
      std::cout << "note: " << key << " \"" << value << "\" is relative: it is taken from gpuqosd's working "
                << "directory (/ under systemd), not the config file's; an absolute path says what it means\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A reload asked for while gpuqosd starts (parsing its config, loading a large profile store)
  // waits for its signalfd, which Daemon::setup makes with SIGHUP in this mask: SIGHUP's default
  // action ended it silently (a review: a `systemctl reload` 150 ms into a start, exit 129, an empty
  // log). SIGTERM and SIGINT still end a start at once, as asked.
  sigset_t reload;
  sigemptyset(&reload);
  sigaddset(&reload, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &reload, nullptr);
  gpuqos::scheduler::DaemonOptions options;
  std::string config_path, check_path;
  std::string log_level = "info";
  double save_interval_s = 300;
  CLI::App app{"gpuqosd: the gpuqos GPU QoS daemon", "gpuqosd"};
  app.set_version_flag("--version", gpuqos::tools::version_text("gpuqosd"));
  app.footer("The defaults shown are gpuqosd's without --config. With it, the config file's values replace them, "
             "and an option given here replaces the config's (examples/gpuqos.toml chooses baymax).");
  // Given empty (an unset variable: --check-config "$CFG"), a path is a mistake, not "none": it
  // started a daemon on the default socket with the default policy, which a check never returned from.
  const CLI::Validator a_file{[](const std::string& path) {
                                return path.empty() ? std::string("an empty path names no file") : std::string();
                              },
                              "FILE"};
  app.add_option("--config", config_path, "TOML config file (examples/gpuqos.toml); the options below override it")
      ->check(a_file);
  app.add_option("--check-config", check_path, "Validate a config file, print the settings that apply (defaults included), and exit (0: usable)")
      ->check(a_file);
  auto* socket = app.add_option("--socket", options.socket_path, "Unix socket clients register on")->capture_default_str();
  auto* policy = app.add_option("--policy", options.policy.name, "Scheduling policy (a config's [policy] name wins "
                                                                 "over this default)")
                     ->check(CLI::IsMember({"fifo", "priority", "baymax"}))
                     ->capture_default_str();
  auto* outstanding = app.add_option("--max-outstanding", options.policy.max_outstanding_ops,
                                     "fifo: low-priority ops granted and not yet completed (0: no limit)")
                          ->check(kCount)
                          ->capture_default_str();
  auto* credit = app.add_option("--credit-ops", options.policy.credit_ops,
                 "Low-priority ops a client may issue ahead of the daemon's answer while nothing else waits "
                 "(0: a grant round trip per op)")
                    ->check(kCount)
                    ->capture_default_str();
  auto* store = app.add_option("--profile-store", options.learning.store_path,
                               "The predictor's store: loaded at start (from `gpuqos train` or an earlier run), "
                               "refined by every completion, saved periodically and at exit");
  auto* interval = app.add_option("--profile-save-interval", save_interval_s,
                                  "Seconds between saves of the store (0: only at exit)")
                       ->check(gpuqos::tools::finite_in(0, 4294967296.0))
                       ->capture_default_str();
  app.add_option("--max-connections-per-user", options.max_connections_per_user,
                 "Connections one user's processes may hold (0: a quarter of the descriptors gpuqosd may open, "
                 "at most 512)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  std::string metrics_listen;
  auto* metrics = app.add_option("--metrics-listen", metrics_listen,
                                 "Serve Prometheus metrics at http://HOST:PORT/metrics (over [daemon] metrics_listen; "
                                 "\"\": off)");
  auto* level = app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
                    ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
                    ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kUsageError;
  }
  if (!check_path.empty()) return check_config(check_path);

  options.learning.save_interval_ns = static_cast<std::int64_t>(save_interval_s * 1e9);
  options.log_level = log_level;
  // What was typed wins over the file, now and at every reload (SIGHUP).
  gpuqos::scheduler::CommandLineOverrides& given = options.command_line;
  if (socket->count()) given.socket_path = options.socket_path;
  if (policy->count()) given.policy_name = options.policy.name;
  if (outstanding->count()) given.max_outstanding_ops = options.policy.max_outstanding_ops;
  if (credit->count()) given.credit_ops = options.policy.credit_ops;
  if (store->count()) given.store_path = options.learning.store_path;
  if (interval->count()) given.save_interval_ns = options.learning.save_interval_ns;
  if (level->count()) given.log_level = log_level;
  if (metrics->count()) {
    gpuqos::config::ListenAddress address;  // "" leaves it off
    if (!metrics_listen.empty()) {
      if (auto why = gpuqos::config::parse_listen(metrics_listen, address)) {
        std::cerr << "gpuqosd: --metrics-listen " << metrics_listen << ": " << *why << "\n";
        return kUsageError;
      }
    }
    given.metrics_listen = options.config.daemon.metrics_listen = address;
  }
  if (!config_path.empty()) {
    // The paths the command line replaces are its to check (the daemon does, as it starts).
    auto loaded = gpuqos::config::load_config_file(config_path, {.for_gpuqosd = true,
                                                                 .check_socket_path = !given.socket_path,
                                                                 .check_store_path = !given.store_path});
    if (!loaded) {
      print_config_problems(loaded.errors());
      return kUsageError;
    }
    auto configured = gpuqos::scheduler::options_from_config(loaded.value(), options);
    if (!configured) {
      std::cerr << "gpuqosd: " << configured.error() << "\n";  // it names the file, line and column
      return kUsageError;
    }
    options = configured.value();
    options.config_path = gpuqos::scheduler::config_path_to_keep(config_path);
    options.log_level = gpuqos::config::to_string(loaded.value().daemon.log_level);
    gpuqos::scheduler::apply_command_line(options);
  }

  spdlog::set_default_logger(spdlog::stderr_color_mt("gpuqosd"));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  if (!config_path.empty()) spdlog::info("config {}", config_path);

  gpuqos::scheduler::make_paths_absolute(options);  // (done by apply_command_line with --config)
  auto daemon = gpuqos::scheduler::Daemon::create(options);
  if (!daemon) {
    spdlog::error("cannot start: {}", daemon.error());
    return 1;
  }
  const int code = daemon.value()->run();
  daemon.value().reset();  // drains, saves the store, removes the socket and the segments
  return code;
}

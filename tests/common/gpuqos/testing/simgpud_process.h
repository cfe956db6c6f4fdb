// A private simgpud for integration tests: its own temp dir (profile, catalog, log, socket) and
// process, killed and removed by the destructor even when a test fails.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "gpuqos/testing/child_process.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::testing {

// True when a SOCK_SEQPACKET Unix socket at `path` accepts a connection (simgpud's kind).
inline bool can_connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

struct SimgpudOptions {
  // Written to <dir>/profile.toml and passed with --profile; none: simgpud's default device.
  std::optional<std::string> profile_toml;
  // Written to <dir>/catalog.json; none: the test writes that file itself before start().
  std::optional<std::string> catalog_json;
  std::string log_level = "warn";
  std::string dir_prefix = "simgpud-test";
};

// How a start attempt ended.
enum class SimgpudStartup { serving, exited, timed_out };

// The daemon reads <dir>/catalog.json (and profile.toml), listens on <dir>/simgpu.sock and logs
// to <dir>/simgpud.log, appending across restarts.
class SimgpudProcess {
 public:
  explicit SimgpudProcess(const SimgpudOptions& options)
      : dir_(options.dir_prefix),
        socket_(file("simgpu.sock").string()),
        log_level_(options.log_level),
        has_profile_(options.profile_toml.has_value()) {
    if (options.profile_toml) dir_.write("profile.toml", *options.profile_toml);
    if (options.catalog_json) dir_.write("catalog.json", *options.catalog_json);
  }
  ~SimgpudProcess() { kill(); }  // before dir_ goes
  SimgpudProcess(const SimgpudProcess&) = delete;
  SimgpudProcess& operator=(const SimgpudProcess&) = delete;

  static std::string binary() { return std::string(GPUQOS_BUILD_DIR) + "/bin/simgpud"; }

  // The command line start() runs (tests also run it themselves to see it refuse).
  std::vector<std::string> argv() const {
    std::vector<std::string> args = {binary(), "--socket", socket_};
    if (has_profile_) args.insert(args.end(), {"--profile", file("profile.toml").string()});
    args.insert(args.end(), {"--catalog", file("catalog.json").string(), "--log-level", log_level_});
    return args;
  }

  // Starts simgpud (again, after kill()) and waits until its socket accepts connections.
  SimgpudStartup try_start(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    process_.emplace(argv(), std::map<std::string, std::string>{}, file("simgpud.log"), OutputMode::append);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!can_connect(socket_)) {
      if (!process_->running()) return SimgpudStartup::exited;
      if (std::chrono::steady_clock::now() > deadline) return SimgpudStartup::timed_out;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return SimgpudStartup::serving;
  }

  // try_start(), throwing with simgpud's log when it does not come up.
  void start() {
    switch (try_start()) {
      case SimgpudStartup::serving: return;
      case SimgpudStartup::exited: throw std::runtime_error("simgpud exited at start:\n" + log_text());
      case SimgpudStartup::timed_out: throw std::runtime_error("simgpud did not come up on " + socket_);
    }
  }

  // SIGKILL and reap, as if it crashed; the socket file is removed so start() finds a clean path.
  void kill() {
    if (!process_) return;
    process_->kill();  // not ~ChildProcess alone: that would SIGTERM first
    process_.reset();
    std::error_code ignored;
    std::filesystem::remove(socket_, ignored);
  }

  // SIGTERM, then its exit code (128 + signal when a signal ended it; -1 when it was not running
  // or did not exit within 10 s).
  int terminate() {
    if (!process_) return -1;
    const auto code = process_->terminate(std::chrono::seconds(10));
    process_.reset();
    return code.value_or(-1);
  }

  const std::string& socket() const { return socket_; }
  const std::filesystem::path& dir() const { return dir_.path(); }
  std::filesystem::path file(const std::string& name) const { return dir_.path() / name; }
  // What every run of simgpud in this dir has logged so far.
  std::string log_text() const {
    std::ifstream in(file("simgpud.log"));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  TempDir dir_;  // first: removed after the process is gone
  std::string socket_;
  std::string log_level_;
  bool has_profile_;
  std::optional<ChildProcess> process_;
};

}  // namespace gpuqos::testing

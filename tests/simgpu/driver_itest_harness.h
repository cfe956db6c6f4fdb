// Harness for simgpu driver integration tests: a private simgpud, and forked CUDA client processes
// that report values and failed checks back to the test.
//
// A process has one driver instance and one connection to simgpud, so a test process that links
// libcuda.so.1 never calls cuInit itself: each scenario runs in ClientProcess children. Both the
// server and the clients are RAII objects: killed, reaped and removed even when a test fails.
#pragma once

#include <cuda.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpuqos/testing/simgpud_process.h"

namespace gpuqos::simgpu::itest {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Milliseconds on CLOCK_MONOTONIC: comparable between the test process and its clients.
inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline bool send_all(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

inline std::string error_name(CUresult code) {
  const char* name = nullptr;
  return cuGetErrorName(code, &name) == CUDA_SUCCESS && name ? name : "CUresult " + std::to_string(code);
}

// ---------------------------------------------------------------------------------------------
// The client side: what a forked client process uses to report to the test.

// A client's link to the test process. Checks that fail are reported as lines "fail <text>",
// values as "value <key> <text>"; the client waits for the test's "go" bytes on the same socket.
class ClientLink {
 public:
  explicit ClientLink(int fd) : fd_(fd) {}

  void report(const std::string& key, const std::string& value) { send_all(fd_, "value " + key + " " + value + "\n"); }
  void report(const std::string& key, double value) {
    std::ostringstream text;
    text.precision(17);
    text << value;
    report(key, text.str());
  }
  void ready() { report("ready", "1"); }

  // Blocks until the test calls ClientProcess::go() (or goes away).
  void wait_go() {
    char byte = 0;
    while (::recv(fd_, &byte, 1, 0) < 0 && errno == EINTR) {
    }
  }

  bool check(bool ok, const char* what, int line) {
    if (!ok) fail("line " + std::to_string(line) + ": check failed: " + what);
    return ok;
  }
  bool check_range(double value, double low, double high, const char* what, int line) {
    bool ok = value >= low && value < high;
    if (!ok) {
      std::ostringstream text;
      text << "line " << line << ": " << what << " = " << value << ", expected in [" << low << ", " << high << ")";
      fail(text.str());
    }
    return ok;
  }
  bool expect_cu(CUresult got, CUresult want, const char* call, int line) {
    if (got == want) return true;
    fail("line " + std::to_string(line) + ": " + call + " returned " + error_name(got) + ", expected " +
         error_name(want));
    return false;
  }
  void fail(const std::string& message) {
    ++failures_;
    send_all(fd_, "fail " + message + "\n");
  }
  int failures() const { return failures_; }

 private:
  int fd_;
  int failures_ = 0;
};

// Checks inside a client: they report and return whether they held, so a client can stop early
// with `if (!CLIENT_OK(...)) return;` when what follows depends on the call.
#define CLIENT_CHECK(link, cond) (link).check((cond), #cond, __LINE__)
#define CLIENT_RANGE(link, value, low, high) (link).check_range((value), (low), (high), #value, __LINE__)
#define CLIENT_CU(link, call, want) (link).expect_cu((call), (want), #call, __LINE__)
#define CLIENT_OK(link, call) CLIENT_CU(link, call, CUDA_SUCCESS)

// ---------------------------------------------------------------------------------------------
// The test side: simgpud and client processes, each cleaned up by its destructor.

// One simgpud on a private socket in a fresh temp dir, with the given profile and catalog, started
// at once (start() again after kill() restarts it on the same socket).
class SimgpudServer : public gpuqos::testing::SimgpudProcess {
 public:
  SimgpudServer(const std::string& profile_toml, const std::string& catalog_json)
      : SimgpudProcess({.profile_toml = profile_toml,
                        .catalog_json = catalog_json,
                        .log_level = "info",
                        .dir_prefix = "simgpu-driver-itest"}) {
    start();
  }

  // simgpu-stat's answer; null when it failed.
  nlohmann::json stats() const {
    std::string command = "'" + std::string(GPUQOS_BUILD_DIR) + "/bin/simgpu-stat' --socket '" + socket() + "' 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (!pipe) return nullptr;
    std::string text;
    char buffer[4096];
    while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, n);
    int status = ::pclose(pipe);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ADD_FAILURE() << "simgpu-stat failed: " << text;
      return nullptr;
    }
    return nlohmann::json::parse(text, nullptr, false);
  }

  // A device statistic from simgpu-stat (-1 when it could not be read).
  std::int64_t device_stat(const char* key, int device = 0) const {
    nlohmann::json s = stats();
    if (!s.is_object() || !s.contains("devices") || s["devices"].size() <= static_cast<std::size_t>(device)) return -1;
    return s["devices"][device].value(key, std::int64_t{-1});
  }
};

// What a client reported, and how it ended.
struct ClientOutcome {
  bool exited = false;  // exited normally (not killed, not timed out)
  int exit_code = -1;
  std::map<std::string, std::string> values;
  std::vector<std::string> failures;

  double number(const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? -1e300 : std::stod(it->second);
  }
};

// One forked CUDA client: runs `body` with SIMGPU_SOCKET set to `socket`, then _exit()s (1 if a
// check failed). The destructor SIGKILLs and reaps it if it is still around.
class ClientProcess {
 public:
  ClientProcess(const std::string& socket_path, const std::function<void(ClientLink&)>& body) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw std::runtime_error("socketpair");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      ::setenv("SIMGPU_SOCKET", socket_path.c_str(), 1);
      ClientLink link(fds[1]);
      try {
        body(link);
      } catch (const std::exception& e) {
        link.fail(std::string("exception: ") + e.what());
      }
      ::_exit(link.failures() == 0 ? 0 : 1);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    if (pid_ < 0) throw std::runtime_error("fork failed");
  }
  ~ClientProcess() {
    kill_now();
    if (fd_ >= 0) ::close(fd_);
  }
  ClientProcess(const ClientProcess&) = delete;
  ClientProcess& operator=(const ClientProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Reads reports until `key` has a value; empty if the client ended or the time ran out first.
  std::string wait_value(const std::string& key, std::chrono::milliseconds timeout = 20s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!outcome_.values.contains(key)) {
      if (!read_some(deadline)) return "";
    }
    return outcome_.values[key];
  }
  bool wait_ready(std::chrono::milliseconds timeout = 20s) { return !wait_value("ready", timeout).empty(); }

  void go() { send_all(fd_, "g"); }

  // What the client reported so far (finish() adds how it ended).
  const ClientOutcome& outcome() const { return outcome_; }

  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // Reads every report until the client exits, then reaps it; kills it after `timeout`.
  ClientOutcome finish(std::chrono::milliseconds timeout = 30s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (read_some(deadline)) {
    }
    if (pid_ > 0) {
      int status = 0;
      for (;;) {
        pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
          pid_ = -1;
          outcome_.exited = WIFEXITED(status);
          outcome_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
          break;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          kill_now();
          outcome_.failures.push_back("client did not finish in time: killed");
          break;
        }
        std::this_thread::sleep_for(2ms);
      }
    }
    return outcome_;
  }

 private:
  // Reads what is there (waiting until `deadline`) and parses complete lines; false at EOF or timeout.
  bool read_some(std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) <= 0) return false;
    char buffer[4096];
    ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) return false;
    pending_.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t eol; (eol = pending_.find('\n')) != std::string::npos;) {
      std::string line = pending_.substr(0, eol);
      pending_.erase(0, eol + 1);
      if (line.starts_with("fail ")) {
        outcome_.failures.push_back(line.substr(5));
      } else if (line.starts_with("value ")) {
        std::size_t space = line.find(' ', 6);
        outcome_.values[line.substr(6, space - 6)] = space == std::string::npos ? "" : line.substr(space + 1);
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_;
  ClientOutcome outcome_;
};

// Every check the client made held and it exited with 0.
inline void expect_clean(const ClientOutcome& outcome, const std::string& who) {
  for (const std::string& failure : outcome.failures) ADD_FAILURE() << who << ": " << failure;
  EXPECT_TRUE(outcome.exited && outcome.exit_code == 0) << who << " exit code " << outcome.exit_code;
}

}  // namespace gpuqos::simgpu::itest

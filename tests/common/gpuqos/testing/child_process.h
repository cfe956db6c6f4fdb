// A child process for integration tests: spawned with extra environment and its output in a file,
// and stopped and reaped by its destructor, even when a test fails.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
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
#include <thread>
#include <vector>

extern char** environ;

namespace gpuqos::testing {

// Whether a new child's output file starts empty or keeps what an earlier run wrote there.
enum class OutputMode { truncate, append };

// Whether a child outlives the process that started it when that one dies without stopping it
// (SIGKILL, a crash). A test's children are stopped by their destructors; a benchmark that a user
// kills must not leave a gpuqosd (which blocks SIGHUP, its reload signal) running for ever.
enum class Lifetime { independent, dies_with_parent };

// Not thread-safe: one test thread owns it.
class ChildProcess {
 public:
  // Starts argv[0] with the current environment plus `env`; stdout and stderr go to `output`.
  // Throws when the program cannot be started.
  // Lifetime::dies_with_parent: the child gets SIGKILL when the *thread* that constructed it ends
  // (PR_SET_PDEATHSIG follows the spawning thread, not the process), so construct it from a thread
  // that lives as long as the child should, the main thread in a program. It survives the exec of
  // `gpuqos run` into its program, so a job under gpuqosd dies with the caller too.
  ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               const std::filesystem::path& output, OutputMode mode = OutputMode::truncate,
               Lifetime lifetime = Lifetime::independent)
      : output_(output) {
    std::vector<std::string> env_strings = environment_with(env);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int flags = O_WRONLY | O_CREAT | (mode == OutputMode::append ? O_APPEND : O_TRUNC);
    if (lifetime == Lifetime::dies_with_parent) {
      spawn_dying_with_parent(argv[0], args.data(), envp.data(), output.c_str(), flags);
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(), flags, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  ~ChildProcess() { stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Exit code (128 + signal when a signal ended it), or nullopt if it is still running after
  // `timeout` (it is then stopped) or was already reaped.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      if (const auto code = try_reap()) return code;
      if (std::chrono::steady_clock::now() > deadline) {
        stop();
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return std::nullopt;
  }

  // Its pid while it runs (to signal it), -1 once reaped.
  pid_t pid() const { return pid_; }

  // False once it has exited (it is then reaped).
  bool running() { return pid_ > 0 && !try_reap(); }

  // SIGTERM, then its exit code as wait() gives it.
  std::optional<int> terminate(std::chrono::milliseconds timeout) {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    return wait(timeout);
  }

  // SIGTERM, up to 5 s to exit, then SIGKILL.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 500; ++i) {
      if (try_reap()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
  }

  // SIGKILL now: what a crash looks like to the peers of the process.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // Everything written to the output file so far.
  std::string output() const {
    std::ifstream in(output_);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  // fork, PR_SET_PDEATHSIG and exec: posix_spawn has no attribute for the death signal. Between
  // fork and exec the child makes only async-signal-safe calls (the caller may have threads), and
  // reports a failed exec's errno through a close-on-exec pipe, so a program that cannot start
  // still throws here as with posix_spawn. SIGKILL: the child of a dead caller has nobody to
  // report to, and gpuqosd and simgpud would otherwise wait for clients that never come.
  void spawn_dying_with_parent(const std::string& program, char* const* args, char* const* envp, const char* output,
                               int flags) {
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error("cannot start " + program + ": pipe2: " + std::strerror(errno));
    const pid_t caller = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      const int error = errno;
      ::close(report[0]);
      ::close(report[1]);
      throw std::runtime_error("cannot start " + program + ": fork: " + std::strerror(error));
    }
    if (pid_ == 0) {
      int error = 0;
      // getppid(): the caller may have died before the death signal was armed.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != caller) ::_exit(127);
      const int fd = ::open(output, flags, 0644);
      if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0 || ::dup2(fd, STDERR_FILENO) < 0) {
        error = errno;
      } else {
        if (fd > STDERR_FILENO) ::close(fd);
        ::execve(args[0], args, envp);
        error = errno;
      }
      [[maybe_unused]] const ssize_t written = ::write(report[1], &error, sizeof error);
      ::_exit(127);
    }
    ::close(report[1]);
    int error = 0;
    ssize_t got;
    do {
      got = ::read(report[0], &error, sizeof error);
    } while (got < 0 && errno == EINTR);
    ::close(report[0]);
    if (got > 0) {  // exec failed: nothing ran
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      throw std::runtime_error("cannot start " + program + ": " + std::strerror(error));
    }
  }

  // The current environment with `overrides` replacing or adding entries, as "KEY=value".
  static std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides) {
    std::vector<std::string> entries;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (!overrides.count(entry.substr(0, entry.find('=')))) entries.push_back(entry);
    }
    for (const auto& [key, value] : overrides) entries.push_back(key + "=" + value);
    return entries;
  }

  // Its exit code if it has exited (and is now reaped), nullopt while it runs.
  std::optional<int> try_reap() {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  pid_t pid_ = -1;
  std::filesystem::path output_;
};

}  // namespace gpuqos::testing

// The shim's one connection object: the settings read from the environment and the gate. Created
// on first use, never destroyed (hooks may run in other threads and atexit handlers until the very
// end); the gate is shut down when the library is unloaded or the process exits.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "daemon_gate.h"
#include "pass_through_gate.h"
#include "profiling_gate.h"
#include "shim.h"

namespace gpuqos::intercept {
namespace {

// The working directory the process started in, read before main: the Client is made at the first
// hooked call, and a program may chdir before it (Python often does). A relative GPUQOS_SOCKET is
// taken from here. Empty when it could not be read (then such a socket is a bad value).
char start_directory[4096];

__attribute__((constructor)) void remember_start_directory() {
  if (::getcwd(start_directory, sizeof start_directory) == nullptr) start_directory[0] = '\0';
}

std::string executable_name() {
  if (program_invocation_short_name && *program_invocation_short_name) return program_invocation_short_name;
  std::string comm;
  std::getline(std::ifstream("/proc/self/comm"), comm);
  return comm;
}

// Set in a child forked from this process once the shim was running here and CUDA had been used.
// The child has none of our threads (the completion thread it would join at exit, the monitor),
// mutexes maybe locked by them at the fork, and the parent's segment: its posts would collide with
// the parent's seqs and take the parent's grants. So it runs unmanaged (CUDA itself cannot be used
// in such a child).
std::atomic<bool> forked_child{false};
std::atomic<bool> told_forked{false};
// CUDA was used here (note_cuda_used). A child forked before that (a server that says its requests'
// arrivals, or imports a framework, and then forks its GPU workers) can use CUDA: it leaves the
// parent's connection object alone and makes its own at its first call, and registers itself.
std::atomic<bool> cuda_used{false};

// One line on the program's stderr, which must never be what ends the program. A stderr whose
// reader has gone (`job 2>&1 >/dev/null | head`, a closed log pipe) makes write raise SIGPIPE,
// whose default action kills the process (exit 141) where the job without gpuqos runs on. So
// SIGPIPE is blocked on this thread for the write, and the one a failed write raised (EPIPE) is
// taken back before the mask is restored; one already pending is the program's, and left to it.
// Only async-signal-safe calls; errno is as the caller left it.
void write_stderr(const std::string& line) noexcept {
  const int saved_errno = errno;
  sigset_t sigpipe_only, previous_mask, pending;
  ::sigemptyset(&sigpipe_only);
  ::sigaddset(&sigpipe_only, SIGPIPE);
  const bool blocked = ::pthread_sigmask(SIG_BLOCK, &sigpipe_only, &previous_mask) == 0;
  const bool already_pending = ::sigpending(&pending) == 0 && ::sigismember(&pending, SIGPIPE) == 1;
  bool broken_pipe = false;
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      broken_pipe = n < 0 && errno == EPIPE;
      break;
    }
  }
  if (blocked) {
    if (broken_pipe && !already_pending) {
      const timespec no_wait{};
      while (::sigtimedwait(&sigpipe_only, nullptr, &no_wait) < 0 && errno == EINTR) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &previous_mask, nullptr);
  }
  errno = saved_errno;
}

class Client {
 public:
  Client() {
    ParsedSettings parsed =
        parse_settings([](const char* name) { return std::getenv(name); }, executable_name(), start_directory);
    settings_ = std::move(parsed.settings);
    const auto log = [this](LogLevel level, const std::string& text) {
      if (level != LogLevel::off && level <= settings_.log_level) write(text);
    };
    for (const std::string& problem : parsed.problems) log(LogLevel::error, problem);  // silenced only by off
    for (const std::string& note : parsed.notes) log(LogLevel::warn, note);
    gate_ = std::make_unique<DaemonGate>(settings_, log);
    if (!settings_.profile_path.empty()) profiling_ = std::make_unique<ProfilingGate>(*gate_, settings_, log);
  }

  const Settings& settings() const { return settings_; }
  // What the hooks ask: the daemon gate, wrapped by the profiling gate in profiling mode.
  Gate& gate() { return profiling_ ? static_cast<Gate&>(*profiling_) : *gate_; }
  DaemonGate& daemon_gate() { return *gate_; }
  Profiler* profiler() { return profiling_ ? &profiling_->profiler() : nullptr; }

  void write(std::string_view text) const {
    write_stderr("gpuqos[" + std::to_string(::getpid()) + "] " + settings_.job + ": " + std::string(text) + "\n");
  }

 private:
  Settings settings_;
  std::unique_ptr<DaemonGate> gate_;
  std::unique_ptr<ProfilingGate> profiling_;  // GPUQOS_PROFILE set
};

// The connection object, made once per process (a child forked before CUDA was used makes its own:
// the atfork handler forgets the parent's, which is left as it was, never touched or freed here).
std::atomic<Client*> instance{nullptr};
std::atomic<bool> tried{false};  // made, or failed to be: not tried again
std::mutex create_mutex;

void after_fork_in_child() noexcept {
  Session::close_inherited();
  if (forked_child.load(std::memory_order_relaxed) || cuda_used.load(std::memory_order_relaxed)) {
    forked_child.store(true, std::memory_order_relaxed);
    return;
  }
  // One thread here, and no other can hold the mutex: another thread of the parent may have held it.
  new (&create_mutex) std::mutex();
  instance.store(nullptr, std::memory_order_relaxed);
  tried.store(false, std::memory_order_relaxed);
}

// Another copy of the shim, at another path, came first in the global scope (LD_PRELOAD naming two
// installs, or `gpuqos run` of one install under another's LD_PRELOAD): both registered and posted
// every op, the first's call reaching the second's hook as the driver (an audit). The first copy
// manages the process; this one passes its calls through, and says so once.
bool another_copy_manages() noexcept {
  void* first = real_dlsym()(RTLD_DEFAULT, "gpuqosQueryBegin");
  Dl_info theirs{}, ours{};
  if (first == nullptr || ::dladdr(first, &theirs) == 0 ||
      ::dladdr(reinterpret_cast<void*>(&another_copy_manages), &ours) == 0 || theirs.dli_fbase == ours.dli_fbase) {
    return false;
  }
  try {
    write_stderr("gpuqos[" + std::to_string(::getpid()) + "]: " + (theirs.dli_fname ? theirs.dli_fname : "?") +
                 " manages this process; " + (ours.dli_fname ? ours.dli_fname : "?") +
                 ", loaded as well, passes its calls through\n");
  } catch (...) {
  }
  return true;
}

// The accessor: the only way to the connection object. `create` false: nullptr if none yet.
Client* client(bool create = true) {
  Client* made = instance.load(std::memory_order_acquire);
  if (made || !create || tried.load(std::memory_order_acquire)) return made;
  const NoCancel no_cancel;  // however the registration starts (a hook, a mark, a log line)
  std::lock_guard lock(create_mutex);
  if (!tried.load(std::memory_order_relaxed)) {
    static const bool handler = ::pthread_atfork(nullptr, nullptr, after_fork_in_child) == 0;
    (void)handler;
    try {
      if (!another_copy_manages()) instance.store(new Client(), std::memory_order_release);
    } catch (...) {
      write_stderr("gpuqos: cannot start (out of memory?); running unmanaged\n");
    }
    tried.store(true, std::memory_order_release);
  }
  return instance.load(std::memory_order_acquire);
}

// Where hooks go when the client could not be created: everything passes (fail open).
Gate& fallback_gate() {
  static PassThroughGate pass_through{""};
  return pass_through;
}

// A forked child's pass-through, said once.
Gate& forked_gate() noexcept {
  if (!told_forked.exchange(true, std::memory_order_relaxed)) {
    try {
      if (Client* c = client(false); c && c->settings().log_level >= LogLevel::warn) {
        c->write("forked from a managed process: this process runs unmanaged (its GPU work goes straight to the driver)");
      }
    } catch (...) {
    }
  }
  return fallback_gate();
}

__attribute__((destructor)) void shut_down_gate() {
  if (forked_child.load(std::memory_order_relaxed)) return;  // the parent's to shut down
  if (Client* c = client(false)) c->gate().shutdown();  // shutdown() is noexcept
}

}  // namespace

Gate& gate() noexcept {
  if (forked_child.load(std::memory_order_relaxed)) return forked_gate();
  try {
    if (Client* c = client()) return c->gate();
  } catch (...) {  // std::call_once may throw std::system_error
  }
  return fallback_gate();
}

void stop_completion_tracking() noexcept {
  if (forked_child.load(std::memory_order_relaxed)) return;  // the thread is the parent's
  if (Client* c = client(false)) c->daemon_gate().stop_completion_tracking();
}

Profiler* active_profiler() noexcept {
  if (forked_child.load(std::memory_order_relaxed)) return nullptr;
  Client* c = client(false);
  return c ? c->profiler() : nullptr;
}

void note_cuda_used() noexcept {
  if (!cuda_used.load(std::memory_order_relaxed)) cuda_used.store(true, std::memory_order_relaxed);
}

void log_message(LogLevel level, std::string_view text) noexcept {
  try {
    Client* c = client();
    if (c && level != LogLevel::off && level <= c->settings().log_level) c->write(text);
  } catch (...) {
    // Logging must never be what breaks the program.
  }
}

}  // namespace gpuqos::intercept

// A forked child that does `setup` (becomes another user, listens, holds a lock...), says it is
// ready, and then waits to be killed: a process of another kind beside a test. Killed and reaped
// when destroyed, whatever the test's outcome.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace gpuqos::testing {

class ReadyChild {
 public:
  // `setup` runs in the child (only async-signal-safe work is sure to be sound there); false: the
  // child exits and ready() is false.
  explicit ReadyChild(const std::function<bool()>& setup) {
    int ends[2];
    if (::pipe(ends) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ends[0]);
      const char byte = 1;
      if (!setup() || ::write(ends[1], &byte, 1) != 1) ::_exit(1);
      for (;;) ::pause();
    }
    ::close(ends[1]);
    char byte = 0;
    ready_ = pid_ > 0 && ::read(ends[0], &byte, 1) == 1;
    ::close(ends[0]);
  }
  ~ReadyChild() { stop(); }
  ReadyChild(const ReadyChild&) = delete;
  ReadyChild& operator=(const ReadyChild&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace gpuqos::testing

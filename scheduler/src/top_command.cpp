// `gpuqos top`: status frames every interval. What ends it (SIGINT/SIGTERM on a signalfd and, on a
// terminal, the key q) is one descriptor that the wait between frames and the wait for gpuqosd's
// answer both poll, so it quits at once without a handler or a global flag; a resized window
// (SIGWINCH, on the same signalfd) redraws the last frame at once.
#include "gpuqos/scheduler/top_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/frame_writer.h"
#include "gpuqos/scheduler/status.h"

namespace gpuqos::scheduler {
namespace {

constexpr const char* kClearScreen = "\x1b[H\x1b[2J";  // cursor home, erase the screen

// What ends top: SIGINT or SIGTERM (blocked for the process while it lives, read on a signalfd)
// and, with `keys` (stdin and stdout a terminal, top in its foreground), q or Q, Ctrl-\ (SIGQUIT)
// and the terminal's hangup. With `resizes` (stdout a terminal) SIGWINCH comes on it too, for
// take_resized (its default action is to be ignored, so blocking it loses nothing). While top is in the terminal's foreground with keys, stdin is read a
// key at a time without echo; the terminal's settings are given back at the end and while Ctrl-Z
// has top stopped, as top(1) does, and taken again when it is back in the foreground.
class QuitWatch {
 public:
  QuitWatch(bool keys, bool resizes) : keys_(keys) {
    sigemptyset(&mask_);
    for (const int signal : {SIGINT, SIGTERM}) sigaddset(&mask_, signal);
    if (resizes) sigaddset(&mask_, SIGWINCH);
    if (keys) {
      for (const int signal : {SIGQUIT, SIGHUP, SIGTSTP, SIGCONT}) sigaddset(&mask_, signal);
    }
    if (::sigprocmask(SIG_BLOCK, &mask_, nullptr) != 0) return;
    signals_ = FileDescriptor(::signalfd(-1, &mask_, SFD_CLOEXEC | SFD_NONBLOCK));
    epoll_ = FileDescriptor(::epoll_create1(EPOLL_CLOEXEC));
    if (!signals_.valid() || !epoll_.valid() || !watch(signals_.get(), EPOLL_CTL_ADD)) {
      // Nothing would read them: Ctrl-C must still end top, by its default action.
      ::sigprocmask(SIG_UNBLOCK, &mask_, nullptr);
      epoll_ = FileDescriptor();
      keys_ = false;
      return;
    }
    take();
  }
  ~QuitWatch() { give_back(); }
  QuitWatch(const QuitWatch&) = delete;
  QuitWatch& operator=(const QuitWatch&) = delete;

  int fd() const { return epoll_.valid() ? epoll_.get() : -1; }
  bool reads_keys() const { return keys_; }

  // Whether the window was resized since the last call (what quits() read).
  bool take_resized() { return std::exchange(resized_, false); }

  // Reads what made fd() readable: true when it says to quit.
  bool quits() {
    signalfd_siginfo info{};
    while (::read(signals_.get(), &info, sizeof info) == sizeof info) {
      if (info.ssi_signo == SIGWINCH) {
        resized_ = true;
      } else if (info.ssi_signo == SIGTSTP) {
        stop_for_the_shell();
      } else if (info.ssi_signo == SIGCONT) {
        take();  // `fg` after a stop that was not ours (kill -STOP)
      } else {
        return true;
      }
    }
    if (!applied_) return false;
    pollfd input{STDIN_FILENO, POLLIN, 0};
    if (::poll(&input, 1, 0) <= 0) return false;
    if ((input.revents & POLLIN) == 0) return true;  // hung up, or an error: nobody can press q
    std::array<char, 64> keys{};
    const ssize_t got = ::read(STDIN_FILENO, keys.data(), keys.size());
    if (got <= 0) return !(got < 0 && (errno == EINTR || errno == EAGAIN));
    return std::any_of(keys.begin(), keys.begin() + got, [](char key) { return key == 'q' || key == 'Q'; });
  }

 private:
  bool watch(int fd, int operation) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    return ::epoll_ctl(epoll_.get(), operation, fd, &event) == 0;
  }
  // Ctrl-Z: the terminal given back, then the stop the shell expects (a real SIGTSTP, which the
  // kernel discards when top's process group is orphaned, as under `ssh -t host gpuqos top`, where
  // nothing could continue it), then the terminal taken again if top is back in the foreground.
  void stop_for_the_shell() {
    give_back();
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTSTP);
    ::sigprocmask(SIG_UNBLOCK, &stop, nullptr);
    ::raise(SIGTSTP);  // delivered before raise returns; top runs on here once continued
    ::sigprocmask(SIG_BLOCK, &stop, nullptr);
    take();
  }
  // Keys a key at a time, not echoed (Ctrl-C and the other signal keys still work), from the
  // terminal's settings as they are now; only in its foreground, where changing them and reading
  // keys stop no one (a background `tcsetattr` or `read` is stopped by SIGTTOU or SIGTTIN).
  void take() {
    if (!keys_ || applied_ || ::tcgetpgrp(STDIN_FILENO) != ::getpgrp()) return;
    termios settings{};
    if (::tcgetattr(STDIN_FILENO, &settings) != 0) return;
    termios unbuffered = settings;
    unbuffered.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    unbuffered.c_cc[VMIN] = 1;
    unbuffered.c_cc[VTIME] = 0;
    if (!watch(STDIN_FILENO, EPOLL_CTL_ADD)) return;
    if (::tcsetattr(STDIN_FILENO, TCSANOW, &unbuffered) != 0) {
      watch(STDIN_FILENO, EPOLL_CTL_DEL);
      return;
    }
    saved_ = settings;
    applied_ = true;
  }
  // Only what take() changed goes back: the user may have changed others meanwhile (stty from
  // another terminal), and those stay as they are now.
  void give_back() {
    if (!applied_) return;
    termios now{};
    if (::tcgetattr(STDIN_FILENO, &now) == 0) {
      constexpr auto kTaken = static_cast<tcflag_t>(ICANON | ECHO);
      now.c_lflag = (now.c_lflag & ~kTaken) | (saved_.c_lflag & kTaken);
      now.c_cc[VMIN] = saved_.c_cc[VMIN];
      now.c_cc[VTIME] = saved_.c_cc[VTIME];
    } else {
      now = saved_;
    }
    ::tcsetattr(STDIN_FILENO, TCSANOW, &now);
    watch(STDIN_FILENO, EPOLL_CTL_DEL);
    applied_ = false;
  }

  bool keys_;
  sigset_t mask_{};
  FileDescriptor signals_;
  FileDescriptor epoll_;
  bool applied_ = false;  // the terminal is read a key at a time, stdin watched
  termios saved_{};       // its settings before, while applied_
  bool resized_ = false;  // SIGWINCH read, not yet taken
};

enum class Waited { elapsed, quit, resized };

// Waits until until_ns (monotonic), or less when something that quits, or a resized window, comes first.
Waited wait_until(QuitWatch& watch, std::int64_t until_ns) {
  if (watch.take_resized()) return Waited::resized;  // while a frame was written
  for (std::int64_t left_ns = until_ns - ipc::monotonic_ns(); left_ns > 0; left_ns = until_ns - ipc::monotonic_ns()) {
    pollfd watched{watch.fd(), POLLIN, 0};
    const int ready = ::poll(&watched, watch.fd() >= 0 ? 1 : 0, static_cast<int>((left_ns + 999'999) / 1'000'000));
    if (ready <= 0 || (watched.revents & POLLIN) == 0) continue;
    if (watch.quits()) return Waited::quit;
    if (watch.take_resized()) return Waited::resized;
  }
  return Waited::elapsed;
}

std::int64_t interval_ns(double interval_s) {
  return static_cast<std::int64_t>(std::clamp(std::ceil(interval_s * 1000), 1.0, 86'400'000.0)) * 1'000'000;
}

// stdout's window: {columns, rows}, {0, 0} when it has none.
std::pair<int, int> window_size() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0) return {0, 0};
  return {size.ws_col, size.ws_row};
}

}  // namespace

std::string fit_to_terminal(std::string_view frame, int columns, int rows) {
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at < frame.size();) {
    const std::size_t end = std::min(frame.find('\n', at), frame.size());
    lines.push_back(frame.substr(at, end - at));
    at = end + 1;
  }
  std::string out;
  const auto add = [&](std::string_view line) {
    std::size_t cut = line.size();
    if (columns > 0) {  // by characters: a UTF-8 continuation byte starts none
      int shown = 0;
      for (std::size_t i = 0; i < line.size(); ++i) {
        if ((static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) continue;
        if (shown++ == columns) {
          cut = i;
          break;
        }
      }
    }
    out.append(line.substr(0, cut)).push_back('\n');
  };
  const std::size_t fits = rows > 0 ? static_cast<std::size_t>(rows) : lines.size();
  if (lines.size() <= fits) {
    for (const std::string_view line : lines) add(line);
  } else {
    const std::size_t shown = fits - 1;  // the last row says what is cut
    for (std::size_t i = 0; i < shown; ++i) add(lines[i]);
    add("(" + std::to_string(lines.size() - shown) + " more lines: a taller window shows them)");
  }
  // A newline after the window's last row scrolls it: the title went off the top (a review).
  if (rows > 0 && !out.empty()) out.pop_back();
  return out;
}

std::string render_top_frame(const nlohmann::json& status, const TopOptions& options) {
  char title[160];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &local);
  if (options.once) {
    std::snprintf(title, sizeof title, "gpuqos top at %s\n", clock);
  } else {
    std::snprintf(title, sizeof title, "gpuqos top at %s, every %g s (%s quits)\n", clock, options.interval_s,
                  options.keys ? "q or Ctrl-C" : "Ctrl-C");
  }
  return title + render_status_table(status);
}

std::string render_top_stall(const std::string& error, std::int64_t since_answer_ns, const TopOptions& options) {
  char line[160];
  std::snprintf(line, sizeof line, "gpuqos top: %s for %.0f s; asking again every %g s (%s quits)\n",
                status_error_is_stall(error) ? "no answer from gpuqosd" : "gpuqosd not reachable",
                static_cast<double>(since_answer_ns) / 1e9, options.interval_s, options.keys ? "q or Ctrl-C" : "Ctrl-C");
  return line + status_error_text(error, options.socket) + "\n";
}

int run_top(const TopOptions& given, int out_fd, std::ostream& err, bool clear_screen) {
  std::optional<QuitWatch> watch;
  TopOptions options = given;
  if (!options.once) {
    // Keys only in the terminal's foreground: `gpuqos top &` changing the terminal's settings would
    // be stopped for it (SIGTTOU), and the shell reads those keys.
    watch.emplace(clear_screen && ::isatty(STDIN_FILENO) == 1 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp(), clear_screen);
    options.keys = watch->reads_keys();
  }
  FrameWriter out(out_fd);
  std::string frame;  // the latest, before fit_to_terminal: what a resized window redraws
  // Draws `frame`, fitted to the window's size now on a terminal: all of it, or quit (while the
  // output takes nothing, as a quit signal or key comes), or failed (said).
  const auto draw = [&](bool first) {
    if (watch) watch->take_resized();  // this draw is at the new size
    std::string shown = frame;
    if (clear_screen) {
      const auto [columns, rows] = window_size();
      shown = kClearScreen + fit_to_terminal(frame, columns, rows);
    } else if (!first) {
      shown.insert(0, "\n");
    }
    const auto wrote = watch ? out.write(shown, watch->fd(), [&] { return watch->quits(); }) : out.write(shown);
    if (wrote == FrameWriter::Wrote::failed) {  // a closed pipe with SIGPIPE ignored, a full disk: nobody sees it
      err << "gpuqos top: cannot write its output (a closed pipe, or a full disk?)\n";
    }
    return wrote;
  };
  // On a terminal the last row has no newline (fit_to_terminal): one at the end puts the shell's
  // prompt below the frame, not after its last line.
  const auto done = [&](int code) {
    if (clear_screen && !frame.empty()) out.write_now("\n");
    return code;
  };
  const auto not_drawn = [&](FrameWriter::Wrote wrote) { return wrote == FrameWriter::Wrote::quit ? done(0) : 1; };
  std::int64_t last_answer_ns = 0;
  for (bool first = true;; first = false) {
    bool quit = false;  // Ctrl-C while a stopped gpuqosd keeps the answer: quit now, not in 5 s
    auto text = watch ? request_status(options.socket, watch->fd(), [&] { return quit = watch->quits(); })
                      : request_status(options.socket);
    if (quit) return done(0);
    // Before a first answer an error ends top: no gpuqosd there, or the wrong socket. After one,
    // any error is waited out, said in the frame, until q or Ctrl-C: a stopped or stalled gpuqosd
    // runs again where it left off, and a restarted one answers again once its socket is back (a
    // review: a restart's 2-s gap ended every open top).
    if (!text && first) {
      err << "gpuqos top: " << status_error_text(text.error(), options.socket) << "\n";
      return done(1);
    }
    const std::int64_t now_ns = ipc::monotonic_ns();
    if (text) {
      last_answer_ns = now_ns;
    }
    try {
      frame = text ? render_top_frame(nlohmann::json::parse(text.value()), options)
                   : render_top_stall(text.error(), now_ns - last_answer_ns, options);
    } catch (const nlohmann::json::exception& e) {
      err << "gpuqos top: unexpected answer from gpuqosd: " << e.what() << "\n";
      return done(1);
    }
    if (const auto wrote = draw(first); wrote != FrameWriter::Wrote::all) return not_drawn(wrote);
    if (options.once) return done(0);
    const std::int64_t until_ns = ipc::monotonic_ns() + interval_ns(options.interval_s);
    for (Waited waited; (waited = wait_until(*watch, until_ns)) != Waited::elapsed;) {
      if (waited == Waited::quit) return done(0);
      // Resized: the same frame at the new size, at once.
      if (const auto wrote = draw(false); wrote != FrameWriter::Wrote::all) return not_drawn(wrote);
    }
  }
}

}  // namespace gpuqos::scheduler

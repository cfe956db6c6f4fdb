// `gpuqos top`: status frames every interval; SIGINT/SIGTERM arrive on a signalfd that the wait
// between frames and the wait for gpuqosd's answer poll, so Ctrl-C ends the loop at once without a
// handler or a global flag.
#include "gpuqos/scheduler/top_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/scheduler/status.h"

namespace gpuqos::scheduler {
namespace {

constexpr const char* kClearScreen = "\x1b[H\x1b[2J";  // cursor home, erase the screen

// A signalfd for SIGINT and SIGTERM (blocked for the process while it lives); invalid if none.
FileDescriptor quit_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  if (::sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) return FileDescriptor();
  return FileDescriptor(::signalfd(-1, &mask, SFD_CLOEXEC));
}

// Waits interval_s; false when a quit signal came first.
bool wait_interval(const FileDescriptor& signals, double interval_s) {
  const auto timeout_ms = static_cast<int>(std::clamp(std::ceil(interval_s * 1000), 1.0, 86'400'000.0));
  pollfd watched{signals.get(), POLLIN, 0};
  const int ready = ::poll(&watched, signals.valid() ? 1 : 0, timeout_ms);
  return !(ready > 0 && (watched.revents & POLLIN));
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
    return out;
  }
  const std::size_t shown = fits - 1;  // the last row says what is cut
  for (std::size_t i = 0; i < shown; ++i) add(lines[i]);
  add("(" + std::to_string(lines.size() - shown) + " more lines: a taller window shows them)");
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
    std::snprintf(title, sizeof title, "gpuqos top at %s, every %g s (Ctrl-C quits)\n", clock, options.interval_s);
  }
  return title + render_status_table(status);
}

int run_top(const TopOptions& options, std::ostream& out, std::ostream& err, bool clear_screen) {
  const FileDescriptor signals = options.once ? FileDescriptor() : quit_signals();
  for (bool first = true;; first = false) {
    bool quit = false;  // Ctrl-C while a stopped gpuqosd keeps the answer: quit now, not in 5 s
    auto text = request_status(options.socket, signals.get(), &quit);
    if (quit) return 0;
    if (!text) {
      err << "gpuqos top: " << (first ? "" : "gpuqosd went away: ") << status_error_text(text.error(), options.socket)
          << "\n";
      return 1;
    }
    std::string frame;
    try {
      frame = render_top_frame(nlohmann::json::parse(text.value()), options);
    } catch (const nlohmann::json::exception& e) {
      err << "gpuqos top: unexpected answer from gpuqosd: " << e.what() << "\n";
      return 1;
    }
    if (clear_screen) {  // the window's size at each frame: it may have been resized
      const auto [columns, rows] = window_size();
      frame = fit_to_terminal(frame, columns, rows);
    }
    out << (clear_screen ? kClearScreen : (first ? "" : "\n")) << frame << std::flush;
    if (!out) {  // a closed pipe with SIGPIPE ignored, a full disk: nobody sees the frames
      err << "gpuqos top: cannot write its output (a closed pipe, or a full disk?)\n";
      return 1;
    }
    if (options.once || !wait_interval(signals, options.interval_s)) return 0;
  }
}

}  // namespace gpuqos::scheduler

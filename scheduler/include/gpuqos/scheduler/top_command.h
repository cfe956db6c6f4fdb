// `gpuqos top`: the status view (status.h's table: jobs against their targets, best-effort
// progress, clients) refreshed live until Ctrl-C, or printed once.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gpuqos/scheduler/unix_socket.h"

namespace gpuqos::scheduler {

struct TopOptions {
  std::string socket = kDefaultSocketPath;
  double interval_s = 1.0;  // between refreshes, > 0
  bool once = false;        // one frame, then exit (scripts, tests)
  bool keys = false;        // the title offers q (run_top sets it when it reads the terminal's keys)
};

// Asks the daemon every interval and writes a frame to `out_fd` (FrameWriter: a quit ends top also
// while the output takes nothing), preceded by the ANSI clear-screen
// codes and fitted to stdout's window (fit_to_terminal) when clear_screen (a terminal), and drawn
// again at once when the window is resized (SIGWINCH). Ends on
// SIGINT or SIGTERM (exit code 0), on q, Ctrl-\ or a hangup when stdin is a terminal as well (read a
// key at a time meanwhile, its settings given back at the end and while Ctrl-Z stops top), or after
// one frame with once; when the daemon cannot be reached at first, says so on `err` and returns 1.
// Once it has answered, a daemon that does not answer (stopped, stalled, or gone: restarting) is
// asked again each interval, each frame saying for how long and why (render_top_stall).
int run_top(const TopOptions& options, int out_fd, std::ostream& err, bool clear_screen);

// One frame: a title line, then render_status_table(status).
std::string render_top_frame(const nlohmann::json& status, const TopOptions& options);

// The frame while gpuqosd does not answer: whether it is there but silent (status_error_is_stall) or
// not reachable, for how long (since_answer_ns), and request_status's error.
std::string render_top_stall(const std::string& error, std::int64_t since_answer_ns, const TopOptions& options);

// `frame` cut to a terminal of `columns` x `rows` (0: no limit), as run_top draws it on one: each
// line cut at the width (a wrapped line pushes the frame's top off the screen), past the height the
// last row says how many lines are not shown, and with `rows` the last line has no newline (one
// after the window's last row scrolls the title line off the screen).
std::string fit_to_terminal(std::string_view frame, int columns, int rows);

}  // namespace gpuqos::scheduler

// The best-effort backlog bound, moved by the measured tail latency of high-priority jobs.
//
// The rule: each job with a target keeps its last kWindow query latencies. After every kEvery
// queries of a job, its tail (the latency at its percentile over the window) is compared with its
// target: above kTighten x target, the bound drops one step; below kLoosen x target, it rises one
// step, but only when every other job's latest verdict also says rise, or is stale: older than
// kStaleGaps of that job's own intervals between checks (at least kStaleChecks checks of any job:
// a job that stopped querying without leaving must not hold the bound down for good, and one that
// queries seldom must not lose its say to busier ones); in between it stays. So with several jobs
// the bound serves the one nearest its target: a job meeting its target easily and querying ten
// times as often out-voted one 2.3x over it, and held the bound at its maximum. After a step the
// window that made it starts again, and its next verdict is of a whole window taken under the new
// bound: one query over the target moves the bound one step, not one per check whose window still
// holds it.
// Always within [min, max]. With adaptation off the bound is fixed.
//
// Why it converges: if a job's tail grows with the bound (more best-effort work queued ahead of a
// query delays it more), steps move the bound towards the band where the tail lies between
// kLoosen and kTighten of the target, and the band has no step out of it; if the tail does not
// depend on the bound (the target is met or missed whatever it is), the bound walks to the end
// that serves best-effort work (max) or the query (min). tests/scheduler/adaptive_bound_test.cpp
// shows both with a latency model.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "gpuqos/scheduler/policy.h"

namespace gpuqos::scheduler {

class AdaptiveBound {
 public:
  static constexpr std::size_t kWindow = 64;
  static constexpr std::size_t kEvery = 16;
  static constexpr double kTighten = 0.9;
  static constexpr double kLoosen = 0.6;
  static constexpr std::uint64_t kStaleChecks = 64;
  static constexpr std::uint64_t kStaleGaps = 4;

  explicit AdaptiveBound(const BaymaxOptions& options) { configure(options); }
  // New parameters: the bound restarts from options.be_backlog_bound_ns (clamped); history stays.
  // The same bound, range, step and switch as before (a reload or a new device that changed other
  // settings) keep the adapted bound.
  void configure(const BaymaxOptions& options);

  std::int64_t bound_ns() const { return bound_ns_; }
  // One closed query of `client`'s job. True when the bound moved.
  bool observe(ClientId client, std::int64_t latency_ns, std::int64_t target_ns, double percentile);
  void forget(ClientId client) { windows_.erase(client); }
  std::uint64_t steps() const { return steps_; }

 private:
  enum class Verdict { none, tighten, hold, loosen };
  struct Window {
    std::vector<std::int64_t> latencies;  // ring of the last kWindow
    std::size_t next = 0;
    std::size_t since_check = 0;
    std::size_t judge_from = 1;  // the fewest latencies it judges by (kWindow since the bound moved)
    Verdict verdict = Verdict::none;  // at its latest check,
    std::uint64_t checked_at = 0;     // the checks_ count then,
    std::uint64_t gap = 0;            // and since the check before (0: none yet)
  };
  std::uint64_t checks_ = 0;  // of all jobs
  bool enabled_ = false;
  std::int64_t configured_ns_ = -1;  // options.be_backlog_bound_ns as last configured (-1: never)
  std::int64_t bound_ns_ = 0, min_ns_ = 0, max_ns_ = 0, step_ns_ = 0;
  std::uint64_t steps_ = 0;
  std::map<ClientId, Window> windows_;
};

}  // namespace gpuqos::scheduler

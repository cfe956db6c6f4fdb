// The adaptation rule of the best-effort backlog bound (see adaptive_bound.h).
#include "gpuqos/scheduler/adaptive_bound.h"

#include <algorithm>
#include <cmath>

namespace gpuqos::scheduler {

void AdaptiveBound::configure(const BaymaxOptions& options) {
  const std::int64_t min_ns = std::max<std::int64_t>(1, options.min_backlog_bound_ns);
  const std::int64_t max_ns = std::max(min_ns, options.max_backlog_bound_ns);
  const std::int64_t step_ns = std::max<std::int64_t>(1, options.adapt_step_ns);
  if (options.adaptation == enabled_ && options.be_backlog_bound_ns == configured_ns_ && min_ns == min_ns_ &&
      max_ns == max_ns_ && step_ns == step_ns_) {
    return;  // nothing of the bound's changed: it keeps what it learned
  }
  enabled_ = options.adaptation;
  configured_ns_ = options.be_backlog_bound_ns;
  min_ns_ = min_ns;
  max_ns_ = max_ns;
  step_ns_ = step_ns;
  bound_ns_ = enabled_ ? std::clamp(options.be_backlog_bound_ns, min_ns_, max_ns_) : options.be_backlog_bound_ns;
}

bool AdaptiveBound::observe(ClientId client, std::int64_t latency_ns, std::int64_t target_ns, double percentile) {
  if (!enabled_ || target_ns <= 0) return false;
  Window& window = windows_[client];
  if (window.latencies.size() < kWindow) {
    window.latencies.push_back(latency_ns);
  } else {
    window.latencies[window.next] = latency_ns;
  }
  window.next = (window.next + 1) % kWindow;
  // After a move, the window judges the new bound only once it holds a whole window taken under it.
  if (++window.since_check < kEvery || window.latencies.size() < window.judge_from) return false;
  window.since_check = 0;
  std::vector<std::int64_t> sorted = window.latencies;
  const auto rank = static_cast<std::size_t>(
      std::ceil(std::clamp(percentile, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size())));
  const std::size_t index = std::clamp<std::size_t>(rank, 1, sorted.size()) - 1;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(index), sorted.end());
  const double tail = static_cast<double>(sorted[index]);
  const double target = static_cast<double>(target_ns);
  window.verdict = tail > kTighten * target ? Verdict::tighten : tail < kLoosen * target ? Verdict::loosen : Verdict::hold;
  ++checks_;
  if (window.checked_at > 0) window.gap = checks_ - window.checked_at;
  window.checked_at = checks_;
  const bool others_loosen = std::all_of(windows_.begin(), windows_.end(), [&](const auto& entry) {
    const Window& other = entry.second;
    return entry.first == client || other.verdict == Verdict::none || other.verdict == Verdict::loosen ||
           checks_ - other.checked_at > std::max(kStaleChecks, kStaleGaps * other.gap);
  });
  std::int64_t next = bound_ns_;
  if (window.verdict == Verdict::tighten) {
    next = std::max(min_ns_, bound_ns_ - step_ns_);
  } else if (window.verdict == Verdict::loosen && others_loosen) {
    next = std::min(max_ns_, bound_ns_ + step_ns_);
  }
  if (next == bound_ns_) return false;
  bound_ns_ = next;
  ++steps_;
  // The latencies that moved it were taken under the old bound: one slow query stayed in its
  // window for kWindow / kEvery checks and stepped the bound down at each of them (a review: four
  // steps for one query over the target, never taken back while the tail stayed in the band). So
  // the window that moved it starts again, and judges the new bound by a whole window of its own
  // queries. Only that one: clearing the others' too let a busy job meeting its target raise the
  // bound over one three times over its own, whose window never filled again between its steps.
  window.latencies.clear();
  window.next = 0;
  window.since_check = 0;
  window.judge_from = kWindow;
  return true;
}

}  // namespace gpuqos::scheduler

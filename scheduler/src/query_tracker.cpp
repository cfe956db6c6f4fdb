// Query boundaries (inferred or marked) and the per-job remaining-time profile.
#include "gpuqos/scheduler/query_tracker.h"

#include <algorithm>
#include <utility>

#include "gpuqos/scheduler/engine_backlog.h"

namespace gpuqos::scheduler {
namespace {

// Falls halfway to a shorter sample, rises a sixteenth of the way to a longer one.
void learn(std::int64_t& estimate, std::int64_t sample) {
  if (estimate == 0) {
    estimate = sample;
  } else if (sample < estimate) {
    estimate -= (estimate - sample) / 2;
  } else {
    estimate += (sample - estimate) / 16;
  }
}

// Counts are learned the other way round: a query that waited more often than expected raises the
// estimate at once (each wait may cost a time slice), a query that waited less lowers it slowly.
void learn_count(double& estimate, double sample) {
  estimate = sample >= estimate ? sample : estimate - (estimate - sample) / 16;
}

// Where the program waits for the device: a synchronisation, or a copy to or from pageable memory
// (the driver stages those through a bounce buffer, synchronously with the host).
bool blocks_host(const ipc::OpDescriptor& op) {
  if (op.kind == ipc::OpKind::sync || op.kind == ipc::OpKind::query_end) return true;
  return op.kind == ipc::OpKind::copy && op.host_memory == ipc::HostMemory::pageable;
}

}  // namespace

void QueryTracker::open(State& state, std::int64_t at_ns, std::int64_t arrived_ns, bool from_arrival) {
  state.open = true;
  state.query = OpenQuery{std::min(arrived_ns, at_ns), at_ns, 0, at_ns, state.explicit_marks, 0, from_arrival};
  state.query.number = ++state.opened_queries;
  state.open_synced = false;
  state.op_times.clear();
  state.block_times.clear();
}

void QueryTracker::note_blocking(State& state, const ipc::OpDescriptor& op, std::int64_t now_ns) {
  if (state.open && blocks_host(op) && state.block_times.size() < kProfileOps) state.block_times.push_back(now_ns);
}

ClosedQuery QueryTracker::close(ClientId client, State& state, std::int64_t at_ns) {
  const std::int64_t closed_ns = std::max(at_ns, state.query.opened_ns);
  // The next blocking point at or after t (the close, if none was seen).
  const auto next_block = [&](std::int64_t t) {
    auto it = std::lower_bound(state.block_times.begin(), state.block_times.end(), t);
    return it == state.block_times.end() ? closed_ns : std::min(*it, closed_ns);
  };
  // The blocking points at or after t; at least one, the end (its mark is one of them when seen).
  const auto blocks_from = [&](std::int64_t t) {
    const auto first = std::lower_bound(state.block_times.begin(), state.block_times.end(), t);
    return std::max(1.0, static_cast<double>(state.block_times.end() - first));
  };
  for (std::size_t k = 0; k < state.op_times.size(); ++k) {
    if (state.remaining.size() <= k) state.remaining.resize(k + 1, 0);
    if (state.unblocked.size() <= k) state.unblocked.resize(k + 1, 0);
    if (state.blocks.size() <= k) state.blocks.resize(k + 1, 0);
    learn(state.remaining[k], std::max<std::int64_t>(1, closed_ns - state.op_times[k]));
    learn(state.unblocked[k], std::max<std::int64_t>(1, next_block(state.op_times[k]) - state.op_times[k]));
    learn_count(state.blocks[k], blocks_from(state.op_times[k]));
  }
  // The profile is of the work, from its start: time waiting in the job's queue is not the query's to repeat.
  const std::int64_t started_ns = std::min(state.query.started_ns, closed_ns);
  learn(state.whole, std::max<std::int64_t>(1, closed_ns - started_ns));
  state.recent_own.push(static_cast<float>(std::max<std::int64_t>(1, closed_ns - started_ns - state.query.waited_ahead_ns)));
  learn(state.whole_unblocked, std::max<std::int64_t>(1, next_block(started_ns) - started_ns));
  learn_count(state.whole_blocks, blocks_from(started_ns));
  ++state.closed_queries;
  ClosedQuery closed{client, state.query.opened_ns, closed_ns, state.query.ops, state.query.marked,
                     state.query.from_arrival};
  state.open = false;
  state.query = {};
  state.op_times.clear();
  state.block_times.clear();
  return closed;
}

void QueryTracker::maybe_close(ClientId client, State& state, std::int64_t at_ns, std::vector<ClosedQuery>& closed) {
  while (state.open && !state.explicit_marks && state.query.closing_seq != 0) {
    const std::uint64_t mark = state.query.closing_seq;
    if (!state.outstanding.empty() && state.outstanding.begin()->first < mark) return;
    closed.push_back(close(client, state, at_ns));
    if (state.later.empty()) return;
    // Work posted after the mark is the next query, open since its first op (done or not), closed
    // by the first sync after it: perhaps drained already, hence the loop.
    State::Later next = std::move(state.later.front());
    state.later.pop_front();
    state.later_times -= next.op_times.size() + next.block_times.size();
    open(state, next.first_op_ns);
    state.query.ops = next.ops;
    state.query.last_op_ns = next.last_op_ns;
    state.query.closing_seq = next.sync_seq;
    state.open_synced = next.synced;  // past kMaxLater its sync_seq was cleared: still waited for
    // Its own times, kept as its ops came (some may be done already: rebuilt from the ops still
    // outstanding, op k had another op's time, and none at all when every op was done).
    state.op_times = std::move(next.op_times);
    state.block_times = std::move(next.block_times);
  }
}

void QueryTracker::switch_to_marks(State& state) {
  if (state.explicit_marks) return;
  // Whatever was inferred so far is not a query of the job's own.
  state.explicit_marks = true;
  state.open = false;
  state.later.clear();
  state.later_times = 0;
}

void QueryTracker::keep_later_time(State& state, std::vector<std::int64_t>& times, std::int64_t at_ns) {
  if (state.later_times >= kProfileOps) return;  // a queue that deep: the rest are not profiled
  times.push_back(at_ns);
  ++state.later_times;
}

std::vector<ClosedQuery> QueryTracker::posted(ClientId client, const ipc::OpDescriptor& op, std::int64_t now_ns) {
  std::vector<ClosedQuery> closed;
  State& state = clients_[client];
  // When the program made the call (the shim's stamp), not when the daemon read it: a daemon that
  // reads late would otherwise see a query shorter than it was, or closed before it opened. A stamp
  // in the future, or older than kMaxStampLagNs when read and than the client's previous op, is not
  // of this clock (or not a stamp): the read time stands for it. One within the lag of the previous
  // op was read late, however late (a stalled loop: timed by the read, the marks left in a ring
  // measured the stall, and a 2-ms query came out 3 s long). Never before the client's previous op
  // (threads may post a little out of order: an arrival stamped just before a worker's op, read
  // after it), so the profile's times stay in order.
  const bool stamped = op.posted_ns > 0 && op.posted_ns <= now_ns &&
                       (now_ns - op.posted_ns <= kMaxStampLagNs ||
                        (state.last_posted_ns > 0 && op.posted_ns >= state.last_posted_ns - kMaxStampLagNs));
  const std::int64_t at_ns = std::clamp(stamped ? op.posted_ns : now_ns, std::min(state.last_posted_ns, now_ns), now_ns);
  state.last_posted_ns = at_ns;
  switch (op.kind) {
    case ipc::OpKind::query_arrived: {
      switch_to_marks(state);
      state.says_arrivals = true;
      // Its own stamp, not held after the job's other ops: another thread (a server's receiving
      // one) says arrivals, and an op stamped after this one may have been read first. Never before
      // the arrival said before it, so the gaps stay in order.
      const std::int64_t arrived_ns =
          std::clamp(stamped ? op.posted_ns : now_ns,
                     state.recent_arrivals.empty() ? std::int64_t{0} : std::min(state.recent_arrivals.back(), now_ns), now_ns);
      if (state.whole > 0) {
        // This request waits for the one before it, less the time between them (Lindley). A wait
        // is kept only after an arrival was, so the previous arrival is the latest one said.
        const std::int64_t before =
            state.queue_waits.empty()
                ? 0
                : state.queue_waits.back() + state.whole - (arrived_ns - state.recent_arrivals.back());
        if (state.queue_waits.size() >= kQueueWaitWindow) state.queue_waits.pop_front();
        state.queue_waits.push_back(std::max<std::int64_t>(0, before));
        ++state.queue_waits_kept;
      }
      if (state.recent_arrivals.size() >= kRateWindow) state.recent_arrivals.pop_front();
      state.recent_arrivals.push_back(arrived_ns);
      // A request begun already (its arrival reached us after its begin): not waiting.
      if (op.posted_ns <= state.last_begun_arrival_ns) return closed;
      if (state.arrivals.size() >= kMaxArrivals) state.arrivals.pop_front();  // as the shim forgets it
      state.arrivals.push_back(std::min(op.posted_ns, now_ns));  // the shim's stamp, never in the future
      return closed;
    }
    case ipc::OpKind::query_begin: {
      switch_to_marks(state);
      // The request it begins (the shim pairs them) and any that arrived before it: not waiting now.
      // A mark lost on the way costs one query its arrival, never the pairing of the next ones.
      const std::int64_t arrived_ns = op.arrived_ns > 0 ? std::min(op.arrived_ns, now_ns) : 0;
      if (arrived_ns > 0) {
        std::erase_if(state.arrivals, [arrived_ns](std::int64_t t) { return t <= arrived_ns; });
        state.last_begun_arrival_ns = std::max(state.last_begun_arrival_ns, op.arrived_ns);
      }
      if (!state.open) open(state, at_ns, arrived_ns > 0 ? arrived_ns : at_ns, arrived_ns > 0);
      return closed;
    }
    case ipc::OpKind::query_end:
      note_blocking(state, op, at_ns);
      if (state.explicit_marks && state.open) closed.push_back(close(client, state, at_ns));
      return closed;
    case ipc::OpKind::sync:
      if (state.open && (state.explicit_marks || state.query.closing_seq == 0)) note_blocking(state, op, at_ns);
      // The first sync closes the query once the work posted before it is done; a later one does
      // not move that mark (a review: a server syncing two streams by turns, requests in flight on
      // both, always had work below a mark that moved on, so its queries merged or never closed).
      if (state.open && !state.explicit_marks) {
        if (state.query.closing_seq == 0) {
          state.query.closing_seq = op.seq;
        } else if (!state.later.empty() && state.later.back().sync_seq == 0) {
          state.later.back().sync_seq = op.seq;  // a later query's (a sync with no op since the last: none)
          state.later.back().synced = true;
          keep_later_time(state, state.later.back().block_times, at_ns);  // its closing sync, as note_blocking
        }
        maybe_close(client, state, at_ns, closed);
      }
      return closed;
    default: break;
  }
  if (!engine_of(op)) return closed;
  state.outstanding.emplace(op.seq, State::Posted{at_ns, blocks_host(op)});
  if (state.outstanding.size() > kMaxOutstandingOps) {
    state.outstanding.erase(state.outstanding.begin());
    state.lost_by_cap = true;  // as a lost completion: an inferred query is abandoned at expire()
  }
  if (state.explicit_marks) {
    if (!state.open) return closed;  // work outside any marked query
  } else if (!state.open) {
    open(state, at_ns);
  } else if (state.query.closing_seq != 0) {
    // After the closing mark: a later query's, opened when this one closes. Past kMaxLater of them
    // the newest takes in what follows (queries merge, rather than memory grow).
    if (state.later.empty() || state.later.back().sync_seq != 0) {
      if (state.later.size() < kMaxLater) {
        state.later.push_back(State::Later{at_ns, at_ns});
      } else {
        state.later.back().sync_seq = 0;  // it stays a query waited for (synced), though open again
      }
    }
    State::Later& later = state.later.back();
    ++later.ops;
    later.last_op_ns = at_ns;
    if (later.op_times.size() + 1 == later.ops) keep_later_time(state, later.op_times, at_ns);  // as above
    if (blocks_host(op)) keep_later_time(state, later.block_times, at_ns);
    return closed;
  }
  ++state.query.ops;
  state.query.last_op_ns = at_ns;
  // Times are of the query's first ops, op k's at k: once one is missing (a later query reopened
  // past what `later` keeps), none after it is kept (op k's time at a smaller index was learned as
  // another op's).
  if (state.op_times.size() + 1 == state.query.ops && state.op_times.size() < kProfileOps) {
    state.op_times.push_back(at_ns);
  }
  note_blocking(state, op, at_ns);
  return closed;
}

std::vector<ClosedQuery> QueryTracker::completed(ClientId client, const ipc::CompletionDescriptor& completion,
                                                 std::int64_t now_ns) {
  std::vector<ClosedQuery> closed;
  auto it = clients_.find(client);
  if (it == clients_.end()) return closed;
  State& state = it->second;
  if (state.outstanding.erase(completion.seq) == 0) return closed;
  // The shim's end time is when its poll saw the work done; never later than now.
  const std::int64_t end_ns = completion.end_ns > 0 ? std::min(completion.end_ns, now_ns) : now_ns;
  maybe_close(client, state, end_ns, closed);
  return closed;
}

std::uint64_t QueryTracker::unfinished_queries(const State& state) {
  if (!state.open) return 0;
  if (state.query.marked) return 1;
  // Inferred: a query is work the program waited for. Work it posted and never synchronised (the
  // async tail of a program that exits, or that went quiet) was no request (a review: a clean exit
  // counted one abandoned query).
  const auto synced = std::count_if(state.later.begin(), state.later.end(),
                                    [](const State::Later& later) { return later.synced; });
  return (state.query.closing_seq != 0 || state.open_synced ? 1 : 0) + static_cast<std::uint64_t>(synced);
}

std::uint64_t QueryTracker::client_gone(ClientId client) {
  const auto it = clients_.find(client);
  if (it == clients_.end()) return 0;
  const std::uint64_t unfinished = unfinished_queries(it->second);
  clients_.erase(it);
  return unfinished;
}

std::vector<AbandonedQueries> QueryTracker::expire(std::int64_t now_ns, std::int64_t max_age_ns) {
  std::vector<AbandonedQueries> expired;
  for (auto& [client, state] : clients_) {
    // A request that never began (the job dropped it, or the begin mark was lost in a full ring).
    std::erase_if(state.arrivals, [&](std::int64_t t) { return now_ns - t > max_age_ns; });
    // An op whose completion never came (lost in a full ring, or by a shim out of memory): while
    // the job keeps posting, an inferred query would never drain, and the map would only grow.
    // Not before kLostCompletionNs: an op may legitimately run a while (an NCCL kernel waiting for
    // its peers, a long copy on a side stream) while the job keeps posting.
    const std::int64_t lost_ns = std::max(max_age_ns, kLostCompletionNs);
    bool lost = std::exchange(state.lost_by_cap, false);
    while (!state.outstanding.empty() && now_ns - state.outstanding.begin()->second.at_ns > lost_ns) {
      state.outstanding.erase(state.outstanding.begin());  // seqs rise with their post times
      lost = true;
    }
    // Idle: nothing posted for max_age_ns, the next query's ops (after the closing mark) included.
    const bool idle = now_ns - std::max(state.query.last_op_ns, state.last_posted_ns) > max_age_ns;
    // A marked query closes at its end mark whatever is outstanding: a lost op does not hold it.
    if (!state.open || !(idle || (lost && !state.explicit_marks))) continue;
    if (const std::uint64_t unfinished = unfinished_queries(state); unfinished > 0) {
      expired.push_back({client, unfinished});
    }
    state.open = false;
    state.query = {};
    state.later.clear();
    state.later_times = 0;
    state.op_times.clear();
    state.outstanding.clear();
  }
  return expired;
}

const OpenQuery* QueryTracker::open_query(ClientId client) const {
  auto it = clients_.find(client);
  return it != clients_.end() && it->second.open ? &it->second.query : nullptr;
}

// The open query's profile estimate after its latest op (`whole` before any), less the time since.
std::int64_t QueryTracker::expected_from(ClientId client, std::int64_t now_ns,
                                         std::vector<std::int64_t> State::*after_op, std::int64_t State::*whole) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || !it->second.open) return 0;
  const State& state = it->second;
  std::int64_t estimate = 0;
  std::int64_t since = state.query.started_ns;
  // A query running late (its time since op k past the profile's) has not posted op k + 1 yet, so
  // it still has at least the profile's time from there; counting down to 0 instead let best-effort
  // work in ahead of the rest of a query that a best-effort kernel had delayed (a user test: 22 of
  // 25 queries over the target had one granted while open, most about 4 ms in).
  // (Only for the time the query still needs: its idle time does not grow with its lateness.)
  std::int64_t floor = 0;
  const std::vector<std::int64_t>& profile = state.*after_op;
  const bool floored = after_op == &State::remaining;
  if (state.query.ops == 0) {
    estimate = state.*whole;
    if (floored && !profile.empty()) floor = profile.front();
  } else {
    // From its latest op (the profile's last, past kProfileOps), when it was posted: a later query
    // may have kept fewer times than it has ops (past kProfileOps in all), and the latest op's is
    // last_op_ns. (From its last op with a time, the floor of that op's next did not decay.)
    const std::size_t k = std::min<std::size_t>(state.query.ops, kProfileOps) - 1;
    if (k < profile.size()) estimate = profile[k];
    if (floored && k + 1 < profile.size() && state.query.ops < kProfileOps) floor = profile[k + 1];
    since = k < state.op_times.size() ? state.op_times[k] : state.query.last_op_ns;
  }
  return std::max<std::int64_t>(floor, estimate - (now_ns - since));
}

std::int64_t QueryTracker::expected_remaining_ns(ClientId client, std::int64_t now_ns) const {
  return expected_from(client, now_ns, &State::remaining, &State::whole);
}

std::int64_t QueryTracker::expected_unblocked_ns(ClientId client, std::int64_t now_ns) const {
  return expected_from(client, now_ns, &State::unblocked, &State::whole_unblocked);
}

double QueryTracker::expected_blocking_points(ClientId client) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || !it->second.open) return 0;
  const State& state = it->second;
  double estimate = state.whole_blocks;
  if (state.query.ops > 0) {
    const std::size_t k = std::min<std::size_t>(state.query.ops, kProfileOps) - 1;
    estimate = k < state.blocks.size() ? state.blocks[k] : 0;
  }
  return std::max(1.0, estimate);
}

double QueryTracker::expected_query_blocking_points(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 1.0 : std::max(1.0, it->second.whole_blocks);
}

std::int64_t QueryTracker::expected_query_unblocked_ns(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.whole_unblocked;
}

void QueryTracker::waited_ahead(ClientId client, std::int64_t wait_ns) {
  const auto it = clients_.find(client);
  if (it != clients_.end() && it->second.open) it->second.query.waited_ahead_ns = std::max<std::int64_t>(0, wait_ns);
}

std::int64_t QueryTracker::own_query_ns(ClientId client) const {
  const auto it = clients_.find(client);
  return it == clients_.end() ? 0 : static_cast<std::int64_t>(it->second.recent_own.quantile(0.5));  // nearest rank
}

std::uint64_t QueryTracker::closed_queries(ClientId client) const {
  const auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.closed_queries;
}

std::int64_t QueryTracker::expected_query_ns(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.whole;
}

const std::deque<std::int64_t>& QueryTracker::waiting_arrivals(ClientId client) const {
  static const std::deque<std::int64_t> kNone;
  auto it = clients_.find(client);
  return it == clients_.end() ? kNone : it->second.arrivals;
}

std::int64_t QueryTracker::mean_arrival_gap_ns(ClientId client) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || it->second.recent_arrivals.size() < kMinRateArrivals) return 0;
  const std::deque<std::int64_t>& arrivals = it->second.recent_arrivals;
  const std::int64_t span = arrivals.back() - arrivals.front();
  return span > 0 ? span / static_cast<std::int64_t>(arrivals.size() - 1) : 0;
}

const std::deque<std::int64_t>& QueryTracker::queue_waits(ClientId client) const {
  static const std::deque<std::int64_t> kNone;
  auto it = clients_.find(client);
  return it == clients_.end() ? kNone : it->second.queue_waits;
}

std::uint64_t QueryTracker::queue_waits_kept(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.queue_waits_kept;
}

bool QueryTracker::says_arrivals(ClientId client) const {
  auto it = clients_.find(client);
  return it != clients_.end() && it->second.says_arrivals;
}

std::uint64_t QueryTracker::outstanding_ops(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.outstanding.size();
}

std::int64_t QueryTracker::last_posted_ns(ClientId client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.last_posted_ns;
}

}  // namespace gpuqos::scheduler

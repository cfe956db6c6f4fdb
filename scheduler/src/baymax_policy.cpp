// baymax: deadline-aware admission of best-effort work (see baymax_policy.h).
#include "gpuqos/scheduler/baymax_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "gpuqos/config/config.h"

namespace gpuqos::scheduler {
namespace {

// On a time-slicing device: how long best-effort jobs' slices delay a query whose program waits
// for the device at points worth slices_ns of slices in all, with idle_ns before the next one. Each
// job with work (its outstanding compute work, and p more for `client` when with_op) delays it by
// what of that work is left once the jobs with work have shared the idle time, at most its slices.
double slice_delay(const std::vector<std::pair<ClientId, std::int64_t>>& be_work, ClientId client, std::int64_t p,
                   bool with_op, std::int64_t idle_ns, double slices_ns) {
  const auto work_of = [&](const auto& job) { return job.second + (with_op && job.first == client ? p : 0); };
  const auto jobs = std::count_if(be_work.begin(), be_work.end(), [&](const auto& job) { return work_of(job) > 0; });
  double delay = 0;
  for (const auto& job : be_work) {
    if (work_of(job) <= 0) continue;
    delay += std::min(static_cast<double>(std::max<std::int64_t>(0, work_of(job) - idle_ns / jobs)), slices_ns);
  }
  return delay;
}

}  // namespace

BaymaxPolicy::BaymaxPolicy(const PolicyOptions& options) : options_(options), bound_(options.baymax) {}

bool BaymaxPolicy::reconfigure(const PolicyOptions& options) {
  if (options.name != name()) return false;
  settle_long_budgets(last_now_ns_);
  options_ = options;
  bound_.configure(options.baymax);
  refresh_long_budgets(last_now_ns_);
  return true;
}

BaymaxPolicy::ClientState& BaymaxPolicy::state_of(ClientId client, ipc::Priority priority) {
  auto [it, added] = clients_.try_emplace(client);
  if (added) {
    it->second.info.client = client;
    it->second.info.priority = priority;
  }
  return it->second;
}

// At most kStaleOpNs: an op is retired by then whatever was predicted, so a longer prediction means
// nothing more, and the backlogs and queues sum these (a review: credited ops predicted at the
// learner's old 1e15-ns cap overflowed a device's best-effort backlog after 9,224 of them).
std::int64_t BaymaxPolicy::predicted(const OpPosted& event) const {
  return std::min(event.predicted_ns > 0 ? event.predicted_ns : placeholder_duration_ns(event.op), kStaleOpNs);
}

BaymaxPolicy::ClientState::FirstCompute BaymaxPolicy::first_compute_of(ClientId client, std::uint64_t query,
                                                                      const ipc::OpDescriptor& op,
                                                                      std::int64_t posted_ns,
                                                                      std::int64_t point_ns) const {
  ClientState::FirstCompute first{query, op.seq, posted_ns, point_ns};
  first.device = op.device;
  // On a time-slicing device the op shares the slices instead: nothing counted as waited.
  if (!options_.baymax.preemptive(op.device)) {
    if (const auto device = compute_in_flight_.find(op.device); device != compute_in_flight_.end()) {
      for (const auto& [other, tally] : device->second) {
        if (other == client) continue;
        first.ahead_ns += tally.predicted_ns;
        first.ahead.emplace_back(other, *tally.seqs.rbegin());  // its last in flight
      }
    }
  }
  return first;
}

void BaymaxPolicy::note_waited_ahead(ClientId client, const ClientState& state) {
  const ClientState::FirstCompute& first = state.first_compute;
  const OpenQuery* query = queries_.open_query(client);
  // Not before the op's own end: the others' ends alone may be later than the query (work beside it,
  // not ahead; an explicit end mark closes a query before its op's completion is read: none then).
  if (!query || first.query != query->number || first.end_ns == 0) return;
  std::int64_t waited = std::min(first.ahead_ns, first.end_ns - first.point_ns - first.posted_ns);
  if (first.ahead_end_ns > 0) waited = std::min(waited, first.ahead_end_ns - first.posted_ns);
  queries_.waited_ahead(client, waited);
}

void BaymaxPolicy::first_compute_completion(ClientId client, const ipc::CompletionDescriptor& completion) {
  if (completion.end_ns <= 0) return;
  // Only compute work, and only on its device, is what a first compute op waits behind (before it is
  // retired: its device and engine are known while it is in flight).
  const auto flight = in_flight_.find({client, completion.seq});
  if (flight == in_flight_.end() || flight->second.engine != Engine::compute) return;
  // The end of work a first compute op was posted behind: also of one posted after its query's
  // closing synchronisation, whose query is yet to reopen.
  const auto ahead_ended = [&](ClientState::FirstCompute& first) {
    const auto ahead = std::find_if(first.ahead.begin(), first.ahead.end(), [&](const auto& a) { return a.first == client; });
    if (ahead == first.ahead.end() || completion.seq > ahead->second || flight->second.device != first.device) return false;
    first.ahead_end_ns = std::max(first.ahead_end_ns, completion.end_ns);
    return true;
  };
  for (auto& [id, state] : clients_) {
    ClientState::FirstCompute& first = state.first_compute;
    if (id != client) {
      for (auto& [seq, candidate] : state.next_first_compute) ahead_ended(candidate);
    }
    if (id == client && first.seq == completion.seq && first.end_ns == 0) {
      first.end_ns = completion.status == 0 ? completion.end_ns : first.posted_ns + first.point_ns;  // failed: no wait
      note_waited_ahead(id, state);
      continue;
    }
    if (ahead_ended(first)) note_waited_ahead(id, state);
  }
}

std::int64_t BaymaxPolicy::expected(const OpPosted& event) const {
  return event.expected_ns > 0 && event.predicted_ns > 0 ? std::min(event.expected_ns, predicted(event))
                                                         : predicted(event);
}

Decisions BaymaxPolicy::client_registered(const ClientInfo& info, std::int64_t now_ns) {
  settle_long_budgets(now_ns);
  const bool known = clients_.contains(info.client);
  ClientState& state = state_of(info.client, info.priority);
  // Registered again (a reload hands every client over anew): its kUnplacedHighNs runs from the first.
  if (!known) state.registered_ns = now_ns;
  state.info = info;
  state.job_share.clear();  // its job may be another
  refresh_long_budgets(now_ns);
  return grant_ready(now_ns);
}

void BaymaxPolicy::account(ClientId client, const ipc::OpDescriptor& op, std::int64_t predicted_ns, bool high,
                           std::int64_t now_ns, bool priced_long) {
  const auto engine = engine_of(op);
  if (!engine) return;
  const auto [placed, fresh] =
      in_flight_.try_emplace({client, op.seq}, InFlight{op.device, *engine, op.stream, predicted_ns, now_ns, high, priced_long});
  if (!fresh) return;
  by_stale_at_.emplace(stale_at_ns(placed->second), placed->first);
  if (!high && (*engine == Engine::h2d || *engine == Engine::d2h)) {
    be_transfer_slots_.emplace(op.device, slot_free_at_ns(placed->second), client, op.seq);
  }
  if (++clients_[client].in_flight_ops > kMaxInFlightPerClient) {
    retire(client, in_flight_.lower_bound({client, 0})->first.second, std::nullopt, now_ns, false);  // its oldest
  }
  if (*engine == Engine::compute) {
    ComputeInFlight& tally = compute_in_flight_[op.device][client];
    tally.predicted_ns += predicted_ns;
    tally.seqs.insert(op.seq);
  }
  EngineState& state = engines_[{op.device, *engine}];
  if (high) {
    ++state.hp_ops;
    ClientState& owner = clients_[client];
    owner.hp_outstanding_ns += predicted_ns;
    if (owner.hp_ops_on.empty()) owner.hp_since_ns = now_ns;  // posted onto nothing
    ++owner.hp_ops_on[{op.device, *engine}];
    if (*engine == Engine::compute) {
      ClientState::HpCompute& tally = owner.hp_compute[op.device];
      if (tally.ns == 0) tally.since_ns = now_ns;
      tally.ns += predicted_ns;
    }
  } else {
    state.be_until_ns = std::max(state.be_until_ns, now_ns) + predicted_ns;
    state.be_outstanding_ns += predicted_ns;
    ++state.be_ops;
    if (*engine == Engine::compute) clients_[client].be_compute_ns[{op.device, op.stream}] += predicted_ns;
  }
  backlog_.account(client, op, predicted_ns, now_ns);
}

void BaymaxPolicy::retire(ClientId client, std::uint64_t seq, std::optional<std::int64_t> end_ns, std::int64_t now_ns,
                          bool completed) {
  auto it = in_flight_.find({client, seq});
  if (it == in_flight_.end()) return;
  const InFlight done = it->second;
  by_stale_at_.erase({stale_at_ns(done), it->first});
  if (!done.high && (done.engine == Engine::h2d || done.engine == Engine::d2h)) {
    be_transfer_slots_.erase({done.device, slot_free_at_ns(done), client, seq});
  }
  if (done.engine == Engine::compute) {
    auto& by_client = compute_in_flight_[done.device];
    if (auto tally = by_client.find(client); tally != by_client.end()) {
      tally->second.predicted_ns -= done.predicted_ns;
      tally->second.seqs.erase(seq);
      if (tally->second.seqs.empty()) by_client.erase(tally);
    }
    if (by_client.empty()) compute_in_flight_.erase(done.device);
  }
  in_flight_.erase(it);
  if (auto c = clients_.find(client); c != clients_.end() && c->second.in_flight_ops > 0) --c->second.in_flight_ops;
  EngineState& state = engines_[{done.device, done.engine}];
  if (done.high) {
    --state.hp_ops;
    if (auto c = clients_.find(client); c != clients_.end()) {
      c->second.hp_outstanding_ns -= done.predicted_ns;
      // It moves, when an op of it completed: one retired stale or at the cap says nothing of it (a
      // silent job posting on held transfers again for good once its first op went stale).
      if (completed) c->second.hp_since_ns = now_ns;
      if (auto on = c->second.hp_ops_on.find({done.device, done.engine}); on != c->second.hp_ops_on.end() && --on->second == 0) {
        c->second.hp_ops_on.erase(on);
      }
      if (done.engine == Engine::compute) {
        if (auto tally = c->second.hp_compute.find(done.device); tally != c->second.hp_compute.end()) {
          if ((tally->second.ns -= done.predicted_ns) <= 0) {
            c->second.hp_compute.erase(tally);
          } else if (completed) {
            tally->second.since_ns = now_ns;  // it moves: counted from here
          }
        }
      }
    }
    return;
  }
  --state.be_ops;
  state.be_outstanding_ns -= done.predicted_ns;
  if (done.engine == Engine::compute) {
    if (auto c = clients_.find(client); c != clients_.end()) {
      auto stream = c->second.be_compute_ns.find({done.device, done.stream});
      if (stream != c->second.be_compute_ns.end() && (stream->second -= done.predicted_ns) <= 0)
        c->second.be_compute_ns.erase(stream);
    }
  }
  if (end_ns) {
    // What is still outstanding runs after this op: the estimate restarts from its measured end.
    state.be_until_ns = std::min(*end_ns, now_ns) + state.be_outstanding_ns;
  } else {
    state.be_until_ns = std::min(state.be_until_ns, now_ns + state.be_outstanding_ns);
  }
}

std::int64_t BaymaxPolicy::ClientState::be_compute_total_ns() const {
  std::int64_t total = 0;
  for (const auto& [stream, ns] : be_compute_ns) total += ns;
  return total;
}

std::int64_t BaymaxPolicy::ClientState::be_compute_ns_on(std::uint32_t device) const {
  std::int64_t total = 0;
  for (auto it = be_compute_ns.lower_bound({device, 0}); it != be_compute_ns.end() && it->first.first == device; ++it)
    total += it->second;
  return total;
}

std::int64_t BaymaxPolicy::be_backlog_ns(std::uint32_t device, Engine engine, std::int64_t now_ns) const {
  auto it = engines_.find({device, engine});
  if (it == engines_.end() || it->second.be_ops == 0) return 0;
  return std::max<std::int64_t>(0, it->second.be_until_ns - now_ns);
}

std::optional<PolicyState> BaymaxPolicy::state(std::int64_t now_ns) const {
  PolicyState state{bound_.bound_ns(), bound_.steps(), {}, {}};
  if (options_.baymax.idle_bound_factor > 1 && options_.baymax.preemptive_devices != 0)
    state.idle_stream_bound_ns = idle_stream_bound_ns();
  for (const auto& [device, budget] : long_budgets_) {
    state.long_op_budgets.push_back({device, long_op_budget_ns(device, now_ns), long_op_budget_cap_ns(device)});
  }
  for (const auto& [id, client] : clients_) {
    if (client.info.priority != ipc::Priority::low) continue;
    state.be_compute_outstanding_ns[client.info.job] += client.be_compute_total_ns();
  }
  state.tight_targets = tight_targets(now_ns);
  for (const auto& [id, client] : clients_) {
    const OpenQuery* query = queries_.open_query(id);
    if (client.info.priority == ipc::Priority::high && client.info.target_ns && query &&
        overdue(*query, *client.info.target_ns, now_ns) &&
        std::find(state.overdue_jobs.begin(), state.overdue_jobs.end(), client.info.job) == state.overdue_jobs.end())
      state.overdue_jobs.push_back(client.info.job);
  }
  for (const auto& [id, client] : clients_) {
    if (client.info.priority != ipc::Priority::high || !client.info.target_ns || !queries_.says_arrivals(id) ||
        queries_.expected_query_ns(id) <= 0)
      continue;
    const PolicyState::MarkedJob entry{client.info.job, queries_.mean_arrival_gap_ns(id), query_allowance_ns(id)};
    auto same = std::find_if(state.marked_jobs.begin(), state.marked_jobs.end(),
                             [&](const PolicyState::MarkedJob& m) { return m.job == entry.job; });
    if (same == state.marked_jobs.end()) {
      state.marked_jobs.push_back(entry);
    } else if (entry.query_allowance_ns < same->query_allowance_ns) {
      *same = entry;
    }
  }
  std::sort(state.marked_jobs.begin(), state.marked_jobs.end(),
            [](const auto& a, const auto& b) { return a.job < b.job; });
  for (const auto& [device, ns] : idle_held_ns_) state.idle_held.push_back({device, ns});
  return state;
}

std::vector<PolicyState::TightTarget> BaymaxPolicy::tight_targets(std::int64_t now_ns) const {
  std::vector<PolicyState::TightTarget> tight;
  for (const auto& [id, client] : clients_) {
    if (client.info.priority != ipc::Priority::high || !client.info.target_ns) continue;
    // What a query takes when nothing delays it: the profile's time counts its waits behind others' work.
    const std::int64_t expected = queries_.own_query_ns(id);
    if (expected <= 0) continue;  // no closed query yet
    const std::int64_t target = *client.info.target_ns;
    // Shorter than its queries: only once a few closed (a slow first one says little).
    if (target < expected && queries_.closed_queries(id) < kQueriesBeforeUnreachable) continue;
    client.for_each_device([&](std::uint32_t device) {
      // Best-effort processes with compute work on the device, or that posted some lately (one
      // is on no device before its first op, and one that went idle takes no slice); at least
      // one, since one may come.
      const auto processes = static_cast<std::uint32_t>(std::max<std::ptrdiff_t>(
          1, std::count_if(clients_.begin(), clients_.end(), [device, now_ns](const auto& other) {
            const ClientState& be = other.second;
            if (be.info.priority != ipc::Priority::low) return false;
            const auto posted = be.compute_posted_ns.find(device);
            return be.be_compute_ns_on(device) > 0 ||
                   (posted != be.compute_posted_ns.end() && now_ns - posted->second <= kActiveProcessNs);
          })));
      PolicyState::TightTarget entry{client.info.job, device, target, expected, 0, processes};
      if (options_.baymax.preemptive(device)) {
        // Each process is a context of its own, and contexts take turns: one slice each.
        entry.timeslice_ns = options_.baymax.timeslice(device);
        if (target - expected >= entry.timeslice_ns * processes) return;
      } else {
        // Kernels run to their end: a query arriving behind best-effort work finds the backlog
        // granted before it, up to the bound (with adaptation, the least the bound can become); what
        // of it drains before the query first waits for the device delays it by nothing (the deadline
        // test holds anything more while it is open). Not all of that time is the backlog's: the
        // query's own device work runs in it too (all of the query's, to err towards warning).
        entry.backlog_bound_ns = options_.baymax.adaptation
                                     ? std::max<std::int64_t>(1, options_.baymax.min_backlog_bound_ns)
                                     : bound_.bound_ns();
        const std::int64_t idle =
            std::max<std::int64_t>(0, queries_.expected_query_unblocked_ns(id) - client.expected_query_work_ns);
        entry.backlog_wait_ns = std::max<std::int64_t>(0, entry.backlog_bound_ns - idle);
        // Another high-priority process's query posted before this one's runs first, whatever the
        // deadlines: the longest of theirs on the device (one at a time: the sum of a many-process
        // job's would rarely all be ahead). A user test: a job with an 8-ms target beside one whose
        // queries are 4 ms of kernels missed it 5-6 % of the time under a 5-ms bound, unwarned. Its
        // predicted work, but no more than its queries take on their own: the work runs within
        // them, and an untrained predictor read those 4 ms as 8.6.
        for (const auto& [other_id, other] : clients_) {
          if (other_id == id || other.info.priority != ipc::Priority::high || !other.on(device)) continue;
          const auto there = other.expected_query_compute_ns.find(device);
          if (there == other.expected_query_compute_ns.end()) continue;
          const std::int64_t measured = queries_.own_query_ns(other_id);
          const std::int64_t work = measured > 0 ? std::min(measured, there->second) : there->second;
          entry.ahead_ns = std::max(entry.ahead_ns, work);
        }
        // A target shorter than the query is missed whatever the bound: warned of all the same (its
        // own text), since every query of it holds best-effort work for as long as it is open.
        if (target >= expected && target - expected - entry.ahead_ns >= entry.backlog_wait_ns) return;
      }
      auto same = std::find_if(tight.begin(), tight.end(), [&](const PolicyState::TightTarget& t) {
        return t.job == entry.job && t.device == device;
      });
      // Several clients of one job: the tightest speaks for it.
      const auto need = [](const PolicyState::TightTarget& t) {
        return t.expected_query_ns + t.ahead_ns + t.backlog_wait_ns;
      };
      if (same == tight.end()) {
        tight.push_back(std::move(entry));
      } else if (need(entry) > need(*same)) {
        *same = std::move(entry);
      }
    });
  }
  std::sort(tight.begin(), tight.end(), [](const auto& a, const auto& b) {
    return std::tie(a.job, a.device) < std::tie(b.job, b.device);
  });
  return tight;
}

std::size_t BaymaxPolicy::queued_ops() const {
  std::size_t queued = 0;
  for (const auto& [id, state] : clients_) queued += state.queue.size();
  return queued;
}

void BaymaxPolicy::learn(const std::vector<ClosedQuery>& closed) {
  for (const ClosedQuery& query : closed) {
    auto it = clients_.find(query.client);
    if (it == clients_.end()) continue;
    ClientState& state = it->second;
    const auto learn_work = [](std::int64_t& expected, std::int64_t work) {  // the first query's, then 1/8 of the way
      expected = expected == 0 ? work : expected + (work - expected) / 8;
    };
    learn_work(state.expected_query_work_ns, state.query_work_ns);
    for (auto& [device, expected] : state.expected_query_compute_ns) {
      learn_work(expected, state.query_compute_ns[device]);  // none there this time: 0
    }
    for (const auto& [device, work] : state.query_compute_ns) state.expected_query_compute_ns.try_emplace(device, work);
    auto next = std::move(state.next_query_ops);
    ClientState::FirstCompute next_first = state.take_next_first_compute(0);
    forget_query_work(state);
    if (const OpenQuery* reopened = queries_.open_query(query.client)) {  // for the work posted after the closing mark
      state.work_query = reopened->number;
      for (const auto& [seq, op] : next) state.count_in_query(op);
      if (next_first.seq != 0) {
        next_first.query = reopened->number;
        state.first_compute = std::move(next_first);
      }
    }
    if (!state.info.target_ns) continue;
    bound_.observe(query.client, query.latency_ns(), *state.info.target_ns, state.info.percentile);
  }
}

std::int64_t BaymaxPolicy::expected_query_compute_ns(ClientId client, std::uint32_t device) const {
  const auto it = clients_.find(client);
  if (it == clients_.end()) return 0;
  const auto work = it->second.expected_query_compute_ns.find(device);
  return work == it->second.expected_query_compute_ns.end() ? 0 : work->second;
}

void BaymaxPolicy::forget_query_work(ClientState& state) {
  state.query_work_ns = 0;
  state.query_compute_ns.clear();
  state.next_query_ops.clear();
  state.first_compute = {};
  state.next_first_compute.clear();
  state.work_query = 0;
}

bool BaymaxPolicy::overdue(const OpenQuery& query, std::int64_t target_ns, std::int64_t now_ns) {
  return now_ns - query.opened_ns > PolicyState::kOverdueTargets * target_ns;
}

bool BaymaxPolicy::query_in_system(std::uint32_t device, std::int64_t now_ns) const {
  return std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    const ClientInfo& info = entry.second.info;
    if (info.priority != ipc::Priority::high || !entry.second.on(device) || !info.target_ns) return false;
    const OpenQuery* query = queries_.open_query(entry.first);
    return (query && !overdue(*query, *info.target_ns, now_ns)) || !queries_.waiting_arrivals(entry.first).empty();
  });
}

std::int64_t BaymaxPolicy::until_no_query_ns(std::uint32_t device, std::int64_t now_ns) const {
  std::int64_t longest = 0;
  for (const auto& [id, state] : clients_) {
    const ClientInfo& info = state.info;
    if (info.priority != ipc::Priority::high || !state.on(device) || !info.target_ns) continue;
    std::int64_t left = 0;
    if (const OpenQuery* query = queries_.open_query(id); query && !overdue(*query, *info.target_ns, now_ns)) {
      left = std::max(queries_.expected_remaining_ns(id, now_ns), hp_outstanding_live(state));
    }
    const auto waiting = static_cast<std::int64_t>(queries_.waiting_arrivals(id).size());
    left += waiting * queries_.expected_query_ns(id);
    longest = std::max(longest, left);
  }
  return longest;
}

std::int64_t BaymaxPolicy::idle_stream_bound_ns() const {
  // Held to what a config may give, whoever built the options (config.h says why that is safe).
  const double factor = std::clamp(options_.baymax.idle_bound_factor, 1.0, config::kMaxIdleBoundFactor);
  return static_cast<std::int64_t>(factor * static_cast<double>(bound_.bound_ns()));
}

std::int64_t BaymaxPolicy::hp_compute_on(const ClientState& state, std::uint32_t device) const {
  const auto tally = state.hp_compute.find(device);
  if (tally == state.hp_compute.end()) return 0;
  // Nothing of it completed for kHpSilentNs: its completions are lost or late (a shim that reports
  // none, a full ring), and its predicted work would hold best-effort work for as long as it runs.
  return last_now_ns_ - tally->second.since_ns > kHpSilentNs ? 0 : tally->second.ns;
}

bool BaymaxPolicy::hp_silent(const ClientState& state) const {
  return !state.hp_ops_on.empty() && last_now_ns_ - state.hp_since_ns > kHpSilentNs;
}

bool BaymaxPolicy::live_hp_ops_on(std::uint32_t device, Engine engine) const {
  return std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    const ClientState& state = entry.second;
    return state.info.priority == ipc::Priority::high && state.hp_ops_on.contains({device, engine}) && !hp_silent(state);
  });
}

std::int64_t BaymaxPolicy::hp_work_on(std::uint32_t device) const {
  std::int64_t total = 0;
  for (const auto& [id, state] : clients_) {
    if (state.info.priority == ipc::Priority::high) total += hp_compute_on(state, device);
  }
  return total;
}

std::int64_t BaymaxPolicy::others_hp_work_ns(std::uint32_t device) const {
  // The most a next query of one high-priority client with a target finds of the others' work.
  std::int64_t least_own = -1;
  for (const auto& [id, state] : clients_) {
    if (state.info.priority != ipc::Priority::high || !state.on(device) || !state.info.target_ns) continue;
    const std::int64_t own = hp_compute_on(state, device);
    least_own = least_own < 0 ? own : std::min(least_own, own);
  }
  return least_own < 0 ? 0 : hp_work_on(device) - least_own;
}

double BaymaxPolicy::unspent_credit_ns(ClientId client, std::uint32_t device) const {
  double unspent = 0;
  for (const auto& [id, other] : clients_) {
    if (id == client || other.info.priority != ipc::Priority::low || (other.placed() && !other.on(device))) continue;
    unspent += other.unspent_credit_ns();
  }
  return unspent;
}

bool BaymaxPolicy::high_priority_on(std::uint32_t device) const {
  return std::any_of(clients_.begin(), clients_.end(), [device](const auto& entry) {
    return entry.second.info.priority == ipc::Priority::high && entry.second.on(device);
  });
}

double BaymaxPolicy::long_op_rate(std::uint32_t device) const {
  if (options_.baymax.preemptive(device)) return 0;
  double strictest = -1;  // the highest percentile of a high-priority job with a target here
  for (const auto& [id, state] : clients_) {
    if (state.info.priority == ipc::Priority::high && state.on(device) && state.info.target_ns)
      strictest = std::max(strictest, state.info.percentile);
  }
  if (strictest < 0) return 0;
  return options_.baymax.long_op_tail_share * std::clamp(1.0 - strictest / 100.0, 0.0, 1.0);
}

bool BaymaxPolicy::is_long(const Queued& queued) const {
  // Long by its point prediction, priced by its upper estimate (baymax_policy.h says why).
  return engine_of(queued.op) == Engine::compute && long_op_rate(queued.op.device) > 0 &&
         queued.point_ns() > long_op_threshold_ns();
}

std::int64_t BaymaxPolicy::long_op_cost(const Queued& queued, std::int64_t now_ns) const {
  if (!is_long(queued)) return 0;
  // Priced for the requests that arrive while it runs, as if none were in the system when it
  // starts (hold_of waits for that); one that starts beside a request all the same (after
  // kLongOpWaitNs) pays at least the bound's price.
  const std::int64_t cost = blocking_cost_ns(queued.op.device, queued.predicted_ns);
  if (!query_in_system(queued.op.device, now_ns)) return cost;
  return std::max(cost, queued.predicted_ns - long_op_threshold_ns());
}

std::int64_t BaymaxPolicy::blocking_cost_ns(std::uint32_t device, std::int64_t length_ns) const {
  const std::int64_t threshold = long_op_threshold_ns();
  double cost = 0;
  for (const auto& [id, state] : clients_) {
    if (state.info.priority != ipc::Priority::high || !state.on(device) || !state.info.target_ns) continue;
    const std::int64_t whole = queries_.expected_query_ns(id);
    const std::int64_t gap = queries_.mean_arrival_gap_ns(id);
    const std::int64_t slack = *state.info.target_ns - whole - margin_of(state);
    if (!queries_.says_arrivals(id) || whole <= 0 || gap <= 0 || slack < 0) {
      // The bound is what a query absorbs (and with no slack at all every request misses anyway:
      // the op's own share of the misses is then the bound's price). With no rate known this is the
      // mean count: a job whose window and rate are known can cost more (a burst's price, below).
      cost = std::max(cost, static_cast<double>(length_ns - threshold));
      continue;
    }
    // Its target counts from each request's arrival. The op starts with none of its requests in the
    // system (hold_of), so one arriving x into it finishes about length - x + whole later, and the
    // k arriving before it in the op add about k x whole: with load = whole / gap, it misses its
    // target (less the margin) when x < (length - slack) / (1 - load). That is for a request that
    // would not have waited otherwise; one that would have waited w in the job's own queue (a burst
    // of arrivals) has w less slack, and one that would have waited more than the slack misses
    // whatever the op does (not the op's miss). So the window is the mean over the waits the job's
    // arrivals made by themselves lately (queue_waits; none known: 0), and when every one of them
    // was past saving the op pays the bound's price, as with no slack at all. The requests arriving
    // in that window miss together, so the op is priced at a high count of them, not the mean (the
    // header): m + k sqrt(m) requests for m = window / gap, or (k + 1) m when fewer than one is
    // expected.
    const double load = std::min(kLongOpMaxLoad, static_cast<double>(whole) / static_cast<double>(gap));
    const WaitSum& sum = wait_sum(id, length_ns, slack);
    if (sum.savable == 0) {
      cost = std::max(cost, static_cast<double>(length_ns - threshold));
      continue;
    }
    const double window = sum.excess / static_cast<double>(sum.count) / (1.0 - load);
    if (window <= 0) continue;
    const double spread = std::min(std::sqrt(window * static_cast<double>(gap)), window);
    cost = std::max(cost, window + kLongOpCountSigmas * spread);
  }
  return static_cast<std::int64_t>(std::max(0.0, cost));
}

const BaymaxPolicy::WaitSum& BaymaxPolicy::wait_sum(ClientId client, std::int64_t length_ns,
                                                    std::int64_t slack_ns) const {
  const std::uint64_t kept = queries_.queue_waits_kept(client);
  auto it = wait_sums_.find({client, length_ns});
  if (it != wait_sums_.end() && it->second.kept == kept && it->second.slack_ns == slack_ns) return it->second;
  if (it == wait_sums_.end()) {
    if (wait_sums_.size() >= kMaxWaitSums) wait_sums_.clear();
    it = wait_sums_.try_emplace({client, length_ns}).first;
  }
  static const std::deque<std::int64_t> kNoWait{0};
  const std::deque<std::int64_t>& recorded = queries_.queue_waits(client);
  const std::deque<std::int64_t>& waits = recorded.empty() ? kNoWait : recorded;
  WaitSum sum{kept, slack_ns, 0, 0, waits.size()};
  for (const std::int64_t wait_ns : waits) {
    if (wait_ns > slack_ns) continue;  // past saving
    ++sum.savable;
    sum.excess += static_cast<double>(std::max<std::int64_t>(0, length_ns - slack_ns + wait_ns));
  }
  return it->second = sum;
}

std::int64_t BaymaxPolicy::long_op_threshold_ns() const {
  // The configured bound is the wait the user said a query can absorb. Adaptation tightening the
  // bound makes the device take fewer ops at once, but an op the configured bound allows is not
  // rationed by the tail budget: otherwise a tightened bound turns a job's ordinary kernels into
  // long ops and starves it (ResNet's 4-ms kernels at 66 % of the ideal leftover, bench, fifo,
  // end-to-end targets). Loosened, the bound raises the threshold with it.
  return std::max(options_.baymax.be_backlog_bound_ns, bound_.bound_ns());
}

double BaymaxPolicy::long_op_budget_cap_ns(std::uint32_t device) const {
  return long_op_rate(device) * static_cast<double>(kTailWindowNs);
}

void BaymaxPolicy::settle_long_budgets(std::int64_t now_ns) {
  for (auto& [device, budget] : long_budgets_) {
    budget.level_ns = long_op_budget_ns(device, now_ns);
    budget.at_ns = std::max(budget.at_ns, now_ns);
  }
}

void BaymaxPolicy::refresh_long_budgets(std::int64_t now_ns) {
  std::erase_if(long_budgets_, [this](const auto& entry) { return long_op_rate(entry.first) <= 0; });
  for (const auto& [id, state] : clients_) {
    // The budget starts empty when a device first has a target to protect: it is earned.
    state.for_each_device([&](std::uint32_t device) {
      if (long_op_rate(device) > 0) long_budgets_.try_emplace(device, LongOpBudget{0, now_ns});
    });
  }
}

bool BaymaxPolicy::debit_long_budget(std::uint32_t device, std::int64_t cost_ns, std::int64_t now_ns) {
  auto it = long_budgets_.find(device);
  if (cost_ns <= 0 || it == long_budgets_.end()) return false;
  const double cap = long_op_budget_cap_ns(device);
  it->second.level_ns = std::max(-cap, long_op_budget_ns(device, now_ns) - static_cast<double>(cost_ns));
  it->second.at_ns = std::max(it->second.at_ns, now_ns);
  return true;
}

bool BaymaxPolicy::spend_long_budget(const Queued& queued, std::int64_t now_ns) {
  if (!is_long(queued)) return false;
  debit_long_budget(queued.op.device, long_op_cost(queued, now_ns), now_ns);
  return true;  // priced, at nothing when no query arriving while it runs would miss for it
}

void BaymaxPolicy::charge_overrun(const InFlight& done, std::int64_t own_ns, std::int64_t now_ns) {
  // An op predicted short that ran long blocked the queries arriving meanwhile as a long op does
  // (an op whose durations at one shape are bimodal): the budget pays for what it ran over the
  // threshold, measured. One priced as long paid its upper estimate already.
  if (done.high || done.priced_long || done.engine != Engine::compute || own_ns <= 0) return;
  // It ran after its grant: a span said to be longer (a client's garbage; an audit put the budget
  // in full debt with one completion spanning the node's uptime) is charged only that long.
  own_ns = std::min(own_ns, std::max<std::int64_t>(0, now_ns - done.since_ns));
  // Granted as a short op, whether or not a request was in the system: the bound's price.
  debit_long_budget(done.device, own_ns - long_op_threshold_ns(), now_ns);
}

double BaymaxPolicy::long_op_budget_ns(std::uint32_t device, std::int64_t now_ns) const {
  const double cap = long_op_budget_cap_ns(device);
  auto it = long_budgets_.find(device);
  if (it == long_budgets_.end()) return 0;
  const double grown = long_op_rate(device) * static_cast<double>(std::max<std::int64_t>(0, now_ns - it->second.at_ns));
  return std::min(cap, it->second.level_ns + grown);
}

std::vector<std::pair<ClientId, std::int64_t>> BaymaxPolicy::be_compute_work(ClientId client,
                                                                             std::uint32_t device) const {
  std::vector<std::pair<ClientId, std::int64_t>> work;
  for (const auto& [id, state] : clients_) {
    if (state.info.priority != ipc::Priority::low) continue;
    const std::int64_t total = state.be_compute_ns_on(device);
    if (total > 0 || id == client) work.emplace_back(id, total);
  }
  return work;
}

std::optional<bool> BaymaxPolicy::arrivals_held(ClientId client, std::uint32_t device, std::int64_t p) const {
  const auto work = be_compute_work(client, device);
  const auto timeslice = static_cast<double>(options_.baymax.timeslice(device));
  bool held = false, any = false;
  for (const auto& [id, state] : clients_) {
    if (state.info.priority != ipc::Priority::high || !state.on(device) || !state.info.target_ns) continue;
    if (queries_.expected_query_ns(id) <= 0) return std::nullopt;  // no profile yet: the streams' bound
    any = true;
    const double slices = queries_.expected_query_blocking_points(id) * timeslice;
    const std::int64_t idle = queries_.expected_query_unblocked_ns(id);
    // At most the bound, and at most one job's slices: the least a time-slicing device can delay a
    // query by once best-effort work is there; every further job adds as much again.
    const double allowed = std::min(static_cast<double>(bound_.bound_ns()), slices);
    // A grant that does not raise the sum holds nothing (its job fills its slices anyway), and a
    // lone op goes whatever it adds, as on any device: else one too long would never run.
    const double with = slice_delay(work, client, p, true, idle, slices);
    const double without = slice_delay(work, client, p, false, idle, slices);
    held = held || (with > allowed && with > without && without > 0);
  }
  if (!any) return std::nullopt;
  return held;
}

std::int64_t BaymaxPolicy::margin_of(const ClientState& state) const {
  return state.info.safety_margin_ns.value_or(options_.baymax.safety_margin_ns);
}

std::int64_t BaymaxPolicy::query_allowance_ns(ClientId client) const {
  const std::int64_t margin = margin_of(clients_.at(client));
  const std::int64_t allowance = std::max(bound_.bound_ns(), margin);
  const std::int64_t gap = queries_.mean_arrival_gap_ns(client);
  if (gap <= 0) return allowance;  // its rate is not known yet
  // Each query stretched by the allowance keeps the job busy for kMaxQueryLoad of the time at most.
  const double room = kMaxQueryLoad * static_cast<double>(gap) - static_cast<double>(queries_.expected_query_ns(client));
  if (room <= static_cast<double>(margin)) return margin;
  return std::min(allowance, static_cast<std::int64_t>(room));
}

bool BaymaxPolicy::uses_device(ClientId client, std::uint32_t device, std::int64_t now_ns) const {
  // Its compute work in flight there, as a whole: an op granted behind others of its streams starts
  // when they are done, so only the batch's predicted total says how long it may take.
  std::int64_t total = 0, oldest = std::numeric_limits<std::int64_t>::max();
  for (auto it = in_flight_.lower_bound({client, 0}); it != in_flight_.end() && it->first.first == client; ++it) {
    const InFlight& op = it->second;
    if (op.device != device || op.engine != Engine::compute) continue;
    total += op.predicted_ns;
    oldest = std::min(oldest, op.since_ns);
  }
  return total > 0 && now_ns - oldest <= kShareOverrun * total + kShareSlackNs;
}

double BaymaxPolicy::job_vtime(const ClientState& state, std::uint32_t device) const {
  if (const auto cached = state.job_share.find(device); cached != state.job_share.end()) return cached->second->vtime;
  const auto it = job_shares_.find({state.info.job, device});
  if (it == job_shares_.end()) return 0;
  state.job_share.emplace(device, &it->second);
  return it->second.vtime;
}

double BaymaxPolicy::weight_per_process(const ClientState& state, std::uint32_t device) const {
  std::size_t processes = 0;  // with compute work there, granted or at the head of its queue
  for (const auto& [id, other] : clients_) {
    if (other.info.priority != ipc::Priority::low || other.info.job != state.info.job) continue;
    const bool waiting = !other.queue.empty() && other.queue.front().op.device == device &&
                         engine_of(other.queue.front().op) == Engine::compute;
    processes += waiting || other.be_compute_ns_on(device) > 0;
  }
  return state.weight() / static_cast<double>(std::max<std::size_t>(1, processes));
}

bool BaymaxPolicy::weighed_apart(const ClientState& a, const ClientState& b, std::uint32_t device) const {
  const double turns_a = weight_per_process(a, device), turns_b = weight_per_process(b, device);
  return std::abs(turns_a - turns_b) > 1e-9 * std::max(turns_a, turns_b);
}

bool BaymaxPolicy::ahead_of_share(ClientId client, std::uint32_t device, std::int64_t now_ns) const {
  const ClientState& self = clients_.at(client);
  const double lead = static_cast<double>(bound_.bound_ns()) / self.weight();
  const double mine = job_vtime(self, device);
  for (const auto& [id, other] : clients_) {
    // Jobs whose weights are as their processes with work there (a time-slicing device gives each
    // a turn) are left to the device's own turns and the fair-queueing order: holding one for the
    // other measurably cost the latency-critical job's tail (scheduler/README.md).
    if (id != client && other.info.priority == ipc::Priority::low && other.info.job != self.info.job &&
        mine > job_vtime(other, device) + lead && weighed_apart(self, other, device) && uses_device(id, device, now_ns))
      return true;
  }
  return false;
}

bool BaymaxPolicy::beside_another_weight(ClientId client, std::uint32_t device, std::int64_t now_ns) const {
  const ClientState& self = clients_.at(client);
  for (const auto& [id, other] : clients_) {
    if (id == client || other.info.priority != ipc::Priority::low || other.info.job == self.info.job) continue;
    const auto posted = other.compute_posted_ns.find(device);
    const bool lately = posted != other.compute_posted_ns.end() && now_ns - posted->second <= kShareRecentNs;
    if ((lately || uses_device(id, device, now_ns)) && weighed_apart(self, other, device)) return true;
  }
  return false;
}

bool BaymaxPolicy::another_waits_on(ClientId client, std::uint32_t device) const {
  return std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    return entry.first != client && !entry.second.queue.empty() && entry.second.queue.front().op.device == device;
  });
}

BaymaxPolicy::CreditBeside BaymaxPolicy::credit_beside(ClientId client, const ClientState& state) const {
  // Itself and every other best-effort client on one of its devices, or on none yet (it may come):
  // one that went quiet may still hold credit.
  CreditBeside beside_it;
  for (const auto& [id, other] : clients_) {
    if (id == client || other.info.priority != ipc::Priority::low || other.posted == 0) continue;
    bool beside = !other.placed() || !state.placed();
    state.for_each_device([&](std::uint32_t device) { beside = beside || other.on(device); });
    if (!beside) continue;
    ++beside_it.holders;
    beside_it.unspent_ns += other.unspent_credit_ns();
  }
  return beside_it;
}

bool BaymaxPolicy::has_compute_work(ClientId client, const ClientState& state, std::uint32_t device) const {
  if (const auto queued = state.compute_queued.find(device); queued != state.compute_queued.end() && queued->second > 0) {
    return true;
  }
  const auto here = compute_in_flight_.find(device);
  return here != compute_in_flight_.end() && here->second.contains(client);
}

void BaymaxPolicy::restart_if_idle(ClientId client, ClientState& state, std::uint32_t device) {
  if (has_compute_work(client, state, device)) return;
  // Its job, when none of its processes has work there either: at the least start of the latest
  // grants of the other jobs busy there.
  const auto busy_here = [&](ClientId id, const ClientState& other) { return has_compute_work(id, other, device); };
  bool job_busy = false;
  std::optional<double> least_job;
  for (const auto& [id, other] : clients_) {
    if (id == client || other.info.priority != ipc::Priority::low || !busy_here(id, other)) continue;
    if (other.info.job == state.info.job) {
      job_busy = true;
      continue;
    }
    const auto share = job_shares_.find({other.info.job, device});
    const double at = share == job_shares_.end() ? 0 : share->second.last_start.value_or(share->second.vtime);
    least_job = std::min(least_job.value_or(at), at);
  }
  // With no other job busy either: at the start of the device's latest grant, so that time every
  // job spent idle buys it nothing later. Its last start goes with a raise, or a job arriving next
  // would start from that stale value.
  JobShare& job = job_shares_[{state.info.job, device}];
  if (!job_busy) {
    const double at = least_job.value_or(compute_start_[device]);
    if (at > job.vtime) {
      job.vtime = at;
      job.last_start.reset();
    }
  }
  // Itself, among its job's processes busy there (its own virtual time orders only those), or with
  // none busy, at the start of its job's latest grant there.
  std::optional<double> least;
  for (const auto& [id, other] : clients_) {
    if (id == client || other.info.priority != ipc::Priority::low || other.info.job != state.info.job) continue;
    if (!has_compute_work(id, other, device)) continue;
    const auto start = other.last_start.find(device);
    const double at = start == other.last_start.end() ? other.vtime_on(device) : start->second;
    least = std::min(least.value_or(at), at);
  }
  const double at = least.value_or(job.process_start);
  if (at > state.vtime_on(device)) {
    state.vtime[device] = at;
    state.last_start.erase(device);
  }
}

void BaymaxPolicy::charge_share(ClientState& state, std::uint32_t device, std::int64_t p) {
  double& vtime = state.vtime[device];
  state.last_start[device] = vtime;
  JobShare& job = job_shares_[{state.info.job, device}];
  job.process_start = std::max(job.process_start, vtime);
  vtime += static_cast<double>(p) / state.weight();
  job.last_start = job.vtime;
  double& start = compute_start_[device];
  start = std::max(start, job.vtime);
  job.vtime += static_cast<double>(p) / state.weight();
}

namespace {
bool is_transfer_engine(std::optional<Engine> engine) { return engine == Engine::h2d || engine == Engine::d2h; }
}  // namespace

bool BaymaxPolicy::is_transfer(const ipc::OpDescriptor& op) { return is_transfer_engine(engine_of(op)); }

bool BaymaxPolicy::has_transfer_work(ClientId client, const ClientState& state, std::uint32_t device) const {
  const auto queued = state.transfers_queued.find(device);
  if (queued != state.transfers_queued.end() && queued->second > 0) return true;
  for (auto it = in_flight_.lower_bound({client, 0}); it != in_flight_.end() && it->first.first == client; ++it) {
    if (it->second.device == device && is_transfer_engine(it->second.engine)) return true;
  }
  return false;
}

void BaymaxPolicy::charge_transfer_share(ClientState& state, std::uint32_t device, std::int64_t p) {
  const double cost = static_cast<double>(p) / state.weight();
  JobShare& job = job_shares_[{state.info.job, device}];
  double& start = transfer_start_[device];
  start = std::max(start, job.transfer_vtime);
  job.transfer_vtime += cost;
  double& own = state.transfer_vtime[device];
  job.transfer_process_start = std::max(job.transfer_process_start, own);
  own += cost;
}

void BaymaxPolicy::restart_transfers_if_idle(ClientId client, ClientState& state, std::uint32_t device) {
  if (has_transfer_work(client, state, device)) return;
  JobShare& job = job_shares_[{state.info.job, device}];
  const bool job_busy = std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    return entry.first != client && entry.second.info.priority == ipc::Priority::low &&
           entry.second.info.job == state.info.job && has_transfer_work(entry.first, entry.second, device);
  });
  if (!job_busy) job.transfer_vtime = std::max(job.transfer_vtime, transfer_start_[device]);
  double& own = state.transfer_vtime[device];
  own = std::max(own, job.transfer_process_start);
}

std::pair<double, double> BaymaxPolicy::fair_order(const ClientState& state) const {
  const ipc::OpDescriptor& head = state.queue.front().op;
  if (!is_transfer(head)) return {job_vtime(state, head.device), state.vtime_on(head.device)};
  const auto job = job_shares_.find({state.info.job, head.device});
  const auto own = state.transfer_vtime.find(head.device);
  return {job == job_shares_.end() ? 0 : job->second.transfer_vtime,
          own == state.transfer_vtime.end() ? 0 : own->second};
}

bool BaymaxPolicy::others_have_work(ClientId client, std::uint32_t device) const {
  return std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    const ClientState& other = entry.second;
    if (entry.first == client || other.info.priority != ipc::Priority::low) return false;
    if (other.be_compute_ns_on(device) > 0) return true;
    if (other.queue.empty()) return false;
    const ipc::OpDescriptor& head = other.queue.front().op;
    return head.device == device && engine_of(head) == Engine::compute;  // waiting for some
  });
}

BaymaxPolicy::Hold BaymaxPolicy::hold_of(ClientId client, const Queued& queued, std::int64_t now_ns) const {
  const ipc::OpDescriptor& op = queued.op;
  const auto engine = engine_of(op);
  if (!engine) return Hold::none;  // a mark
  const std::int64_t p = queued.predicted_ns;
  const std::int64_t backlog = be_backlog_ns(op.device, *engine, now_ns);
  const auto state_at = [this, &op](Engine e) {
    auto it = engines_.find({op.device, e});
    return it == engines_.end() ? EngineState{} : it->second;
  };
  const EngineState here = state_at(*engine);
  if (*engine == Engine::compute) {
    // The client's own share first: it holds only this client, and not for longer than kShareHoldNs.
    const std::int64_t share_since = clients_.at(client).share_held_since_ns;
    if ((share_since < 0 || now_ns - share_since <= kShareHoldNs) && ahead_of_share(client, op.device, now_ns))
      return Hold::share;
    // Budget first: a long op waiting for it must not close the engine to the others.
    if (is_long(queued)) {
      const double needed = std::min(static_cast<double>(long_op_cost(queued, now_ns)), long_op_budget_cap_ns(op.device));
      if (needed > 0 && long_op_budget_ns(op.device, now_ns) < needed) return Hold::budget;
      // The budget prices the queries that arrive while the op runs. A query already open or
      // waiting would wait for all of it, and so would everything queued behind that query. Not
      // for ever: a job whose queries never leave the system (overloaded, or always busy) would
      // starve the op, so after kLongOpWaitNs held it goes by the deadline test alone.
      const std::int64_t held_since = clients_.at(client).head_held_since_ns;
      const bool waited_enough = held_since >= 0 && now_ns - held_since > kLongOpWaitNs;
      if (!waited_enough && query_in_system(op.device, now_ns)) return Hold::deadline;
    }
    if (options_.baymax.preemptive(op.device)) {
      // Kernels of different processes are time-sliced: a query arriving later waits for its
      // slice, not behind every best-effort job's backlog. Each job's own backlog on each of its
      // streams (they run side by side in its slice) stays within the bound, and a job held by it
      // does not close the device to the others.
      const std::optional<bool> arrivals =
          options_.baymax.bound_by_slices ? arrivals_held(client, op.device, p) : std::nullopt;
      // The slices are the device's, not the job's: a head they hold closes the device's compute
      // engine to the jobs behind it, or a job already filling its slice (whose grants do not raise
      // the sum) would refill for ever ahead of one waiting for it to drain.
      if (arrivals && *arrivals) return Hold::engine;
      // bound_by_slices: a job alone with work may queue all it wants once a query arriving now is
      // known to wait at most its slices; next to another job with work, or one waiting for some,
      // it keeps its streams' bound too (measured: queueing freely next to another job put the
      // benchmark's mix at 0.98-1.04 x the target).
      if (!arrivals || others_have_work(client, op.device)) {
        // With no query in the system, one arriving would wait for a slice of each job with work
        // however deep its queue: the streams may run further ahead (idle_bound_factor), and once a
        // query is there nothing more goes until they are back under the bound.
        const std::int64_t stream_bound = options_.baymax.idle_bound_factor > 1 && !query_in_system(op.device, now_ns)
                                              ? idle_stream_bound_ns()
                                              : bound_.bound_ns();
        const auto& streams = clients_.at(client).be_compute_ns;
        const auto own = streams.find({op.device, op.stream});
        if (own != streams.end() && own->second + p > stream_bound) return Hold::own_bound;
      }
    } else {
      // Kernels run to their end in the order they came: a query arriving later waits for the
      // best-effort backlog, and for the work other high-priority clients have posted (a user test:
      // a job with an 8-ms target beside one with 30 ms and training, 16-24 % of its queries over,
      // nearly all while the other's query ran; 0.1-0.3 % without the training).
      // A lone op still goes whatever its length (the long-op budget rations long ones): held for the
      // others' work, a guessed or long op would wait for as long as another job keeps work posted.
      // Beside a high-priority job, credit the other best-effort clients still hold (given before it
      // came to the device) goes unasked: it counts as theirs already.
      if (here.be_ops > 0) {
        const double credit = high_priority_on(op.device) ? unspent_credit_ns(client, op.device) : 0.0;
        if (static_cast<double>(backlog + others_hp_work_ns(op.device) + p) + credit > static_cast<double>(bound_.bound_ns()))
          return Hold::engine;
      }
    }
  } else {
    // Transfers between host and device are rationed; device-local work (memsets, copies within
    // device memory) is not, but its backlog is bounded, as on a device that runs kernels to their
    // end (a query's own memset or copy shares the engine with it). Both wait for a high-priority
    // op on their engine.
    const std::uint32_t copies = transfer_slots_taken(op.device, now_ns);
    if (is_transfer(op) && options_.baymax.max_be_transfers != 0 && copies >= options_.baymax.max_be_transfers)
      return Hold::engine;
    if (*engine == Engine::local && here.be_ops > 0 && backlog + p > bound_.bound_ns()) return Hold::engine;
    if (here.hp_ops > 0 && live_hp_ops_on(op.device, *engine)) return Hold::engine;
  }
  // Each query to protect: its deadline, the time its job still needs for it (its own posted work
  // included), the time best-effort work may use without delaying it, and its job's posted device
  // work, which the queries of other jobs after it in deadline order wait for.
  struct Protected {
    std::int64_t deadline_ns, need_ns, idle_ns, outstanding_ns;
    // The blocking points at which best-effort slices can delay it (a preemptive device): its own
    // still to come and those of the queries ahead of it; infinite before the job's first query
    // closed (no profile: all the work counts, as on a device that runs work in order).
    double blocks;
    std::int64_t margin_ns;  // its job's safety margin
    ClientId client;
    bool waiting;  // a request not begun yet
    std::int64_t ahead_margins_ns = 0;  // the margins of its job's queries ahead of it, in need_ns
  };
  std::vector<Protected> queries;
  for (const auto& [id, state] : clients_) {
    if (state.info.priority != ipc::Priority::high || !state.on(op.device) || !state.info.target_ns) continue;
    const std::int64_t target = *state.info.target_ns;
    const std::int64_t outstanding = hp_outstanding_live(state);
    std::int64_t need = outstanding, idle = 0;
    const bool profiled = queries_.expected_query_ns(id) > 0;
    double blocks = profiled ? 0 : std::numeric_limits<double>::infinity();
    const OpenQuery* query = queries_.open_query(id);
    // Past saving, and perhaps never to close (a begin mark without its end; a job whose work never
    // drains): it stops holding best-effort work, which would otherwise wait for as long as the job
    // runs. Its job's later requests are still protected.
    if (query && overdue(*query, target, now_ns)) query = nullptr;
    if (query) {
      // Before its job's first query closed there is no profile (0 remaining): the query needs at
      // least its posted work, which best-effort work granted now queues behind on a device that
      // runs it in order (a review: a 3-ms best-effort kernel went beside an 8-ms query kernel
      // against a 10-ms target).
      need = profiled ? queries_.expected_remaining_ns(id, now_ns) : outstanding;
      // The best-effort work ahead, this op included, delays the query only by what of it is still
      // running when its program next waits; until then the device also has the query's own
      // outstanding work to do, so only the rest of that time is idle for best-effort work.
      idle = std::max<std::int64_t>(0, queries_.expected_unblocked_ns(id, now_ns) - outstanding);
      if (profiled) blocks = queries_.expected_blocking_points(id);
      // A job that says its arrivals: at most the bound of delay per query, as for one arriving later
      // (baymax_policy.h).
      std::int64_t deadline = query->opened_ns + target;
      if (profiled && queries_.says_arrivals(id))
        deadline = std::min(deadline, query->started_ns + queries_.expected_query_ns(id) + query_allowance_ns(id));
      queries.push_back(Protected{deadline, need, idle, outstanding, blocks, margin_of(state), id, false});
    }
    // Requests waiting in the job's own queue start when the ones before them are done (so what
    // delays the open query delays them by as much), and each then takes a whole query's time.
    // Each query ahead may also run over its estimate by up to the margin: those add up.
    const std::int64_t whole = queries_.expected_query_ns(id);
    const std::int64_t margin = margin_of(state);
    bool query_ahead = query != nullptr;  // an overdue query is not ahead of anything
    std::int64_t margins = 0;
    const auto behind = [&](std::int64_t arrived_ns) {
      if (query_ahead) {
        need += margin;
        margins += margin;
      }
      query_ahead = true;
      need += whole;
      if (profiled) blocks += queries_.expected_query_blocking_points(id);
      queries.push_back(Protected{arrived_ns + target, need, idle, 0, blocks, margin, id, true, margins});
    };
    for (const std::int64_t arrived_ns : queries_.waiting_arrivals(id)) behind(arrived_ns);
    // A job that says when its requests arrive has its target counted from there, so the requests
    // that have not arrived yet need protecting too: the best-effort work granted now delays every
    // one that arrives before the job's queue drains. A request arriving now is the one it delays
    // most (the ones after it have their deadlines later and wait for the same queue), so while the
    // job has a request in the system it is protected as if it had arrived: an open query can then
    // be made to wait only until a request arriving behind it could still finish in time, not until
    // its own deadline. With nothing in the system the bound protects the next arrival instead:
    // best-effort work flows up to it (on a preemptive device, per stream, up to idle_bound_factor x
    // the bound).
    if (profiled && query_ahead && queries_.says_arrivals(id)) behind(now_ns);
  }
  std::sort(queries.begin(), queries.end(), [](const Protected& a, const Protected& b) {
    return std::tie(a.deadline_ns, a.client, a.waiting) < std::tie(b.deadline_ns, b.client, b.waiting);
  });
  // On a device that time-slices processes' kernels, best-effort work delays a query by the slices
  // it takes, not by its length: at each blocking point the query's kernels wait for at most one
  // slice of each best-effort job that still has work there, and a job delays it by no more than
  // the work it has left. Until the query's next blocking point the jobs with work take turns in
  // its idle time, so each has run its share of it by then. A grant that adds nothing to that delay
  // (its job fills a slice at every blocking point anyway) holds nothing: holding it would not make
  // the query any faster.
  const bool sliced = options_.baymax.preemptive(op.device) && *engine == Engine::compute;
  // Each best-effort job's outstanding compute work (all its streams: together they take at most
  // that long), with this op for its own job.
  const auto be_work = sliced && !queries.empty() ? be_compute_work(client, op.device)
                                                  : std::vector<std::pair<ClientId, std::int64_t>>{};
  const auto timeslice = static_cast<double>(options_.baymax.timeslice(op.device));
  const auto delay_of = [&](const Protected& query, bool with_op) {
    const double slices = query.blocks * timeslice;
    return static_cast<std::int64_t>(slice_delay(be_work, client, p, with_op, query.idle_ns, slices));
  };
  // On a device that runs kernels to their end, every other client's posted work runs before the
  // query's next ops, whatever its deadline.
  const bool in_order = !options_.baymax.preemptive(op.device);
  const std::int64_t hp_here = in_order ? hp_work_on(op.device) : 0;
  std::int64_t ahead = 0;  // device work of the other jobs' queries with earlier deadlines
  std::vector<std::pair<ClientId, std::int64_t>> added;  // of which each job's own (its need counts it)
  for (const Protected& query : queries) {
    auto own = std::find_if(added.begin(), added.end(), [&](const auto& a) { return a.first == query.client; });
    const std::int64_t earlier = ahead - (own == added.end() ? 0 : own->second);
    const std::int64_t others =
        in_order ? std::max(earlier, hp_here - hp_compute_on(clients_.at(query.client), op.device)) : earlier;
    const std::int64_t due = now_ns + query.need_ns + others;
    // A waiting request that is late even with no best-effort work and no margin (neither its own
    // nor those of the queries ahead of it) is past saving: holding best-effort work for it would
    // only starve that work while an overloaded job's queue refills. (The open query still holds,
    // late or not, until it closes.) One late only by the margins ahead holds: counting them here
    // gave up on the third request of a burst while best-effort work was granted ahead of the
    // first two (benchmark, fifo device, the mix at load 0.2: 22 ms of ResNet-50 kernels granted
    // as the first began, and the third over its target).
    if (query.waiting && due - query.ahead_margins_ns > query.deadline_ns) continue;
    if (sliced) {
      const std::int64_t delay = delay_of(query, true);
      if (due + query.margin_ns + delay > query.deadline_ns && delay > delay_of(query, false))
        return Hold::deadline;
    } else {
      const std::int64_t delay = std::max<std::int64_t>(0, backlog + p - query.idle_ns);
      if (due + query.margin_ns + delay > query.deadline_ns) return Hold::deadline;
    }
    if (query.outstanding_ns == 0) continue;
    ahead += query.outstanding_ns;
    if (own == added.end()) {
      added.emplace_back(query.client, query.outstanding_ns);
    } else {
      own->second += query.outstanding_ns;
    }
  }
  return Hold::none;
}

void BaymaxPolicy::extend_credit(ClientId client, ClientState& state, Decisions& decisions) {
  // Credit is what a job already holds when a high-priority job comes to the device, and then goes
  // unasked (a user test: 32 ops of 3 ms on credit ran ahead of the first queries of a job that came,
  // on a device that runs kernels to their end). So all the best-effort clients that may hold some
  // there share the bound: each gets its part of it in ops of its longest recent one (at least one
  // op, at most credit_ops). On a device that runs kernels to their end the part is of what the
  // bound has left over the best-effort work in flight (credit bounds what goes unasked, not what is
  // in flight: a job that launches far ahead of its synchronisations would queue all it launches).
  // None while its ops are guessed: a 3-ms kernel the predictor does not know counts as every
  // kernel's mean, microseconds.
  if (options_.credit_ops == 0 || state.posted == 0 || !state.queue.empty() || state.guessed_within > 0) return;
  double room = static_cast<double>(bound_.bound_ns());
  bool in_order = false;
  state.for_each_device([&](std::uint32_t device) {
    if (options_.baymax.preemptive(device)) return;
    in_order = true;
    room = std::min(room, static_cast<double>(bound_.bound_ns() - be_backlog_ns(device, Engine::compute, last_now_ns_)));
  });
  const CreditBeside beside = credit_beside(client, state);
  if (in_order) room -= beside.unspent_ns;  // the others' credit not spent yet
  const double longest = std::max(state.longest_recent_ns, 1.0);
  if (in_order && room < longest) return;
  const double by_time = room / (longest * static_cast<double>(beside.holders));
  const auto credit = static_cast<std::uint32_t>(std::clamp(by_time, 1.0, static_cast<double>(options_.credit_ops)));
  if (state.granted >= state.posted + credit / 2 && state.granted > state.posted) return;  // enough left
  // With a high-priority job: no credit, every op asks. Beside another best-effort job whose weight
  // per process differs: none either, so each op meets its stream's bound and the share hold bites
  // (credit let a job's queue on the device run hundreds of ms deep, past any hold).
  bool shared = !state.placed();  // on no device yet: it may be one with a high-priority job
  // A high-priority job on no device yet (registered, before its first GPU op) may come to this one:
  // the credit held then would go unasked ahead of its first query (the user test above: the first
  // query of a job that joined running best-effort work met all of it). For kUnplacedHighNs.
  shared = shared || std::any_of(clients_.begin(), clients_.end(), [this](const auto& entry) {
             const ClientState& other = entry.second;
             return other.info.priority == ipc::Priority::high && !other.placed() &&
                    last_now_ns_ - other.registered_ns < kUnplacedHighNs;
           });
  // Nor while another client waits there for a grant: credit would pass its op for as long as it is
  // renewed (a user test: a job whose first op came while another ran on credit waited 5 s, until
  // the other exited, whatever their weights).
  state.for_each_device([&](std::uint32_t device) {
    shared = shared || high_priority_on(device) || beside_another_weight(client, device, last_now_ns_) ||
             another_waits_on(client, device);
  });
  if (shared) return;
  state.granted = state.posted + credit;
  decisions.push_back(Grant{client, state.granted});
}

void BaymaxPolicy::charge_holds(std::int64_t now_ns) {
  // Saturate rather than wrap: a wrapped counter reads as a reset.
  const auto add = [](std::int64_t& total, std::int64_t ns) {
    total = total > std::numeric_limits<std::int64_t>::max() - ns ? std::numeric_limits<std::int64_t>::max() : total + ns;
  };
  const std::int64_t elapsed = std::max<std::int64_t>(0, now_ns - waiting_since_ns_);
  waiting_since_ns_ = std::max(waiting_since_ns_, now_ns);
  if (elapsed == 0) return;
  for (const std::uint32_t device : idle_held_devices_) add(idle_held_ns_[device], elapsed);
  for (const auto& [id, reason] : waiting_) {
    const auto r = static_cast<std::size_t>(reason);
    add(held_ns_[r], elapsed);
    auto client = clients_.find(id);
    if (client == clients_.end()) continue;
    auto job = held_by_job_.find(client->second.info.job);
    if (job == held_by_job_.end()) {
      if (held_by_job_.size() >= kMaxHoldJobs) continue;  // only the daemon-wide total
      job = held_by_job_.try_emplace(client->second.info.job).first;
    }
    add(job->second[r], elapsed);
  }
}

std::optional<Policy::HeldHead> BaymaxPolicy::held_head(ClientId client) const {
  const auto held = std::find_if(waiting_.begin(), waiting_.end(), [client](const auto& w) { return w.first == client; });
  const auto state = clients_.find(client);
  if (held == waiting_.end() || state == clients_.end() || state->second.queue.empty()) return std::nullopt;
  const Queued& head = state->second.queue.front();
  return HeldHead{head.op, head.predicted_ns, head.expected_ns, held->second};
}

Decisions BaymaxPolicy::grant_ready(std::int64_t now_ns) {
  Decisions decisions;
  last_now_ns_ = std::max(last_now_ns_, now_ns);  // every event ends here
  charge_holds(now_ns);
  for (;;) {
    waiting_.clear();
    const auto held = [this](ClientId id, HoldReason reason) { waiting_.emplace_back(id, reason); };
    // Least virtual time first. A client whose head the engine's state holds (the bound, the
    // transfer limit) closes the engine to the clients behind it, so short ops of one client cannot
    // starve a long op of another. A head held only by a query's deadline does not: a shorter op of
    // another client may still fit the query's slack, and the long op goes after the query, when
    // the bound (which the shorter ones cannot pass then) holds it and closes the engine for it.
    std::vector<std::tuple<double, double, ClientId>> order;  // the job's, then the process's
    for (const auto& [id, state] : clients_) {
      if (state.queue.empty()) continue;
      const auto [job, own] = fair_order(state);
      order.emplace_back(job, own, id);
    }
    std::sort(order.begin(), order.end());
    std::set<EngineKey> closed;
    std::set<EngineKey> closed_until_no_query;  // by a head the deadline held past kDeadlineHoldNs
    std::set<std::uint32_t> budget_reserved;  // devices whose budget a held long op waits for
    ClientId chosen = 0;
    bool found = false;
    for (const auto& entry : order) {
      const ClientId id = std::get<2>(entry);
      const Queued& head = clients_.at(id).queue.front();
      const auto engine = engine_of(head.op);
      const bool only_till_no_query = engine && closed_until_no_query.contains({head.op.device, *engine});
      if ((engine && closed.contains({head.op.device, *engine})) ||
          (budget_reserved.contains(head.op.device) && long_op_cost(head, now_ns) > 0)) {
        held(id, HoldReason::behind);
        continue;
      }
      ClientState& client = clients_.at(id);
      Hold hold = hold_of(id, head, now_ns);
      // Behind a long op waiting for the queries to be done: only what is done before they are (on a
      // device that runs work in order, after the high-priority work posted there too).
      const std::int64_t ahead = be_backlog_ns(head.op.device, *engine, now_ns) +
                                 (options_.baymax.preemptive(head.op.device) ? 0 : hp_work_on(head.op.device));
      if (only_till_no_query && hold == Hold::none &&
          ahead + head.predicted_ns > until_no_query_ns(head.op.device, now_ns)) {
        held(id, HoldReason::behind);
        continue;
      }
      if (hold == Hold::none) {
        chosen = id;
        found = true;
        break;
      }
      if (hold == Hold::budget) {
        client.head_held_since_ns = -1;  // the deadline hold limit counts from when it has budget
        budget_reserved.insert(head.op.device);
        held(id, HoldReason::budget);
        continue;
      }
      if (hold == Hold::own_bound) {
        client.head_held_since_ns = -1;
        held(id, HoldReason::bound);
        continue;
      }
      if (hold == Hold::share) {  // its own wait: the deadline and long-op clocks run on
        if (client.share_held_since_ns < 0) client.share_held_since_ns = now_ns;
        held(id, HoldReason::share);
        continue;
      }
      if (hold == Hold::deadline) {
        held(id, HoldReason::deadline);
      } else {
        held(id, engine == Engine::compute ? HoldReason::bound : HoldReason::transfer);
      }
      if (client.head_held_since_ns < 0) client.head_held_since_ns = now_ns;
      if (engine && hold == Hold::deadline && now_ns - client.head_held_since_ns > kDeadlineHoldNs) {
        closed_until_no_query.insert({head.op.device, *engine});
      }
      if (engine && hold == Hold::engine) closed.insert({head.op.device, *engine});
    }
    if (!found) break;
    ClientState& state = clients_.at(chosen);
    const Queued next = state.queue.front();
    state.queue.pop_front();
    state.head_held_since_ns = -1;
    state.share_held_since_ns = -1;
    if (engine_of(next.op)) {
      const bool priced_long = spend_long_budget(next, now_ns);
      account(chosen, next.op, next.predicted_ns, false, now_ns, priced_long);
      if (engine_of(next.op) == Engine::compute) {
        --state.compute_queued[next.op.device];
        charge_share(state, next.op.device, next.point_ns());
      }
      if (is_transfer(next.op)) {
        --state.transfers_queued[next.op.device];
        charge_transfer_share(state, next.op.device, next.point_ns());
      }
    }
    state.granted = std::max(state.granted, next.op.seq);
    decisions.push_back(Grant{chosen, next.op.seq});
  }
  for (auto& [id, state] : clients_) {
    if (state.info.priority == ipc::Priority::low) extend_credit(id, state, decisions);
  }
  note_idle_holds();
  return decisions;
}

void BaymaxPolicy::note_idle_holds() {
  idle_held_devices_.clear();
  for (const auto& [id, reason] : waiting_) {
    const auto it = clients_.find(id);
    if (it == clients_.end() || it->second.info.priority != ipc::Priority::low || it->second.queue.empty()) continue;
    const ipc::OpDescriptor& op = it->second.queue.front().op;
    if (engine_of(op) == Engine::compute) idle_held_devices_.insert(op.device);
  }
  std::erase_if(idle_held_devices_, [this](std::uint32_t device) {  // busy: compute ops in flight, any priority
    const auto it = engines_.find({device, Engine::compute});
    return it != engines_.end() && it->second.be_ops + it->second.hp_ops > 0;
  });
}

Decisions BaymaxPolicy::op_posted(const OpPosted& event) {
  const ipc::OpDescriptor& op = event.op;
  ClientState& state = state_of(event.client, event.priority);
  state.posted = std::max(state.posted, op.seq);
  if (engine_of(op) && !state.devices.contains(op.device)) {
    // The job is on a new device now: budgets are settled at the old rates, and start there.
    settle_long_budgets(event.now_ns);
    state.devices.insert(op.device);
    refresh_long_budgets(event.now_ns);
  }
  if (event.priority == ipc::Priority::low && engine_of(op) == Engine::compute) {
    state.compute_posted_ns[op.device] = event.now_ns;
  }
  std::int64_t p = predicted(event);
  // A best-effort kernel the predictor does not know, on a device that runs kernels to their end,
  // counts as the bound: its guess is every kernel's mean, and a query that comes waits for all of
  // it (a user test: the first query after gpuqosd started met five or six 2-ms kernels guessed at
  // 10 us, 10.7-31 ms against an 8-ms target). So one at a time until its kernel is learned, for at
  // most kGuessedBoundOps of a client's ops: one whose completions are never learned (coarse, or
  // always beside another client's) would otherwise go one at a time for good.
  if (event.guessed && event.priority == ipc::Priority::low && engine_of(op) == Engine::compute &&
      !options_.baymax.preemptive(op.device) && state.guessed_as_bound < kGuessedBoundOps) {
    ++state.guessed_as_bound;
    p = std::max(p, bound_.bound_ns());
  }
  if (event.priority == ipc::Priority::low && engine_of(op)) {
    state.longest_recent_ns = std::max(static_cast<double>(p), kLongestRecentDecay * state.longest_recent_ns);
    state.guessed_within = event.guessed ? kGuessedMemoryOps : state.guessed_within - (state.guessed_within > 0 ? 1 : 0);
  }
  if (event.priority == ipc::Priority::high) {
    account(event.client, op, p, true, event.now_ns);
    const OpenQuery* before = queries_.open_query(event.client);
    const std::uint64_t query_before = before ? before->number : 0;
    const std::uint64_t ops_before = before ? before->ops : 0;
    if (before && op.kind == ipc::OpKind::sync) {
      // A later synchronisation is the open query's closing mark now: what was posted after the
      // one before is its own again (QueryTracker counts it there).
      for (const auto& [seq, next] : state.next_query_ops) state.count_in_query(next);
      state.next_query_ops.clear();
      ClientState::FirstCompute next_first = state.take_next_first_compute(query_before);
      if (next_first.seq != 0 && state.first_compute.query != query_before) {
        state.first_compute = std::move(next_first);  // the query had no compute op before its first close
      }
    }
    learn(queries_.posted(event.client, op, event.now_ns));
    // The point prediction: what a query's work takes, for tight_targets() to judge a target by (the
    // upper estimate read an untrained gpuqosd's 4 ms of another job's kernels as 10 ms ahead).
    const std::int64_t point = std::min(expected(event), p);
    const OpenQuery* query = queries_.open_query(event.client);
    if (query && state.work_query != query->number) {  // what was counted is of a query that closed unlearned
      forget_query_work(state);
      state.work_query = query->number;
    }
    if (query && engine_of(op)) {
      // Counted in it: not one posted after its closing mark, which is the next query's.
      const bool counted = query->number != query_before || query->ops != ops_before;
      const ClientState::NextOp work{p, op.device, engine_of(op) == Engine::compute ? std::max<std::int64_t>(1, point) : 0};
      if (counted) {
        state.count_in_query(work);
      } else {
        state.next_query_ops.insert_or_assign(op.seq, work);
        if (engine_of(op) == Engine::compute && state.next_first_compute.size() < ClientState::kMaxNextFirstCompute) {
          state.next_first_compute.emplace(op.seq,
                                           first_compute_of(event.client, 0, op, queries_.last_posted_ns(event.client), point));
        }
      }
      // The query's first compute op, whose completion tells how long it waited behind the work
      // posted before it (at most that work's predicted time: with none ahead, a longer span is the
      // op's own, the predictor short).
      if (counted && engine_of(op) == Engine::compute && state.first_compute.query != query->number) {
        state.first_compute = first_compute_of(event.client, query->number, op, query->last_op_ns, point);
      }
    }
    return grant_ready(event.now_ns);
  }
  if (engine_of(op) == Engine::compute) restart_if_idle(event.client, state, op.device);  // low priority here
  if (is_transfer(op)) restart_transfers_if_idle(event.client, state, op.device);
  if (op.seq <= state.granted && state.queue.empty()) {
    // Credit, spent without asking: charged all the same, to the budget and to the job's share.
    const bool priced_long = spend_long_budget(Queued{op, p, expected(event)}, event.now_ns);
    account(event.client, op, p, false, event.now_ns, priced_long);
    if (engine_of(op) == Engine::compute) charge_share(state, op.device, expected(event));
    if (is_transfer(op)) charge_transfer_share(state, op.device, expected(event));
    return grant_ready(event.now_ns);
  }
  if (is_transfer(op)) ++state.transfers_queued[op.device];
  if (engine_of(op) == Engine::compute) ++state.compute_queued[op.device];
  push_coalescing_marks(state.queue, Queued{op, p, expected(event)}, [](const Queued&) { return true; });
  return grant_ready(event.now_ns);
}

Decisions BaymaxPolicy::op_completed(const OpCompleted& event) {
  const ipc::CompletionDescriptor& completion = event.completion;
  if (auto flight = in_flight_.find({event.client, completion.seq}); flight != in_flight_.end()) {
    charge_overrun(flight->second, event.own_ns, event.now_ns);
  } else if (auto stuck = retired_.find({event.client, completion.seq}); stuck != retired_.end()) {
    charge_overrun(stuck->second.flight, event.own_ns, event.now_ns);  // taken for stuck, but it ran
    retired_.erase(stuck);
  }
  first_compute_completion(event.client, completion);  // while it is in flight
  retire_earlier_on_its_stream(event.client, completion, event.now_ns);
  retire(event.client, completion.seq, completion.end_ns > 0 ? std::optional(completion.end_ns) : std::nullopt,
         event.now_ns, true);
  backlog_.complete(event.client, completion);
  auto it = clients_.find(event.client);
  if (it != clients_.end() && it->second.info.priority == ipc::Priority::high) {
    // Done before its query closed: not in the one QueryTracker reopens.
    it->second.next_query_ops.erase(completion.seq);
    it->second.next_first_compute.erase(completion.seq);
    learn(queries_.completed(event.client, completion, event.now_ns));
  }
  return grant_ready(event.now_ns);
}

void BaymaxPolicy::retire_earlier_on_its_stream(ClientId client, const ipc::CompletionDescriptor& completion,
                                                std::int64_t now_ns) {
  const auto done = in_flight_.find({client, completion.seq});
  if (done == in_flight_.end() || !done->second.high) return;
  std::vector<std::uint64_t> earlier;
  for (auto it = in_flight_.lower_bound({client, 0}); it != done; ++it) {
    if (it->second.stream == done->second.stream && it->second.device == done->second.device) earlier.push_back(it->first.second);
  }
  const std::optional<std::int64_t> end = completion.end_ns > 0 ? std::optional(completion.end_ns) : std::nullopt;
  for (const std::uint64_t seq : earlier) retire(client, seq, end, now_ns, true);
}

std::size_t BaymaxPolicy::in_flight_ops(ClientId client) const {
  const auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.in_flight_ops;
}

Decisions BaymaxPolicy::client_gone(ClientId client, std::int64_t now_ns) {
  std::vector<std::uint64_t> seqs;
  for (auto it = in_flight_.lower_bound({client, 0}); it != in_flight_.end() && it->first.first == client; ++it) {
    seqs.push_back(it->first.second);
  }
  for (std::uint64_t seq : seqs) retire(client, seq, std::nullopt, now_ns, false);
  retired_.erase(retired_.lower_bound({client, 0}),
                 retired_.upper_bound({client, std::numeric_limits<std::uint64_t>::max()}));
  queries_.client_gone(client);
  std::erase_if(wait_sums_, [client](const auto& entry) { return entry.first.first == client; });
  bound_.forget(client);
  backlog_.drop_client(client);
  settle_long_budgets(now_ns);
  charge_holds(now_ns);  // its last wait, while its job is still known
  const std::string job = clients_.contains(client) ? clients_.at(client).info.job : std::string();
  clients_.erase(client);
  if (std::none_of(clients_.begin(), clients_.end(), [&](const auto& entry) { return entry.second.info.job == job; })) {
    std::erase_if(job_shares_, [&](const auto& entry) { return entry.first.first == job; });
  }
  refresh_long_budgets(now_ns);
  return grant_ready(now_ns);
}

// Only a best-effort op holds its own client's next call; a high-priority one, however late, still
// keeps best-effort work off its engine until kStaleOpNs.
std::int64_t BaymaxPolicy::slot_free_at_ns(const InFlight& flight) {
  const std::int64_t hold_ns = std::clamp(kSlotFactor * std::min(flight.predicted_ns, kStaleOpNs), kSlotFloorNs, kStuckOpNs);
  return flight.since_ns + hold_ns;
}

std::uint32_t BaymaxPolicy::transfer_slots_taken(std::uint32_t device, std::int64_t now_ns) const {
  const auto from = be_transfer_slots_.lower_bound({device, now_ns + 1, 0, 0});  // free at now: free
  const auto to = be_transfer_slots_.lower_bound({device + 1, std::numeric_limits<std::int64_t>::min(), 0, 0});
  return static_cast<std::uint32_t>(std::distance(from, to));
}

std::int64_t BaymaxPolicy::stale_at_ns(const InFlight& flight) {
  const std::int64_t stuck_ns = std::max(kStuckOpNs, kStuckFactor * std::min(flight.predicted_ns, kStaleOpNs));
  return flight.since_ns + (flight.high ? kStaleOpNs : std::min(kStaleOpNs, stuck_ns));
}

Decisions BaymaxPolicy::tick(std::int64_t now_ns) {
  backlog_.expire(now_ns);
  queries_.expire(now_ns, kStaleQueryNs);  // what its queries counted is dropped at the next (work_query)
  std::vector<std::pair<ClientId, std::uint64_t>> stale;
  for (auto it = by_stale_at_.begin(); it != by_stale_at_.end() && it->first < now_ns; ++it) stale.push_back(it->second);
  std::sort(stale.begin(), stale.end());  // retired in the order of their clients and seqs, as ever
  for (const auto& key : stale) {
    const InFlight& flight = in_flight_.at(key);
    if (!flight.high && flight.engine == Engine::compute && !flight.priced_long) {
      retired_.insert_or_assign(key, Retired{flight, now_ns});
      if (retired_.size() > kMaxRetiredOps) {
        retired_.erase(std::min_element(retired_.begin(), retired_.end(), [](const auto& a, const auto& b) {
          return a.second.retired_ns < b.second.retired_ns;
        }));
      }
    }
    retire(key.first, key.second, std::nullopt, now_ns, false);
  }
  return grant_ready(now_ns);
}

}  // namespace gpuqos::scheduler

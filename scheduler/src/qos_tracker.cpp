// The QoS tracker: latency histograms, best-effort progress windows and per-job bookkeeping.
#include "gpuqos/scheduler/qos_tracker.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

namespace gpuqos::scheduler {
namespace {

constexpr std::int64_t kSubBuckets = std::int64_t{1} << LatencyHistogram::kSubBucketBits;

}  // namespace

// --- LatencyHistogram ---

std::size_t LatencyHistogram::bucket_of(std::int64_t value_ns) {
  if (value_ns < kSubBuckets) return value_ns < 0 ? 0 : static_cast<std::size_t>(value_ns);
  const int exponent = std::bit_width(static_cast<std::uint64_t>(value_ns)) - 1;
  if (exponent > kMaxExponent) return kBucketCount - 1;
  const int shift = exponent - kSubBucketBits;
  return (static_cast<std::size_t>(shift + 1) << kSubBucketBits) +
         static_cast<std::size_t>((value_ns >> shift) - kSubBuckets);
}

std::int64_t LatencyHistogram::bucket_low_ns(std::size_t bucket) {
  if (bucket < static_cast<std::size_t>(kSubBuckets)) return static_cast<std::int64_t>(bucket);
  const std::size_t group = bucket >> kSubBucketBits;  // >= 1
  const auto sub = static_cast<std::int64_t>(bucket & (kSubBuckets - 1));
  return (kSubBuckets + sub) << (group - 1);
}

std::int64_t LatencyHistogram::bucket_high_ns(std::size_t bucket) {
  if (bucket < static_cast<std::size_t>(kSubBuckets)) return static_cast<std::int64_t>(bucket);
  const std::size_t group = bucket >> kSubBucketBits;
  return bucket_low_ns(bucket) + (std::int64_t{1} << (group - 1)) - 1;
}

void LatencyHistogram::record(std::int64_t value_ns) {
  value_ns = std::max<std::int64_t>(0, value_ns);
  const std::size_t bucket = bucket_of(value_ns);
  if (counts_.size() <= bucket) counts_.resize(bucket + 1, 0);
  ++counts_[bucket];
  const auto bound = std::lower_bound(kLeBoundsNs.begin(), kLeBoundsNs.end(), value_ns);
  if (bound != kLeBoundsNs.end()) ++within_[static_cast<std::size_t>(bound - kLeBoundsNs.begin())];
  min_ns_ = count_ == 0 ? value_ns : std::min(min_ns_, value_ns);
  max_ns_ = count_ == 0 ? value_ns : std::max(max_ns_, value_ns);
  ++count_;
  sum_ns_ += static_cast<double>(value_ns);
}

std::uint64_t LatencyHistogram::count_at_most(std::size_t bound) const {
  std::uint64_t count = 0;
  for (std::size_t i = 0; i <= bound && i < within_.size(); ++i) count += within_[i];
  return count;
}

std::uint64_t LatencyHistogram::rank_for(double percentile, std::uint64_t count) {
  if (count == 0) return 0;
  // p * n / 100 is exact for whole p; the factor absorbs the rounding of 99.9 * n.
  const double exact = std::clamp(percentile, 0.0, 100.0) * static_cast<double>(count) / 100.0;
  const double rank = std::ceil(exact * (1.0 - 1e-12));
  return std::clamp<std::uint64_t>(static_cast<std::uint64_t>(std::max(rank, 1.0)), 1, count);
}

std::int64_t LatencyHistogram::percentile_ns(double percentile) const {
  const std::uint64_t rank = rank_for(percentile, count_);
  if (rank == 0) return 0;
  std::uint64_t seen = 0;
  for (std::size_t bucket = 0; bucket < counts_.size(); ++bucket) {
    seen += counts_[bucket];
    if (seen < rank) continue;
    const std::int64_t low = bucket_low_ns(bucket), high = bucket_high_ns(bucket);
    if (bucket == kBucketCount - 1 && max_ns_ > high) return max_ns_;  // the top bucket holds all larger ones too
    return std::clamp(low + (high - low) / 2, min_ns_, max_ns_);
  }
  return max_ns_;
}

// --- ProgressWindow ---

namespace {

std::int64_t slot_index(std::int64_t ns) {  // floor(ns / kSlotNs), for times before 0 too
  return ns / ProgressWindow::kSlotNs - (ns % ProgressWindow::kSlotNs < 0 ? 1 : 0);
}

}  // namespace

ProgressWindow::Slot* ProgressWindow::slot_for(std::int64_t index) {
  constexpr auto kRing = static_cast<std::int64_t>(kSlots);
  Slot& slot = slots_[static_cast<std::size_t>((index % kRing + kRing) % kRing)];
  if (slot.index > index) return nullptr;  // it holds a later slot's: this one is out of the ring
  if (slot.index != index) slot = Slot{index, 0, 0};
  return &slot;
}

void ProgressWindow::add_ops(std::int64_t now_ns, std::uint64_t ops) {
  if (Slot* slot = slot_for(slot_index(now_ns))) slot->ops += ops;
}

void ProgressWindow::add_time(std::int64_t start_ns, std::int64_t end_ns) {
  if (end_ns <= start_ns) return;
  // Only the slots the ring can hold behind the latest: older time is in the totals only.
  const std::int64_t last = slot_index(end_ns - 1);
  for (std::int64_t index = std::max(slot_index(start_ns), last - static_cast<std::int64_t>(kSlots) + 1); index <= last;
       ++index) {
    const std::int64_t from = std::max(start_ns, index * kSlotNs), to = std::min(end_ns, (index + 1) * kSlotNs);
    if (Slot* slot = slot_for(index)) slot->device_ns += to - from;
  }
}

ProgressWindow::Rate ProgressWindow::rate(std::int64_t now_ns, std::int64_t since_ns) const {
  const std::int64_t newest = slot_index(now_ns);
  const std::int64_t oldest = newest - static_cast<std::int64_t>(kSlots) + 1;
  std::uint64_t ops = 0;
  std::int64_t device_ns = 0;
  for (const Slot& slot : slots_) {
    if (slot.index < oldest || slot.index > newest) continue;
    ops += slot.ops;
    device_ns += slot.device_ns;
  }
  // At least one slot long: a job seen a millisecond ago has no meaningful rate yet.
  const std::int64_t span_ns = std::max(kSlotNs, now_ns - std::max(oldest * kSlotNs, since_ns));
  const double seconds = static_cast<double>(span_ns) / 1e9;
  return Rate{static_cast<double>(ops) / seconds, static_cast<double>(device_ns) / static_cast<double>(span_ns)};
}

// --- CoveredTime ---

std::int64_t CoveredTime::add(std::int64_t start_ns, std::int64_t end_ns, std::int64_t now_ns,
                              const std::function<void(std::int64_t, std::int64_t)>& piece) {
  using Interval = boost::icl::interval_set<std::int64_t>::interval_type;
  if (now_ns - kHorizonNs > forgotten_before_ns_) {
    forgotten_before_ns_ = now_ns - kHorizonNs;
    spans_.erase(Interval::right_open(std::numeric_limits<std::int64_t>::min(), forgotten_before_ns_));
  }
  start_ns = std::max(start_ns, forgotten_before_ns_);
  if (end_ns <= start_ns) return 0;
  const auto span = Interval::right_open(start_ns, end_ns);
  // The gaps of the set within the span, in order (not `spans_ & span`, which copies the set).
  std::int64_t added = 0, from = start_ns;
  const auto take = [&](std::int64_t to) {
    if (to <= from) return;
    added += to - from;
    if (piece) piece(from, to);
  };
  const auto [first, last] = spans_.equal_range(span);
  for (auto it = first; it != last; ++it) {
    take(std::min(it->lower(), end_ns));
    from = std::max(from, it->upper());
  }
  take(end_ns);
  spans_ += span;
  while (spans_.iterative_size() > kMaxIntervals) {
    const auto oldest = spans_.begin();
    spans_ += Interval::right_open(oldest->lower(), std::next(oldest)->lower());  // joins the two
  }
  return added;
}

// --- GrantCounters ---

GrantCounters& GrantCounters::operator+=(const GrantCounters& other) {
  grants += other.grants;
  ops_held += other.ops_held;
  held_wait_ns_total += other.held_wait_ns_total;
  held_wait_ns_max = std::max(held_wait_ns_max, other.held_wait_ns_max);
  if (other.held_ns_by_reason) {
    if (!held_ns_by_reason) held_ns_by_reason.emplace();
    for (std::size_t i = 0; i < kHoldReasons; ++i) (*held_ns_by_reason)[i] += (*other.held_ns_by_reason)[i];
  }
  return *this;
}

// --- QosTracker ---

QosTracker::Job& QosTracker::add_job(const std::string& name, std::int64_t now_ns) {
  if (jobs_.size() >= kMaxJobs) {
    // Drop the job idle longest; one with connected clients only when every job has some, and one
    // with measured queries (a service's latency record) only when every job without clients has
    // some. A user test: 270 best-effort processes of names of their own (a site naming batch jobs by
    // their scheduler's id) dropped an idle service's p99 and violations from status and metrics.
    const auto rank = [](const Job& job) {
      return std::make_tuple(job.clients != 0, job.latency.count() != 0, job.last_active_ns);
    };
    auto victim = std::min_element(jobs_.begin(), jobs_.end(),
                                   [&](const auto& a, const auto& b) { return rank(a.second) < rank(b.second); });
    jobs_.erase(victim);
  }
  Job& job = jobs_[name];
  job.first_seen_ns = job.last_active_ns = now_ns;
  return job;
}

QosTracker::Job* QosTracker::job_of(ClientId client, std::int64_t now_ns, Activity activity) {
  auto state = clients_.find(client);
  if (state == clients_.end()) return nullptr;
  auto it = jobs_.find(state->second.job);
  Job* job = nullptr;
  if (it != jobs_.end()) {
    job = &it->second;
  } else {  // dropped while this client was connected: start it again
    job = &restart_job(state->second.job, now_ns);
  }
  if (activity == Activity::active) job->last_active_ns = now_ns;
  return job;
}

QosTracker::Job& QosTracker::restart_job(const std::string& name, std::int64_t now_ns) {
  Job& job = add_job(name, now_ns);
  job.priority = priority_of_job(name);
  for (const auto& [id, other] : clients_) job.clients += other.job == name;
  return job;
}

void QosTracker::client_seen(ClientId client, const std::string& job, ipc::Priority priority, std::int64_t now_ns) {
  if (job_of(client, now_ns) != nullptr) return;
  clients_.emplace(client, ClientState{job, priority});
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {  // new, or dropped while other processes of it were connected (a review)
    restart_job(job, now_ns);
    return;
  }
  // Processes of one job name at both priorities (a server and its warm-up client, say): the job is
  // high while any of its connected processes is, so its queries are not shown as a low job's.
  it->second.priority = priority_of_job(job);
  ++it->second.clients;
  it->second.last_active_ns = now_ns;
}

void QosTracker::client_marks(ClientId client, std::int64_t now_ns) {
  if (job_of(client, now_ns) != nullptr) clients_.at(client).marks = true;
}

void QosTracker::client_left(ClientId client, const GrantCounters& counters, std::int64_t now_ns) {
  departed_ += counters;
  auto state = clients_.find(client);
  if (state == clients_.end()) return;
  const std::string job = state->second.job;
  clients_.erase(state);
  if (auto it = jobs_.find(job); it != jobs_.end()) {
    if (it->second.clients > 0) --it->second.clients;
    it->second.last_active_ns = now_ns;
    // Its priority is its remaining processes' (high if any is); with none left it keeps the last.
    if (it->second.clients > 0) it->second.priority = priority_of_job(job);
  }
}

bool QosTracker::any_client_marks(const std::string& job) const {
  return std::any_of(clients_.begin(), clients_.end(),
                     [&](const auto& entry) { return entry.second.job == job && entry.second.marks; });
}

ipc::Priority QosTracker::priority_of_job(const std::string& job) const {
  const bool high = std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    return entry.second.job == job && entry.second.priority == ipc::Priority::high;
  });
  return high ? ipc::Priority::high : ipc::Priority::low;
}

const char* latency_from_name(LatencyFrom from) {
  switch (from) {
    case LatencyFrom::begin: return "begin";
    case LatencyFrom::arrival: return "arrival";
    case LatencyFrom::first_op: break;
  }
  return "first_op";
}

QosTracker::StartedOver QosTracker::query_closed(ClientId client, std::int64_t latency_ns,
                                                 std::optional<std::int64_t> target_ns, std::int64_t now_ns,
                                                 LatencyFrom from) {
  Job* job = job_of(client, now_ns);
  if (job == nullptr) return {};
  ClientState& state = clients_.at(client);  // job_of found it
  if (from != LatencyFrom::first_op) state.marks = true;
  StartedOver over;
  // An inferred query of a job whose latencies run from its marks: another process of the job does
  // not mark (a review: it was recorded among them, as if of their kind). A marked one whose arrival
  // was lost (measured from its begin in a job that says arrivals) stays: a lower bound of its kind.
  if (from == LatencyFrom::first_op && job->from != LatencyFrom::first_op) {
    if (any_client_marks(state.job)) {
      over.left_out = true;
      over.from = job->from;
      return over;
    }
    // No process of the job marks now (a review: once one had, the job's inferred queries were left
    // out for good, after a restart without marks too): they are what there is to measure.
    over = start_over(*job, /*target_changed=*/false);
    over.back_to_first_op = true;
    job->from = LatencyFrom::first_op;
  }
  const bool measured_otherwise = from > job->from;  // not one histogram
  const bool other_target = job->latency.count() > 0 && job->measured_target_ns != target_ns;
  if (measured_otherwise || other_target) over = start_over(*job, /*target_changed=*/!measured_otherwise);
  job->from = std::max(job->from, from);
  over.from = job->from;
  job->measured_target_ns = target_ns;
  job->latency.record(latency_ns);
  if (target_ns && latency_ns > *target_ns) ++job->violations;
  return over;
}

void QosTracker::query_abandoned(ClientId client, std::int64_t now_ns, std::uint64_t queries) {
  if (Job* job = job_of(client, now_ns, Activity::not_active)) job->abandoned += queries;
}

QosTracker::StartedOver QosTracker::start_over(Job& job, bool target_changed) {
  const StartedOver over{job.latency.count(), target_changed, job.measured_target_ns};
  job.latency = LatencyHistogram{};
  job.violations = 0;
  return over;
}

std::optional<std::int64_t> QosTracker::target_of(const config::Config& config, const std::string& job) {
  const config::JobConfig* listed = config::find_job(config, job);
  if (listed == nullptr || !listed->target_ms) return std::nullopt;
  return std::llround(*listed->target_ms * 1e6);
}

std::map<std::string, QosTracker::StartedOver> QosTracker::retarget(const config::Config& config) {
  std::map<std::string, StartedOver> started_over;
  for (auto& [name, job] : jobs_) {
    const std::optional<std::int64_t> target = target_of(config, name);
    if (job.latency.count() == 0 || job.measured_target_ns == target) continue;
    started_over[name] = start_over(job, /*target_changed=*/true);
    job.measured_target_ns = target;
  }
  return started_over;
}

void QosTracker::work_completed(ClientId client, const ipc::CompletionDescriptor& completion, std::int64_t now_ns) {
  if (completion.status != 0) return;  // nothing ran
  Job* job = job_of(client, now_ns);
  if (job == nullptr) return;
  // The daemon checked the end is not in the future; CoveredTime counts at most its horizon of a
  // span. The rate is over the time since the job was first seen: time before it is not in it.
  const std::int64_t end_ns = std::min<std::int64_t>(completion.end_ns, now_ns);
  const std::int64_t device_ns = job->in_flight.add(completion.start_ns, end_ns, now_ns, [&](std::int64_t from, std::int64_t to) {
    job->window.add_time(std::max(from, job->first_seen_ns), to);
  });
  ++job->be_ops;
  job->be_device_ns += device_ns;
  job->window.add_ops(now_ns, 1);
}

JobQosSnapshot QosTracker::snapshot_of(const std::string& name, const Job& job, const config::Config& config,
                                       std::int64_t now_ns) const {
  JobQosSnapshot s;
  s.job = name;
  s.priority = job.priority;
  s.clients = job.clients;
  s.target_ns = target_of(config, name);
  if (const config::JobConfig* listed = config::find_job(config, name)) {
    s.percentile = listed->percentile;
    s.weight = listed->weight;
  }
  const LatencyHistogram& h = job.latency;
  s.queries = h.count();
  s.latency_from = job.from;
  s.latency_sum_ns = h.sum_ns();
  s.mean_ns = std::llround(h.mean_ns());
  s.p50_ns = h.percentile_ns(50);
  s.p90_ns = h.percentile_ns(90);
  s.p99_ns = h.percentile_ns(99);
  s.p999_ns = h.percentile_ns(99.9);
  s.max_ns = h.max_ns();
  s.at_percentile_ns = h.percentile_ns(s.percentile);
  for (std::size_t i = 0; i < s.at_most.size(); ++i) s.at_most[i] = h.count_at_most(i);
  s.violations = job.violations;
  s.abandoned = job.abandoned;
  s.violation_fraction = s.queries == 0 ? 0.0 : static_cast<double>(job.violations) / static_cast<double>(s.queries);
  if (s.target_ns && s.queries > 0) {
    if (job.measured_target_ns == s.target_ns) {
      // Exact, from the count of queries over the target: the percentile's latency is a bucket's
      // middle, up to 1.6 % off, and a job 89 % over a p99 target at 1.002 x it read "ok" (an
      // audit). The target is met when at most n - rank queries are over it. The latencies shown
      // are kept on the side of the target the count says (each still within its bucket): met,
      // none at or below the target's percentile is over the target; missed, none at or above it
      // is under. So the line never reads "OVER" beside a latency under the target, nor the columns
      // fall out of order.
      const std::uint64_t allowed = s.queries - LatencyHistogram::rank_for(s.percentile, s.queries);
      const bool meets = s.violations <= allowed;
      s.meets_target = meets;
      const auto side = [&](std::int64_t& latency) {
        latency = meets ? std::min(latency, *s.target_ns) : std::max(latency, *s.target_ns + 1);
      };
      side(s.at_percentile_ns);
      const std::pair<double, std::int64_t*> shown[] = {{50, &s.p50_ns}, {90, &s.p90_ns}, {99, &s.p99_ns}, {99.9, &s.p999_ns}};
      for (const auto& [percentile, latency] : shown) {
        if (meets ? percentile <= s.percentile : percentile >= s.percentile) side(*latency);
      }
    } else {
      s.meets_target = s.at_percentile_ns <= *s.target_ns;  // measured against another target
    }
  }
  s.be_ops = job.be_ops;
  s.be_device_ns = job.be_device_ns;
  const ProgressWindow::Rate rate = job.window.rate(now_ns, job.first_seen_ns);
  s.be_ops_per_s = rate.ops_per_s;
  s.be_busy_share = rate.busy_share;
  s.idle_ns = std::max<std::int64_t>(0, now_ns - job.last_active_ns);
  return s;
}

std::vector<JobQosSnapshot> QosTracker::snapshot(const config::Config& config, std::int64_t now_ns) const {
  std::vector<JobQosSnapshot> jobs;
  jobs.reserve(jobs_.size());
  for (const auto& [name, job] : jobs_) jobs.push_back(snapshot_of(name, job, config, now_ns));
  std::stable_sort(jobs.begin(), jobs.end(), [](const JobQosSnapshot& a, const JobQosSnapshot& b) {
    const bool a_connected = a.clients > 0, b_connected = b.clients > 0;
    if (a_connected != b_connected) return a_connected;
    // An idle job the config gives a target before idle others: a status cut short for size (many
    // short-lived jobs) keeps the jobs it is read for.
    if (!a_connected && a.target_ns.has_value() != b.target_ns.has_value()) return a.target_ns.has_value();
    if (!a_connected) return a.idle_ns < b.idle_ns;  // most recently active first (the map gave name order)
    return a.priority != b.priority ? a.priority == ipc::Priority::high : false;
  });
  return jobs;
}

std::vector<TightTargetWatch::Key> TightTargetWatch::check(const std::vector<Key>& tight) {
  constexpr std::uint32_t kKept = (1u << kChecks) - 1;
  for (auto& [key, history] : history_) history = (history << 1) & kKept;
  for (const Key& key : tight) history_[key] |= 1u;
  std::erase_if(history_, [](const auto& entry) { return entry.second == 0; });
  std::vector<Key> to_log;
  for (const auto& [key, history] : history_) {
    if ((history & 1u) != 0 && std::popcount(history) >= kLogAfter) to_log.push_back(key);
  }
  return to_log;
}

}  // namespace gpuqos::scheduler

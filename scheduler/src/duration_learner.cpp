// DurationLearner: remembered ops, online observations, the store's schedule.
#include "gpuqos/scheduler/duration_learner.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <utility>

#include "gpuqos/ipc/registration.h"
#include "gpuqos/predictor/features.h"
#include "gpuqos/predictor/store.h"
#include "gpuqos/scheduler/engine_backlog.h"

namespace gpuqos::scheduler {
namespace {

bool is_timed_work(ipc::OpKind kind) {
  return kind == ipc::OpKind::kernel || kind == ipc::OpKind::copy || kind == ipc::OpKind::memset ||
         kind == ipc::OpKind::graph;
}

// A store is saved as a temporary file in its directory, renamed over it: a directory that is not
// there is made now, and one that cannot be made or written is said now, not first at exit when
// what was learned is lost.
void ensure_directory_of(const std::string& path, std::optional<std::string>& warning) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path directory = parent.empty() ? std::filesystem::path(".") : parent;
  std::error_code error;
  std::string problem;
  if (!std::filesystem::exists(directory, error) && !error) {
    std::filesystem::create_directories(directory, error);
    if (error) problem = "its directory " + directory.string() + " cannot be made (" + error.message() + ")";
  } else if (!error && !std::filesystem::is_directory(directory, error)) {
    problem = directory.string() + " is not a directory";
  } else if (!error && ::access(directory.c_str(), W_OK | X_OK) != 0) {
    problem = "its directory " + directory.string() + " cannot be written (" + std::strerror(errno) + ")";
  }
  if (error && problem.empty()) problem = "its directory " + directory.string() + ": " + error.message();
  if (problem.empty()) return;
  const std::string text = "profile store " + path + ": " + problem + "; saves will fail until it can be written";
  warning = warning ? *warning + "; " + text : text;
}

// A store whose content cannot be used is moved aside, never saved over: it may be a good profile
// this build cannot read (a newer version), or one a user wants to recover. One that cannot be read
// at all (permissions, I/O) may be fine: it stays. Either way, if it is still there, `blocked` says
// not to save over it. Another gpuqosd's store (`anothers`) is never moved.
predictor::Predictor load(const std::string& path, bool anothers, std::optional<std::string>& warning, bool& blocked,
                          bool& from_store, predictor::FileIdentity& identity) {
  if (path.empty()) return predictor::Predictor();
  std::error_code exists_error;
  const bool existed = std::filesystem::exists(path, exists_error);
  predictor::LoadedProfile loaded = predictor::load_profile(path, predictor::PredictorConfig{});
  from_store = existed && !loaded.inaccessible && !loaded.unreadable;
  // A store not made yet is a first start, not a problem (gpuqosd says so at info).
  if (!existed && !exists_error && !loaded.inaccessible) loaded.warning.reset();
  warning = std::move(loaded.warning);
  identity = loaded.identity;  // the file read, not what is at the path by now
  const auto beside = [&path] { return path + ".gpuqosd-" + std::to_string(::getpid()); };
  if (loaded.inaccessible) {
    blocked = true;
    std::error_code kind_error;
    *warning += std::filesystem::is_regular_file(path, kind_error)
                    ? "; it is left as it is, and what this gpuqosd learns is saved beside it, to " + beside()
                    : std::string("; nothing learned will be saved over it");
  } else if (loaded.unreadable && anothers) {
    *warning += "; left as it is: another gpuqosd's store";
  } else if (loaded.unreadable) {
    const std::string aside = path + ".unreadable-" + std::to_string(::time(nullptr)) + "-" + std::to_string(::getpid());
    std::error_code error;
    std::filesystem::rename(path, aside, error);
    if (error) {
      blocked = true;
      *warning += "; it cannot be moved aside (" + error.message() + "), so nothing learned will be saved over it";
    } else {
      identity = {};
      *warning += "; moved aside to " + aside + ", a new profile will be saved in its place";
    }
  }
  if (!blocked) {
    if (auto refused = predictor::why_not_saved_over(path)) {
      const std::string text = *refused + "; what this gpuqosd learns is saved beside it, to " + beside();
      warning = warning ? *warning + "; " + text : text;
    }
    ensure_directory_of(path, warning);
  }
  return std::move(loaded.predictor);
}

}  // namespace

std::string graph_model_name(std::string_view job, std::uint32_t graph_id) {
  std::string name = "graph:" + std::string(job);
  if (graph_id != 0 && graph_id <= ipc::kMaxGraphIds) name += ":" + std::to_string(graph_id);
  return name;
}

DurationLearner::DurationLearner(Options options, std::int64_t now_ns, std::optional<std::string>& warning)
    : options_(std::move(options)),
      predictor_(load(options_.store_path, options_.saves_beside, warning, save_blocked_, from_store_, store_identity_)),
      last_save_ns_(now_ns),
      epoch_began_ns_(now_ns) {}

std::optional<DurationLearner::SmCountNote> DurationLearner::device_sm_count(std::uint32_t device, std::uint32_t sm_count) {
  if (sm_count == 0) return std::nullopt;
  const auto known = device_sm_counts_.find(device);
  if (known != device_sm_counts_.end() && known->second == sm_count) return std::nullopt;  // every op but the first
  if (device_sm_counts_.size() >= ipc::kMaxDevices && known == device_sm_counts_.end()) return std::nullopt;
  device_sm_counts_[device] = sm_count;
  if (sm_count_noted_.contains({device, sm_count}) || sm_count_noted_.size() >= kMaxSmCountNotes) return std::nullopt;
  sm_count_noted_.insert({device, sm_count});
  const std::uint32_t counted = predictor_.config().sm_count;
  if (!sm_count_adopted_ && !from_store_ && predictor_.kernel_count() == 0) {
    sm_count_adopted_ = true;
    if (sm_count == counted || !predictor_.adopt_sm_count(sm_count)) return std::nullopt;
    return SmCountNote{false, "predictor: counts waves by " + std::to_string(sm_count) + " SMs, as device " + std::to_string(device) +
           " has (was " + std::to_string(counted) + ")"};
  }
  sm_count_adopted_ = true;
  if (sm_count == counted) return std::nullopt;
  return SmCountNote{true, "predictor: device " + std::to_string(device) + " has " + std::to_string(sm_count) +
         " SMs, but the predictor counts waves by " + std::to_string(counted) +
         (options_.store_path.empty() ? std::string(" (the first device's)") : " (its store's)") +
         ": predictions of its multi-wave kernels are off until a store is trained for it (gpuqos train --sms " +
         std::to_string(sm_count) + ")"};
}

DurationLearner::Estimate DurationLearner::posted(std::uint32_t client, const ipc::OpDescriptor& op,
                                                  std::shared_ptr<const std::string> kernel_name, std::int64_t arrived_ns) {
  if (!is_timed_work(op.kind)) return {};
  if (!kernel_name) kernel_name = std::make_shared<const std::string>();
  const predictor::Prediction prediction = predictor_.predict(predictor::features_of(op, *kernel_name));
  if (!remembered_.empty() && remembered_.size() >= options_.max_remembered_ops) {
    const auto most = std::max_element(remembered_per_client_.begin(), remembered_per_client_.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    forget(remembered_.lower_bound({most->first, 0}));  // its oldest: seqs rise
  }
  if (remembered_.insert_or_assign({client, op.seq}, Remembered{op, std::move(kernel_name), predictor_.epoch(), arrived_ns}).second) {
    ++remembered_per_client_[client];
  }
  if (prediction.model == predictor::ModelUsed::none) return {};
  // 0 would read as "no model knows it"; a NaN or infinity cannot be an integer. At most
  // kMaxLearnedNs, the policy's horizon for an op in flight (it sums these).
  const auto nanoseconds = [](double ns) -> std::int64_t {
    return std::isfinite(ns) ? std::max<std::int64_t>(1, static_cast<std::int64_t>(std::min(ns, static_cast<double>(kMaxLearnedNs))))
                             : 0;
  };
  const Estimate estimate{nanoseconds(std::min(prediction.upper_ns, prediction.duration_ns * kMaxUpperRatio)),
                          nanoseconds(prediction.duration_ns),
                          prediction.model == predictor::ModelUsed::global_default};
  if (estimate.upper_ns == 0) return {};
  return estimate;
}

std::int64_t DurationLearner::completed(std::uint32_t client, const ipc::CompletionDescriptor& completion,
                                        std::uint64_t time_sliced_devices) {
  const auto it = remembered_.find({client, completion.seq});
  if (it == remembered_.end()) {
    ++counts_.unknown;
    return 0;
  }
  const Remembered remembered = std::move(it->second);
  forget(it);
  // A span that cannot be the op's teaches nothing, but the op ran: from no earlier than it can
  // have started, its span still counts against the others' and gives its own time (a review: an
  // honest 11-s kernel was otherwise charged no overrun, and the op queued behind it was learned
  // with its wait).
  std::int64_t start_ns = completion.start_ns;
  if (remembered.arrived_ns > 0) {
    start_ns = std::min(completion.end_ns, std::max(start_ns, remembered.arrived_ns - kMaxPostLagNs));
  }
  const std::int64_t duration_ns = completion.end_ns - completion.start_ns;
  const bool learnable = start_ns == completion.start_ns && duration_ns <= kMaxLearnedNs;
  // Every completion's span counts against the others', timed or not: a coarse one also ran.
  const bool in_order = !ipc::device_in(time_sliced_devices, remembered.op.device);
  const Overlap overlap = in_order && completion.status == 0
                             ? overlaps(client, remembered.op, start_ns, completion.end_ns)
                             : Overlap{};
  const bool shared = overlap.another;
  if (completion.flags & ipc::kCompletionCoarse) {
    ++counts_.coarse;
    return 0;
  }
  // On a device that runs work in order the op ran after every op read before it that ended inside
  // its span (it waited for those, its own client's or another's): its own time is from the latest
  // such end. None when a span read before it ran alongside it (began before its end, ended after).
  const std::int64_t own_ns =
      in_order && completion.status == 0 && !overlap.concurrent
          ? completion.end_ns - std::max(start_ns, overlap.ran_from_ns)
          : 0;
  if (shared) {
    ++counts_.shared;
    return own_ns;
  }
  if (!learnable) {
    ++counts_.rejected;
    return own_ns;
  }
  const predictor::OpFeatures features = predictor::features_of(remembered.op, *remembered.kernel_name);
  const bool is_kernel = features.op_class == predictor::OpClass::kernel;
  const std::optional<std::uint64_t> last_epoch =
      is_kernel ? predictor_.last_observed_epoch(features.kernel.name) : std::nullopt;
  const bool new_name = is_kernel && !last_epoch;
  if (completion.status != 0 || (new_name && !may_bring_in_name(client)) ||
      !predictor_.observe(features, static_cast<double>(duration_ns))) {
    ++counts_.rejected;
    return own_ns;
  }
  if (new_name) {
    brought_in_name(client, *remembered.kernel_name);
  } else if (last_epoch && predictor_.epoch() - *last_epoch >= predictor::Predictor::kIdleEpochs) {
    name_in_use_again(*remembered.kernel_name);
  }
  ++counts_.learned;
  return own_ns;
}

void DurationLearner::client_user(std::uint32_t client, std::uint32_t uid) { client_uids_[client] = uid; }

bool DurationLearner::may_bring_in_name(std::uint32_t client) {
  const auto user = client_uids_.find(client);
  if (user == client_uids_.end()) return true;
  const std::size_t share = name_share();
  if (names_brought_in_by(user->second) < share || predictor_.kernel_count() + share < predictor_.config().max_kernels)
    return true;
  if (crowded_said_.insert(user->second).second) crowded_unsaid_.push_back(user->second);
  return false;
}

void DurationLearner::brought_in_name(std::uint32_t client, std::string name) {
  const auto user = client_uids_.find(client);
  if (user == client_uids_.end()) return;
  const auto [it, added] = name_brought_by_.try_emplace(std::move(name), BroughtIn{user->second});
  if (!added) {  // the predictor evicted it since the last epoch, and it is new again
    uncount(it->second);
    it->second = BroughtIn{user->second};
  }
  ++names_per_user_[user->second];
}

void DurationLearner::uncount(const BroughtIn& name) {
  if (!name.counted) return;
  const auto count = names_per_user_.find(name.uid);
  if (count != names_per_user_.end() && --count->second == 0) names_per_user_.erase(count);
}

void DurationLearner::name_in_use_again(std::string_view name) {
  const auto it = name_brought_by_.find(name);
  if (it == name_brought_by_.end() || it->second.counted) return;
  it->second.counted = true;
  ++names_per_user_[it->second.uid];
}

std::vector<std::uint32_t> DurationLearner::take_crowded_users() { return std::exchange(crowded_unsaid_, {}); }

void DurationLearner::age_brought_in_names() {
  const std::uint64_t epoch = predictor_.epoch();
  for (auto it = name_brought_by_.begin(); it != name_brought_by_.end();) {
    const std::optional<std::uint64_t> last = predictor_.last_observed_epoch(it->first);
    if (!last) {  // evicted: another user may bring it in again
      uncount(it->second);
      it = name_brought_by_.erase(it);
      continue;
    }
    if (epoch - *last >= predictor::Predictor::kIdleEpochs) {
      uncount(it->second);
      it->second.counted = false;
    }
    ++it;
  }
  std::erase_if(crowded_said_, [&](std::uint32_t uid) { return names_brought_in_by(uid) < name_share(); });
}

DurationLearner::Overlap DurationLearner::overlaps(std::uint32_t client, const ipc::OpDescriptor& op,
                                                   std::int64_t start_ns, std::int64_t end_ns) {
  const auto engine = engine_of(op);
  if (!engine) return {};
  std::deque<Span>& spans = spans_[{op.device, static_cast<std::uint8_t>(*engine)}];
  // From the latest end back, a span that ended before this one began ends the search. Only
  // against spans already read: one that overlaps this op and is read later (a long op of another
  // client on a time-slicing device) is not counted here (that one is, when it comes).
  Overlap overlap;
  for (auto span = spans.rbegin(); span != spans.rend(); ++span) {
    if (span->end_ns <= start_ns) break;
    if (span->start_ns >= end_ns) continue;
    overlap.another = overlap.another || span->client != client;
    if (span->end_ns > end_ns) {
      overlap.concurrent = true;
    } else {
      overlap.ran_from_ns = std::max(overlap.ran_from_ns, span->end_ns);
    }
  }
  if (spans.size() >= kSpansPerEngine) spans.pop_front();
  // Kept in order of their ends (one read late goes back to its place), so the search's stop is exact
  // for what has been read.
  auto at = spans.end();
  while (at != spans.begin() && std::prev(at)->end_ns > end_ns) --at;
  spans.insert(at, Span{client, start_ns, end_ns});
  return overlap;
}

void DurationLearner::client_gone(std::uint32_t client) {
  remembered_.erase(remembered_.lower_bound({client, 0}), remembered_.upper_bound({client, UINT64_MAX}));
  remembered_per_client_.erase(client);
  client_uids_.erase(client);  // the names it brought in stay its user's until they go idle
}

void DurationLearner::forget(RememberedOps::iterator it) {
  const auto count = remembered_per_client_.find(it->first.first);
  if (count != remembered_per_client_.end() && --count->second == 0) remembered_per_client_.erase(count);
  remembered_.erase(it);
}

std::optional<std::string> DurationLearner::tick(std::int64_t now_ns) {
  if (now_ns - epoch_began_ns_ >= kEpochNs) {
    const std::int64_t epochs = (now_ns - epoch_began_ns_) / kEpochNs;
    predictor_.advance_epochs(static_cast<std::uint64_t>(epochs));
    epoch_began_ns_ += epochs * kEpochNs;
    const std::uint64_t epoch = predictor_.epoch();
    for (auto it = remembered_.begin(); it != remembered_.end();) {
      const auto next = std::next(it);
      if (epoch - it->second.epoch >= kForgetAfterEpochs) forget(it);
      it = next;
    }
    age_brought_in_names();
  }
  std::optional<std::string> said = finish_saving(false);
  if (options_.save_interval_ns <= 0 || now_ns - last_save_ns_ < options_.save_interval_ns) return said;
  if (saving()) return said;  // one at a time: the next tick's turn
  last_save_ns_ = now_ns;
  if (options_.store_path.empty() || !unsaved()) return said;  // nothing new: nothing written
  try {
    saving_ = std::async(std::launch::async, [task = save_task()] {
      // Below the loop, whatever its scheduling (gpuqosd under SCHED_RR on a core of its own: a save
      // at the same priority on that core stretched the loop's ticks to 136-152 ms).
      const sched_param normal{};
      (void)::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &normal);
      (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
      return write(task);
    });
  } catch (const std::exception& e) {  // no thread (a tasks limit), no memory for the state
    const std::string failed = options_.store_path + ": not saved now (" + e.what() + "); tried again in " +
                               std::to_string(options_.save_interval_ns / 1'000'000'000) + " s";
    return said ? *said + "; " + failed : failed;
  }
  return said;
}

std::optional<std::string> DurationLearner::save() {
  std::optional<std::string> said = finish_saving(true);
  if (options_.store_path.empty() || !unsaved()) return said;
  std::optional<std::string> now;
  try {
    now = apply(write(save_task()));
  } catch (const std::exception& e) {  // no memory for the state
    now = options_.store_path + ": not saved: " + e.what();
  }
  if (!said) return now;
  return now ? *said + "; " + *now : said;
}

std::optional<std::string> DurationLearner::finish_saving(bool wait) {
  if (!saving_.valid()) return std::nullopt;
  if (!wait && saving_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return std::nullopt;
  try {
    return apply(saving_.get());
  } catch (const std::exception& e) {  // bad_alloc: nothing is lost, the next save tries again
    return options_.store_path + ": not saved: " + e.what();
  }
}

DurationLearner::SaveTask DurationLearner::save_task() const {
  return SaveTask{predictor_.state(), options_.store_path, beside_path(), changed_since_read(), options_.saves_beside,
                  save_blocked_,      store_identity_,     counts_.learned};
}

DurationLearner::SaveOutcome DurationLearner::write(const SaveTask& task) {
  SaveOutcome outcome;
  outcome.learned = task.learned;
  struct stat there{};
  const bool special = ::stat(task.store_path.c_str(), &there) == 0 && !S_ISREG(there.st_mode);
  if (task.blocked && special) return outcome;  // /dev/null, a FIFO: nothing is saved (said at start)
  // Why this save goes beside the store ("": it replaces the store).
  std::string why_beside;
  if (task.blocked) {
    why_beside = task.store_path + " could not be read, or moved aside (it may be good, so it stays)";
  } else if (auto refused = predictor::why_not_saved_over(task.store_path)) {
    why_beside = std::move(*refused);
  } else if (predictor::identity_of(task.store_path) != task.store_identity) {
    why_beside = task.changed_since_read;
  }
  // Replaced only if it is still the file this gpuqosd read or wrote last, checked in the same step
  // as the replacement (a store trained in between was replaced, in a review).
  if (!task.saves_beside && why_beside.empty()) {
    const auto error = predictor::save_profile(task.state, task.store_path, predictor::SaveAs::store, {},
                                               &task.store_identity, &outcome.store_identity);
    if (!error) {
      outcome.saved = outcome.over_store = true;
      return outcome;
    }
    if (*error != predictor::kStoreChanged) {
      outcome.error = error;
      return outcome;
    }
    why_beside = task.changed_since_read;
  }
  outcome.error = predictor::save_profile(task.state, task.beside_path, predictor::SaveAs::own_file, task.store_path);
  outcome.saved = !outcome.error;
  outcome.why_beside = std::move(why_beside);
  return outcome;
}

std::optional<std::string> DurationLearner::apply(SaveOutcome outcome) {
  if (outcome.error || !outcome.saved) return outcome.error;
  learned_at_last_save_ = outcome.learned;
  ++counts_.saves;
  if (outcome.over_store) {
    store_identity_ = outcome.store_identity;
    told_beside_.clear();  // the store could be replaced again (made writable)
    return std::nullopt;
  }
  // Said once a reason, not at every save: another gpuqosd's store is said at start.
  if (options_.saves_beside || std::exchange(told_beside_, outcome.why_beside) == outcome.why_beside) {
    return std::nullopt;
  }
  return outcome.why_beside + "; what this one learned is saved to " + beside_path();
}

// Written by someone else since (a retrained store, another gpuqosd): theirs stays.
std::string DurationLearner::changed_since_read() const {
  return options_.store_path +
         " changed since this gpuqosd read it (gpuqos train --out, or another gpuqosd on the same store): "
         "not overwritten";
}

std::string DurationLearner::beside_path() const {
  return options_.store_path + ".gpuqosd-" + std::to_string(::getpid());
}

}  // namespace gpuqos::scheduler

// The daemon's side of the predictor: every posted op is remembered until its completion, and every
// exactly timed completion teaches the predictor (online learning); the profile store is loaded at
// start and saved periodically and at exit.
//
// Only completions the shim marks exact are learned: a completion flagged ipc::kCompletionCoarse
// bounds several ops that finished together, or was timed by the host, and says nothing of this
// one's own duration. The shim marks exact only an op it timed on the device, between events
// recorded right before and after its call (see the shim's completion_tracker.h): a low-priority
// call at most once a millisecond per thread and a low-priority kernel not timed for 100 ms, and a
// high-priority kernel once a second. So most of a high-priority job's ops are learned slowly or not
// at all (its copies and memsets), and a store `gpuqos train` makes from CUPTI profiles is what
// predicts them from the start. On a device that runs processes' work in order, an exact completion during whose
// span another client's op on the same engine of the same device ran is not learned either: on an
// idle stream the span includes the wait behind the other job's work. Ten 4-ms kernels each queued
// behind another job's 97-ms one would raise the 4-ms kernel's upper estimate to 170 ms (the unit
// test). On a time-slicing device such a span is the op's wall time while it shared the slices,
// and it is learned as before: leaving it out raised the benchmark's timeslice resnet+recsys share
// by about 3 points and its p99 at load 0.4 to 1.00-1.16 x the target in 3 runs (the cell is
// marginal on every version: 0.82-1.00 x at 9d3c0c5 the same day). An exact span is placed at the
// poll's sighting of its end minus its device time, so it sits late by the poll's lateness.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpuqos/ipc/descriptor.h"
#include "gpuqos/predictor/predictor.h"
#include "gpuqos/predictor/store.h"

namespace gpuqos::scheduler {

// The name a graph launch is predicted and learned under: one per job and graph (the shim's number
// of the process's graph, OpDescriptor::kernel_id), "graph:<job>:<n>"; "graph:<job>" for a graph not
// numbered (an older shim, past ipc::kMaxGraphIds). A job's graphs of different lengths (a server's
// per batch size) shared one model, and a long one after a run of short ones was predicted short.
std::string graph_model_name(std::string_view job, std::uint32_t graph_id);

class DurationLearner {
 public:
  struct Options {
    std::string store_path;                   // empty: nothing loaded or saved
    std::int64_t save_interval_ns = 300'000'000'000;  // 0: only at exit
    // Posted, not yet completed. When full, the client remembered for the most ops loses its oldest:
    // one that never reports completions cannot stop the others' from being learned.
    std::size_t max_remembered_ops = 65536;
    // Another gpuqosd learns into the store (it holds its lock): this one reads it, never moves it
    // aside nor saves over it, and saves to `<store>.gpuqosd-<pid>`.
    bool saves_beside = false;
  };
  struct Counts {
    std::uint64_t learned = 0;     // exact completions the predictor took
    std::uint64_t coarse = 0;      // completions not learned: batch-timed
    std::uint64_t shared = 0;      // completions not learned: another client's op ran on the engine meanwhile
    std::uint64_t unknown = 0;     // completions of ops not remembered (or not GPU work)
    std::uint64_t rejected = 0;    // failed ops, spans that cannot be the op's, or durations the predictor refused
    std::uint64_t saves = 0;
  };

  // Loads the store; `warning` is set when it could not be (entirely) used.
  DurationLearner(Options options, std::int64_t now_ns, std::optional<std::string>& warning);

  // The upper estimate handed to the policy is at most this many times the prediction. The
  // predictor's own (its prediction times the p90 of its recent log-residuals) keeps the errors of
  // a kernel's first, few-sample predictions for its next 64 observations: ratios of 100-1000x were
  // seen on ResNet-50 trace kernels, which would hold a 0.2 ms best-effort kernel for a second. What
  // the cap leaves out, the margin, the completions' corrections and the adaptive bound absorb.
  static constexpr double kMaxUpperRatio = 4.0;

  struct Estimate {
    std::int64_t upper_ns = 0;     // the upper estimate, capped at kMaxUpperRatio x the prediction
    std::int64_t expected_ns = 0;  // the prediction
    bool guessed = false;          // a kernel no model knows (the predictor's global default)
  };
  // What a kernel op says of its device's SM count (sm_count, protocol 1.5; 0: not said). The first
  // count said of any device becomes the predictor's while it has learned nothing (a store trained
  // with `gpuqos train --sms` has its own); a device whose count differs from the predictor's is
  // worth one warning (its kernels' waves are counted wrong until a store is trained for it): what
  // to log, once per device and count.
  struct SmCountNote {
    bool warning = false;  // a mismatch; else the count was adopted
    std::string text;
  };
  std::optional<SmCountNote> device_sm_count(std::uint32_t device, std::uint32_t sm_count);
  // Remembers the op, read by gpuqosd at arrived_ns (0: not said); returns the predictor's
  // estimates of its device time (0: no model knows it). The name is shared, not copied: a client's
  // registered name serves every op of its kernel (a review: a copy per remembered op, 65,536 of
  // them, was 280 MiB from one client of 4-KiB names, and an allocation for each op of a real one).
  Estimate posted(std::uint32_t client, const ipc::OpDescriptor& op, std::shared_ptr<const std::string> kernel_name,
                  std::int64_t arrived_ns = 0);
  Estimate posted(std::uint32_t client, const ipc::OpDescriptor& op, std::string kernel_name,
                  std::int64_t arrived_ns = 0) {
    return posted(client, op, std::make_shared<const std::string>(std::move(kernel_name)), arrived_ns);
  }
  // `time_sliced_devices` (an ipc::device_in mask): devices that time-slice processes' work, where
  // an overlapping span is learned (see the top of this file). Returns the op's own device time on a
  // device that runs work in order (exact, ran): from the latest end within its span of the spans
  // read before it (the ops it waited for, any client's), or its start, to its end; 0 when a span read
  // before it began before its end and ended after it (ran alongside it), on a time-slicing device,
  // or for a coarse or failed one.
  // Whether or not a model took the op.
  // A completion is its client's word, and one predictor serves every job: a span longer than
  // kMaxLearnedNs (the policy's horizon for an op in flight, BaymaxPolicy::kStaleOpNs), or one that
  // begins before its op can have started, is not learned (counted rejected). The op ran after its
  // post, and gpuqosd reads a post within kMaxPostLagNs of it (its loop stalls far less; the shim's
  // own stamp is not trusted), so it began no earlier than kMaxPostLagNs before gpuqosd read it
  // (posted()'s arrived_ns; the daemon has checked that it ended before it was read): from there
  // the span still counts against the other clients' and gives the op's own time. An audit taught a
  // shared kernel 21,548 s with spans of hours, so another job's ops of it were rationed as long
  // for good.
  static constexpr std::int64_t kMaxLearnedNs = 10'000'000'000;
  static constexpr std::int64_t kMaxPostLagNs = 1'000'000'000;
  std::int64_t completed(std::uint32_t client, const ipc::CompletionDescriptor& completion,
                         std::uint64_t time_sliced_devices = 0);
  void client_gone(std::uint32_t client);

  // Whose a client is: its user's uid. The predictor's kernel-name table (config max_kernels, 4,096)
  // is every job's, and a name stays in it until it has been idle for an hour. So one user's
  // clients may bring new names into it only while they hold less than a quarter of it (names they
  // brought in and that are not idle), or while it is less than three quarters full: whatever one
  // user makes up, a quarter of the table stays for the others' new kernels (an audit filled it with
  // 4,100 made-up names, and every later job's kernels stayed guessed for the hour). A name over
  // the share is not learned (counted rejected); its ops keep the global default. A client whose
  // user is not said is not held to it.
  void client_user(std::uint32_t client, std::uint32_t uid);
  // Users whose new names stopped being learned for their share since the last call: each is in it
  // once, and again only after it was back under its share.
  std::vector<std::uint32_t> take_crowded_users();
  // The names a user's clients brought in that are in use (not idle).
  std::size_t names_brought_in_by(std::uint32_t uid) const {
    const auto it = names_per_user_.find(uid);
    return it == names_per_user_.end() ? 0 : it->second;
  }

  // Advances the predictor's epochs (one a minute: a kernel name unobserved for an hour may give its
  // place in a full table to a new one, predictor.h), forgets the ops posted kForgetAfterEpochs or
  // more epochs ago that never completed (their completions were lost: the shim drops one it has
  // no memory or ring space for; one that comes after all is counted unknown), and saves when the
  // interval has passed. The save's files are written on a thread of its own (SCHED_BATCH, nice
  // 19), from a state taken here: encoding and writing took 0.3-0.5 s for 512 kernels of 64 shapes
  // each (8-26 s for a full table), which on gpuqosd's loop stalled every grant and heartbeat that
  // long, past the 100 ms after which jobs run unmanaged; the tick now takes 2-6 ms (38-52 ms),
  // copying the state. What the last save said (its error, or why it went beside the store, or
  // that no thread could be had: tried again at the next interval), once it is done; one at a time.
  static constexpr std::int64_t kEpochNs = 60'000'000'000;
  static constexpr std::uint64_t kForgetAfterEpochs = 10;
  std::optional<std::string> tick(std::int64_t now_ns);
  // Saves what was learned since the last save (nothing new: nothing written, the file left as it
  // is). A store that changed since this daemon read or last wrote it (`gpuqos train --out` over it,
  // another gpuqosd on the same file), one it could not read, and one that is read-only are not
  // overwritten: this daemon's model goes to `<store>.gpuqosd-<pid>` beside it, and the returned
  // text says so (once a reason). A store path that is not a regular file (/dev/null) gets nothing.
  // Waits for a save under way first. For the exit, and tests.
  std::optional<std::string> save();
  bool unsaved() const { return counts_.learned != learned_at_last_save_; }
  bool saving() const { return saving_.valid(); }

  const predictor::Predictor& predictor() const { return predictor_; }
  const Counts& counts() const { return counts_; }
  const std::string& store_path() const { return options_.store_path; }
  // Where a save writes: the store, or beside it (Options::saves_beside, or the last save went there).
  std::string save_path() const {
    return options_.saves_beside || !told_beside_.empty() ? beside_path() : options_.store_path;
  }

 private:
  struct Remembered {
    ipc::OpDescriptor op;
    std::shared_ptr<const std::string> kernel_name;  // never null
    std::uint64_t epoch = 0;  // the predictor's when it was posted
    std::int64_t arrived_ns = 0;  // when gpuqosd read it (0: not said)
  };

  using RememberedOps = std::map<std::pair<std::uint32_t, std::uint64_t>, Remembered>;  // (client, seq)

  // The latest completions' timed spans on one engine of one device, newest last.
  struct Span {
    std::uint32_t client = 0;
    std::int64_t start_ns = 0, end_ns = 0;
  };
  static constexpr std::size_t kSpansPerEngine = 256;
  struct Overlap {
    bool another = false;           // a span of another client
    bool concurrent = false;        // a span that began before this one ended and ended after it
    std::int64_t ran_from_ns = 0;   // the latest end within this span of the others (0: none)
  };
  // Which spans read so far on the op's engine overlap [start, end]; records this one.
  Overlap overlaps(std::uint32_t client, const ipc::OpDescriptor& op, std::int64_t start_ns, std::int64_t end_ns);

  void forget(RememberedOps::iterator it);
  // Whether `client` may bring a new kernel name into the predictor (client_user); the record of one
  // it brought in; a recorded name used again after it was idle counts again; at each epoch, idle
  // names stop counting and the predictor's evicted ones leave the record.
  bool may_bring_in_name(std::uint32_t client);
  void brought_in_name(std::uint32_t client, std::string name);
  void name_in_use_again(std::string_view name);
  void age_brought_in_names();
  // A user's share of the kernel-name table, and the room left for the others (a quarter of it).
  std::size_t name_share() const { return std::max<std::size_t>(1, predictor_.config().max_kernels / 4); }
  struct BroughtIn {
    std::uint32_t uid = 0;
    bool counted = true;  // in use: not idle (the predictor's kIdleEpochs)
  };
  void uncount(const BroughtIn& name);

  Options options_;
  bool save_blocked_ = false;  // set by load() while predictor_ is built: declared before it
  bool from_store_ = false;    // likewise: a store was loaded, which says what the predictor counts waves by
  // The store file as this daemon last read (set by load(), likewise) or wrote it (none: there was
  // none): a save finds out whether someone else wrote it since.
  predictor::FileIdentity store_identity_;
  predictor::Predictor predictor_;
  RememberedOps remembered_;
  std::map<std::uint32_t, std::size_t> remembered_per_client_;
  std::map<std::pair<std::uint32_t, std::uint8_t>, std::deque<Span>> spans_;  // (device, engine)
  std::string told_beside_;  // why the last save went beside the store, as said then
  std::int64_t last_save_ns_ = 0;
  std::int64_t epoch_began_ns_ = 0;
  std::uint64_t learned_at_last_save_ = 0;
  std::string beside_path() const;
  std::string changed_since_read() const;
  // A save: what it is given on the loop thread, what it found on its own.
  struct SaveTask {
    predictor::Predictor::State state;
    std::string store_path, beside_path, changed_since_read;
    bool saves_beside = false, blocked = false;
    predictor::FileIdentity store_identity;
    std::uint64_t learned = 0;  // counts_.learned when the state was taken
  };
  struct SaveOutcome {
    std::optional<std::string> error;
    bool saved = false;          // else skipped (a special file) or failed
    bool over_store = false;     // replaced the store, now store_identity
    predictor::FileIdentity store_identity;
    std::string why_beside;      // saved beside the store: why
    std::uint64_t learned = 0;
  };
  SaveTask save_task() const;
  static SaveOutcome write(const SaveTask& task);
  std::optional<std::string> apply(SaveOutcome outcome);
  // The save under way, if done (or `wait`): what apply() said of it.
  std::optional<std::string> finish_saving(bool wait);
  std::future<SaveOutcome> saving_;
  Counts counts_;
  std::map<std::uint32_t, std::uint32_t> device_sm_counts_;  // as the latest op of each device said
  // (device, count) pairs said once: device ordinals are each process's own (CUDA_VISIBLE_DEVICES,
  // MIG), so one ordinal may say two counts by turns. At most kMaxSmCountNotes.
  std::set<std::pair<std::uint32_t, std::uint32_t>> sm_count_noted_;
  static constexpr std::size_t kMaxSmCountNotes = 64;
  bool sm_count_adopted_ = false;
  std::map<std::uint32_t, std::uint32_t> client_uids_;
  // The names users brought in, until the predictor evicts them (at most its table).
  std::map<std::string, BroughtIn, std::less<>> name_brought_by_;
  std::map<std::uint32_t, std::size_t> names_per_user_;
  std::set<std::uint32_t> crowded_said_;         // said by take_crowded_users, still over its share
  std::vector<std::uint32_t> crowded_unsaid_;
};

}  // namespace gpuqos::scheduler

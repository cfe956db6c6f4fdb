// DurationLearner: what it hands the policy, and what it learns from.
#include "gpuqos/scheduler/duration_learner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gpuqos/predictor/features.h"
#include "gpuqos/predictor/store.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::scheduler {
namespace {

ipc::OpDescriptor kernel(std::uint64_t seq, std::uint32_t grid_x) {
  ipc::OpDescriptor op{};
  op.seq = seq;
  op.kind = ipc::OpKind::kernel;
  op.kernel_id = 1;
  op.grid[0] = grid_x;
  op.grid[1] = op.grid[2] = 1;
  op.block[0] = 128;
  op.block[1] = op.block[2] = 1;
  return op;
}

ipc::CompletionDescriptor exact(std::uint64_t seq, std::int64_t duration_ns, std::int64_t start_ns = 1'000'000) {
  ipc::CompletionDescriptor c{};
  c.seq = seq;
  c.start_ns = start_ns;
  c.end_ns = c.start_ns + duration_ns;
  c.flags = ipc::kCompletionExact;
  return c;
}

DurationLearner make_learner() {
  std::optional<std::string> warning;
  DurationLearner learner({}, 0, warning);
  EXPECT_FALSE(warning);
  return learner;
}

// The ops of a kernel share its registered name while they are remembered, rather than a copy each
// (a review: 65,536 remembered ops of a 4-KiB name were 280 MiB), and learn under it.
TEST(DurationLearner, RememberedOpsShareTheirKernelsName) {
  DurationLearner learner = make_learner();
  const auto name = std::make_shared<const std::string>(std::string(4000, 'k'));
  for (std::uint64_t seq = 1; seq <= 100; ++seq) (void)learner.posted(1, kernel(seq, 64), name);
  EXPECT_EQ(name.use_count(), 101) << "each remembered op holds the one name";
  for (std::uint64_t seq = 1; seq <= 100; ++seq) (void)learner.completed(1, exact(seq, 50'000));
  EXPECT_EQ(name.use_count(), 1) << "forgotten once done";
  EXPECT_EQ(learner.predictor().kernel_count(), 1u);
  EXPECT_GT(learner.posted(1, kernel(101, 64), *name).expected_ns, 0) << "learned under the name";
}

// The first SM count a kernel op says of its device becomes an untrained predictor's; a device that
// says another count is worth one warning, as is any count but its own to a predictor that has
// learned (its kernels' samples are banked by their waves).
TEST(DurationLearner, AnUntrainedPredictorCountsWavesByTheFirstDevicesSms) {
  DurationLearner learner = make_learner();
  const std::uint32_t before = learner.predictor().config().sm_count;
  ASSERT_NE(before, 132u);
  EXPECT_FALSE(learner.device_sm_count(0, 0)) << "not said (an older shim)";
  EXPECT_EQ(learner.predictor().config().sm_count, before);
  const auto adopted = learner.device_sm_count(0, 132);
  ASSERT_TRUE(adopted);
  EXPECT_FALSE(adopted->warning);
  EXPECT_NE(adopted->text.find("132 SMs"), std::string::npos) << adopted->text;
  EXPECT_EQ(learner.predictor().config().sm_count, 132u);
  EXPECT_FALSE(learner.device_sm_count(0, 132)) << "said once";
  EXPECT_FALSE(learner.device_sm_count(1, 132)) << "the same count on another device";
  const auto mismatch = learner.device_sm_count(2, 108);
  ASSERT_TRUE(mismatch);
  EXPECT_TRUE(mismatch->warning);
  EXPECT_NE(mismatch->text.find("gpuqos train --sms 108"), std::string::npos) << mismatch->text;
  EXPECT_FALSE(learner.device_sm_count(2, 108)) << "once per device and count";
  EXPECT_EQ(learner.predictor().config().sm_count, 132u) << "the first device's count stays";

  DurationLearner learned = make_learner();  // learns a kernel before any count is said
  (void)learned.posted(1, kernel(1, 64), "gemm");
  (void)learned.completed(1, exact(1, 50'000));
  ASSERT_EQ(learned.predictor().kernel_count(), 1u);
  const auto late = learned.device_sm_count(0, 132);
  ASSERT_TRUE(late);
  EXPECT_TRUE(late->warning) << "its samples are banked by the old count: not adopted";
  EXPECT_EQ(learned.predictor().config().sm_count, before);
}

// Device ordinals are each process's own (CUDA_VISIBLE_DEVICES, MIG slices): one ordinal may say two
// counts by turns, which is worth one note per count, not one per op.
TEST(DurationLearner, ACountSaidByTurnsIsNotedOnce) {
  DurationLearner learner = make_learner();
  ASSERT_TRUE(learner.device_sm_count(0, 42));  // adopted
  ASSERT_TRUE(learner.device_sm_count(0, 14));  // warned
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(learner.device_sm_count(0, 42)) << i;
    EXPECT_FALSE(learner.device_sm_count(0, 14)) << i;
  }
}

// A store says what its predictor counts waves by (gpuqos train --sms), even one with no kernels.
TEST(DurationLearner, AStoresSmCountIsKeptEvenWithoutKernels) {
  testing::TempDir dir("learner-sms");
  predictor::PredictorConfig config;
  config.sm_count = 100;
  const auto path = dir.path() / "copies-only.gqp";
  ASSERT_FALSE(predictor::save_profile(predictor::Predictor(config), path));
  DurationLearner::Options options;
  options.store_path = path.string();
  std::optional<std::string> warning;
  DurationLearner learner(options, 0, warning);
  ASSERT_EQ(learner.predictor().config().sm_count, 100u) << (warning ? *warning : "");
  const auto note = learner.device_sm_count(0, 132);
  ASSERT_TRUE(note);
  EXPECT_TRUE(note->warning);
  EXPECT_NE(note->text.find("its store's"), std::string::npos) << note->text;
  EXPECT_EQ(learner.predictor().config().sm_count, 100u);
}

// The predictor's epochs (its clock for idle kernel names) advance one a minute from the
// learner's start, however irregular the ticks.
TEST(DurationLearner, AdvancesThePredictorsEpochOnceAMinute) {
  constexpr std::int64_t kMinute = DurationLearner::kEpochNs;
  std::optional<std::string> warning;
  DurationLearner learner({}, 5 * kMinute, warning);
  (void)learner.tick(6 * kMinute - 1);
  EXPECT_EQ(learner.predictor().epoch(), 0u);
  (void)learner.tick(6 * kMinute);
  EXPECT_EQ(learner.predictor().epoch(), 1u);
  (void)learner.tick(16 * kMinute + 1);
  EXPECT_EQ(learner.predictor().epoch(), 11u) << "ten minutes without a tick: ten epochs at once";
  (void)learner.tick(17 * kMinute);
  EXPECT_EQ(learner.predictor().epoch(), 12u) << "counted from the start, not from the late tick";
}

// An op whose completion never came (the shim lost it) is forgotten kForgetAfterEpochs minutes
// after it was posted, not kept until the memory is full; one posted later is still remembered.
TEST(DurationLearner, ForgetsOpsWhoseCompletionsNeverCameAfterTenMinutes) {
  constexpr std::int64_t kMinute = DurationLearner::kEpochNs;
  std::optional<std::string> warning;
  DurationLearner learner({}, 0, warning);
  learner.posted(7, kernel(1, 64), "k");
  (void)learner.tick(5 * kMinute);
  learner.posted(7, kernel(2, 64), "k");
  (void)learner.tick(10 * kMinute - 1);
  learner.completed(7, exact(1, 100'000));
  EXPECT_EQ(learner.counts().learned, 1u) << "nine minutes: still remembered";
  learner.posted(7, kernel(3, 64), "k");
  (void)learner.tick(15 * kMinute);
  learner.completed(7, exact(2, 100'000));
  EXPECT_EQ(learner.counts().unknown, 1u) << "posted at minute 5: forgotten at 15";
  learner.completed(7, exact(3, 100'000));
  EXPECT_EQ(learner.counts().learned, 2u) << "posted at minute 9: six minutes old";
}

// One user's jobs may bring new kernel names into the shared table only while they use less than a
// quarter of it or it is less than three quarters full: made-up names from one user leave a quarter
// for the others' kernels. Names idle for an hour no longer count against their user, until used
// again.
TEST(DurationLearner, OneUserBringsAtMostAQuarterOfTheKernelNamesIntoAFullTable) {
  constexpr std::int64_t kMinute = DurationLearner::kEpochNs;
  std::optional<std::string> warning;
  DurationLearner learner({}, 0, warning);
  const std::size_t table = learner.predictor().config().max_kernels;
  learner.client_user(1, 1000);  // the flooder
  learner.client_user(2, 1000);  // another client of the same user
  learner.client_user(3, 2000);  // another user
  learner.client_user(4, 3000);  // a third
  std::uint64_t seq = 0;
  const auto learn = [&](std::uint32_t client, const std::string& name) {
    const std::uint64_t learned = learner.counts().learned;
    learner.posted(client, kernel(++seq, 64), name);
    // Spans one after another: none overlaps another client's, which would not be learned.
    learner.completed(client, exact(seq, 100'000, static_cast<std::int64_t>(seq) * 200'000));
    return learner.counts().learned > learned;
  };
  std::size_t taken = 0;
  for (std::size_t i = 0; i < table; ++i) taken += learn(i % 2 == 0 ? 1 : 2, "junk" + std::to_string(i));
  EXPECT_EQ(taken, table * 3 / 4) << "the table three quarters full, all of it one user's";
  EXPECT_EQ(learner.names_brought_in_by(1000), table * 3 / 4);
  EXPECT_EQ(learner.take_crowded_users(), std::vector<std::uint32_t>{1000u});
  EXPECT_TRUE(learner.take_crowded_users().empty()) << "said once";
  EXPECT_TRUE(learn(1, "junk0")) << "a name it brought in is still learned";
  for (std::size_t i = 0; i < table / 4; ++i) ASSERT_TRUE(learn(3, "real" + std::to_string(i))) << i;
  EXPECT_EQ(learner.predictor().kernel_count(), table);
  EXPECT_EQ(learner.names_brought_in_by(2000), table / 4);
  EXPECT_FALSE(learn(3, "real-more")) << "its quarter, in a full table";
  EXPECT_EQ(learner.take_crowded_users(), std::vector<std::uint32_t>{2000u});
  EXPECT_FALSE(learn(4, "third")) << "under its share, but full with nothing idle: the predictor's own limit";
  EXPECT_TRUE(learner.take_crowded_users().empty()) << "not for its share";
  // An hour on, the second user's names are kept in use; the flooder's went idle.
  for (std::int64_t minute = 1; minute <= 61; ++minute) {
    (void)learner.tick(minute * kMinute);
    for (std::size_t i = 0; i < table / 4; ++i) learn(3, "real" + std::to_string(i));
  }
  EXPECT_EQ(learner.names_brought_in_by(1000), 0u) << "idle names no longer count";
  EXPECT_EQ(learner.names_brought_in_by(2000), table / 4);
  EXPECT_TRUE(learn(4, "third")) << "an idle name gave its place";
  // Used again, the flooder's idle names count again: they cannot be reused to take the quarter.
  for (std::size_t i = 1; i <= table / 4; ++i) ASSERT_TRUE(learn(1, "junk" + std::to_string(i))) << i;
  EXPECT_EQ(learner.names_brought_in_by(1000), table / 4);
  EXPECT_FALSE(learn(1, "new-after-an-hour"));
  EXPECT_EQ(learner.take_crowded_users(), std::vector<std::uint32_t>{1000u}) << "said again: it was back under";
  // A client whose user is not said is not held to a share.
  learner.client_gone(1);
  EXPECT_TRUE(learn(1, "unsaid"));
  EXPECT_EQ(learner.names_brought_in_by(1000), table / 4);
}

TEST(DurationLearner, LearnsExactCompletionsAndNotCoarseOnes) {
  DurationLearner learner = make_learner();
  std::uint64_t seq = 0;
  for (int i = 0; i < 20; ++i) {
    learner.posted(7, kernel(++seq, 64), "k");
    learner.completed(7, exact(seq, 100'000));
  }
  learner.posted(7, kernel(++seq, 64), "k");
  ipc::CompletionDescriptor coarse = exact(seq, 50'000'000);
  coarse.flags = ipc::kCompletionCoarse;
  learner.completed(7, coarse);
  EXPECT_EQ(learner.counts().learned, 20u);
  EXPECT_EQ(learner.counts().coarse, 1u);
  const std::int64_t upper = learner.posted(7, kernel(++seq, 64), "k").upper_ns;
  EXPECT_GE(upper, 100'000 * 0.9);
  EXPECT_LE(upper, 100'000 * DurationLearner::kMaxUpperRatio);
}

// A job's graphs each have a model of their own (the shim numbers them): one of 20 ms is not
// predicted at the 1 ms of the job's other graph. An unnumbered graph (an older shim, or a number
// past what a shim gives) keeps the job's shared model.
TEST(DurationLearner, EachGraphOfAJobIsLearnedOnItsOwn) {
  EXPECT_EQ(graph_model_name("serve", 0), "graph:serve");
  EXPECT_EQ(graph_model_name("serve", 3), "graph:serve:3");
  EXPECT_EQ(graph_model_name("serve", ipc::kMaxGraphIds + 1), "graph:serve");
  DurationLearner learner = make_learner();
  const auto graph = [](std::uint64_t seq, std::uint32_t id) {
    ipc::OpDescriptor op{};
    op.seq = seq;
    op.kind = ipc::OpKind::graph;
    op.kernel_id = id;
    return op;
  };
  std::uint64_t seq = 0;
  for (int i = 0; i < 10; ++i) {
    for (const auto& [id, ns] : {std::pair{1u, 1'000'000}, std::pair{2u, 20'000'000}}) {
      learner.posted(7, graph(++seq, id), graph_model_name("serve", id));
      learner.completed(7, exact(seq, ns, static_cast<std::int64_t>(seq) * 100'000'000));
    }
  }
  EXPECT_NEAR(static_cast<double>(learner.posted(7, graph(++seq, 1), graph_model_name("serve", 1)).expected_ns), 1e6, 2e5);
  EXPECT_NEAR(static_cast<double>(learner.posted(7, graph(++seq, 2), graph_model_name("serve", 2)).expected_ns), 2e7, 4e6);
}

// A client that never reports completions fills what is remembered: it loses its own oldest ops,
// and the others' completions are still learned. Client 9's ops sort after client 1's, so the
// smallest-key eviction this replaces took client 1's.
TEST(DurationLearner, AClientThatNeverCompletesLosesItsOwnOpsWhenTheMemoryIsFull) {
  std::optional<std::string> warning;
  DurationLearner learner({.max_remembered_ops = 4}, 0, warning);
  learner.posted(1, kernel(1, 64), "k");
  for (std::uint64_t seq = 1; seq <= 10; ++seq) learner.posted(9, kernel(seq, 64), "k");
  learner.completed(1, exact(1, 100'000));
  EXPECT_EQ(learner.counts().learned, 1u);
  EXPECT_EQ(learner.counts().unknown, 0u);
  learner.completed(9, exact(6, 100'000, 2'000'000));  // forgotten: only its last three are remembered
  EXPECT_EQ(learner.counts().unknown, 1u);
  learner.completed(9, exact(8, 100'000, 2'000'000));
  EXPECT_EQ(learner.counts().learned, 2u);
}

// One job's op queued behind another's long one on a device that runs them in order: the shim's span
// for it includes the wait. Learned, a 4-ms kernel seen at 100 ms would be taken for a long op.
TEST(DurationLearner, AnOpWhoseSpanOverlapsAnotherClientsOpOnItsEngineIsNotLearned) {
  DurationLearner learner = make_learner();
  constexpr std::int64_t kOwn = 4'000'000, kLong = 97'000'000;
  std::int64_t now = 1'000'000;
  std::uint64_t seq = 0, other_seq = 0;
  const auto run_alone = [&] {
    learner.posted(1, kernel(++seq, 64), "short");
    learner.completed(1, exact(seq, kOwn, now));
    now += kOwn;
  };
  for (int i = 0; i < 20; ++i) run_alone();
  const std::int64_t upper_before = learner.posted(1, kernel(++seq, 64), "short").upper_ns;
  learner.completed(1, exact(seq, kOwn, now));  // its own span is learned: nothing else ran
  now += kOwn;
  EXPECT_EQ(learner.counts().learned, 21u);

  // Client 2's long op, then each of client 1's next ten waits behind one of them.
  for (int i = 0; i < 10; ++i) {
    learner.posted(2, kernel(++other_seq, 8), "long");
    learner.posted(1, kernel(++seq, 64), "short");
    learner.completed(2, exact(other_seq, kLong, now));
    learner.completed(1, exact(seq, kLong + kOwn, now + 1'000));
    now += kLong + kOwn + 1'000;
  }
  EXPECT_EQ(learner.counts().shared, 10u);
  EXPECT_EQ(learner.counts().learned, 21u + 10u);  // the long ops ran alone: their spans are theirs
  const std::int64_t upper_after = learner.posted(1, kernel(++seq, 64), "short").upper_ns;
  EXPECT_EQ(upper_after, upper_before);
  EXPECT_LT(upper_after, 2 * kOwn);
}

// What completed() tells the policy: the op's own time (the long-op budget charges an op that ran
// long by it), from the end of the last op read before it that it waited for; nothing when one ran
// alongside it, or for a span that is not the op's alone (coarse).
TEST(DurationLearner, ReturnsTheOwnTimeOfAnOpFromTheEndOfWhatItWaitedFor) {
  DurationLearner learner = make_learner();
  learner.posted(1, kernel(1, 64), "k");
  EXPECT_EQ(learner.completed(1, exact(1, 4'000'000, 1'000'000)), 4'000'000) << "alone: its own";
  learner.posted(2, kernel(1, 8), "long");
  learner.posted(1, kernel(2, 64), "k");
  EXPECT_EQ(learner.completed(2, exact(1, 97'000'000, 5'000'000)), 97'000'000);
  EXPECT_EQ(learner.completed(1, exact(2, 101'000'000, 5'001'000)), 4'001'000)
      << "behind client 2's (not learned: shared): from its end at 102 ms to 106.001 ms";
  learner.posted(1, kernel(3, 64), "k");
  ipc::CompletionDescriptor coarse = exact(3, 50'000'000, 200'000'000);
  coarse.flags = ipc::kCompletionCoarse;
  EXPECT_EQ(learner.completed(1, coarse), 0) << "a batch's span";
  learner.posted(1, kernel(4, 64), "k");
  ipc::CompletionDescriptor failed = exact(4, 50'000'000, 300'000'000);
  failed.status = 1;
  EXPECT_EQ(learner.completed(1, failed), 0) << "nothing ran";
  EXPECT_EQ(learner.completed(1, exact(99, 1'000'000, 400'000'000)), 0) << "never posted";
  learner.posted(1, kernel(5, 8), "long");
  learner.posted(1, kernel(6, 64), "k");
  EXPECT_EQ(learner.completed(1, exact(5, 97'000'000, 500'000'000)), 97'000'000);
  EXPECT_EQ(learner.completed(1, exact(6, 98'000'000, 500'001'000)), 1'001'000)
      << "waited for its own client's op on another stream (learned whole): 597 to 598.001 ms";
  EXPECT_EQ(learner.counts().learned, 4u);
  learner.posted(1, kernel(7, 8), "long");
  learner.posted(1, kernel(8, 64), "k");
  EXPECT_EQ(learner.completed(1, exact(7, 100'000'000, 700'000'000)), 100'000'000);
  EXPECT_EQ(learner.completed(1, exact(8, 80'000'000, 710'000'000)), 0)
      << "inside one that ended after it: alongside";
  EXPECT_EQ(learner.counts().shared, 1u) << "the op behind client 2's: its own time, not learned";
  // Two ops it waited for end inside its span: from the later end; one that began after it ended
  // does not count.
  learner.posted(2, kernel(2, 8), "a");
  learner.posted(2, kernel(3, 8), "b");
  learner.posted(2, kernel(4, 8), "c");
  learner.posted(1, kernel(9, 64), "k");
  EXPECT_EQ(learner.completed(2, exact(2, 10'000'000, 900'000'000)), 10'000'000);
  EXPECT_EQ(learner.completed(2, exact(3, 20'000'000, 910'000'000)), 20'000'000);
  EXPECT_EQ(learner.completed(2, exact(4, 5'000'000, 960'000'000)), 5'000'000) << "after the gap";
  EXPECT_EQ(learner.completed(1, exact(9, 55'000'000, 901'000'000)), 26'000'000) << "930 to 956 ms";
  learner.posted(3, kernel(1, 64), "k");
  EXPECT_EQ(learner.completed(3, exact(1, 97'000'000, 0), std::uint64_t{1} << 0), 0)
      << "device 0 time-sliced: others' slices in it";
}

// On a device that time-slices processes the same overlap is the op's wall time among the slices:
// learned, as the policy there has always been fed.
TEST(DurationLearner, AnOverlappingSpanOnATimeSlicingDeviceIsLearned) {
  DurationLearner learner = make_learner();
  const std::uint64_t sliced = std::uint64_t{1} << 0;  // device 0
  learner.posted(2, kernel(1, 8), "long");
  learner.posted(1, kernel(1, 64), "short");
  learner.completed(2, exact(1, 97'000'000, 0), sliced);
  learner.completed(1, exact(1, 101'000'000, 1'000), sliced);
  EXPECT_EQ(learner.counts().shared, 0u);
  EXPECT_EQ(learner.counts().learned, 2u);
}

// Only another client's op on the same engine of the same device: a copy beside a kernel, a kernel
// on another device, and an op of the same client (its other streams) share nothing of theirs.
TEST(DurationLearner, SpansOnOtherEnginesOrDevicesOrOfTheSameClientDoNotCount) {
  DurationLearner learner = make_learner();
  ipc::OpDescriptor copy{};
  copy.seq = 1;
  copy.kind = ipc::OpKind::copy;
  copy.direction = ipc::CopyDirection::h2d;
  copy.bytes = 1 << 20;
  learner.posted(2, copy, "");
  learner.completed(2, exact(1, 10'000'000, 0));
  ipc::OpDescriptor elsewhere = kernel(2, 64);
  elsewhere.device = 1;
  learner.posted(2, elsewhere, "k");
  learner.completed(2, exact(2, 10'000'000, 0));
  learner.posted(1, kernel(1, 64), "k");
  learner.completed(1, exact(1, 5'000'000, 1'000'000));
  learner.posted(1, kernel(2, 64), "k");
  learner.completed(1, exact(2, 5'000'000, 2'000'000));
  EXPECT_EQ(learner.counts().shared, 0u);
  EXPECT_EQ(learner.counts().learned, 4u);
  // Back to back with another client's op on the engine is not overlapping it.
  learner.posted(3, kernel(1, 64), "k");
  learner.completed(3, exact(1, 1'000'000, 7'000'000));
  EXPECT_EQ(learner.counts().shared, 0u);
  learner.posted(3, kernel(2, 64), "k");
  learner.completed(3, exact(2, 1'000'000, 6'500'000));
  EXPECT_EQ(learner.counts().shared, 1u);
}

// A store that is there but cannot be loaded may be a good profile this build cannot read (a newer
// version): it is moved aside, never saved over, and what this run learns is saved in its place.
TEST(DurationLearner, AStoreThatCannotBeLoadedIsMovedAsideNotOverwritten) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  std::ofstream(path, std::ios::binary) << "GPUQOSPF from a newer gpuqos";
  std::optional<std::string> warning;
  DurationLearner learner({.store_path = path.string()}, 0, warning);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("moved aside to " + path.string() + ".unreadable-"), std::string::npos) << *warning;
  std::vector<std::filesystem::path> aside;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) aside.push_back(entry.path());
  ASSERT_EQ(aside.size(), 1u);
  std::ostringstream kept;
  kept << std::ifstream(aside[0], std::ios::binary).rdbuf();
  EXPECT_EQ(kept.str(), "GPUQOSPF from a newer gpuqos");
  for (std::uint64_t seq = 1; seq <= 20; ++seq) {
    learner.posted(7, kernel(seq, 64), "k");
    learner.completed(7, exact(seq, 100'000));
  }
  EXPECT_EQ(learner.save(), std::nullopt);
  EXPECT_FALSE(predictor::load_profile(path, {}).unreadable);
  EXPECT_EQ(predictor::load_profile(path, {}).predictor.kernel_count(), 1u);
}

// A store path that is not a regular file (here: a directory; /dev/null, a FIFO) stays, and nothing
// is saved, there or beside it; said at start, not at every save.
TEST(DurationLearner, AStoreThatCannotBeReadStaysAndIsNotSavedOver) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  std::filesystem::create_directory(path);
  std::optional<std::string> warning;
  DurationLearner learner({.store_path = path.string()}, 0, warning);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("nothing learned will be saved over it"), std::string::npos) << *warning;
  learner.posted(7, kernel(1, 64), "k");
  learner.completed(7, exact(1, 100'000));
  EXPECT_EQ(learner.save(), std::nullopt);
  EXPECT_EQ(learner.counts().saves, 0u);
  EXPECT_TRUE(std::filesystem::is_directory(path));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1)
      << "nothing beside it";
}

// A user test: a read-only store (mode 0440: its owner's word to keep it) was saved over, its mode
// reset. It is read, said at start, and what is learned goes beside it, said once, readable only
// as the store is (the beside file was 0644 whatever the store's mode).
TEST(DurationLearner, AReadOnlyStoreIsReadAndWhatIsLearnedGoesBesideIt) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  ASSERT_EQ(predictor::save_profile(predictor::Predictor(), path), std::nullopt);
  std::filesystem::permissions(path, std::filesystem::perms(0440));
  const std::string beside = path.string() + ".gpuqosd-" + std::to_string(::getpid());
  std::optional<std::string> warning;
  DurationLearner learner({.store_path = path.string()}, 0, warning);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("is read-only (mode 0440"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("saved beside it, to " + beside), std::string::npos) << *warning;
  const auto before = std::filesystem::last_write_time(path);
  learner.posted(7, kernel(1, 64), "k");
  learner.completed(7, exact(1, 100'000));
  const auto said = learner.save();
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->find("what this one learned is saved to " + beside), std::string::npos) << *said;
  EXPECT_EQ(predictor::load_profile(beside, {}).predictor.kernel_count(), 1u);
  EXPECT_EQ(std::filesystem::status(beside).permissions(), std::filesystem::perms(0640));
  learner.posted(7, kernel(2, 64), "k");
  learner.completed(7, exact(2, 100'000));
  EXPECT_EQ(learner.save(), std::nullopt) << "said once";
  EXPECT_EQ(learner.counts().saves, 2u);
  EXPECT_EQ(std::filesystem::last_write_time(path), before);
  EXPECT_EQ(std::filesystem::status(path).permissions(), std::filesystem::perms(0440));
}

// A review: `<store>.gpuqosd-<pid>` is a name anyone can foresee; a read-only file planted there
// would have made every save beside the store fail. It is gpuqosd's own name: replaced.
TEST(DurationLearner, ASaveBesideTheStoreReplacesWhateverIsPlantedAtItsName) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  const std::string beside = path.string() + ".gpuqosd-" + std::to_string(::getpid());
  std::ofstream(beside) << "planted";
  std::filesystem::permissions(beside, std::filesystem::perms(0444));
  std::optional<std::string> warning;
  DurationLearner learner({.store_path = path.string(), .saves_beside = true}, 0, warning);
  learner.posted(7, kernel(1, 64), "k");
  learner.completed(7, exact(1, 100'000));
  EXPECT_EQ(learner.save(), std::nullopt);
  EXPECT_EQ(predictor::load_profile(beside, {}).predictor.kernel_count(), 1u);
}

// Nothing learned: nothing written (a store trained meanwhile is not replaced by an empty model).
// A store someone else wrote since it was read (gpuqos train --out, another gpuqosd) is not
// overwritten either: what this daemon learned goes beside it.
TEST(DurationLearner, ASaveNeverReplacesAStoreWrittenSinceOrWithNothingNew) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  std::optional<std::string> warning;
  DurationLearner learner({.store_path = path.string()}, 0, warning);  // no file yet: an empty model
  std::ofstream(path, std::ios::binary) << "a store trained meanwhile";
  EXPECT_EQ(learner.save(), std::nullopt);
  const auto content = [](const std::filesystem::path& file) {
    std::ostringstream text;
    text << std::ifstream(file, std::ios::binary).rdbuf();
    return text.str();
  };
  EXPECT_EQ(content(path), "a store trained meanwhile") << "nothing learned: not written";
  learner.posted(7, kernel(1, 64), "k");
  learner.completed(7, exact(1, 100'000));
  const auto said = learner.save();
  ASSERT_TRUE(said.has_value());
  const std::string beside = path.string() + ".gpuqosd-" + std::to_string(::getpid());
  EXPECT_NE(said->find("changed since this gpuqosd read it"), std::string::npos) << *said;
  EXPECT_NE(said->find(beside), std::string::npos) << *said;
  EXPECT_EQ(content(path), "a store trained meanwhile");
  EXPECT_EQ(predictor::load_profile(beside, {}).predictor.kernel_count(), 1u);
}

// gpuqosd's periodic save is written on a thread of its own. A store of 512 kernels of 64 shapes
// each took 0.5 s to encode and write, all of it inside the tick, on gpuqosd's loop: every grant
// and heartbeat waited, past the 100 ms after which jobs run unmanaged. Now the tick returns with
// the save under way, learning goes on meanwhile, and what was learned after the state was taken
// is left for the next save.
TEST(DurationLearner, APeriodicSaveIsWrittenWhileTheLearnerGoesOn) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  {
    predictor::Predictor seed;
    for (std::uint32_t grid = 1; grid <= 64; ++grid) {
      predictor::KernelFeatures features{"seed", {}};
      features.shape.grid = {grid, 1, 1};
      features.shape.block = {128, 1, 1};
      seed.observe(features, 1000.0 * grid);
    }
    predictor::Predictor::State state = seed.state();
    ASSERT_EQ(state.kernels.size(), 1u);
    const auto one = state.kernels[0].second;
    state.kernels.clear();
    for (int k = 0; k < 512; ++k) state.kernels.emplace_back("kernel_" + std::to_string(k), one);
    ASSERT_EQ(predictor::save_profile(predictor::Predictor::restore(state), path), std::nullopt);
  }
  constexpr std::int64_t kInterval = 60'000'000'000;
  std::optional<std::string> warning;
  DurationLearner learner({.store_path = path.string(), .save_interval_ns = kInterval}, 0, warning);
  ASSERT_FALSE(warning.has_value()) << *warning;
  ASSERT_EQ(learner.predictor().kernel_count(), 512u);
  learner.posted(7, kernel(1, 64), "k");
  learner.completed(7, exact(1, 100'000));
  const predictor::FileIdentity read = predictor::identity_of(path);

  EXPECT_EQ(learner.tick(kInterval), std::nullopt);
  EXPECT_TRUE(learner.saving());
  EXPECT_TRUE(predictor::identity_of(path) == read) << "the tick returned before the store was written";
  learner.posted(7, kernel(2, 32), "k");
  learner.completed(7, exact(2, 50'000));
  EXPECT_EQ(learner.counts().learned, 2u) << "learning goes on while it saves";

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::int64_t now_ns = kInterval;
  while (learner.saving() && std::chrono::steady_clock::now() < deadline) {
    EXPECT_EQ(learner.tick(now_ns += 10'000'000), std::nullopt);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(learner.saving());
  EXPECT_EQ(learner.counts().saves, 1u);
  EXPECT_FALSE(predictor::identity_of(path) == read) << "replaced";
  EXPECT_EQ(predictor::load_profile(path, {}).predictor.kernel_count(), 513u);
  EXPECT_TRUE(learner.unsaved()) << "the completion learned after the state was taken";
  EXPECT_EQ(learner.save(), std::nullopt);
  EXPECT_EQ(learner.counts().saves, 2u);
  EXPECT_FALSE(learner.unsaved());
}

// A store in a directory that is not there yet: the directory is made at start, so the save at exit
// does not fail then, with everything learned lost. One that cannot be made is said at start.
TEST(DurationLearner, TheStoresDirectoryIsMadeAtStartOrItsProblemSaid) {
  const testing::TempDir dir;
  const auto path = dir.path() / "state" / "gpuqos" / "profile.gqp";
  std::optional<std::string> warning;
  DurationLearner learner({.store_path = path.string()}, 0, warning);
  EXPECT_FALSE(warning.has_value()) << *warning << ": a first start is no problem (said at info by gpuqosd)";
  EXPECT_TRUE(std::filesystem::is_directory(path.parent_path()));
  learner.posted(7, kernel(1, 64), "k");
  learner.completed(7, exact(1, 100'000));
  EXPECT_EQ(learner.save(), std::nullopt);
  EXPECT_TRUE(std::filesystem::exists(path));

  const std::string nowhere = "/proc/gpuqos-no-such-dir/profile.gqp";  // /proc takes no directories, even root's
  std::optional<std::string> said;
  DurationLearner refused({.store_path = nowhere}, 0, said);
  ASSERT_TRUE(said.has_value());
  EXPECT_TRUE(said->starts_with("profile store " + nowhere + ": its directory /proc/gpuqos-no-such-dir cannot be made ("))
      << *said;
  EXPECT_TRUE(said->ends_with("; saves will fail until it can be written")) << *said;
}

// A kernel whose durations swing by 1000x at the same shape: the predictor's p90 residual ratio is
// huge, and the learner hands the policy at most kMaxUpperRatio x the prediction.
TEST(DurationLearner, CapsTheUpperEstimateAtAFewTimesThePrediction) {
  DurationLearner learner = make_learner();
  std::uint64_t seq = 0;
  for (int i = 0; i < 60; ++i) {
    learner.posted(7, kernel(++seq, 64), "wild");
    learner.completed(7, exact(seq, i % 3 == 0 ? 100'000'000 : 100'000));
  }
  const auto features = predictor::features_of(kernel(seq + 1, 64), "wild");
  const predictor::Prediction raw = learner.predictor().predict(features);
  ASSERT_GT(raw.upper_ns, raw.duration_ns * 10) << "the case needs a wild upper estimate to mean anything";
  const DurationLearner::Estimate estimate = learner.posted(7, kernel(++seq, 64), "wild");
  EXPECT_LE(static_cast<double>(estimate.upper_ns), raw.duration_ns * DurationLearner::kMaxUpperRatio + 1);
  EXPECT_GE(static_cast<double>(estimate.upper_ns), raw.duration_ns);
  EXPECT_NEAR(static_cast<double>(estimate.expected_ns), raw.duration_ns, 1.0) << "the prediction itself, uncapped";
}

TEST(DurationLearner, OpsThatTakeNoEngineTimeArePredictedZero) {
  DurationLearner learner = make_learner();
  ipc::OpDescriptor sync{};
  sync.seq = 1;
  sync.kind = ipc::OpKind::sync;
  EXPECT_EQ(learner.posted(7, sync, "").upper_ns, 0);
}

// A completion is its client's word, and one predictor serves every job: a span that begins before
// its op can have started (kMaxPostLagNs before gpuqosd read its post), or over kMaxLearnedNs,
// teaches nothing. The op still ran: its own time counts from no earlier than it can have started.
// One that fits is learned as before.
TEST(DurationLearner, ASpanLongerThanTheOpCanHaveRunIsNotLearned) {
  constexpr std::int64_t kArrived = 5'000'000'000'000;  // gpuqosd read the post 5,000 s after boot
  constexpr std::int64_t kS = 1'000'000'000;
  DurationLearner learner = make_learner();
  ipc::OpDescriptor op = kernel(1, 64);
  op.posted_ns = 1;  // the shim's stamp: not trusted
  (void)learner.posted(7, op, "k", kArrived);
  // Ending 10 ms after gpuqosd read its post, it claims an hour: it ran 1.01 s at most.
  const std::int64_t read = kArrived + 10'000'000;
  EXPECT_EQ(learner.completed(7, exact(1, 3'600 * kS, read - 3'600 * kS)), kS + 10'000'000);
  EXPECT_EQ(learner.counts().rejected, 1u);
  // 1.2 s, ending 100 ms after the post was read: begun before it can have started.
  op.seq = 2;
  op.device = 2;  // alone on its device: no other span ends inside this one
  (void)learner.posted(7, op, "k", kArrived);
  EXPECT_EQ(learner.completed(7, exact(2, 1'200'000'000, kArrived - 1'100'000'000)),
            1'100'000'000);
  EXPECT_EQ(learner.counts().rejected, 2u);
  // Over kMaxLearnedNs whatever the times say (no reading said: a caller that knows none); it ran so long.
  op.seq = 3;
  op.device = 3;  // alone on its device: no other span ends inside this one
  (void)learner.posted(7, op, "k");
  EXPECT_EQ(learner.completed(7, exact(3, DurationLearner::kMaxLearnedNs + 1)), DurationLearner::kMaxLearnedNs + 1);
  EXPECT_EQ(learner.counts().rejected, 3u);
  EXPECT_EQ(learner.counts().learned, 0u);
  // One that fits: 1 s, from 0.9 s before the post was read.
  op.seq = 4;
  op.device = 4;  // alone on its device: no other span ends inside this one
  (void)learner.posted(7, op, "k", kArrived);
  EXPECT_EQ(learner.completed(7, exact(4, kS, kArrived - 900'000'000)), kS);
  EXPECT_EQ(learner.counts().learned, 1u);
  EXPECT_EQ(learner.counts().rejected, 3u);
}

// A span not learned still counts against the others': another client's op that waited behind an
// 11-s kernel is not learned with its wait (a review: it was learned at 3 s, and charged so).
TEST(DurationLearner, AnUnlearnedLongSpanStillCountsAgainstTheOthers) {
  constexpr std::int64_t kS = 1'000'000'000;
  DurationLearner learner = make_learner();
  const std::int64_t arrived = 100 * kS;
  ipc::OpDescriptor longest = kernel(1, 64);
  (void)learner.posted(1, longest, "long", arrived);
  (void)learner.posted(2, kernel(1, 64), "short", arrived + 8 * kS);
  EXPECT_EQ(learner.completed(1, exact(1, 11 * kS, arrived)), 11 * kS) << "not learned, but it ran";
  EXPECT_EQ(learner.counts().rejected, 1u);
  // Client 2's 2-ms kernel, posted at 8 s, waited for the long one to end at 11 s.
  EXPECT_EQ(learner.completed(2, exact(1, 3 * kS + 2'000'000, arrived + 8 * kS)), 2'000'000);
  EXPECT_EQ(learner.counts().shared, 1u);
  EXPECT_EQ(learner.counts().learned, 0u);
}

}  // namespace
}  // namespace gpuqos::scheduler

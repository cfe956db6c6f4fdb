// Tests of the priority policy in a virtual clock: best-effort work only while no high-priority
// work is on the device, arrival order otherwise, and a lost completion cannot starve anyone.
#include "gpuqos/scheduler/priority_policy.h"

#include <gtest/gtest.h>

namespace gpuqos::scheduler {
namespace {

using ipc::Priority;

ipc::OpDescriptor op(std::uint64_t seq, ipc::OpKind kind = ipc::OpKind::kernel) {
  ipc::OpDescriptor d{};
  d.seq = seq;
  d.posted_ns = 1;
  d.kind = kind;
  if (kind == ipc::OpKind::kernel) d.kernel_id = 1;
  return d;
}

ipc::CompletionDescriptor done(std::uint64_t seq) { return ipc::CompletionDescriptor{seq, 10, 20, 0, 0}; }

constexpr ClientId kServe = 1, kTrainA = 2, kTrainB = 3, kServeB = 4;

TEST(PriorityPolicy, BestEffortFlowsWhileNoQueryRuns) {
  PriorityPolicy policy;
  EXPECT_EQ(policy.op_posted({kTrainA, Priority::low, op(1), 1'000}), (Decisions{{kTrainA, 1}}));
  EXPECT_EQ(policy.op_posted({kTrainB, Priority::low, op(1), 2'000}), (Decisions{{kTrainB, 1}}));
  EXPECT_EQ(policy.name(), "priority");
}

TEST(PriorityPolicy, HoldsBestEffortWhileHighPriorityWorkIsOnTheDevice) {
  PriorityPolicy policy;
  EXPECT_TRUE(policy.op_posted({kServe, Priority::high, op(1), 1'000}).empty());
  EXPECT_TRUE(policy.op_posted({kServe, Priority::high, op(2), 1'100}).empty());
  EXPECT_TRUE(policy.op_posted({kTrainA, Priority::low, op(1), 1'200}).empty());
  EXPECT_TRUE(policy.op_posted({kTrainB, Priority::low, op(1), 1'300}).empty());
  EXPECT_TRUE(policy.op_completed({kServe, done(1), 1'400}).empty()) << "one of the query's ops still runs";
  EXPECT_EQ(policy.op_completed({kServe, done(2), 1'500}), (Decisions{{kTrainA, 1}, {kTrainB, 1}}))
      << "drained: the queue goes in arrival order";
  EXPECT_EQ(policy.queued_ops(), 0u);
}

// Best-effort work waits only for high-priority work on its own device: it waited for any
// device's, so an inference job on one GPU held back training on every other (0 grants in a second,
// in a review). A client's ops still go in its order: one held holds its later ones.
TEST(PriorityPolicy, HoldsBestEffortOnlyForItsOwnDevicesHighPriorityWork) {
  const auto on = [](std::uint32_t device, std::uint64_t seq) {
    ipc::OpDescriptor d = op(seq);
    d.device = device;
    return d;
  };
  PriorityPolicy policy;
  EXPECT_TRUE(policy.op_posted({kServe, Priority::high, on(1, 1), 1'000}).empty());
  EXPECT_EQ(policy.op_posted({kTrainA, Priority::low, on(0, 1), 1'100}), (Decisions{{kTrainA, 1}}))
      << "device 0 has no high-priority work";
  EXPECT_TRUE(policy.op_posted({kTrainB, Priority::low, on(1, 1), 1'200}).empty());
  EXPECT_TRUE(policy.op_posted({kTrainB, Priority::low, on(0, 2), 1'300}).empty()) << "behind its own held op";
  EXPECT_EQ(policy.op_posted({kTrainA, Priority::low, on(0, 2), 1'400}), (Decisions{{kTrainA, 2}}))
      << "another client's held op holds nothing of this one";
  EXPECT_EQ(policy.queued_ops(), 2u);
  EXPECT_EQ(policy.op_completed({kServe, done(1), 1'500}), (Decisions{{kTrainB, 1}, {kTrainB, 2}}));
  EXPECT_EQ(policy.queued_ops(), 0u);
  // Also when the high-priority client goes, or its op goes stale.
  (void)policy.op_posted({kServe, Priority::high, on(1, 2), 2'000});
  EXPECT_TRUE(policy.op_posted({kTrainB, Priority::low, on(1, 3), 2'100}).empty());
  EXPECT_EQ(policy.client_gone(kServe, 2'200), (Decisions{{kTrainB, 3}}));
  (void)policy.op_posted({kServeB, Priority::high, on(1, 1), 3'000});
  EXPECT_TRUE(policy.op_posted({kTrainB, Priority::low, on(1, 4), 3'100}).empty());
  EXPECT_EQ(policy.tick(3'000 + PriorityPolicy::kStaleHighNs + 1), (Decisions{{kTrainB, 4}}));
  EXPECT_EQ(policy.high_priority_in_flight(), 0u);
  // A mark occupies no device (one from a thread without a context says device 0): it holds
  // nothing of its client's later work elsewhere.
  const std::int64_t later = 3'000 + PriorityPolicy::kStaleHighNs + 10;
  (void)policy.op_posted({kServe, Priority::high, on(0, 3), later});
  ipc::OpDescriptor mark = op(5, ipc::OpKind::query_end);
  EXPECT_EQ(policy.op_posted({kTrainB, Priority::low, mark, later}), (Decisions{{kTrainB, 5}}));
  EXPECT_EQ(policy.op_posted({kTrainB, Priority::low, on(1, 6), later}), (Decisions{{kTrainB, 6}}));
}

// Marks in a row of one client behind its held op are one queue entry (push_coalescing_marks):
// a thread looping on synchronisations posts them without waiting. Another client's entry between
// them keeps them apart, and the grant releases each client through its latest. A mark with
// nothing of its client held goes at once.
TEST(PriorityPolicy, MarksInARowOfOneClientAreOneQueueEntry) {
  PriorityPolicy policy;
  (void)policy.op_posted({kServe, Priority::high, op(1), 1'000});
  EXPECT_TRUE(policy.op_posted({kTrainA, Priority::low, op(1), 1'100}).empty());
  for (std::uint64_t seq = 2; seq <= 1'000; ++seq) {
    EXPECT_TRUE(policy.op_posted({kTrainA, Priority::low, op(seq, ipc::OpKind::sync), 1'100}).empty());
  }
  EXPECT_EQ(policy.queued_ops(), 2u) << "the op and one entry for 999 marks";
  EXPECT_EQ(policy.op_posted({kTrainB, Priority::low, op(1, ipc::OpKind::sync), 1'200}), (Decisions{{kTrainB, 1}}))
      << "a mark with nothing of its client held: it occupies no device";
  EXPECT_TRUE(policy.op_posted({kTrainB, Priority::low, op(2), 1'250}).empty());
  EXPECT_TRUE(policy.op_posted({kTrainA, Priority::low, op(1'001, ipc::OpKind::query_end), 1'300}).empty());
  EXPECT_EQ(policy.queued_ops(), 4u) << "kTrainB's kernel keeps kTrainA's marks apart";
  const Decisions granted = policy.op_completed({kServe, done(1), 1'400});
  ASSERT_FALSE(granted.empty());
  EXPECT_EQ(granted.back(), (Grant{kTrainA, 1'001}));
  EXPECT_EQ(policy.queued_ops(), 0u);
}

TEST(PriorityPolicy, MarksOfTheHighPriorityJobHoldNothing) {
  PriorityPolicy policy;
  EXPECT_TRUE(policy.op_posted({kServe, Priority::high, op(1, ipc::OpKind::sync), 1'000}).empty());
  EXPECT_EQ(policy.high_priority_in_flight(), 0u);
  EXPECT_EQ(policy.op_posted({kTrainA, Priority::low, op(1), 1'100}), (Decisions{{kTrainA, 1}}));
}

TEST(PriorityPolicy, AGoneHighPriorityClientReleasesTheQueue) {
  PriorityPolicy policy;
  (void)policy.op_posted({kServe, Priority::high, op(1), 1'000});
  EXPECT_TRUE(policy.op_posted({kTrainA, Priority::low, op(1), 1'100}).empty());
  EXPECT_EQ(policy.client_gone(kServe, 1'200), (Decisions{{kTrainA, 1}}));
}

TEST(PriorityPolicy, ALostCompletionStopsBlockingAfterTheStaleLimit) {
  PriorityPolicy policy;
  (void)policy.op_posted({kServe, Priority::high, op(1), 1'000});
  EXPECT_TRUE(policy.op_posted({kTrainA, Priority::low, op(1), 2'000}).empty());
  EXPECT_TRUE(policy.tick(1'000 + PriorityPolicy::kStaleHighNs).empty()) << "not yet stale";
  EXPECT_EQ(policy.tick(1'001 + PriorityPolicy::kStaleHighNs), (Decisions{{kTrainA, 1}}));
}

// A high-priority client that never reports completions could keep millions of ops in flight for
// kStaleHighNs, each tick walking them all: past EngineBacklog::kMaxTrackedOpsPerClient its oldest goes.
TEST(PriorityPolicy, AClientsOpsInFlightAreBoundedInCountAndTheStaleOnesGoByTick) {
  constexpr std::uint64_t kMax = EngineBacklog::kMaxTrackedOpsPerClient;
  PriorityPolicy policy;
  for (std::uint64_t seq = 1; seq <= kMax + 1; ++seq) (void)policy.op_posted({kServe, Priority::high, op(seq), 1'000});
  (void)policy.op_posted({kServeB, Priority::high, op(1), 5'000});
  EXPECT_EQ(policy.high_priority_in_flight(), kMax + 1);
  EXPECT_TRUE(policy.op_posted({kTrainA, Priority::low, op(1), 6'000}).empty());
  for (std::uint64_t seq = 2; seq <= kMax + 1; ++seq) EXPECT_TRUE(policy.op_completed({kServe, done(seq), 7'000}).empty());
  EXPECT_EQ(policy.high_priority_in_flight(), 1u) << "op 1 went at the cap; kServeB's op is left";
  EXPECT_TRUE(policy.tick(5'000 + PriorityPolicy::kStaleHighNs).empty());
  EXPECT_EQ(policy.tick(5'001 + PriorityPolicy::kStaleHighNs), (Decisions{{kTrainA, 1}}));
}

TEST(PriorityPolicy, BacklogCountsBothClasses) {
  PriorityPolicy policy;
  (void)policy.op_posted({kTrainA, Priority::low, op(1), 1'000});
  (void)policy.op_posted({kServe, Priority::high, op(1), 1'100});
  EXPECT_EQ(policy.backlog().load(0, Engine::compute).outstanding_ops, 2u);
  (void)policy.op_completed({kTrainA, done(1), 1'200});
  EXPECT_EQ(policy.backlog().load(0, Engine::compute).outstanding_ops, 1u);
}

TEST(PriorityPolicy, ReconfigureTakesItsOwnNameOnly) {
  PriorityPolicy policy;
  EXPECT_TRUE(policy.reconfigure({.name = "priority", .max_outstanding_ops = 3, .credit_ops = 4}));
  EXPECT_FALSE(policy.reconfigure({.name = "fifo"}));
  EXPECT_FALSE(policy.reconfigure({.name = "baymax"}));
  EXPECT_EQ(policy.op_posted({kTrainA, Priority::low, op(1), 1'000}), (Decisions{{kTrainA, 1}})) << "still serving";
}

}  // namespace
}  // namespace gpuqos::scheduler

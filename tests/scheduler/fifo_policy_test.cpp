// Tests of the fifo policy and the engine backlog in a virtual clock (no daemon, no processes).
#include "gpuqos/scheduler/fifo_policy.h"

#include <gtest/gtest.h>

#include <limits>

namespace gpuqos::scheduler {
namespace {

using ipc::Priority;

ipc::OpDescriptor kernel(std::uint64_t seq, std::uint32_t device = 0) {
  ipc::OpDescriptor op{};
  op.seq = seq;
  op.posted_ns = 1;
  op.device = device;
  op.kind = ipc::OpKind::kernel;
  op.kernel_id = 1;
  return op;
}

ipc::OpDescriptor copy(std::uint64_t seq, ipc::CopyDirection direction, std::uint64_t bytes) {
  ipc::OpDescriptor op{};
  op.seq = seq;
  op.posted_ns = 1;
  op.kind = ipc::OpKind::copy;
  op.direction = direction;
  op.host_memory = ipc::HostMemory::pinned;
  op.bytes = bytes;
  return op;
}

ipc::OpDescriptor sync(std::uint64_t seq) {
  ipc::OpDescriptor op{};
  op.seq = seq;
  op.posted_ns = 1;
  op.kind = ipc::OpKind::sync;
  return op;
}

ipc::CompletionDescriptor done(std::uint64_t seq, std::int64_t start_ns, std::int64_t end_ns) {
  return ipc::CompletionDescriptor{seq, start_ns, end_ns, 0, 0};
}

// A virtual clock: every event happens 1 us after the previous one.
struct Clock {
  std::int64_t now_ns = 1'000'000;
  std::int64_t next() { return now_ns += 1'000; }
};

TEST(FifoPolicy, UnlimitedGrantsEachLowOpAsItArrives) {
  FifoPolicy fifo;
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}}));
  EXPECT_EQ(fifo.op_posted({2, Priority::low, kernel(1), clock.next()}), (Decisions{{2, 1}}));
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(2), clock.next()}), (Decisions{{1, 2}}));
  EXPECT_EQ(fifo.name(), "fifo");
}

TEST(FifoPolicy, GrantsInArrivalOrderAcrossClients) {
  FifoPolicy fifo(1);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}}));
  EXPECT_TRUE(fifo.op_posted({2, Priority::low, kernel(1), clock.next()}).empty());
  EXPECT_TRUE(fifo.op_posted({1, Priority::low, kernel(2), clock.next()}).empty());
  EXPECT_TRUE(fifo.op_posted({3, Priority::low, kernel(1), clock.next()}).empty());
  EXPECT_EQ(fifo.queued_ops(), 3u);
  EXPECT_TRUE(fifo.tick(clock.next()).empty()) << "nothing completed: nothing more may go";
  EXPECT_EQ(fifo.op_completed({1, done(1, 10, 20), clock.next()}), (Decisions{{2, 1}}));
  EXPECT_EQ(fifo.op_completed({2, done(1, 20, 30), clock.next()}), (Decisions{{1, 2}}));
  EXPECT_EQ(fifo.op_completed({1, done(2, 30, 40), clock.next()}), (Decisions{{3, 1}}));
  EXPECT_EQ(fifo.queued_ops(), 0u);
  EXPECT_EQ(fifo.outstanding_ops(), 1u);
}

// A granted op whose completion never comes would hold its slot, and every other client, for ever;
// one waiting for its own program's host would stall it: the slot comes back after 2 s.
TEST(FifoPolicy, AnOpWhoseCompletionNeverComesGivesItsSlotBackAfterTheStuckAge) {
  FifoPolicy fifo(1);
  Clock clock;
  const std::int64_t granted_ns = clock.next();
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), granted_ns}), (Decisions{{1, 1}}));
  EXPECT_TRUE(fifo.op_posted({2, Priority::low, kernel(1), clock.next()}).empty());
  static_assert(FifoPolicy::kStuckOpNs == 2'000'000'000);
  EXPECT_TRUE(fifo.tick(granted_ns + FifoPolicy::kStuckOpNs).empty()) << "not yet stuck";
  EXPECT_EQ(fifo.tick(granted_ns + FifoPolicy::kStuckOpNs + 1), (Decisions{{2, 1}}));
  EXPECT_EQ(fifo.outstanding_ops(), 1u);  // client 2's
  EXPECT_TRUE(fifo.op_completed({1, done(1, 10, 20), clock.next()}).empty()) << "a late report changes nothing";
}

TEST(FifoPolicy, HighPriorityIsAccountedNeverHeld) {
  FifoPolicy fifo(1);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}}));
  for (std::uint64_t seq = 1; seq <= 5; ++seq) {
    EXPECT_TRUE(fifo.op_posted({9, Priority::high, kernel(seq), clock.next()}).empty());
  }
  EXPECT_EQ(fifo.backlog().load(0, Engine::compute).outstanding_ops, 6u);
  EXPECT_EQ(fifo.outstanding_ops(), 1u) << "high ops take no low-priority slot";
  EXPECT_TRUE(fifo.op_completed({9, done(3, 0, 50'000), clock.next()}).empty());
  EXPECT_EQ(fifo.backlog().load(0, Engine::compute).outstanding_ops, 5u);
}

TEST(FifoPolicy, CompletionsUpdateTheBacklogPerEngine) {
  FifoPolicy fifo;
  Clock clock;
  (void)fifo.op_posted({1, Priority::low, kernel(1), clock.next()});
  (void)fifo.op_posted({1, Priority::low, copy(2, ipc::CopyDirection::h2d, 10'000'000), clock.next()});
  (void)fifo.op_posted({1, Priority::low, copy(3, ipc::CopyDirection::d2h, 20'000), clock.next()});
  (void)fifo.op_posted({1, Priority::low, sync(4), clock.next()});
  // Work within device memory runs on the copy engines, beside the kernels.
  (void)fifo.op_posted({1, Priority::low, copy(5, ipc::CopyDirection::d2d, 10'000), clock.next()});
  ipc::OpDescriptor memset = copy(6, ipc::CopyDirection::memset, 10'000);
  memset.kind = ipc::OpKind::memset;
  memset.host_memory = ipc::HostMemory::none;
  (void)fifo.op_posted({1, Priority::low, memset, clock.next()});
  const auto& backlog = fifo.backlog();
  EXPECT_EQ(backlog.load(0, Engine::compute).backlog_ns, 100'000);
  EXPECT_EQ(backlog.load(0, Engine::compute).outstanding_ops, 1u) << "the kernel alone";
  EXPECT_EQ(backlog.load(0, Engine::h2d).backlog_ns, 5'000 + 1'000'000);
  EXPECT_EQ(backlog.load(0, Engine::d2h).outstanding_ops, 1u);
  EXPECT_EQ(backlog.load(0, Engine::local).outstanding_ops, 2u) << "the device-to-device copy and the memset";
  (void)fifo.op_completed({1, done(2, 100, 900'100), clock.next()});
  EXPECT_EQ(backlog.load(0, Engine::h2d).outstanding_ops, 0u);
  EXPECT_EQ(backlog.load(0, Engine::h2d).backlog_ns, 0);
  EXPECT_EQ(backlog.load(0, Engine::h2d).completed_ops, 1u);
  EXPECT_EQ(backlog.load(0, Engine::h2d).completed_device_ns, 900'000);
  (void)fifo.op_completed({1, done(2, 100, 900'100), clock.next()});
  EXPECT_EQ(backlog.load(0, Engine::h2d).completed_ops, 1u) << "a duplicate completion is ignored";
  EXPECT_EQ(backlog.loads().size(), 4u) << "compute, h2d, d2h, local";
}

TEST(FifoPolicy, SyncOpsTakeNoSlot) {
  FifoPolicy fifo(1);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, sync(1), clock.next()}), (Decisions{{1, 1}}));
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(2), clock.next()}), (Decisions{{1, 2}}));
  // Every slot taken: a mark behind the running kernel still goes, one behind a held kernel waits.
  EXPECT_EQ(fifo.op_posted({1, Priority::low, sync(3), clock.next()}), (Decisions{{1, 3}}));
  EXPECT_TRUE(fifo.op_posted({2, Priority::low, kernel(1), clock.next()}).empty());
  EXPECT_TRUE(fifo.op_posted({2, Priority::low, sync(2), clock.next()}).empty()) << "order within a client";
  EXPECT_EQ(fifo.op_completed({1, done(2, 10, 20), clock.next()}), (Decisions{{2, 1}, {2, 2}}));
}

TEST(FifoPolicy, CreditLetsAnIdleClientIssueAheadAndIsRenewedAtHalf) {
  FifoPolicy fifo(/*max_outstanding_ops=*/0, /*credit_ops=*/4);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}, {1, 5}}));
  EXPECT_TRUE(fifo.op_posted({1, Priority::low, kernel(2), clock.next()}).empty()) << "3 of 4 left";
  EXPECT_TRUE(fifo.op_posted({1, Priority::low, kernel(3), clock.next()}).empty()) << "2 of 4 left";
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(4), clock.next()}), (Decisions{{1, 8}})) << "1 left: renewed";
  EXPECT_EQ(fifo.queued_ops(), 0u);
  EXPECT_EQ(fifo.backlog().load(0, Engine::compute).outstanding_ops, 4u) << "credited ops are accounted";
}

TEST(FifoPolicy, CreditStaysWithinTheOutstandingLimit) {
  FifoPolicy fifo(/*max_outstanding_ops=*/2, /*credit_ops=*/4);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}, {1, 2}}))
      << "one slot left: one op of credit";
  EXPECT_TRUE(fifo.op_posted({1, Priority::low, kernel(2), clock.next()}).empty());
  EXPECT_EQ(fifo.outstanding_ops(), 2u);
  EXPECT_TRUE(fifo.op_posted({2, Priority::low, kernel(1), clock.next()}).empty()) << "full: queued";
  EXPECT_EQ(fifo.op_completed({1, done(1, 10, 20), clock.next()}), (Decisions{{2, 1}}))
      << "the queued op first; no credit while anything waited";
  EXPECT_TRUE(fifo.op_completed({1, done(2, 20, 30), clock.next()}).empty() == false);
  EXPECT_LE(fifo.outstanding_ops(), 2u);
}

TEST(FifoPolicy, NoCreditWhileAnotherClientWaits) {
  FifoPolicy fifo(/*max_outstanding_ops=*/1, /*credit_ops=*/8);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}}));
  EXPECT_TRUE(fifo.op_posted({2, Priority::low, kernel(1), clock.next()}).empty());
  EXPECT_TRUE(fifo.op_posted({1, Priority::low, kernel(2), clock.next()}).empty());
  EXPECT_EQ(fifo.op_completed({1, done(1, 10, 20), clock.next()}), (Decisions{{2, 1}}));
  EXPECT_EQ(fifo.op_completed({2, done(1, 20, 30), clock.next()}), (Decisions{{1, 2}}))
      << "in arrival order, and the limit leaves no room for credit";
}

TEST(FifoPolicy, ClientGoneDropsItsOpsAndFreesItsSlot) {
  FifoPolicy fifo(1);
  Clock clock;
  (void)fifo.op_posted({1, Priority::low, kernel(1), clock.next()});
  (void)fifo.op_posted({1, Priority::low, kernel(2), clock.next()});
  (void)fifo.op_posted({2, Priority::low, kernel(1), clock.next()});
  (void)fifo.op_posted({1, Priority::low, kernel(3), clock.next()});
  EXPECT_EQ(fifo.client_gone(1, clock.next()), (Decisions{{2, 1}}));
  EXPECT_EQ(fifo.queued_ops(), 0u);
  EXPECT_EQ(fifo.backlog().load(0, Engine::compute).outstanding_ops, 1u);
  EXPECT_TRUE(fifo.op_completed({1, done(1, 0, 1), clock.next()}).empty()) << "the gone client is forgotten";
  EXPECT_EQ(fifo.backlog().load(0, Engine::compute).outstanding_ops, 1u);
}

TEST(EngineBacklog, RetiresTheOldestBeyondItsBound) {
  EngineBacklog backlog;
  for (std::uint64_t seq = 1; seq <= EngineBacklog::kMaxTrackedOpsPerClient + 10; ++seq) backlog.account(1, kernel(seq), 1, 0);
  EXPECT_EQ(backlog.load(0, Engine::compute).outstanding_ops, EngineBacklog::kMaxTrackedOpsPerClient);
  EXPECT_FALSE(backlog.complete(1, done(1, 0, 1)));
  EXPECT_TRUE(backlog.complete(1, done(EngineBacklog::kMaxTrackedOpsPerClient + 10, 0, 1)));
}

// An op whose completion never came is retired as lost kLostAfterNs after it was accounted, by
// every policy's tick: status and metrics went on showing it outstanding (and its predicted time as
// backlog) until its client left, long after the policy had let it go.
TEST(EngineBacklog, AnOpWhoseCompletionNeverCameIsCountedLostByEveryPolicysTick) {
  constexpr std::int64_t kLost = EngineBacklog::kLostAfterNs;
  for (const char* name : {"fifo", "priority", "baymax"}) {
    SCOPED_TRACE(name);
    PolicyOptions options{name, 0};
    auto policy = make_policy(options);
    ASSERT_TRUE(policy);
    (void)policy->client_registered(ClientInfo{1, "train", Priority::low, 0, std::nullopt, 99.0, 1.0}, 0);
    (void)policy->op_posted({1, Priority::low, kernel(1), 1'000});
    (void)policy->op_posted({1, Priority::low, kernel(2), 2'000});
    (void)policy->op_completed({1, done(2, 2'000, 3'000), 3'000});
    (void)policy->op_posted({1, Priority::low, kernel(3), kLost});
    ASSERT_EQ(policy->backlog().load(0, Engine::compute).outstanding_ops, 2u);
    (void)policy->tick(kLost + 999);
    EXPECT_EQ(policy->backlog().load(0, Engine::compute).outstanding_ops, 2u) << "not yet";
    (void)policy->tick(kLost + 1'000);
    const EngineLoad load = policy->backlog().load(0, Engine::compute);
    EXPECT_EQ(load.outstanding_ops, 1u) << "the first, lost";
    EXPECT_EQ(load.lost_ops, 1u);
    EXPECT_EQ(load.completed_ops, 1u);
    EXPECT_TRUE(policy->op_completed({1, done(3, kLost, kLost + 2'000), kLost + 2'000}).empty());
    EXPECT_EQ(policy->backlog().load(0, Engine::compute).outstanding_ops, 0u);
    EXPECT_EQ(policy->backlog().load(0, Engine::compute).backlog_ns, 0);
  }
}

// Spans are a client's word: a start of 0 and an end days later pass validation, and thousands of
// them overflowed the sum of device time (negative in the status). It saturates; a span that ends
// before it starts counts nothing.
TEST(EngineBacklog, CompletedDeviceTimeSaturatesAndNeverGoesBack) {
  EngineBacklog backlog;
  constexpr std::int64_t kTwelveDays = 12LL * 86'400 * 1'000'000'000;
  for (std::uint64_t seq = 1; seq <= 9'000; ++seq) {
    backlog.account(7, kernel(seq), 1'000, 0);
    ASSERT_TRUE(backlog.complete(7, done(seq, 0, kTwelveDays)));
  }
  EXPECT_EQ(backlog.load(0, Engine::compute).completed_device_ns, std::numeric_limits<std::int64_t>::max());
  EngineBacklog backwards;
  backwards.account(7, kernel(1), 1'000, 0);
  ASSERT_TRUE(backwards.complete(7, done(1, 5'000, 1'000)));
  EXPECT_EQ(backwards.load(0, Engine::compute).completed_device_ns, 0);
}

TEST(MakePolicy, KnowsFifoPriorityAndBaymax) {
  EXPECT_EQ(make_policy({"fifo", 0})->name(), "fifo");
  EXPECT_EQ(make_policy({"priority", 0})->name(), "priority");
  EXPECT_EQ(make_policy({"baymax", 0})->name(), "baymax");
  EXPECT_EQ(make_policy({"none", 0}), nullptr) << "none means running without gpuqosd";
  EXPECT_EQ(make_policy({"edf", 0}), nullptr);
}

TEST(FifoPolicy, ReconfigureRaisesTheLimitAndTheNextTickGrants) {
  FifoPolicy fifo(1);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}}));
  EXPECT_TRUE(fifo.op_posted({2, Priority::low, kernel(1), clock.next()}).empty());
  EXPECT_TRUE(fifo.tick(clock.next()).empty()) << "the one slot is taken";
  EXPECT_TRUE(fifo.reconfigure({.name = "fifo", .max_outstanding_ops = 2, .credit_ops = 0}));
  EXPECT_EQ(fifo.max_outstanding_ops(), 2u);
  EXPECT_EQ(fifo.tick(clock.next()), (Decisions{{2, 1}}));
}

TEST(FifoPolicy, ReconfigureTakesCreditAndRefusesAnotherPolicy) {
  FifoPolicy fifo(0, 0);
  Clock clock;
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(1), clock.next()}), (Decisions{{1, 1}})) << "no credit";
  EXPECT_FALSE(fifo.reconfigure({.name = "priority", .max_outstanding_ops = 5, .credit_ops = 8}));
  EXPECT_EQ(fifo.max_outstanding_ops(), 0u) << "a refused reconfigure changes nothing";
  EXPECT_EQ(fifo.credit_ops(), 0u);
  EXPECT_TRUE(fifo.reconfigure({.name = "fifo", .max_outstanding_ops = 0, .credit_ops = 8}));
  EXPECT_EQ(fifo.op_posted({1, Priority::low, kernel(2), clock.next()}), (Decisions{{1, 2}, {1, 10}}))
      << "granted, then 8 ops of credit beyond it";
}

}  // namespace
}  // namespace gpuqos::scheduler

// Virtual-clock tests of the engine model: exact completion times for every compute mode,
// copy-bandwidth sharing, stream order, events, legacy-stream semantics, graphs and host functions.
#include "gpuqos/simgpu/engine.h"

#include <gtest/gtest.h>

#include <map>

namespace gpuqos::simgpu {
namespace {

constexpr Nanos us = 1000;

DeviceProfile profile(ComputeMode mode) {
  DeviceProfile p;
  p.compute_mode = mode;
  p.sms = 100;
  p.timeslice_us = 100;
  p.h2d_gbps = 10;  // 10 bytes per ns
  p.d2h_gbps = 10;
  p.d2d_gbps = 100;
  p.pageable_factor = 0.5;
  p.copy_latency_us = 0;
  return p;
}

OpSpec kernel(Nanos ns, std::uint64_t blocks = 100) {
  OpSpec s;
  s.kind = OpKind::kernel;
  s.kernel_ns = ns;
  s.blocks = blocks;
  return s;
}

OpSpec copy(CopyEngine engine, std::uint64_t bytes, bool pageable = false) {
  OpSpec s;
  s.kind = OpKind::copy;
  s.engine = engine;
  s.bytes = bytes;
  s.pageable = pageable;
  return s;
}

OpSpec simple(OpKind kind) {
  OpSpec s;
  s.kind = kind;
  return s;
}

OpSpec wait_for(std::vector<OpId> ops) {
  OpSpec s;
  s.kind = OpKind::wait;
  s.wait_for = std::move(ops);
  return s;
}

// Drives an engine in virtual time and remembers every completion.
struct Sim {
  explicit Sim(DeviceProfile p) : engine({std::move(p)}) {}
  Sim(std::vector<DeviceProfile> ps) : engine(std::move(ps)) {}

  void context(ContextId ctx, int device = 0) { ASSERT_EQ(engine.create_context(ctx, device), EngineStatus::ok); }
  void stream(StreamId s, ContextId ctx, StreamKind kind = StreamKind::blocking) {
    ASSERT_EQ(engine.create_stream(s, ctx, kind), EngineStatus::ok);
  }
  void submit(StreamId s, OpId op, OpSpec spec) {
    ASSERT_EQ(engine.submit(s, op, std::move(spec), events), EngineStatus::ok);
    collect();
  }
  void at(Nanos t) {
    engine.advance_to(t, events);
    collect();
  }
  void drain() {
    while (auto next = engine.next_event_ns()) at(*next);
  }
  void collect() {
    for (const Completion& c : events.completions) done[c.op] = c;
    for (OpId op : events.host_funcs_ready) host_ready[op] = engine.now();
    events.clear();
  }
  Nanos end(OpId op) const { return done.at(op).end_ns; }
  Nanos start(OpId op) const { return done.at(op).start_ns; }

  Engine engine;
  EngineEvents events;
  std::map<OpId, Completion> done;
  std::map<OpId, Nanos> host_ready;
};

TEST(EngineTest, StreamRunsInOrder) {
  Sim sim(profile(ComputeMode::mps));
  sim.context(1);
  sim.stream(10, 1);
  sim.submit(10, 1, kernel(100 * us));
  sim.submit(10, 2, kernel(200 * us));
  sim.drain();
  EXPECT_EQ(sim.start(1), 0);
  EXPECT_EQ(sim.end(1), 100 * us);
  EXPECT_EQ(sim.start(2), 100 * us);
  EXPECT_EQ(sim.end(2), 300 * us);
  EXPECT_EQ(sim.engine.stats(0).compute_busy_ns, 300 * us);
  EXPECT_EQ(sim.engine.stats(0).kernels_completed, 2u);
}

TEST(EngineTest, WorkSubmittedLaterStartsWhenSubmitted) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.stream(10, 1);
  sim.submit(10, 1, kernel(100 * us));
  sim.at(250 * us);
  sim.submit(10, 2, kernel(50 * us));
  sim.drain();
  EXPECT_EQ(sim.start(2), 250 * us);
  EXPECT_EQ(sim.end(2), 300 * us);
  EXPECT_EQ(sim.engine.stats(0).compute_busy_ns, 150 * us);
}

TEST(EngineTest, FifoRunsOneKernelAtATimeInReadyOrder) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.context(2);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.stream(11, 1);
  sim.submit(10, 1, kernel(1000 * us, 1));
  sim.submit(20, 2, kernel(500 * us, 1));
  sim.at(100 * us);
  sim.submit(11, 3, kernel(10 * us, 1));  // small, but behind the queue: no preemption
  sim.drain();
  EXPECT_EQ(sim.end(1), 1000 * us);
  EXPECT_EQ(sim.start(2), 1000 * us);
  EXPECT_EQ(sim.end(2), 1500 * us);
  EXPECT_EQ(sim.start(3), 1500 * us);
  EXPECT_EQ(sim.end(3), 1510 * us);
}

TEST(EngineTest, MpsSharesSmsProportionally) {
  Sim sim(profile(ComputeMode::mps));
  sim.context(1);
  sim.context(2);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.submit(10, 1, kernel(1000 * us, 1000));  // wants all 100 SMs
  sim.submit(20, 2, kernel(500 * us, 100));    // wants all 100 SMs
  sim.drain();
  // Both at half speed until the short one is done at 1000 us; then the long one alone.
  EXPECT_EQ(sim.end(2), 1000 * us);
  EXPECT_EQ(sim.end(1), 1500 * us);
  EXPECT_EQ(sim.engine.stats(0).compute_busy_ns, 1500 * us);
}

TEST(EngineTest, MpsSmallKernelsRunSideBySideAtFullSpeed) {
  Sim sim(profile(ComputeMode::mps));
  sim.context(1);
  sim.context(2);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.submit(10, 1, kernel(300 * us, 40));
  sim.submit(20, 2, kernel(300 * us, 60));
  sim.drain();
  EXPECT_EQ(sim.end(1), 300 * us);
  EXPECT_EQ(sim.end(2), 300 * us);
}

TEST(EngineTest, MpsOversubscriptionByThirds) {
  Sim sim(profile(ComputeMode::mps));
  sim.context(1);
  sim.stream(10, 1);
  sim.stream(11, 1);
  sim.stream(12, 1);
  for (OpId i = 0; i < 3; ++i) sim.submit(10 + i, i + 1, kernel(100 * us, 100));
  sim.drain();
  for (OpId i = 1; i <= 3; ++i) EXPECT_EQ(sim.end(i), 300 * us) << i;
}

TEST(EngineTest, TimesliceAlternatesContextsInQuanta) {
  Sim sim(profile(ComputeMode::timeslice));
  sim.context(1);
  sim.context(2);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.submit(10, 1, kernel(300 * us));
  sim.submit(20, 2, kernel(300 * us));
  sim.drain();
  // ctx1 0-100, ctx2 100-200, ctx1 200-300, ctx2 300-400, ctx1 400-500 (done), ctx2 500-600.
  EXPECT_EQ(sim.start(1), 0);
  EXPECT_EQ(sim.start(2), 100 * us);
  EXPECT_EQ(sim.end(1), 500 * us);
  EXPECT_EQ(sim.end(2), 600 * us);
  EXPECT_EQ(sim.engine.stats(0).compute_busy_ns, 600 * us);
  EXPECT_EQ(sim.engine.stats(0).context_switches, 5u);
}

TEST(EngineTest, TimesliceHandsOverEarlyWhenOwnerRunsDry) {
  Sim sim(profile(ComputeMode::timeslice));
  sim.context(1);
  sim.context(2);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.submit(10, 1, kernel(30 * us));
  sim.submit(20, 2, kernel(50 * us));
  sim.drain();
  EXPECT_EQ(sim.end(1), 30 * us);
  EXPECT_EQ(sim.start(2), 30 * us);
  EXPECT_EQ(sim.end(2), 80 * us);
}

TEST(EngineTest, TimesliceStreamsOfOneContextRunConcurrently) {
  Sim sim(profile(ComputeMode::timeslice));
  sim.context(1);
  sim.stream(10, 1);
  sim.stream(11, 1);
  sim.submit(10, 1, kernel(80 * us, 50));
  sim.submit(11, 2, kernel(80 * us, 50));
  sim.drain();
  EXPECT_EQ(sim.end(1), 80 * us);
  EXPECT_EQ(sim.end(2), 80 * us);
}

TEST(EngineTest, CopiesShareTheirDirectionsBandwidth) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.stream(10, 1);
  sim.stream(11, 1);
  sim.stream(12, 1);
  sim.submit(10, 1, copy(CopyEngine::h2d, 1'000'000));  // 100 us alone at 10 B/ns
  sim.submit(11, 2, copy(CopyEngine::h2d, 1'000'000));
  sim.submit(12, 3, copy(CopyEngine::d2h, 1'000'000));  // other direction: not shared
  sim.drain();
  EXPECT_EQ(sim.end(1), 200 * us);
  EXPECT_EQ(sim.end(2), 200 * us);
  EXPECT_EQ(sim.end(3), 100 * us);
  EXPECT_EQ(sim.engine.stats(0).h2d_busy_ns, 200 * us);
  EXPECT_EQ(sim.engine.stats(0).d2h_busy_ns, 100 * us);
}

TEST(EngineTest, PageableCopiesAndLatencyAndTimeScale) {
  DeviceProfile p = profile(ComputeMode::fifo);
  p.copy_latency_us = 2;
  p.time_scale = 3;
  Sim sim(p);
  sim.context(1);
  sim.stream(10, 1);
  sim.submit(10, 1, copy(CopyEngine::h2d, 1'000'000, /*pageable=*/true));
  sim.submit(10, 2, kernel(10 * us));
  sim.drain();
  EXPECT_EQ(sim.end(1), 3 * (2 * us + 200 * us));
  EXPECT_EQ(sim.end(2), sim.end(1) + 30 * us);
}

TEST(EngineTest, CopyOverlapsKernelOnOtherEngine) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.stream(10, 1);
  sim.stream(11, 1);
  sim.submit(10, 1, kernel(100 * us));
  sim.submit(11, 2, copy(CopyEngine::h2d, 500'000));
  sim.drain();
  EXPECT_EQ(sim.end(1), 100 * us);
  EXPECT_EQ(sim.end(2), 50 * us);
}

TEST(EngineTest, EventsAndCrossStreamWaits) {
  Sim sim(profile(ComputeMode::mps));
  sim.context(1);
  sim.stream(10, 1);
  sim.stream(11, 1);
  sim.submit(10, 1, kernel(100 * us, 10));
  sim.submit(10, 2, simple(OpKind::event_record));
  sim.submit(11, 3, wait_for({2}));
  sim.submit(11, 4, kernel(50 * us, 10));
  sim.submit(11, 5, simple(OpKind::event_record));
  EXPECT_FALSE(sim.engine.is_complete(2));
  sim.drain();
  EXPECT_EQ(sim.end(2), 100 * us);
  EXPECT_EQ(sim.end(3), 100 * us);
  EXPECT_EQ(sim.start(4), 100 * us);
  EXPECT_EQ(sim.end(5), 150 * us);
  EXPECT_TRUE(sim.engine.is_complete(2));
  EXPECT_TRUE(sim.engine.is_complete(12345));  // never submitted: a wait on it does not block
}

TEST(EngineTest, LegacyStreamOrdersWithBlockingStreamsOnly) {
  Sim sim(profile(ComputeMode::mps));
  sim.context(1);
  sim.stream(1, 1, StreamKind::legacy_default);
  sim.stream(10, 1, StreamKind::blocking);
  sim.stream(11, 1, StreamKind::non_blocking);
  sim.submit(10, 1, kernel(100 * us, 10));
  sim.submit(11, 2, kernel(300 * us, 10));
  sim.submit(1, 3, kernel(10 * us, 10));   // waits for stream 10 only
  sim.submit(10, 4, kernel(10 * us, 10));  // waits for the legacy kernel
  sim.drain();
  EXPECT_EQ(sim.start(3), 100 * us);
  EXPECT_EQ(sim.end(3), 110 * us);
  EXPECT_EQ(sim.start(4), 110 * us);
  EXPECT_EQ(sim.end(2), 300 * us);
}

TEST(EngineTest, GraphRunsItsNodesInOrderAsOneUnit) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.stream(10, 1);
  sim.stream(11, 1);
  OpSpec graph = simple(OpKind::graph);
  graph.graph_nodes = {kernel(10 * us), copy(CopyEngine::h2d, 100'000), kernel(20 * us)};
  sim.submit(10, 1, kernel(5 * us));
  sim.submit(10, 2, std::move(graph));
  sim.submit(11, 3, wait_for({2}));
  sim.submit(11, 4, kernel(1 * us));
  sim.drain();
  EXPECT_EQ(sim.start(2), 5 * us);
  EXPECT_EQ(sim.end(2), 5 * us + 10 * us + 10 * us + 20 * us);
  EXPECT_EQ(sim.start(4), sim.end(2));
  EXPECT_EQ(sim.done.size(), 4u);  // graph nodes are not reported on their own
  EXPECT_EQ(sim.engine.stats(0).kernels_completed, 4u);
}

TEST(EngineTest, EmptyGraphCompletesAtOnce) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.stream(10, 1);
  sim.submit(10, 1, simple(OpKind::graph));
  EXPECT_EQ(sim.end(1), 0);
}

TEST(EngineTest, HostFunctionHoldsItsStreamUntilDone) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.stream(10, 1);
  sim.submit(10, 1, kernel(100 * us));
  sim.submit(10, 2, simple(OpKind::host_func));
  sim.submit(10, 3, kernel(10 * us));
  sim.drain();
  ASSERT_TRUE(sim.host_ready.contains(2));
  EXPECT_EQ(sim.host_ready[2], 100 * us);
  EXPECT_FALSE(sim.done.contains(3));
  sim.at(170 * us);
  ASSERT_EQ(sim.engine.host_func_done(2, sim.events), EngineStatus::ok);
  sim.collect();
  sim.drain();
  EXPECT_EQ(sim.end(2), 170 * us);
  EXPECT_EQ(sim.end(3), 180 * us);
  EXPECT_EQ(sim.engine.host_func_done(2, sim.events), EngineStatus::unknown_op);
}

TEST(EngineTest, DestroyedContextFreesTheDeviceForOthers) {
  Sim sim(profile(ComputeMode::mps));
  sim.context(1);
  sim.context(2);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.submit(10, 1, kernel(1000 * us, 100));
  sim.submit(10, 2, kernel(1000 * us, 100));
  sim.submit(20, 3, kernel(400 * us, 100));
  sim.at(200 * us);  // each has done 100 us of work
  ASSERT_EQ(sim.engine.destroy_context(1, sim.events), EngineStatus::ok);
  sim.collect();
  sim.drain();
  EXPECT_EQ(sim.end(3), 500 * us);
  EXPECT_FALSE(sim.done.contains(1));
  EXPECT_TRUE(sim.engine.is_complete(1));  // dropped work no longer blocks waiters
  EXPECT_EQ(sim.engine.submit(10, 9, kernel(1), sim.events), EngineStatus::unknown_stream);
}

TEST(EngineTest, FifoQueueMovesOnWhenRunningKernelsContextDies) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.context(2);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.submit(10, 1, kernel(1000 * us));
  sim.submit(20, 2, kernel(100 * us));
  sim.at(300 * us);
  ASSERT_EQ(sim.engine.destroy_context(1, sim.events), EngineStatus::ok);
  sim.collect();
  sim.drain();
  EXPECT_EQ(sim.start(2), 300 * us);
  EXPECT_EQ(sim.end(2), 400 * us);
}

TEST(EngineTest, DestroyedStreamDrainsFirst) {
  Sim sim(profile(ComputeMode::fifo));
  sim.context(1);
  sim.stream(10, 1);
  sim.submit(10, 1, kernel(100 * us));
  ASSERT_EQ(sim.engine.destroy_stream(10, sim.events), EngineStatus::ok);
  EXPECT_EQ(sim.engine.submit(10, 2, kernel(1), sim.events), EngineStatus::unknown_stream);
  sim.drain();
  EXPECT_EQ(sim.end(1), 100 * us);
  EXPECT_EQ(sim.engine.create_stream(10, 1, StreamKind::blocking), EngineStatus::ok);  // id released
}

TEST(EngineTest, DevicesAreIndependent) {
  Sim sim(std::vector<DeviceProfile>{profile(ComputeMode::fifo), profile(ComputeMode::fifo)});
  sim.context(1, 0);
  sim.context(2, 1);
  sim.stream(10, 1);
  sim.stream(20, 2);
  sim.submit(10, 1, kernel(100 * us));
  sim.submit(20, 2, kernel(100 * us));
  sim.drain();
  EXPECT_EQ(sim.end(1), 100 * us);
  EXPECT_EQ(sim.end(2), 100 * us);
}

TEST(EngineTest, RejectsBadIds) {
  Sim sim(profile(ComputeMode::fifo));
  EXPECT_EQ(sim.engine.create_context(1, 5), EngineStatus::bad_device);
  EXPECT_EQ(sim.engine.create_context(1, -1), EngineStatus::bad_device);
  sim.context(1);
  EXPECT_EQ(sim.engine.create_context(1, 0), EngineStatus::duplicate_id);
  EXPECT_EQ(sim.engine.create_stream(10, 99, StreamKind::blocking), EngineStatus::unknown_context);
  sim.stream(10, 1);
  EXPECT_EQ(sim.engine.create_stream(10, 1, StreamKind::blocking), EngineStatus::duplicate_id);
  EXPECT_EQ(sim.engine.submit(99, 1, kernel(1), sim.events), EngineStatus::unknown_stream);
  sim.submit(10, 1, kernel(100));
  EXPECT_EQ(sim.engine.submit(10, 1, kernel(1), sim.events), EngineStatus::duplicate_id);
  EXPECT_EQ(sim.engine.submit(10, 0, kernel(1), sim.events), EngineStatus::duplicate_id);
  OpSpec graph = simple(OpKind::graph);
  graph.graph_nodes = {simple(OpKind::host_func)};
  EXPECT_EQ(sim.engine.submit(10, 2, graph, sim.events), EngineStatus::bad_op);
  EXPECT_EQ(sim.engine.destroy_context(42, sim.events), EngineStatus::unknown_context);
}

}  // namespace
}  // namespace gpuqos::simgpu

// policy-bench: what gpuqosd's baymax policy costs per event while a best-effort long op waits for
// the tail budget (on a run-to-end device). Such a head is priced again at every event (it is the
// head the grant loop looks at), and its price reads the queue waits of each high-priority job that
// marks its arrivals: up to QueryTracker::kQueueWaitWindow of them. One job serving a request every
// 40 ms (8-ms queries, a 100-ms target), one best-effort job whose 100-ms kernel is held.
//
// held_long_op_tick/<arrivals>: a tick (the daemon's idle wake-up; any event prices the head the
//   same way) with the job's <arrivals> requests said; 0: a job that never says them (the bound's
//   price, no waits read). Compare the rows of one run.
// tick_in_flight/<ops>: a tick with <ops> high-priority ops in flight, none stale yet.
// query_beside_in_flight/<ops>: a query of one job while another has <ops> kernels in flight.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "gpuqos/scheduler/baymax_policy.h"

namespace {

using gpuqos::ipc::OpDescriptor;
using gpuqos::ipc::OpKind;
using gpuqos::ipc::Priority;
using namespace gpuqos::scheduler;

constexpr std::int64_t kMs = 1'000'000;
constexpr ClientId kServe = 1, kTrain = 2;

OpDescriptor descriptor(std::uint64_t seq, OpKind kind, std::int64_t at_ns) {
  OpDescriptor d{};
  d.seq = seq;
  d.kind = kind;
  d.posted_ns = at_ns;
  if (kind == OpKind::kernel) d.kernel_id = 1;
  return d;
}

void held_long_op_tick(benchmark::State& state) {
  PolicyOptions options;
  options.name = "baymax";
  options.baymax.safety_margin_ns = kMs;
  options.baymax.be_backlog_bound_ns = 5 * kMs;
  BaymaxPolicy policy(options);
  (void)policy.client_registered(ClientInfo{kServe, "serve", Priority::high, 0, 100 * kMs, 99.0, 1.0}, 0);
  (void)policy.client_registered(ClientInfo{kTrain, "train", Priority::low, 0, std::nullopt, 99.0, 1.0}, 0);
  const auto post = [&](ClientId client, Priority priority, const OpDescriptor& d, std::int64_t now, std::int64_t ns) {
    (void)policy.op_posted(OpPosted{client, priority, d, now, ns});
  };
  const auto arrivals = state.range(0);
  std::uint64_t seq = 0;
  std::int64_t now = 0;
  for (std::int64_t i = 0; i < (arrivals == 0 ? 64 : arrivals); ++i, now += 40 * kMs) {
    if (arrivals > 0) post(kServe, Priority::high, descriptor(++seq, OpKind::query_arrived, now), now, 0);
    OpDescriptor begin = descriptor(++seq, OpKind::query_begin, now);
    begin.arrived_ns = now;
    post(kServe, Priority::high, begin, now, 0);
    const std::uint64_t work = ++seq;
    post(kServe, Priority::high, descriptor(work, OpKind::kernel, now), now, kMs);
    (void)policy.op_completed(OpCompleted{kServe, gpuqos::ipc::CompletionDescriptor{work, now, now + 8 * kMs, 0, 0},
                                          now + 8 * kMs});
    post(kServe, Priority::high, descriptor(++seq, OpKind::query_end, now + 8 * kMs), now + 8 * kMs, 0);
  }
  // The budget has grown full meanwhile: an op costing more than it empties it (and goes, as one
  // costing more than the cap does once the budget is full), so the next long op is held.
  post(kTrain, Priority::low, descriptor(1, OpKind::kernel, now), now, 100'000 * kMs);
  (void)policy.op_completed(OpCompleted{kTrain, gpuqos::ipc::CompletionDescriptor{1, now, now + kMs, 0, 0}, now + kMs});
  now += kMs;
  post(kTrain, Priority::low, descriptor(2, OpKind::kernel, now), now, 100 * kMs);
  std::int64_t granted = 0;
  for (auto _ : state) {
    now += 100;  // the budget needs seconds to cover the op: it stays held
    granted += static_cast<std::int64_t>(policy.tick(now).size());
  }
  state.counters["granted"] = static_cast<double>(granted);
  state.counters["held"] = policy.held_head(kTrain) ? 1 : 0;
  state.counters["waits"] = static_cast<double>(policy.queries().queue_waits(kServe).size());
}
BENCHMARK(held_long_op_tick)->Arg(0)->Arg(16)->Arg(1024);

// tick_in_flight/<ops>: a tick with <ops> high-priority kernels in flight that never complete (a
// review's clients posted millions; the tick walked them all, 350 ms a tick). Ticks look only at
// the ops that are stale, so the rows should cost about the same.
void tick_in_flight(benchmark::State& state) {
  PolicyOptions options;
  options.name = "baymax";
  BaymaxPolicy policy(options);
  (void)policy.client_registered(ClientInfo{kServe, "serve", Priority::high, 0, 100 * kMs, 99.0, 1.0}, 0);
  std::int64_t now = 0;
  for (std::int64_t seq = 1; seq <= state.range(0); ++seq) {
    (void)policy.op_posted(OpPosted{kServe, Priority::high, descriptor(static_cast<std::uint64_t>(seq), OpKind::kernel, now),
                                    now, kMs});
  }
  for (auto _ : state) {
    now += 100;  // far from their kStaleOpNs
    benchmark::DoNotOptimize(policy.tick(now));
  }
}
BENCHMARK(tick_in_flight)->Arg(16)->Arg(100'000);

// query_beside_in_flight/<ops>: a query (its begin and first kernel, then its end) of one
// high-priority job while another has <ops> kernels in flight that never complete, on a device that
// runs kernels to their end: its first kernel reads what is ahead of it, a sum per client.
void query_beside_in_flight(benchmark::State& state) {
  PolicyOptions options;
  options.name = "baymax";
  BaymaxPolicy policy(options);
  constexpr ClientId kFlood = 3;
  (void)policy.client_registered(ClientInfo{kServe, "serve", Priority::high, 0, 100 * kMs, 99.0, 1.0}, 0);
  (void)policy.client_registered(ClientInfo{kFlood, "flood", Priority::high, 0, std::nullopt, 99.0, 1.0}, 0);
  std::int64_t now = 0;
  for (std::int64_t seq = 1; seq <= state.range(0); ++seq) {
    (void)policy.op_posted(OpPosted{kFlood, Priority::high, descriptor(static_cast<std::uint64_t>(seq), OpKind::kernel, now),
                                    now, kMs});
  }
  std::uint64_t seq = 0;
  for (auto _ : state) {
    now += 100;
    benchmark::DoNotOptimize(policy.op_posted(OpPosted{kServe, Priority::high, descriptor(++seq, OpKind::query_begin, now), now, 0}));
    benchmark::DoNotOptimize(policy.op_posted(OpPosted{kServe, Priority::high, descriptor(++seq, OpKind::kernel, now), now, kMs}));
    benchmark::DoNotOptimize(policy.op_posted(OpPosted{kServe, Priority::high, descriptor(++seq, OpKind::query_end, now), now, 0}));
  }
}
BENCHMARK(query_beside_in_flight)->Arg(16)->Arg(100'000);

}  // namespace

BENCHMARK_MAIN();

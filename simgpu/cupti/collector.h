// The state behind simgpu's libcupti: enabled kinds, records in flight and complete, delivery.
//
// Records flow in three steps. The driver's submit hook (on the program's thread) builds the record
// of each op whose kind is enabled and keeps it in flight, and writes an EXTERNAL_CORRELATION record
// for every external id the thread has pushed. The completion hook (the driver's receiver thread)
// sets the device's start and end and appends the record to the staging area. Delivery copies
// staged records into the client's buffers (bufferRequested / bufferCompleted), on a worker thread
// when enough are staged or a flush period passed, or on the caller's thread in cuptiActivityFlushAll.
// The hooks take only the collector's mutex, briefly, and never call client code: they run with the
// driver's lock held. Client callbacks run with no lock of ours but the delivery mutex, which keeps
// buffers in order.
#pragma once

#include <cupti.h>

#include <array>
#include <bitset>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpuqos/simgpu/activity.h"
#include "records.h"

namespace gpuqos::simgpu::cupti {

// The calling thread's pushed external correlation ids, a stack per CUpti_ExternalCorrelationKind.
using ExternalIdStacks = std::array<std::vector<std::uint64_t>, CUPTI_EXTERNAL_CORRELATION_KIND_SIZE>;
ExternalIdStacks& external_id_stacks();

class Collector {
 public:
  // The process's collector: created on first use, never destroyed (exit-time flushes, the driver's
  // receiver thread and the worker may use it after static destructors ran).
  static Collector& instance();

  CUptiResult enable(CUpti_ActivityKind kind);
  CUptiResult disable(CUpti_ActivityKind kind);
  CUptiResult register_callbacks(CUpti_BuffersCallbackRequestFunc requested, CUpti_BuffersCallbackCompleteFunc completed);
  CUptiResult flush_all();
  CUptiResult set_flush_period(std::uint32_t period_ms);
  std::size_t take_dropped();
  void finalize();

  // The driver's hooks (activity.h): called with the driver's lock held.
  void on_submitted(const activity::SubmittedOp& op);
  void on_completed(const activity::Completion& completion);

 private:
  Collector() = default;

  bool subscribe_locked();    // finds simgpu's libcuda and hands it the hooks
  void unsubscribe_locked();
  void stage_locked(const void* record, std::size_t bytes);
  const char* intern_locked(const char* name);
  void start_worker_locked();
  void worker();
  void deliver();  // everything staged so far, in order, into the client's buffers

  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::mutex mutex_;  // everything below
  std::bitset<CUPTI_ACTIVITY_KIND_COUNT> enabled_;  // by CUpti_ActivityKind
  activity::SubscribeFunction subscribe_ = nullptr;  // the driver's, once found
  bool driver_searched_ = false;
  bool subscribed_ = false;
  bool worker_started_ = false;
  CUpti_BuffersCallbackRequestFunc requested_ = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed_ = nullptr;
  std::uint32_t flush_period_ms_ = 0;  // 0: deliver when a buffer's worth is staged, or at a flush
  std::unordered_map<std::uint64_t, InFlightRecord> in_flight_;  // correlation id -> record
  std::unordered_map<std::uint64_t, std::vector<InFlightRecord>> in_flight_graphs_;  // a graph launch's nodes
  std::vector<unsigned char> staged_;  // complete records, back to back
  std::size_t dropped_ = 0;
  std::unordered_set<std::string, NameHash, std::equal_to<>> names_;  // interned: records point into it
  std::condition_variable wake_worker_;

  std::mutex delivery_mutex_;  // one delivery at a time, so buffers complete in record order
};

}  // namespace gpuqos::simgpu::cupti

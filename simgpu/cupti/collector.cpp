// The collector: subscription to simgpu's driver, records in flight, staging and delivery.
#include "collector.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

namespace gpuqos::simgpu::cupti {
namespace {

namespace act = gpuqos::simgpu::activity;

constexpr const char* kDriverSoname = "libcuda.so.1";
// A worker delivers once this much is staged (about 2,000 kernel records), so memory stays bounded
// in a long run without a flush; a program's own flushes deliver the rest.
constexpr std::size_t kDeliverBytes = 512 * 1024;

constexpr CUpti_ActivityKind kSupported[] = {CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                             CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                             CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

bool supported(CUpti_ActivityKind kind) {
  for (CUpti_ActivityKind k : kSupported) {
    if (k == kind) return true;
  }
  return false;
}

void log_line(const std::string& text) {
  const std::string line = "simgpu libcupti: " + text + "\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

void hook_submitted(const act::SubmittedOp* op) { Collector::instance().on_submitted(*op); }
void hook_completed(const act::Completion* completion) { Collector::instance().on_completed(*completion); }

constexpr act::Hooks kHooks{act::kVersion, 0, &hook_submitted, &hook_completed};

// The driver's subscribe function, once found (libcuda stays loaded: its handle is never closed).
act::SubscribeFunction find_driver_subscribe() {
  void* driver = dlopen(kDriverSoname, RTLD_NOW | RTLD_NOLOAD);
  if (!driver) driver = dlopen(kDriverSoname, RTLD_NOW);
  if (!driver) {
    log_line(std::string("cannot load ") + kDriverSoname + ": " + dlerror() + "; no activity records");
    return nullptr;
  }
  auto subscribe = reinterpret_cast<act::SubscribeFunction>(dlsym(driver, act::kSubscribeSymbol));
  if (!subscribe) log_line("libcuda.so.1 is not simgpu's (no simgpuActivitySubscribe): no activity records");
  return subscribe;
}

}  // namespace

ExternalIdStacks& external_id_stacks() {
  thread_local ExternalIdStacks stacks;
  return stacks;
}

Collector& Collector::instance() {
  static Collector* collector = new Collector();  // leaked on purpose: see header
  return *collector;
}

bool Collector::subscribe_locked() {
  if (subscribed_) return true;
  if (!driver_searched_) {  // once: a driver that is not simgpu's stays so (and is reported once)
    subscribe_ = find_driver_subscribe();
    driver_searched_ = true;
  }
  if (!subscribe_) return false;
  if (subscribe_(&kHooks) != 0) {
    log_line("simgpu's libcuda.so.1 speaks another activity interface version: no activity records");
    return false;
  }
  subscribed_ = true;
  return true;
}

void Collector::unsubscribe_locked() {
  if (!subscribed_) return;
  subscribe_(nullptr);
  subscribed_ = false;
  in_flight_.clear();  // their completions will not be reported any more
  in_flight_graphs_.clear();
}

CUptiResult Collector::enable(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) return CUPTI_ERROR_INVALID_KIND;
  if (!supported(kind)) return CUPTI_ERROR_NOT_SUPPORTED;
  std::lock_guard lock(mutex_);
  if (!subscribe_locked()) return CUPTI_ERROR_NOT_INITIALIZED;
  enabled_.set(kind);
  start_worker_locked();
  return CUPTI_SUCCESS;
}

CUptiResult Collector::disable(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) return CUPTI_ERROR_INVALID_KIND;
  if (!supported(kind)) return CUPTI_ERROR_NOT_SUPPORTED;
  std::lock_guard lock(mutex_);
  enabled_.reset(kind);
  if (enabled_.none()) unsubscribe_locked();  // back to one atomic load per op in the driver
  return CUPTI_SUCCESS;
}

CUptiResult Collector::register_callbacks(CUpti_BuffersCallbackRequestFunc requested,
                                          CUpti_BuffersCallbackCompleteFunc completed) {
  if (!requested || !completed) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard lock(mutex_);
  requested_ = requested;
  completed_ = completed;
  return CUPTI_SUCCESS;
}

CUptiResult Collector::flush_all() {
  {
    std::lock_guard lock(mutex_);
    if (!requested_) return CUPTI_ERROR_INVALID_OPERATION;
  }
  // Records are staged only once complete, so a forced flush and a default one deliver the same.
  deliver();
  return CUPTI_SUCCESS;
}

CUptiResult Collector::set_flush_period(std::uint32_t period_ms) {
  {
    std::lock_guard lock(mutex_);
    flush_period_ms_ = period_ms;
  }
  wake_worker_.notify_one();
  return CUPTI_SUCCESS;
}

std::size_t Collector::take_dropped() {
  std::lock_guard lock(mutex_);
  return std::exchange(dropped_, 0);
}

void Collector::finalize() {
  {
    std::lock_guard lock(mutex_);
    enabled_.reset();
    unsubscribe_locked();
  }
  deliver();
}

void Collector::on_submitted(const act::SubmittedOp& op) {
  const ExternalIdStacks& stacks = external_id_stacks();  // the submitting thread's
  std::lock_guard lock(mutex_);
  // One EXTERNAL_CORRELATION record per API call: a graph launch's first node stands for it.
  if (enabled_.test(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) && op.graph_node == 0) {
    for (std::size_t kind = 0; kind < stacks.size(); ++kind) {
      if (stacks[kind].empty()) continue;
      const ExternalCorrelationRecord record = external_correlation_record(
          static_cast<CUpti_ExternalCorrelationKind>(kind), stacks[kind].back(), op.correlation);
      stage_locked(&record, sizeof record);
    }
  }
  std::optional<InFlightRecord> record;
  switch (op.kind) {
    case act::OpKind::kernel:
      if (enabled_.test(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) {
        record = kernel_record(op, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, intern_locked(op.name));
      } else if (enabled_.test(CUPTI_ACTIVITY_KIND_KERNEL)) {
        record = kernel_record(op, CUPTI_ACTIVITY_KIND_KERNEL, intern_locked(op.name));
      }
      break;
    case act::OpKind::memcpy:
      if (enabled_.test(CUPTI_ACTIVITY_KIND_MEMCPY)) record = memcpy_record(op);
      break;
    case act::OpKind::memset:
      if (enabled_.test(CUPTI_ACTIVITY_KIND_MEMSET)) record = memset_record(op);
      break;
  }
  if (!record) return;
  if (op.graph_id != 0) {
    in_flight_graphs_[op.correlation].push_back(*record);  // its nodes, in graph order
  } else {
    in_flight_.emplace(op.correlation, *record);
  }
}

void Collector::on_completed(const act::Completion& completion) {
  std::lock_guard lock(mutex_);
  const auto stage = [&](InFlightRecord& record) {
    if (completion.status != 0) return;  // a refused op never ran: no record, as on a GPU
    set_times(record, static_cast<std::uint64_t>(completion.start_ns), static_cast<std::uint64_t>(completion.end_ns));
    std::visit([&](const auto& r) { stage_locked(&r, sizeof r); }, record);
  };
  if (const auto it = in_flight_.find(completion.correlation); it != in_flight_.end()) {
    stage(it->second);
    in_flight_.erase(it);
  } else if (const auto graph = in_flight_graphs_.find(completion.correlation); graph != in_flight_graphs_.end()) {
    for (InFlightRecord& node : graph->second) stage(node);  // each with the graph's times
    in_flight_graphs_.erase(graph);
  } else {
    return;
  }
  if (staged_.size() >= kDeliverBytes) wake_worker_.notify_one();
}

void Collector::stage_locked(const void* record, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(record);
  staged_.insert(staged_.end(), p, p + bytes);
}

const char* Collector::intern_locked(const char* name) {
  const std::string_view key = name ? name : "";
  auto it = names_.find(key);
  if (it == names_.end()) it = names_.emplace(key).first;
  return it->c_str();
}

void Collector::start_worker_locked() {
  if (worker_started_) return;
  try {
    std::thread worker([this] { this->worker(); });
    ::pthread_setname_np(worker.native_handle(), "simgpu-cupti");  // for top -H, gdb and the mask tests
    worker.detach();
    worker_started_ = true;
  } catch (const std::system_error&) {
    log_line("cannot start the delivery thread: records are delivered at flushes only");
    worker_started_ = true;  // do not try again at every enable
  }
}

void Collector::worker() {
  std::unique_lock lock(mutex_);
  for (;;) {
    const std::uint32_t period_ms = flush_period_ms_;
    const auto enough = [&] { return staged_.size() >= kDeliverBytes || flush_period_ms_ != period_ms; };
    if (period_ms == 0) {
      wake_worker_.wait(lock, enough);
    } else {
      wake_worker_.wait_for(lock, std::chrono::milliseconds(period_ms), enough);  // timed out: a period passed
    }
    if (flush_period_ms_ != period_ms && staged_.size() < kDeliverBytes) continue;  // wait by the new period
    lock.unlock();
    deliver();
    lock.lock();
  }
}

void Collector::deliver() {
  std::lock_guard delivery(delivery_mutex_);
  std::vector<unsigned char> records;
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!requested_ || staged_.empty()) return;  // kept until the client registers its callbacks
    records.swap(staged_);
    requested = requested_;
    completed = completed_;
  }
  const auto size_at = [&](std::size_t at) {
    CUpti_ActivityKind kind{};
    std::memcpy(&kind, records.data() + at, sizeof kind);
    return record_size(kind);  // never 0: only records of known kinds are staged
  };
  std::size_t at = 0, dropped = 0;
  while (at < records.size()) {
    std::uint8_t* buffer = nullptr;
    std::size_t size = 0, max_records = 0;
    requested(&buffer, &size, &max_records);
    std::size_t valid = 0, count = 0;
    while (buffer && at < records.size() && valid + size_at(at) <= size && (max_records == 0 || count < max_records)) {
      const std::size_t n = size_at(at);
      std::memcpy(buffer + valid, records.data() + at, n);
      valid += n;
      at += n;
      ++count;
    }
    if (valid == 0) {  // declined, or too small for one record: what is left is dropped
      for (; at < records.size(); at += size_at(at)) ++dropped;
    }
    if (buffer) completed(nullptr, 0, buffer, size, valid);  // every buffer goes back to its owner
  }
  if (dropped) {
    std::lock_guard lock(mutex_);
    dropped_ += dropped;
  }
}

}  // namespace gpuqos::simgpu::cupti

// The engine model: stream order, dependencies, and processor-shared compute and copy engines.
#include "gpuqos/simgpu/engine.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace gpuqos::simgpu {

namespace {
// Remaining work below this (ns at full rate) counts as done: absorbs floating-point residue
// of shared rates such as 1/3 without moving any completion by a nanosecond.
constexpr double kDoneEpsilonNs = 1e-3;
}  // namespace

const char* to_string(EngineStatus status) {
  switch (status) {
    case EngineStatus::ok: return "ok";
    case EngineStatus::bad_device: return "bad device";
    case EngineStatus::unknown_context: return "unknown context";
    case EngineStatus::unknown_stream: return "unknown stream";
    case EngineStatus::unknown_op: return "unknown op";
    case EngineStatus::duplicate_id: return "duplicate id";
    case EngineStatus::bad_op: return "bad op";
  }
  return "?";
}

struct Engine::Node {
  OpId id = 0;  // 0 for graph nodes, which are not visible outside
  OpSpec spec;
  std::vector<OpId> deps;  // explicit waits plus implicit legacy-stream ordering
  OpId graph_parent = 0;   // set on the last node of an expanded graph
  bool started = false;
  Nanos start_ns = -1;
};

struct Engine::Stream {
  StreamId id = 0;
  Context* ctx = nullptr;
  StreamKind kind = StreamKind::blocking;
  std::deque<Node> queue;
  bool destroyed = false;
  OpId last_op = 0;
  Nanos graph_start_ns = -1;  // start of the graph now running on this stream
};

struct Engine::Context {
  ContextId id = 0;
  int device = 0;
  std::vector<Stream*> streams;
};

// A kernel or transfer handed to an engine: it progresses at `rate` (fraction of full speed).
struct Engine::Work {
  Stream* stream = nullptr;
  ContextId ctx = 0;
  double remaining_ns = 0;  // at full rate
  double rate = 0;
  std::uint64_t sm_demand = 1;
  Nanos start_ns = -1;
};

struct Engine::Device {
  DeviceProfile profile;
  std::vector<Work> kernels;    // in the order they became ready
  std::vector<Work> copies[3];  // by CopyEngine
  bool has_active = false;      // timeslice: which context owns the SMs, until quantum_end
  ContextId active_ctx = 0;
  Nanos quantum_end = 0;
  DeviceStats stats;
};

Engine::Engine(std::vector<DeviceProfile> devices) {
  for (auto& profile : devices) {
    auto device = std::make_unique<Device>();
    device->profile = std::move(profile);
    devices_.push_back(std::move(device));
  }
}

Engine::~Engine() = default;

int Engine::device_count() const { return static_cast<int>(devices_.size()); }

const DeviceProfile& Engine::profile(int device) const { return devices_.at(device)->profile; }

DeviceStats Engine::stats(int device) const { return devices_.at(device)->stats; }

bool Engine::is_complete(OpId op) const { return !incomplete_.contains(op); }

EngineStatus Engine::create_context(ContextId ctx, int device) {
  if (device < 0 || device >= device_count()) return EngineStatus::bad_device;
  if (contexts_.contains(ctx)) return EngineStatus::duplicate_id;
  auto context = std::make_unique<Context>();
  context->id = ctx;
  context->device = device;
  contexts_.emplace(ctx, std::move(context));
  return EngineStatus::ok;
}

EngineStatus Engine::destroy_context(ContextId ctx, EngineEvents& out) {
  auto it = contexts_.find(ctx);
  if (it == contexts_.end()) return EngineStatus::unknown_context;
  for (Stream* stream : it->second->streams) {
    drop_stream_work(*stream);
    streams_.erase(stream->id);
  }
  contexts_.erase(it);
  dispatch(out);
  return EngineStatus::ok;
}

EngineStatus Engine::create_stream(StreamId stream, ContextId ctx, StreamKind kind) {
  auto it = contexts_.find(ctx);
  if (it == contexts_.end()) return EngineStatus::unknown_context;
  if (streams_.contains(stream)) return EngineStatus::duplicate_id;
  auto s = std::make_unique<Stream>();
  s->id = stream;
  s->ctx = it->second.get();
  s->kind = kind;
  it->second->streams.push_back(s.get());
  streams_.emplace(stream, std::move(s));
  return EngineStatus::ok;
}

EngineStatus Engine::destroy_stream(StreamId stream, EngineEvents& out) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || it->second->destroyed) return EngineStatus::unknown_stream;
  it->second->destroyed = true;
  dispatch(out);  // erases it at once if it is already drained
  return EngineStatus::ok;
}

EngineStatus Engine::submit(StreamId stream_id, OpId op, OpSpec spec, EngineEvents& out) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end() || it->second->destroyed) return EngineStatus::unknown_stream;
  if (op == 0 || incomplete_.contains(op)) return EngineStatus::duplicate_id;
  for (const OpSpec& node : spec.graph_nodes) {
    if (node.kind != OpKind::kernel && node.kind != OpKind::copy && node.kind != OpKind::memset) {
      return EngineStatus::bad_op;
    }
  }
  Stream& stream = *it->second;
  Node node;
  node.id = op;
  if (spec.kind == OpKind::wait) node.deps = spec.wait_for;
  // Legacy default-stream semantics: the NULL stream waits for every blocking stream of its
  // context, and blocking streams wait for the NULL stream.
  for (Stream* other : stream.ctx->streams) {
    if (other == &stream || other->last_op == 0 || !incomplete_.contains(other->last_op)) continue;
    bool implicit = (stream.kind == StreamKind::legacy_default && other->kind == StreamKind::blocking) ||
                    (stream.kind == StreamKind::blocking && other->kind == StreamKind::legacy_default);
    if (implicit) node.deps.push_back(other->last_op);
  }
  node.spec = std::move(spec);
  stream.last_op = op;
  incomplete_.insert(op);
  stream.queue.push_back(std::move(node));
  dispatch(out);
  return EngineStatus::ok;
}

EngineStatus Engine::host_func_done(OpId op, EngineEvents& out) {
  auto it = host_funcs_running_.find(op);
  if (it == host_funcs_running_.end()) return EngineStatus::unknown_op;
  auto stream_it = streams_.find(it->second);
  host_funcs_running_.erase(it);
  if (stream_it == streams_.end()) return EngineStatus::unknown_op;
  Stream& stream = *stream_it->second;
  complete_head(stream, stream.queue.front().start_ns, out);
  dispatch(out);
  return EngineStatus::ok;
}

void Engine::advance_to(Nanos t, EngineEvents& out) { run_until(std::max(t, now_), out); }

std::optional<Nanos> Engine::next_event_ns() const {
  std::optional<Nanos> next;
  auto consider = [&next](Nanos t) {
    if (!next || t < *next) next = t;
  };
  auto consider_works = [&](const std::vector<Work>& works) {
    for (const Work& w : works) {
      if (w.rate <= 0) continue;
      if (w.remaining_ns <= kDoneEpsilonNs) {
        consider(now_);
      } else {
        consider(now_ + std::max<Nanos>(1, static_cast<Nanos>(std::ceil(w.remaining_ns / w.rate - 1e-6))));
      }
    }
  };
  for (const auto& device : devices_) {
    consider_works(device->kernels);
    for (const auto& copies : device->copies) consider_works(copies);
    if (device->profile.compute_mode == ComputeMode::timeslice && device->has_active) {
      bool others_waiting = std::any_of(device->kernels.begin(), device->kernels.end(),
                                        [&](const Work& w) { return w.ctx != device->active_ctx; });
      if (others_waiting) consider(std::max(device->quantum_end, now_));
    }
  }
  return next;
}

void Engine::run_until(Nanos t, EngineEvents& out) {
  while (true) {
    std::optional<Nanos> next = next_event_ns();
    if (!next || *next > t) break;
    progress(*next);
    for (auto& device : devices_) {
      finish_work(*device, device->kernels, true, out);
      for (auto& copies : device->copies) finish_work(*device, copies, false, out);
    }
    dispatch(out);
  }
  progress(t);
}

void Engine::progress(Nanos t) {
  Nanos dt = t - now_;
  if (dt <= 0) return;
  auto advance = [dt](std::vector<Work>& works) {
    bool busy = false;
    for (Work& w : works) {
      if (w.rate <= 0) continue;
      w.remaining_ns -= w.rate * static_cast<double>(dt);
      busy = true;
    }
    return busy;
  };
  for (auto& device : devices_) {
    if (advance(device->kernels)) device->stats.compute_busy_ns += dt;
    if (advance(device->copies[0])) device->stats.h2d_busy_ns += dt;
    if (advance(device->copies[1])) device->stats.d2h_busy_ns += dt;
    if (advance(device->copies[2])) device->stats.local_busy_ns += dt;
  }
  now_ = t;
}

// Completes every running work item that has no work left, in the order they became ready.
void Engine::finish_work(Device& device, std::vector<Work>& works, bool is_kernel, EngineEvents& out) {
  std::vector<Work> done;
  auto keep = std::stable_partition(works.begin(), works.end(), [](const Work& w) {
    return !(w.rate > 0 && w.remaining_ns <= kDoneEpsilonNs);
  });
  done.assign(std::make_move_iterator(keep), std::make_move_iterator(works.end()));
  works.erase(keep, works.end());
  for (Work& w : done) {
    if (is_kernel) {
      ++device.stats.kernels_completed;
    } else {
      ++device.stats.copies_completed;
    }
    complete_head(*w.stream, w.start_ns, out);
  }
}

void Engine::complete_head(Stream& stream, Nanos start_ns, EngineEvents& out) {
  Node node = std::move(stream.queue.front());
  stream.queue.pop_front();
  if (node.id == 0) {  // a graph node: the graph completes with its last node
    if (node.graph_parent != 0) {
      out.completions.push_back({node.graph_parent, stream.graph_start_ns, now_});
      incomplete_.erase(node.graph_parent);
      stream.graph_start_ns = -1;
    }
    return;
  }
  out.completions.push_back({node.id, start_ns, now_});
  incomplete_.erase(node.id);
}

void Engine::dispatch(EngineEvents& out) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (auto it = streams_.begin(); it != streams_.end();) {
      Stream& stream = *it->second;
      while (!stream.queue.empty() && !stream.queue.front().started && start_head(stream, out)) {
        changed = true;
      }
      if (stream.destroyed && stream.queue.empty()) {
        auto& owned = stream.ctx->streams;
        owned.erase(std::remove(owned.begin(), owned.end(), &stream), owned.end());
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& device : devices_) schedule(*device);
}

// Hands the head of a stream to its engine, or finishes it at once if it takes no time.
// Returns false if the head must keep waiting for its dependencies.
bool Engine::start_head(Stream& stream, EngineEvents& out) {
  Node& head = stream.queue.front();
  for (OpId dep : head.deps) {
    if (incomplete_.contains(dep)) return false;
  }
  head.started = true;
  head.start_ns = now_;
  Device& device = *devices_[stream.ctx->device];
  switch (head.spec.kind) {
    case OpKind::event_record:
    case OpKind::wait:
      complete_head(stream, now_, out);
      return true;
    case OpKind::host_func:
      out.host_funcs_ready.push_back(head.id);
      host_funcs_running_[head.id] = stream.id;
      return true;
    case OpKind::graph: {
      Node graph = std::move(head);
      stream.queue.pop_front();
      if (graph.spec.graph_nodes.empty()) {
        out.completions.push_back({graph.id, now_, now_});
        incomplete_.erase(graph.id);
        return true;
      }
      stream.graph_start_ns = now_;
      auto& nodes = graph.spec.graph_nodes;
      for (std::size_t i = nodes.size(); i-- > 0;) {
        Node child;
        child.spec = std::move(nodes[i]);
        if (i + 1 == nodes.size()) child.graph_parent = graph.id;
        stream.queue.push_front(std::move(child));
      }
      return true;
    }
    case OpKind::kernel: {
      Work w{&stream, stream.ctx->id, static_cast<double>(kernel_work_ns(device, head.spec))};
      w.sm_demand = std::clamp<std::uint64_t>(head.spec.blocks, 1, device.profile.sms);
      device.kernels.push_back(w);
      return true;
    }
    case OpKind::copy:
    case OpKind::memset: {
      Work w{&stream, stream.ctx->id, copy_work_ns(device, head.spec)};
      device.copies[static_cast<int>(head.spec.engine)].push_back(w);
      return true;
    }
  }
  return false;
}

Nanos Engine::kernel_work_ns(const Device& device, const OpSpec& spec) const {
  return static_cast<Nanos>(std::llround(static_cast<double>(spec.kernel_ns) * device.profile.time_scale));
}

// Work of a transfer in ns at full speed of its engine: latency plus bytes over bandwidth.
double Engine::copy_work_ns(const Device& device, const OpSpec& spec) const {
  const DeviceProfile& p = device.profile;
  double gbps = p.d2d_gbps;
  if (spec.kind == OpKind::copy && spec.engine == CopyEngine::h2d) gbps = p.h2d_gbps;
  if (spec.kind == OpKind::copy && spec.engine == CopyEngine::d2h) gbps = p.d2h_gbps;
  if (spec.kind == OpKind::copy && spec.pageable && spec.engine != CopyEngine::local) gbps *= p.pageable_factor;
  // bytes / (GB/s) = bytes / (1e9 bytes/s) = ns per byte count divided by gbps.
  double ns = p.copy_latency_us * 1000.0 + static_cast<double>(spec.bytes) / gbps;
  return std::round(ns * p.time_scale);
}

void Engine::schedule(Device& device) {
  for (auto& copies : device.copies) {
    // Concurrent transfers on one engine share its bandwidth equally.
    double rate = copies.empty() ? 0 : 1.0 / static_cast<double>(copies.size());
    for (Work& w : copies) {
      w.rate = rate;
      if (w.start_ns < 0) w.start_ns = now_;
    }
  }
  schedule_compute(device);
}

void Engine::schedule_compute(Device& device) {
  auto& kernels = device.kernels;
  for (Work& w : kernels) w.rate = 0;
  if (kernels.empty()) return;
  const DeviceProfile& p = device.profile;
  auto share_sms = [&](auto&& runs) {
    std::uint64_t demand = 0;
    for (const Work& w : kernels) {
      if (runs(w)) demand += w.sm_demand;
    }
    double rate = std::min(1.0, static_cast<double>(p.sms) / static_cast<double>(std::max<std::uint64_t>(demand, 1)));
    for (Work& w : kernels) {
      if (!runs(w)) continue;
      w.rate = rate;
      if (w.start_ns < 0) w.start_ns = now_;
    }
  };
  switch (p.compute_mode) {
    case ComputeMode::fifo:
      // Non-preemptive: the earliest-ready kernel runs alone until it is done.
      kernels.front().rate = 1.0;
      if (kernels.front().start_ns < 0) kernels.front().start_ns = now_;
      return;
    case ComputeMode::mps:
      share_sms([](const Work&) { return true; });
      return;
    case ComputeMode::timeslice: {
      std::map<ContextId, bool> ready;  // ordered: round robin by context id
      for (const Work& w : kernels) ready[w.ctx] = true;
      bool active_ready = device.has_active && ready.contains(device.active_ctx);
      bool expired = now_ >= device.quantum_end;
      if (!active_ready || (expired && ready.size() > 1)) {
        auto next = device.has_active ? ready.upper_bound(device.active_ctx) : ready.begin();
        if (next == ready.end()) next = ready.begin();
        if (device.has_active && next->first != device.active_ctx) ++device.stats.context_switches;
        device.has_active = true;
        device.active_ctx = next->first;
        device.quantum_end = now_ + static_cast<Nanos>(std::llround(p.timeslice_us * 1000.0 * p.time_scale));
      } else if (expired) {
        device.quantum_end = now_ + static_cast<Nanos>(std::llround(p.timeslice_us * 1000.0 * p.time_scale));
      }
      ContextId active = device.active_ctx;
      share_sms([active](const Work& w) { return w.ctx == active; });
      return;
    }
  }
}

void Engine::drop_stream_work(Stream& stream) {
  for (auto& device : devices_) {
    auto drop = [&stream](std::vector<Work>& works) {
      works.erase(std::remove_if(works.begin(), works.end(), [&](const Work& w) { return w.stream == &stream; }),
                  works.end());
    };
    drop(device->kernels);
    for (auto& copies : device->copies) drop(copies);
  }
  for (const Node& node : stream.queue) {
    if (node.id != 0) {
      incomplete_.erase(node.id);
      host_funcs_running_.erase(node.id);
    }
    if (node.graph_parent != 0) incomplete_.erase(node.graph_parent);
  }
  stream.queue.clear();
}

}  // namespace gpuqos::simgpu

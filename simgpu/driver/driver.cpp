// The driver's connection to simgpud and the machinery every API call shares: submit and wait.
#include "driver.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string_view>
#include <utility>

#include "activity.h"
#include "gpuqos/simgpu/visible_devices.h"

namespace gpuqos::simgpu::driver {

namespace {
constexpr int kHelloTimeoutSeconds = 5;  // as simgpu-stat: a server that does not answer is as good as none
}  // namespace

Driver& driver() {
  static Driver* instance = new Driver();  // leaked on purpose: see header
  return *instance;
}

void log_once(const std::string& message) {
  static std::mutex mu;
  static std::unordered_set<std::string> seen;
  std::lock_guard lock(mu);
  if (!seen.insert(message).second) return;
  std::string line = "simgpu libcuda: " + message + "\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

std::uint64_t env_number(const char* name, std::uint64_t unset) {
  const char* text = std::getenv(name);
  return text && *text ? std::strtoull(text, nullptr, 10) : unset;
}

// SIMGPU_DEVICE_DATA=none: device memory keeps no contents, so copies and memsets into it move no
// bytes. simgpu keeps device memory in host memory: moving them takes the host's CPU, where a GPU's
// copy engines and SMs take none of it (for benchmarks, whose programs never read their results).
// Unset or "keep": kept.
static bool keeps_device_data() {
  const char* text = std::getenv("SIMGPU_DEVICE_DATA");
  if (!text || !*text || std::string_view(text) == "keep") return true;
  if (std::string_view(text) == "none") return false;
  log_once(std::string("SIMGPU_DEVICE_DATA=") + text + " is neither keep nor none: device data is kept");
  return true;
}

bool dead_event(const char* api, CUevent event) {
  if (!driver().dead_events.contains(event)) return false;
  log_once(std::string(api) + ": an event of a destroyed context (undefined behaviour on a GPU)");
  return true;
}

CUctx_st*& current_context() {
  thread_local CUctx_st* ctx = nullptr;
  return ctx;
}

void HostAction::run() const {
  switch (kind) {
    case Kind::none: return;
    case Kind::copy: {
      const auto* from = staged ? staged->data() : static_cast<const unsigned char*>(src);
      const std::size_t from_pitch = staged ? bytes : src_pitch;
      const std::size_t from_slice_pitch = staged ? bytes * height : src_slice_pitch;
      for (std::size_t slice = 0; slice < depth; ++slice) {
        auto* into = static_cast<unsigned char*>(dst) + slice * slice_pitch;
        for (std::size_t row = 0; row < height; ++row) {
          std::memmove(into + row * pitch, from + slice * from_slice_pitch + row * from_pitch, bytes);
        }
      }
      return;
    }
    case Kind::memset: {
      auto* base = static_cast<unsigned char*>(dst);
      std::size_t row_bytes = width * element_size;
      for (std::size_t row = 0; row < height; ++row) {
        unsigned char* p = base + row * (pitch ? pitch : row_bytes);
        if (element_size == 1) {
          std::memset(p, static_cast<int>(value & 0xff), width);
          continue;
        }
        for (std::size_t i = 0; i < width; ++i) std::memcpy(p + i * element_size, &value, element_size);
      }
      return;
    }
    case Kind::host_func:
      if (fn) fn(user_data);
      return;
  }
}

void Driver::before_fork() { driver().mu.lock(); }  // no call of another thread is half done in the child

void Driver::after_fork_in_parent() { driver().mu.unlock(); }

void Driver::after_fork_in_child() {
  Driver& d = driver();
  d.forked_ = true;
  d.initialized_ = false;
  d.connection_lost = true;
  // The parent's work in flight and data moves: none of them completes here (no receiver or mover
  // thread), so nothing may wait for them (a review: cuMemFreeHost waited for a move for ever).
  d.pending.clear();
  d.replies_.clear();
  d.moves.clear();
  d.moving = false;
  d.moving_bytes_ = 0;
  d.deferred_signals_ = 0;
  d.mover_started_ = false;
  if (d.fd_ >= 0) ::close(d.fd_);  // the parent's connection: never written from here
  d.fd_ = -1;
  d.mu.unlock();
}

CUresult Driver::init() {
  std::unique_lock lock(mu);
  if (forked_) {
    // Written directly: log_once's lock may have been held by another thread of the parent at the fork.
    static constexpr char kSaid[] =
        "simgpu libcuda: cuInit in a child forked after the parent initialised CUDA: CUDA cannot be used here\n";
    static bool said = false;
    if (!std::exchange(said, true)) (void)!::write(STDERR_FILENO, kSaid, sizeof kSaid - 1);
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (initialized_) return init_result_;
  std::string path = wire::default_socket_path();
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof addr.sun_path) {
    if (fd >= 0) ::close(fd);
    return CUDA_ERROR_NO_DEVICE;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return CUDA_ERROR_NO_DEVICE;  // as the real driver says on a machine without a GPU
  }
  // A server that accepted the connection but never answers (stopped, hung) must not hang cuInit:
  // the hello exchange has a deadline; afterwards the receiver thread blocks without one.
  timeval hello_timeout{kHelloTimeoutSeconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hello_timeout, sizeof hello_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &hello_timeout, sizeof hello_timeout);
  wire::Hello hello{wire::kMagic, wire::kVersionMajor, wire::kVersionMinor, static_cast<std::uint32_t>(::getpid()), 0};
  std::vector<unsigned char> buf(sizeof(wire::MsgHeader) + wire::kMaxPayload);
  ssize_t n = -1;
  if (wire::send_message(fd, wire::MsgType::hello, &hello, sizeof hello)) {
    do {
      n = ::recv(fd, buf.data(), buf.size(), 0);
    } while (n < 0 && errno == EINTR);
  }
  bool timed_out = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  wire::MsgHeader header{};
  wire::HelloReply reply{};
  bool ok = n >= static_cast<ssize_t>(sizeof header + sizeof reply);
  if (ok) {
    std::memcpy(&header, buf.data(), sizeof header);
    std::memcpy(&reply, buf.data() + sizeof header, sizeof reply);
    ok = header.type == wire::MsgType::hello_reply && reply.status == 0 && reply.device_count <= wire::kMaxDevices &&
         static_cast<std::size_t>(n) >= sizeof header + sizeof reply + reply.device_count * sizeof(wire::DeviceInfo);
  }
  if (!ok) {
    log_once(timed_out ? "simgpud at " + path + " did not answer within " + std::to_string(kHelloTimeoutSeconds) + " s"
                       : "simgpud at " + path + " refused the connection (protocol version mismatch?)");
    ::close(fd);
    return CUDA_ERROR_NO_DEVICE;
  }
  timeval no_timeout{0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &no_timeout, sizeof no_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &no_timeout, sizeof no_timeout);
  epoch_monotonic_ns = reply.epoch_monotonic_ns;
  std::vector<wire::DeviceInfo> node(reply.device_count);
  std::memcpy(node.data(), buf.data() + sizeof header + sizeof reply, reply.device_count * sizeof(wire::DeviceInfo));
  // As the CUDA driver does: the process sees the devices CUDA_VISIBLE_DEVICES names, in its order.
  std::vector<std::array<std::uint8_t, 16>> uuids(node.size());
  for (std::size_t i = 0; i < node.size(); ++i) std::memcpy(uuids[i].data(), node[i].uuid, sizeof node[i].uuid);
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  node_device = visible_devices(env ? std::optional<std::string_view>(env) : std::nullopt, uuids);
  for (std::uint32_t index : node_device) devices.push_back(node[index]);
  primary.assign(devices.size(), nullptr);
  primary_refs.assign(devices.size(), 0);
  primary_flags.assign(devices.size(), 0);
  keep_device_data_ = keeps_device_data();
  fd_ = fd;
  initialized_ = true;
  init_result_ = devices.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
  static std::once_flag fork_handlers;
  std::call_once(fork_handlers, [] { ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  receiver_ = std::thread([this] { receive_loop(); });
  receiver_.detach();
  return init_result_;
}

bool Driver::send(wire::MsgType type, const void* head, std::size_t head_bytes, const void* tail,
                  std::size_t tail_bytes) {
  if (connection_lost) return false;
  return wire::send_message(fd_, type, head, head_bytes, tail, tail_bytes);
}

std::optional<wire::Reply> Driver::request(std::unique_lock<std::mutex>& lock, wire::MsgType type, void* msg,
                                           std::size_t bytes, std::uint64_t* request_field, const void* tail,
                                           std::size_t tail_bytes) {
  std::uint64_t id = next_request++;
  *request_field = id;
  if (!send(type, msg, bytes, tail, tail_bytes)) return std::nullopt;
  cv.wait(lock, [&] { return replies_.contains(id) || connection_lost; });
  auto it = replies_.find(id);
  if (it == replies_.end()) return std::nullopt;
  wire::Reply reply = it->second;
  replies_.erase(it);
  return reply;
}

void Driver::receive_loop() {
  std::vector<unsigned char> buf(sizeof(wire::MsgHeader) + wire::kMaxPayload);
  while (true) {
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < static_cast<ssize_t>(sizeof(wire::MsgHeader))) break;
    wire::MsgHeader header;
    std::memcpy(&header, buf.data(), sizeof header);
    const unsigned char* payload = buf.data() + sizeof header;
    std::size_t size = static_cast<std::size_t>(n) - sizeof header;
    if (header.type == wire::MsgType::completion && size >= sizeof(wire::CompletionMsg)) {
      wire::CompletionMsg msg;
      std::memcpy(&msg, payload, sizeof msg);
      on_completion(msg);
    } else if (header.type == wire::MsgType::reply && size >= sizeof(wire::Reply)) {
      wire::Reply reply;
      std::memcpy(&reply, payload, sizeof reply);
      std::lock_guard lock(mu);
      replies_[reply.request] = reply;
      cv.notify_all();
    } else if (header.type == wire::MsgType::host_func_run && size >= sizeof(wire::HostFuncRun)) {
      wire::HostFuncRun msg;
      std::memcpy(&msg, payload, sizeof msg);
      on_host_func(msg.op);
    }
  }
  lose_connection();
}

namespace {
// Its effect reaches only device memory, and it reads nothing the host may change after the op is
// signalled done (mu held).
bool device_only(const HostAction& action) {
  switch (action.kind) {
    case HostAction::Kind::none:
      return true;
    case HostAction::Kind::memset:
      return find_allocation(addr(action.dst), 1) != nullptr;
    case HostAction::Kind::copy:
      return find_allocation(addr(action.dst), action.copy_span(action.pitch, action.slice_pitch)) != nullptr &&
             (action.staged ||
              find_allocation(addr(action.src), action.copy_span(action.src_pitch, action.src_slice_pitch)) != nullptr);
    case HostAction::Kind::host_func:
      return false;
  }
  return false;
}

std::size_t bytes_of(const std::vector<HostAction>& actions) {
  std::size_t total = 0;
  for (const HostAction& action : actions) {
    if (action.kind == HostAction::Kind::copy) total += action.bytes * action.height * action.depth;
    if (action.kind == HostAction::Kind::memset) total += action.width * action.element_size * action.height;
  }
  return total;
}
}  // namespace

bool touches(const HostAction& action, std::uintptr_t base, std::size_t bytes) {
  const auto in = [&](const void* p) { return addr(p) >= base && addr(p) < base + bytes; };
  return in(action.dst) || in(action.src);
}

bool Driver::moving_range(std::uintptr_t base, std::size_t bytes) const {
  for (const DataMove& move : moves) {
    for (const HostAction& action : move.actions) {
      if (touches(action, base, bytes)) return true;
    }
  }
  return false;
}

void Driver::on_completion(const wire::CompletionMsg& msg) {
  std::unique_lock lock(mu);
  auto it = pending.find(msg.op);
  if (it == pending.end()) return;
  std::vector<HostAction> actions = std::move(it->second.actions);
  if (msg.status != 0) actions.clear();  // a failed op moved nothing
  if (!keep_device_data_) {
    std::erase_if(actions, [](const HostAction& action) {
      return action.kind != HostAction::Kind::host_func && find_allocation(addr(action.dst), 1) != nullptr;
    });
  }
  report_completion(msg);  // under the lock, so after the op's submit report
  if (deferred_signals_ == 0 && moves.empty() && bytes_of(actions) <= kInlineMoveBytes) {
    // Short, with nothing ahead: moved here, which spares the mover's wake-up. Only this thread
    // queues moves, so none can overtake it meanwhile.
    lock.unlock();
    for (const HostAction& action : actions) action.run();  // without the lock
    lock.lock();
    signal_completion(msg);
    return;
  }
  const bool now = deferred_signals_ == 0 && moving_bytes_ + bytes_of(actions) <= kMaxMovingBytes &&
                   std::all_of(actions.begin(), actions.end(), device_only);
  if (actions.empty() && now) {
    signal_completion(msg);
    return;
  }
  DataMove move{std::move(actions), now ? std::nullopt : std::optional(msg), 0};
  try {
    queue_move(move);
  } catch (...) {  // no thread or no memory: here, after the moves before it (with the lock: rare)
    // Signalled only once made, and its op's actions back in place while the moves before it run,
    // so a free of what they touch waits for them. (This thread is the receiver: no loss of the
    // connection can come meanwhile, but a context destroyed meanwhile clears them.)
    const auto put_back = [&] {
      if (auto op = pending.find(msg.op); op != pending.end()) std::swap(op->second.actions, move.actions);
    };
    put_back();
    wait_for_moves(lock);
    put_back();
    for (const HostAction& action : move.actions) action.run();
    signal_completion(msg);
    return;
  }
  if (now) signal_completion(msg);
}

void Driver::wait_for_moves(std::unique_lock<std::mutex>& lock) {
  cv.wait(lock, [this] { return moves.empty(); });
}

void Driver::signal_completion(const wire::CompletionMsg& msg) {
  auto it = pending.find(msg.op);
  if (it == pending.end()) return;
  PendingOp& op = it->second;
  if (streams.contains(op.stream) && op.stream->completed < op.seq) op.stream->completed = op.seq;
  if (op.event && events.contains(op.event) && op.event->op == msg.op) {
    op.event->done = true;
    op.event->time_ns = msg.end_ns;
  }
  pending.erase(it);
  cv.notify_all();
}

// For tests of the fallbacks: SIMGPU_FAIL_QUEUE_MOVE_EVERY=N makes every Nth move the process
// would queue fail as out of memory, so it is made where it came from. Unset: never.
static bool queue_move_fails() {
  static const std::uint64_t every = env_number("SIMGPU_FAIL_QUEUE_MOVE_EVERY", 0);
  static std::uint64_t moves = 0;  // mu held
  return every != 0 && ++moves % every == 0;
}

void Driver::queue_move(DataMove& move) {
  if (queue_move_fails()) throw std::bad_alloc();
  if (!mover_started_) {
    std::thread([this] { move_data(); }).detach();  // like the receiver: lives as long as the process
    mover_started_ = true;
  }
  const bool signals = move.signal.has_value();
  const std::size_t bytes = bytes_of(move.actions);
  moves.push_back(std::move(move));
  if (signals) ++deferred_signals_;
  moving_bytes_ += bytes;
  moves_cv_.notify_one();
}

void Driver::move_data() {
  std::unique_lock lock(mu);
  for (;;) {
    moves_cv_.wait(lock, [this] { return !moves.empty(); });
    // The front stays queued while it runs (a deque's elements keep their place as others are
    // added), so that a free of the memory it touches waits for it.
    const DataMove& move = moves.front();
    moving = true;
    lock.unlock();
    for (const HostAction& action : move.actions) action.run();  // without the lock, as before
    lock.lock();
    moving = false;
    if (move.signal) {
      signal_completion(*move.signal);
      --deferred_signals_;
    }
    if (move.host_func_op != 0) {
      wire::HostFuncDone done{move.host_func_op, wire::monotonic_ns()};
      send(wire::MsgType::host_func_done, &done, sizeof done);
    }
    moving_bytes_ -= bytes_of(move.actions);
    moves.pop_front();
    cv.notify_all();  // a free waiting for the range, lose_connection() for the running move
  }
}

void Driver::on_host_func(std::uint64_t op) {
  HostAction action;
  {
    std::unique_lock lock(mu);
    auto it = pending.find(op);
    if (it != pending.end() && !it->second.actions.empty()) action = it->second.actions.front();
    if (it != pending.end()) it->second.actions.clear();  // ran now, not again at completion
    // Behind data still moving: a copy before it on its stream may be one it reads.
    if (!moves.empty()) {
      DataMove move{{action}, std::nullopt, op};
      try {
        queue_move(move);
        return;
      } catch (...) {  // no memory: here, once the moves before it are done
        wait_for_moves(lock);
      }
    }
  }
  action.run();  // without the lock: the callback may take its time
  std::lock_guard lock(mu);
  wire::HostFuncDone done{op, wire::monotonic_ns()};
  send(wire::MsgType::host_func_done, &done, sizeof done);
}

void Driver::lose_connection() {
  std::unique_lock lock(mu);
  if (!connection_lost) log_once("lost the connection to simgpud: the device is gone");
  // The moves not begun are dropped, like the completions never received: a wait that returns
  // for the lost device must not find its buffer written later (or a host function run) after
  // the program freed it. The one running is waited for.
  while (moves.size() > (moving ? 1 : 0)) {
    moving_bytes_ -= bytes_of(moves.back().actions);
    if (moves.back().signal) --deferred_signals_;
    moves.pop_back();
  }
  cv.wait(lock, [this] { return !moving; });
  connection_lost = true;
  pending.clear();
  cv.notify_all();
}

CUstream_st* resolve_stream(CUstream stream, bool per_thread_default) {
  Driver& d = driver();
  if (stream == CU_STREAM_PER_THREAD || (stream == nullptr && per_thread_default)) {
    CUctx_st* ctx = current_context();
    if (!ctx || !d.contexts.contains(ctx)) return nullptr;
    thread_local std::map<CUctx_st*, CUstream_st*> per_thread;
    CUstream_st*& s = per_thread[ctx];
    if (!s || !d.streams.contains(s) || s->ctx != ctx) {
      s = create_stream_locked(ctx, 0, 0, wire::WireStreamKind::blocking);
      if (s) s->per_thread = true;
    }
    return s;
  }
  if (stream == nullptr || stream == CU_STREAM_LEGACY) {
    CUctx_st* ctx = current_context();
    return ctx && d.contexts.contains(ctx) ? ctx->legacy : nullptr;
  }
  return d.streams.contains(stream) ? stream : nullptr;
}

bool blocking_stream_captures(const CUctx_st* ctx, bool invalidate) {
  bool any = false;
  for (CUstream_st* stream : ctx->streams) {
    if (stream == ctx->legacy || !stream->capture || (stream->flags & CU_STREAM_NON_BLOCKING) != 0) continue;
    any = true;
    if (invalidate) stream->capture_invalidated = true;
  }
  return any;
}

CUresult submit(CUstream_st* stream, const wire::WireOp& op, HostAction action, CUevent_st* event,
                const std::vector<std::uint64_t>& wait_deps, const std::vector<GraphNode>* graph,
                std::uint64_t* op_id) {
  Driver& d = driver();
  if (op_id) *op_id = 0;
  if (stream->capture) {
    if (stream->capture_invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (op.kind == wire::WireOpKind::kernel || op.kind == wire::WireOpKind::copy ||
        op.kind == wire::WireOpKind::memset) {
      stream->capture->nodes.push_back({op, std::move(action)});
      return CUDA_SUCCESS;
    }
    if (op.kind == wire::WireOpKind::graph && graph) {
      stream->capture->nodes.insert(stream->capture->nodes.end(), graph->begin(), graph->end());
      return CUDA_SUCCESS;
    }
    // Events and waits inside a single-stream capture order nothing new: the graph is linear.
    if (op.kind == wire::WireOpKind::event_record || op.kind == wire::WireOpKind::wait) return CUDA_SUCCESS;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (d.connection_lost) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  wire::Submit msg{};
  msg.op = d.next_op++;
  msg.stream = stream->id;
  msg.sent_ns = wire::monotonic_ns();
  msg.spec = op;
  std::vector<wire::WireOp> nodes;
  const void* tail = nullptr;
  std::size_t tail_bytes = 0;
  PendingOp pending{stream, ++stream->submitted, {}, event};
  if (action.kind != HostAction::Kind::none) pending.actions.push_back(std::move(action));
  if (op.kind == wire::WireOpKind::wait) {
    msg.extra = static_cast<std::uint32_t>(wait_deps.size());
    tail = wait_deps.data();
    tail_bytes = wait_deps.size() * sizeof(std::uint64_t);
  } else if (op.kind == wire::WireOpKind::graph && graph) {
    for (const GraphNode& node : *graph) {
      nodes.push_back(node.op);
      if (node.action.kind != HostAction::Kind::none) pending.actions.push_back(node.action);
    }
    msg.extra = static_cast<std::uint32_t>(nodes.size());
    tail = nodes.data();
    tail_bytes = nodes.size() * sizeof(wire::WireOp);
  }
  d.pending.emplace(msg.op, std::move(pending));
  stream->last_op = msg.op;
  if (!d.send(wire::MsgType::submit, &msg, sizeof msg, tail, tail_bytes)) {
    d.pending.erase(msg.op);
    stream->completed = stream->submitted;
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  if (op_id) *op_id = msg.op;
  return CUDA_SUCCESS;
}

CUresult wait_op(std::unique_lock<std::mutex>& lock, CUstream_st* stream, std::uint64_t seq) {
  Driver& d = driver();
  d.cv.wait(lock, [&] { return !d.streams.contains(stream) || stream->completed >= seq || d.connection_lost; });
  if (d.streams.contains(stream) && stream->completed >= seq) return CUDA_SUCCESS;
  return d.connection_lost ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_SUCCESS;
}

CUresult wait_stream(std::unique_lock<std::mutex>& lock, CUstream_st* stream) {
  return wait_op(lock, stream, stream->submitted);
}

const DeviceMemory* find_allocation(std::uintptr_t ptr, std::size_t bytes) {
  auto& allocations = driver().allocations;
  auto it = allocations.upper_bound(ptr);
  if (it == allocations.begin()) return nullptr;
  --it;
  std::uintptr_t end = it->first + it->second.bytes;
  if (ptr >= end || bytes > end - ptr) return nullptr;
  return &it->second;
}

bool is_pinned(const void* ptr, std::size_t bytes) {
  auto p = reinterpret_cast<std::uintptr_t>(ptr);
  auto& pinned = driver().pinned;
  auto it = pinned.upper_bound(p);
  if (it == pinned.begin()) return false;
  --it;
  return p < it->first + it->second && bytes <= it->first + it->second - p;
}

CUresult require_context(CUctx_st** ctx) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUctx_st* current = current_context();
  if (!current || !d.contexts.contains(current)) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx) *ctx = current;
  return CUDA_SUCCESS;
}

CUstream_st* create_stream_locked(CUctx_st* ctx, unsigned flags, int priority, wire::WireStreamKind kind) {
  Driver& d = driver();
  auto* stream = new CUstream_st();
  stream->id = d.next_stream++;
  stream->ctx = ctx;
  stream->flags = flags;
  stream->priority = priority;
  wire::CreateStream msg{stream->id, ctx->id, kind};
  d.send(wire::MsgType::create_stream, &msg, sizeof msg);
  d.streams.insert(stream);
  ctx->streams.push_back(stream);
  return stream;
}

void destroy_stream_locked(CUstream_st* stream) {
  Driver& d = driver();
  wire::DestroyStream msg{stream->id};
  d.send(wire::MsgType::destroy_stream, &msg, sizeof msg);
  auto& owned = stream->ctx->streams;
  std::erase(owned, stream);
  d.streams.erase(stream);
  delete stream->capture;
  delete stream;
  // Pending ops of the stream still complete on the device; their bookkeeping must not
  // touch the freed stream (signal_completion checks the live set).
}

CUctx_st* create_context_locked(int device, unsigned flags, bool primary) {
  Driver& d = driver();
  auto* ctx = new CUctx_st();
  ctx->id = d.next_ctx++;
  ctx->device = device;
  ctx->flags = flags;
  ctx->primary = primary;
  wire::CreateContext msg{ctx->id, d.wire_device(device)};
  d.send(wire::MsgType::create_context, &msg, sizeof msg);
  d.contexts.insert(ctx);
  ctx->legacy = create_stream_locked(ctx, 0, 0, wire::WireStreamKind::legacy_default);
  return ctx;
}

void destroy_context_locked(CUctx_st* ctx) {
  Driver& d = driver();
  wire::DestroyContext msg{ctx->id};
  d.send(wire::MsgType::destroy_context, &msg, sizeof msg);
  for (CUstream_st* stream : std::vector<CUstream_st*>(ctx->streams)) {
    d.streams.erase(stream);
    delete stream->capture;
    delete stream;
  }
  for (auto it = d.modules.begin(); it != d.modules.end();) {
    CUmod_st* module = *it;
    if (module->ctx != ctx) {
      ++it;
      continue;
    }
    for (auto& [name, fn] : module->functions) d.functions.erase(fn.get());
    it = d.modules.erase(it);
    delete module;
  }
  for (CUlib_st* library : d.libraries) library->modules.erase(ctx);
  // A context's events die with it ("destroys and cleans up all resources associated with the
  // context", cuCtxDestroy).
  for (auto it = d.events.begin(); it != d.events.end();) {
    CUevent_st* event = *it;
    if (event->ctx != ctx) {
      ++it;
      continue;
    }
    for (auto& [id, op] : d.pending) {
      if (op.event == event) op.event = nullptr;
    }
    d.dead_events.insert(event);
    it = d.events.erase(it);
  }
  d.cv.notify_all();  // a cuEventSynchronize on one of them returns (an invalid handle now)
  for (auto& [id, op] : d.pending) {
    if (!d.streams.contains(op.stream)) op.actions.clear();
  }
  d.contexts.erase(ctx);
  if (current_context() == ctx) current_context() = nullptr;
  delete ctx;
}

}  // namespace gpuqos::simgpu::driver

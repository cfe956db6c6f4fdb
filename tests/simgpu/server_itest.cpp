// Integration tests of simgpud: the real server process on a private socket, spoken to over the
// raw wire protocol (SOCK_SEQPACKET), with clients that misbehave, die and disconnect.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpuqos/simgpu/protocol.h"
#include "gpuqos/testing/simgpud_process.h"

namespace gpuqos::simgpu {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::uint64_t kDeviceMemoryBytes = 1 << 20;  // memory_gib below
constexpr std::int64_t kFixedKernelNs = 1'000'000;      // "fixed_1ms"
constexpr std::int64_t kLongKernelNs = 200'000'000;     // "long_200ms": outlasts any scheduling noise

constexpr const char* kProfile = R"(
compute_mode = "fifo"
sms = 8
memory_gib = 0.0009765625  # 1 MiB
copy_latency_us = 0.0
[[device]]
name = "itest device 0"
[[device]]
name = "itest device 1"
)";

constexpr const char* kCatalog = R"({
  "kernels": [
    {"match": "^fixed_1ms$", "model": "fixed", "us": 1000},
    {"match": "^long_200ms$", "model": "fixed", "us": 200000},
    {"match": "^sleep$", "model": "from_arg", "arg": 2, "unit": "us"}
  ],
  "default_us": 10,
  "noise_cv": 0
})";

// Runs `argv` and returns its exit code (or -1), with stdout (and, with with_stderr, stderr)
// captured into `out` if given.
int run_program(const std::vector<std::string>& argv, std::string* out = nullptr, bool with_stderr = false) {
  std::string command;
  for (const auto& arg : argv) command += "'" + arg + "' ";
  command += with_stderr ? "2>&1" : "2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return -1;
  char buffer[4096];
  std::string text;
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, n);
  int status = ::pclose(pipe);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// One simgpud with this file's profile and catalog in a fresh temp dir, not started yet; killed
// and cleaned up whatever happens in the test.
class ItestSimgpud : public gpuqos::testing::SimgpudProcess {
 public:
  ItestSimgpud()
      : SimgpudProcess({.profile_toml = kProfile, .catalog_json = kCatalog, .dir_prefix = "simgpud-itest"}) {}
};

struct Message {
  wire::MsgType type{};
  std::vector<std::byte> payload;

  template <class T>
  T as(std::size_t offset = 0) const {
    T value{};
    if (offset + sizeof(T) <= payload.size()) std::memcpy(&value, payload.data() + offset, sizeof(T));
    return value;
  }
};

// A raw protocol client: what libcuda.so.1 says, one message at a time.
class TestClient {
 public:
  explicit TestClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("cannot connect to " + path);
    }
  }
  ~TestClient() { ::close(fd_); }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  void send(wire::MsgType type, const void* head, std::size_t bytes, const void* tail = nullptr,
            std::size_t tail_bytes = 0) {
    ASSERT_TRUE(wire::send_message(fd_, type, head, bytes, tail, tail_bytes)) << std::strerror(errno);
  }
  void send_raw(const void* data, std::size_t bytes) {
    ASSERT_EQ(::send(fd_, data, bytes, MSG_NOSIGNAL), static_cast<ssize_t>(bytes));
  }

  // The next message; nullopt when the server closed the connection or nothing came in time.
  std::optional<Message> receive(std::chrono::milliseconds timeout = 10s) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
    std::vector<std::byte> buffer(sizeof(wire::MsgHeader) + wire::kMaxPayload);
    ssize_t n = ::recv(fd_, buffer.data(), buffer.size(), 0);
    if (n < static_cast<ssize_t>(sizeof(wire::MsgHeader))) return std::nullopt;
    wire::MsgHeader header{};
    std::memcpy(&header, buffer.data(), sizeof header);
    EXPECT_EQ(header.size, n - sizeof header);
    return Message{header.type, {buffer.begin() + sizeof header, buffer.begin() + n}};
  }

  // True when the server hangs up on us (reading past any messages it sent first).
  bool closed_by_server(std::chrono::milliseconds timeout = 10s) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    std::byte buffer[sizeof(wire::MsgHeader) + wire::kMaxPayload];
    ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET) || (n > 0 && closed_by_server(timeout));
  }

  Message hello(std::uint16_t major = wire::kVersionMajor, std::uint32_t observer = 0) {
    wire::Hello msg{wire::kMagic, major, wire::kVersionMinor, static_cast<std::uint32_t>(::getpid()), observer};
    send(wire::MsgType::hello, &msg, sizeof msg);
    auto reply = receive();
    if (!reply || reply->type != wire::MsgType::hello_reply) throw std::runtime_error("no hello reply");
    return *reply;
  }

  // A context on `device` with one blocking stream, both numbered `id`.
  void open_stream(std::uint32_t id, std::uint32_t device = 0) {
    wire::CreateContext ctx{id, device};
    send(wire::MsgType::create_context, &ctx, sizeof ctx);
    wire::CreateStream stream{id, id, wire::WireStreamKind::blocking};
    send(wire::MsgType::create_stream, &stream, sizeof stream);
  }

  wire::Reply request(wire::MsgType type, const void* head, std::size_t bytes, const void* tail = nullptr,
                      std::size_t tail_bytes = 0) {
    send(type, head, bytes, tail, tail_bytes);
    auto reply = receive();
    if (!reply || reply->type != wire::MsgType::reply) throw std::runtime_error("no reply");
    return reply->as<wire::Reply>();
  }

  std::uint64_t register_kernel(std::uint32_t kernel, const std::string& name) {
    wire::RegisterKernel msg{kernel, kernel, static_cast<std::uint32_t>(name.size())};
    return request(wire::MsgType::register_kernel, &msg, sizeof msg, name.data(), name.size()).value0;
  }

  void launch(std::uint64_t op, std::uint32_t stream, std::uint32_t kernel, std::optional<std::uint64_t> arg = {}) {
    wire::Submit msg{op, stream, 0, {}};
    msg.spec.kind = wire::WireOpKind::kernel;
    msg.spec.kernel = kernel;
    msg.spec.blocks = 1;
    msg.spec.has_duration_arg = arg.has_value();
    msg.spec.duration_arg = arg.value_or(0);
    send(wire::MsgType::submit, &msg, sizeof msg);
  }

  void wait_for(std::uint64_t op, std::uint32_t stream, std::uint64_t dep) {
    wire::Submit msg{op, stream, 1, {}};
    msg.spec.kind = wire::WireOpKind::wait;
    send(wire::MsgType::submit, &msg, sizeof msg, &dep, sizeof dep);
  }

  // Completions of exactly `ops`, in whatever order they come.
  std::map<std::uint64_t, wire::CompletionMsg> completions(const std::set<std::uint64_t>& ops) {
    std::map<std::uint64_t, wire::CompletionMsg> done;
    while (done.size() < ops.size()) {
      auto msg = receive();
      if (!msg) break;
      EXPECT_EQ(msg->type, wire::MsgType::completion);
      auto completion = msg->as<wire::CompletionMsg>();
      EXPECT_TRUE(ops.contains(completion.op)) << "unexpected completion of op " << completion.op;
      done[completion.op] = completion;
    }
    EXPECT_EQ(done.size(), ops.size()) << "completions missing";
    return done;
  }

  wire::CompletionMsg completion(std::uint64_t op) { return completions({op})[op]; }

  wire::Reply mem_alloc(std::uint64_t bytes, std::uint32_t device = 0) {
    wire::MemAlloc msg{7, device, 0, bytes};
    return request(wire::MsgType::mem_alloc, &msg, sizeof msg);
  }
  std::uint64_t mem_free_bytes(std::uint32_t device = 0) {
    wire::MemInfo msg{8, device, 0};
    return request(wire::MsgType::mem_info, &msg, sizeof msg).value0;
  }

  // The stats reply and its per-device entries.
  std::pair<wire::StatsReply, std::vector<wire::WireDeviceStats>> stats() {
    wire::StatsRequest msg{9};
    send(wire::MsgType::stats, &msg, sizeof msg);
    auto reply = receive();
    if (!reply || reply->type != wire::MsgType::stats_reply) throw std::runtime_error("no stats reply");
    auto head = reply->as<wire::StatsReply>();
    std::vector<wire::WireDeviceStats> devices;
    for (std::uint32_t d = 0; d < head.device_count; ++d) {
      devices.push_back(reply->as<wire::WireDeviceStats>(sizeof head + d * sizeof(wire::WireDeviceStats)));
    }
    return {head, devices};
  }

 private:
  int fd_ = -1;
};

class SimgpudTest : public ::testing::Test {
 protected:
  void SetUp() override { server.start(); }
  ItestSimgpud server;
};

TEST_F(SimgpudTest, HelloReportsEveryDevice) {
  TestClient client(server.socket());
  Message reply = client.hello();
  auto head = reply.as<wire::HelloReply>();
  EXPECT_EQ(head.status, 0u);
  EXPECT_EQ(head.version_major, wire::kVersionMajor);
  ASSERT_EQ(head.device_count, 2u);
  ASSERT_EQ(reply.payload.size(), sizeof head + 2 * sizeof(wire::DeviceInfo));
  auto dev0 = reply.as<wire::DeviceInfo>(sizeof head);
  auto dev1 = reply.as<wire::DeviceInfo>(sizeof head + sizeof(wire::DeviceInfo));
  EXPECT_STREQ(dev0.name, "itest device 0");
  EXPECT_STREQ(dev1.name, "itest device 1");
  EXPECT_EQ(dev0.memory_bytes, kDeviceMemoryBytes);
  EXPECT_EQ(dev0.sms, 8u);
  EXPECT_EQ(dev0.compute_mode, 0u);  // fifo
  EXPECT_NE(std::memcmp(dev0.uuid, dev1.uuid, sizeof dev0.uuid), 0);

  // The uuid is deterministic: a second connection sees the same one.
  TestClient again(server.socket());
  auto dev0_again = again.hello().as<wire::DeviceInfo>(sizeof head);
  EXPECT_EQ(std::memcmp(dev0.uuid, dev0_again.uuid, sizeof dev0.uuid), 0);
}

TEST_F(SimgpudTest, RefusesOtherProtocolVersion) {
  TestClient client(server.socket());
  Message reply = client.hello(wire::kVersionMajor + 1);
  auto head = reply.as<wire::HelloReply>();
  EXPECT_NE(head.status, 0u);
  EXPECT_EQ(head.device_count, 0u);
  EXPECT_TRUE(client.closed_by_server());
}

TEST_F(SimgpudTest, KernelTakesItsCatalogDuration) {
  TestClient client(server.socket());
  client.hello();
  client.open_stream(1);
  EXPECT_EQ(client.register_kernel(1, "fixed_1ms"), 0u);
  EXPECT_EQ(client.register_kernel(2, "sleep"), 3u);  // argument index 2, plus one
  client.launch(1, 1, 1);
  auto fixed = client.completion(1);
  EXPECT_EQ(fixed.status, 0);
  EXPECT_EQ(fixed.end_ns - fixed.start_ns, kFixedKernelNs);
  client.launch(2, 1, 2, 2500);  // 2500 us
  auto slept = client.completion(2);
  EXPECT_EQ(slept.end_ns - slept.start_ns, 2'500'000);
  EXPECT_GE(slept.start_ns, fixed.end_ns);
}

TEST_F(SimgpudTest, WaitDependsOnAnotherStreamOfTheSameClient) {
  TestClient client(server.socket());
  client.hello();
  client.open_stream(1);
  wire::CreateStream second{2, 1, wire::WireStreamKind::non_blocking};
  client.send(wire::MsgType::create_stream, &second, sizeof second);
  client.register_kernel(1, "fixed_1ms");
  client.launch(1, 1, 1);
  client.wait_for(2, 2, 1);
  client.launch(3, 2, 1);
  auto done = client.completions({1, 2, 3});
  EXPECT_EQ(done[3].start_ns, done[1].end_ns);
}

TEST_F(SimgpudTest, SubmitToUnknownStreamCompletesWithError) {
  TestClient client(server.socket());
  client.hello();
  client.launch(1, 42, 1);
  EXPECT_NE(client.completion(1).status, 0);
}

TEST_F(SimgpudTest, FifoSerialisesTwoClients) {
  TestClient a(server.socket());
  TestClient b(server.socket());
  for (TestClient* c : {&a, &b}) {
    c->hello();
    c->open_stream(1);
    c->register_kernel(1, "long_200ms");
  }
  a.launch(1, 1, 1);
  b.launch(1, 1, 1);  // same client op id: each client has its own namespace
  auto from_a = a.completion(1);
  auto from_b = b.completion(1);
  EXPECT_EQ(from_a.end_ns - from_a.start_ns, kLongKernelNs);
  EXPECT_EQ(from_b.end_ns - from_b.start_ns, kLongKernelNs);
  // Both arrive within microseconds; the server may read either first. The other queues behind it.
  const auto& [first, second] = from_a.start_ns <= from_b.start_ns ? std::pair(from_a, from_b) : std::pair(from_b, from_a);
  EXPECT_EQ(second.start_ns, first.end_ns) << "the later kernel should start exactly when the earlier one ends";
}

TEST_F(SimgpudTest, OutOfMemoryAndMemoryOfAKilledClientIsReclaimed) {
  TestClient a(server.socket());
  a.hello();
  ASSERT_EQ(a.mem_alloc(kDeviceMemoryBytes / 2).status, wire::ReplyStatus::ok);
  EXPECT_EQ(a.mem_free_bytes(), kDeviceMemoryBytes / 2);
  EXPECT_EQ(a.mem_free_bytes(1), kDeviceMemoryBytes);  // devices are separate

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {  // takes the rest of device 0 and a context, then waits to be killed
    try {
      TestClient victim(server.socket());
      victim.hello();
      victim.open_stream(1);
      bool ok = victim.mem_alloc(kDeviceMemoryBytes / 2).status == wire::ReplyStatus::ok;
      char byte = ok ? 'y' : 'n';
      [[maybe_unused]] auto n = ::write(ready[1], &byte, 1);
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(byte, 'y');
  EXPECT_EQ(a.mem_alloc(1).status, wire::ReplyStatus::out_of_memory);
  EXPECT_EQ(a.stats().second.at(0).memory_used_bytes, kDeviceMemoryBytes);

  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::uint64_t free_bytes = 0;
  for (int i = 0; i < 500 && free_bytes != kDeviceMemoryBytes / 2; ++i) {
    free_bytes = a.mem_free_bytes();
    if (free_bytes != kDeviceMemoryBytes / 2) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(free_bytes, kDeviceMemoryBytes / 2);
  EXPECT_EQ(a.mem_alloc(kDeviceMemoryBytes / 2).status, wire::ReplyStatus::ok);
}

TEST_F(SimgpudTest, GarbageDisconnectsOnlyTheSender) {
  TestClient good(server.socket());
  good.hello();
  good.open_stream(1);
  good.register_kernel(1, "long_200ms");
  good.launch(1, 1, 1);

  {  // a message before hello
    TestClient bad(server.socket());
    wire::StatsRequest msg{1};
    bad.send(wire::MsgType::stats, &msg, sizeof msg);
    EXPECT_TRUE(bad.closed_by_server());
  }
  {  // bytes that are not even a header
    TestClient bad(server.socket());
    bad.send_raw("xyz", 3);
    EXPECT_TRUE(bad.closed_by_server());
  }
  {  // an unknown message type after a valid hello
    TestClient bad(server.socket());
    bad.hello();
    wire::MsgHeader header{static_cast<wire::MsgType>(9999), 0};
    bad.send_raw(&header, sizeof header);
    EXPECT_TRUE(bad.closed_by_server());
  }
  {  // a header whose size lies
    TestClient bad(server.socket());
    bad.hello();
    struct {
      wire::MsgHeader header;
      wire::CreateContext ctx;
    } lie{{wire::MsgType::create_context, 100}, {1, 0}};
    bad.send_raw(&lie, sizeof lie);
    EXPECT_TRUE(bad.closed_by_server());
  }
  {  // a stream kind out of range
    TestClient bad(server.socket());
    bad.hello();
    wire::CreateStream stream{1, 1, static_cast<wire::WireStreamKind>(7)};
    bad.send(wire::MsgType::create_stream, &stream, sizeof stream);
    EXPECT_TRUE(bad.closed_by_server());
  }
  {  // an observer may only ask for stats
    TestClient bad(server.socket());
    bad.hello(wire::kVersionMajor, 1);
    wire::CreateContext ctx{1, 0};
    bad.send(wire::MsgType::create_context, &ctx, sizeof ctx);
    EXPECT_TRUE(bad.closed_by_server());
  }
  auto done = good.completion(1);
  EXPECT_EQ(done.status, 0);
  EXPECT_EQ(done.end_ns - done.start_ns, kLongKernelNs);
}

TEST_F(SimgpudTest, ClientThatReadsLateStillGetsEverythingInOrder) {
  TestClient client(server.socket());
  client.hello();
  client.open_stream(1);
  constexpr std::uint64_t kOps = 20000;  // far more completions than a socket buffer holds
  for (std::uint64_t op = 1; op <= kOps; ++op) {
    wire::Submit msg{op, 1, 0, {}};
    msg.spec.kind = wire::WireOpKind::event_record;
    client.send(wire::MsgType::submit, &msg, sizeof msg);
  }
  for (std::uint64_t op = 1; op <= kOps; ++op) {
    auto msg = client.receive();
    ASSERT_TRUE(msg) << "completion " << op << " never came";
    ASSERT_EQ(msg->as<wire::CompletionMsg>().op, op);
  }
}

TEST_F(SimgpudTest, StatsCountBusyTimeAndClients) {
  TestClient client(server.socket());
  client.hello();
  client.open_stream(1);
  client.register_kernel(1, "fixed_1ms");
  client.launch(1, 1, 1);
  client.launch(2, 1, 1);
  client.completions({1, 2});

  TestClient observer(server.socket());
  observer.hello(wire::kVersionMajor, 1);
  auto [head, devices] = observer.stats();
  EXPECT_EQ(head.clients, 1u);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].compute_busy_ns, 2 * kFixedKernelNs);
  EXPECT_EQ(devices[0].kernels_completed, 2u);
  EXPECT_EQ(devices[1].compute_busy_ns, 0);

  std::string output;
  ASSERT_EQ(run_program({std::string(GPUQOS_BUILD_DIR) + "/bin/simgpu-stat", "--socket", server.socket()}, &output),
            0);
  auto json = nlohmann::json::parse(output);
  EXPECT_EQ(json["clients"], 1);
  EXPECT_EQ(json["devices"][0]["compute_busy_ns"], 2 * kFixedKernelNs);
  EXPECT_EQ(json["devices"][0]["kernels_completed"], 2);
  EXPECT_GE(json["now_ns"].get<std::int64_t>(), head.now_ns);
  // Which device each is: its name and UUID, as a program's driver calls say.
  EXPECT_EQ(json["devices"][1]["name"], "itest device 1");
  EXPECT_TRUE(json["devices"][1]["uuid"].get<std::string>().starts_with("GPU-")) << json.dump();
  EXPECT_EQ(json["devices"][0]["uuid"].get<std::string>().size(), 40u) << json.dump();
  EXPECT_NE(json["devices"][0]["uuid"], json["devices"][1]["uuid"]);

  // An idle device's clock reads now, not its last event: a user test saw it 6.5 s behind.
  const auto before = observer.stats().first.now_ns;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto after = observer.stats().first.now_ns;
  EXPECT_GE(after - before, 300'000'000) << "the window between two reads is the time between them";
  EXPECT_LT(after - before, 5'000'000'000);
}

TEST_F(SimgpudTest, SecondServerOnTheSameSocketIsRefused) {
  EXPECT_EQ(run_program(server.argv()), 1);
  TestClient client(server.socket());  // the first one still serves
  EXPECT_EQ(client.hello().as<wire::HelloReply>().status, 0u);
}

TEST_F(SimgpudTest, SigtermExitsCleanlyAndRemovesTheSocket) {
  TestClient client(server.socket());
  client.hello();
  EXPECT_EQ(server.terminate(), 0);
  EXPECT_FALSE(fs::exists(server.socket()));
  EXPECT_TRUE(client.closed_by_server());
}

TEST(SimgpudStartup, BadProfileExitsWithTwo) {
  ItestSimgpud server;
  std::ofstream(fs::path(server.socket()).parent_path() / "profile.toml") << "sms = -1\n";
  EXPECT_EQ(run_program(server.argv()), 2);
  EXPECT_FALSE(fs::exists(server.socket()));
}

TEST(SimgpudStartup, ATimeScaleThatIsNotPositiveIsSaidPlainly) {
  ItestSimgpud server;
  for (const char* scale : {"0", "-2", "abc"}) {
    std::vector<std::string> argv = server.argv();
    argv.insert(argv.end(), {"--time-scale", scale});
    std::string output;
    EXPECT_NE(run_program(argv, &output, true), 0) << scale;
    EXPECT_NE(output.find("--time-scale: must be a positive number, got '" + std::string(scale) + "'"), std::string::npos)
        << output;
    EXPECT_LT(output.size(), 200u) << "not a 300-digit range: " << output;
  }
  EXPECT_FALSE(fs::exists(server.socket()));
}

TEST(SimgpudStartup, StaleSocketFileIsReplaced) {
  ItestSimgpud server;
  int stale = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, server.socket().c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(stale, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(stale);  // the file stays, nobody listens: what a killed server leaves behind
  ASSERT_TRUE(fs::exists(server.socket()));
  server.start();
  TestClient client(server.socket());
  EXPECT_EQ(client.hello().as<wire::HelloReply>().status, 0u);
  EXPECT_EQ((fs::status(server.socket()).permissions() & fs::perms::all), fs::perms::owner_read | fs::perms::owner_write);
}

TEST(SimgpudStartup, StatWithoutServerFails) {
  ItestSimgpud server;  // not started: only its temp dir
  EXPECT_EQ(run_program({std::string(GPUQOS_BUILD_DIR) + "/bin/simgpu-stat", "--socket", server.socket()}), 1);
}

}  // namespace
}  // namespace gpuqos::simgpu

// MetricsServer against a flood of stalled connections on 127.0.0.1 (it keeps a bounded number open
// and still answers once the flood is gone) and against a peer that trickles its request (stop()
// does not wait for it).
#include "gpuqos/scheduler/metrics_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/testing/http_client.h"

namespace gpuqos::scheduler {
namespace {

constexpr int kFlood = 40;

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

// kFlood connections that send the start of a request and then nothing (the server waits out its
// read timeout on each), a few ms apart so that a server that accepts whatever comes takes each (all
// at once, most would only wait in the listen backlog, or for the kernel to retry their SYN).
// Non-blocking connects: past the backlog a blocking one would wait; a send that finds the
// connection not yet up is simply lost.
std::vector<FileDescriptor> stalled_connections(std::uint16_t port) {
  static constexpr char kStart[] = "GET /metrics HTTP/1.1\r\n";
  std::vector<FileDescriptor> sockets;
  const sockaddr_in address = testing::loopback(port);
  for (int i = 0; i < kFlood; ++i) {
    FileDescriptor socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    ::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    [[maybe_unused]] const ssize_t sent = ::send(socket.get(), kStart, sizeof kStart - 1, MSG_NOSIGNAL);
    sockets.push_back(std::move(socket));
  }
  return sockets;
}

TEST(MetricsServer, AFloodOfStalledConnectionsIsHeldToABound) {
  const std::uint16_t port = testing::free_port();
  auto started = MetricsServer::start(config::ListenAddress{"127.0.0.1", port});
  ASSERT_TRUE(started) << started.error();
  MetricsServer& server = *started.value();
  server.publish("gpuqos_up 1\n", ipc::monotonic_ns());

  const std::size_t before = open_descriptors();
  std::vector<FileDescriptor> flood = stalled_connections(port);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the accept thread takes what it will
  const std::size_t accepted = open_descriptors() - before - flood.size();
  EXPECT_LE(accepted, static_cast<std::size_t>(MetricsServer::kMaxConnections))
      << "the server holds a descriptor for each connection it accepted";

  flood.clear();  // the peers hang up: their connections end at once
  const std::string answer = testing::http_get(port, "/metrics");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("gpuqos_up 1"), std::string::npos) << answer;
}

// A peer that sends its request a byte at a time, each well within the read timeout, keeps its
// connection as long as it likes (httplib times each read, not the request). stop() — which the
// daemon's loop calls on a reload that moves the endpoint, and at exit — must not wait for it: it
// frees the port and returns, and the request, still served, finishes on threads that own what
// they use, after the MetricsServer is gone.
TEST(MetricsServer, APeerTricklingItsRequestDoesNotHoldStop) {
  const std::uint16_t port = testing::free_port();
  auto started = MetricsServer::start(config::ListenAddress{"127.0.0.1", port});
  ASSERT_TRUE(started) << started.error();
  started.value()->publish("gpuqos_up 1\n", ipc::monotonic_ns());

  FileDescriptor peer(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const timeval timeout{5, 0};
  ::setsockopt(peer.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const sockaddr_in address = testing::loopback(port);
  ASSERT_EQ(::connect(peer.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  std::atomic<bool> finish{false};
  std::thread trickle([&] {
    static constexpr char kStart[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Slow: ";
    ::send(peer.get(), kStart, sizeof kStart - 1, MSG_NOSIGNAL);
    // Header lines without end, a byte every 200 ms, until told to end them (or for 30 s at most).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (char c = 'a'; !finish.load() && std::chrono::steady_clock::now() < until; c = c == 'z' ? 'a' : c + 1) {
      ::send(peer.get(), &c, 1, MSG_NOSIGNAL);
      if (c == 'z') ::send(peer.get(), "\r\nX-Slow: ", 10, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ::send(peer.get(), "\r\n\r\n", 4, MSG_NOSIGNAL);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the server is reading its request

  const auto before = std::chrono::steady_clock::now();
  started.value()->stop();
  const auto waited = std::chrono::steady_clock::now() - before;
  EXPECT_LT(waited, std::chrono::nanoseconds(MetricsServer::kStopWaitNs) + std::chrono::seconds(5))
      << "stop() waited for the trickling peer";
  started.value().reset();
  // Nothing listens there any more (httplib binds with SO_REUSEPORT, so a second server binding the
  // port would not say whether the first still listens).
  FileDescriptor probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_NE(::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(errno, ECONNREFUSED);

  auto again = MetricsServer::start(config::ListenAddress{"127.0.0.1", port});
  ASSERT_TRUE(again) << again.error();
  again.value()->publish("gpuqos_up 2\n", ipc::monotonic_ns());
  EXPECT_NE(testing::http_get(port, "/metrics").find("gpuqos_up 2"), std::string::npos);

  finish.store(true);
  trickle.join();
  std::string answer;
  char buffer[4096];
  for (ssize_t got; (got = ::recv(peer.get(), buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, static_cast<std::size_t>(got));
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << "its request was served after all: " << answer;
  EXPECT_NE(answer.find("gpuqos_up 1"), std::string::npos) << answer;
}

// On a reload the daemon's loop stops the server without waiting at all (wait_ns 0): a scrape in
// progress, even a well-behaved one, finishes on the server's own threads.
TEST(MetricsServer, StopWithoutWaitingReturnsAtOnceAndTheScrapeInProgressStillEnds) {
  const std::uint16_t port = testing::free_port();
  auto started = MetricsServer::start(config::ListenAddress{"127.0.0.1", port});
  ASSERT_TRUE(started) << started.error();
  started.value()->publish("gpuqos_up 1\n", ipc::monotonic_ns());
  FileDescriptor peer(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const timeval timeout{5, 0};
  ::setsockopt(peer.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const sockaddr_in address = testing::loopback(port);
  ASSERT_EQ(::connect(peer.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  static constexpr char kStart[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  ::send(peer.get(), kStart, sizeof kStart - 1, MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server is reading its request

  const auto before = std::chrono::steady_clock::now();
  started.value()->stop(0);
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(1)) << "stop(0) waited";
  started.value().reset();

  ::send(peer.get(), "Connection: close\r\n\r\n", 21, MSG_NOSIGNAL);
  std::string answer;
  char buffer[4096];
  for (ssize_t got; (got = ::recv(peer.get(), buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, static_cast<std::size_t>(got));
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("gpuqos_up 1"), std::string::npos) << answer;
}

}  // namespace
}  // namespace gpuqos::scheduler

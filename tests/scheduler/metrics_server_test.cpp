// MetricsServer against a flood of stalled connections on 127.0.0.1 (it keeps a bounded number open
// and still answers once the flood is gone) and against a peer that trickles its request (stop()
// does not wait for it).
#include "gpuqos/scheduler/metrics_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>
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

// A server on 127.0.0.1:port that has published `text`; null (and a test failure) if it cannot start.
std::unique_ptr<MetricsServer> serving(std::uint16_t port, const std::string& text) {
  auto started = MetricsServer::start(config::ListenAddress{"127.0.0.1", port});
  EXPECT_TRUE(started) << started.error();
  if (!started) return nullptr;
  started.value()->publish(text, ipc::monotonic_ns());
  return std::move(started.value());
}

// `answer` is a 200 carrying `sample`.
void expect_served(const std::string& answer, const std::string& sample) {
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find(sample), std::string::npos) << answer;
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

// Two daemons on one metrics port: the second is told it cannot listen there, rather than both
// serving it and Prometheus reading each by turns.
TEST(MetricsServer, ASecondServerCannotListenOnAPortInUse) {
  const std::uint16_t port = testing::free_port();
  const std::unique_ptr<MetricsServer> first = serving(port, "gpuqos_up 1\n");
  ASSERT_NE(first, nullptr);
  const auto second = MetricsServer::start(config::ListenAddress{"127.0.0.1", port});
  ASSERT_FALSE(second) << "a second server bound the port";
  EXPECT_EQ(second.error(), "cannot listen on 127.0.0.1:" + std::to_string(port) + ": Address already in use");
}

// A loop that stopped publishing (stalled on something) must not look healthy: past kStaleNs
// without an answer to the refresh a scrape asks for, the scrape gets a 503 saying so, and the
// next publication serves again.
TEST(MetricsServer, AStalledLoopsOldFiguresAreNotServed) {
  const std::uint16_t port = testing::free_port();
  auto started = MetricsServer::start(config::ListenAddress{"127.0.0.1", port});
  ASSERT_TRUE(started) << started.error();
  const std::unique_ptr<MetricsServer> server = std::move(started.value());
  const std::string not_yet = testing::http_get(port, "/metrics");
  EXPECT_EQ(not_yet.rfind("HTTP/1.1 503", 0), 0u) << not_yet;
  EXPECT_NE(not_yet.find("no metrics yet"), std::string::npos) << not_yet;

  server->publish("gpuqos_up 1\n", ipc::monotonic_ns() - MetricsServer::kStaleNs + 1'000'000'000);
  expect_served(testing::http_get(port, "/metrics"), "gpuqos_up 1");  // old, not stale: served
  EXPECT_TRUE(server->refresh_wanted());
  server->publish("gpuqos_up 1\n", ipc::monotonic_ns() - MetricsServer::kStaleNs - 1'000'000'000);
  const std::string stale = testing::http_get(port, "/metrics");
  EXPECT_EQ(stale.rfind("HTTP/1.1 503", 0), 0u) << stale;
  EXPECT_NE(stale.find("its loop has not answered for 3"), std::string::npos) << stale;
  server->publish("gpuqos_up 2\n", ipc::monotonic_ns());
  expect_served(testing::http_get(port, "/metrics"), "gpuqos_up 2");
}

TEST(MetricsServer, AFloodOfStalledConnectionsIsHeldToABound) {
  const std::uint16_t port = testing::free_port();
  const std::unique_ptr<MetricsServer> server = serving(port, "gpuqos_up 1\n");
  ASSERT_TRUE(server);

  const std::size_t before = open_descriptors();
  std::vector<FileDescriptor> flood = stalled_connections(port);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the accept thread takes what it will
  const std::size_t accepted = open_descriptors() - before - flood.size();
  EXPECT_LE(accepted, static_cast<std::size_t>(MetricsServer::kMaxConnections))
      << "the server holds a descriptor for each connection it accepted";

  flood.clear();  // the peers hang up: their connections end at once
  expect_served(testing::http_get(port, "/metrics"), "gpuqos_up 1");
}

// A connection that sends nothing holds a serving thread until its first-byte timeout (kIoTimeoutS):
// with a few of them open (a client keeping one, a port scanner), a scrape is still served at once,
// while they are all still open, not after they time out.
TEST(MetricsServer, AFewIdleConnectionsDoNotDelayAScrape) {
  const std::uint16_t port = testing::free_port();
  const std::unique_ptr<MetricsServer> server = serving(port, "gpuqos_up 1\n");
  ASSERT_TRUE(server);
  std::vector<FileDescriptor> idle;
  for (int i = 0; i < MetricsServer::kPoolThreads - 1; ++i) idle.push_back(testing::connect_loopback(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // each is accepted and waits for its request
  expect_served(testing::http_get(port, "/metrics"), "gpuqos_up 1");
  for (const FileDescriptor& peer : idle) {
    char byte = 0;
    const ssize_t got = ::recv(peer.get(), &byte, 1, MSG_DONTWAIT);
    EXPECT_TRUE(got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        << "an idle connection was closed (timed out) before the scrape was served: got " << got;
  }
}

// A peer that sends its request a byte at a time, each well within the read timeout, keeps its
// connection as long as it likes (httplib times each read, not the request). stop() — which the
// daemon's loop calls on a reload that moves the endpoint, and at exit — must not wait for it: it
// frees the port and returns, and the request, still served, finishes on threads that own what
// they use, after the MetricsServer is gone.
TEST(MetricsServer, APeerTricklingItsRequestDoesNotHoldStop) {
  const std::uint16_t port = testing::free_port();
  std::unique_ptr<MetricsServer> server = serving(port, "gpuqos_up 1\n");
  ASSERT_TRUE(server);

  const FileDescriptor peer = testing::connect_loopback(port);
  ASSERT_TRUE(peer.valid());
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
  server->stop();
  const auto waited = std::chrono::steady_clock::now() - before;
  EXPECT_LT(waited, std::chrono::nanoseconds(MetricsServer::kStopWaitNs) + std::chrono::seconds(5))
      << "stop() waited for the trickling peer";
  server.reset();
  // Nothing listens there any more: a connect is refused (asked directly rather than by binding a
  // second server there, which says nothing of a peer's connection still open).
  const sockaddr_in address = testing::loopback(port);
  FileDescriptor probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_NE(::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(errno, ECONNREFUSED);

  const std::unique_ptr<MetricsServer> again = serving(port, "gpuqos_up 2\n");
  ASSERT_TRUE(again);
  expect_served(testing::http_get(port, "/metrics"), "gpuqos_up 2");

  finish.store(true);
  trickle.join();
  // Its request was answered after all: with the figures, or, once they are older than kStaleNs
  // (no loop publishes to a stopped server), with a 503 saying they are not fresh.
  const std::string answer = testing::receive_all(peer);
  if (answer.rfind("HTTP/1.1 503", 0) == 0) {
    EXPECT_NE(answer.find("has not answered"), std::string::npos) << answer;
  } else {
    expect_served(answer, "gpuqos_up 1");
  }
}

// On a reload the daemon's loop stops the server without waiting at all (wait_ns 0): a scrape in
// progress, even a well-behaved one, finishes on the server's own threads.
TEST(MetricsServer, StopWithoutWaitingReturnsAtOnceAndTheScrapeInProgressStillEnds) {
  const std::uint16_t port = testing::free_port();
  std::unique_ptr<MetricsServer> server = serving(port, "gpuqos_up 1\n");
  ASSERT_TRUE(server);
  const FileDescriptor peer = testing::connect_loopback(port);
  ASSERT_TRUE(peer.valid());
  static constexpr char kStart[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  ::send(peer.get(), kStart, sizeof kStart - 1, MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server is reading its request

  const auto before = std::chrono::steady_clock::now();
  server->stop(0);
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(1)) << "stop(0) waited";
  server.reset();
  EXPECT_TRUE(MetricsServer::left_a_request_running()) << "the server's thread still reads the request";

  ::send(peer.get(), "Connection: close\r\n\r\n", 21, MSG_NOSIGNAL);
  expect_served(testing::receive_all(peer), "gpuqos_up 1");
  // Its thread then ends: a process exiting later needs no quick exit for it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (MetricsServer::left_a_request_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(MetricsServer::left_a_request_running());
}

}  // namespace
}  // namespace gpuqos::scheduler

// Tests of the registration records (round trips, garbage rejected), record I/O and SO_PEERCRED.
#include "gpuqos/ipc/registration.h"

#include <filesystem>
#include <iterator>

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <random>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::ipc {
namespace {

template <class T>
std::vector<std::byte> raw(const T& value) {
  const auto* begin = reinterpret_cast<const std::byte*>(&value);
  return {begin, begin + sizeof(T)};
}

Hello valid_hello() {
  auto hello = make_hello(Priority::high, 1, "resnet-serve");
  EXPECT_TRUE(hello) << hello.error();
  return hello.value();
}

void expect_rejected(const Result<DecodedHello>& decoded, const std::string& why) {
  ASSERT_FALSE(decoded) << "accepted, expected: " << why;
  EXPECT_NE(decoded.error().find(why), std::string::npos) << decoded.error();
}

TEST(Hello, RoundTrips) {
  auto decoded = decode_hello(encode(valid_hello()));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_TRUE(decoded->version_matches);
  EXPECT_EQ(decoded->hello.priority, Priority::high);
  EXPECT_EQ(decoded->hello.device, 1u);
  EXPECT_STREQ(decoded->hello.job_name, "resnet-serve");
  EXPECT_EQ(record_kind(encode(valid_hello())), RecordKind::hello);
}

TEST(Hello, MakeRefusesBadJobNames) {
  EXPECT_FALSE(make_hello(Priority::low, 0, ""));
  EXPECT_FALSE(make_hello(Priority::low, 0, std::string(64, 'a')));
  EXPECT_TRUE(make_hello(Priority::low, 0, std::string(63, 'a')));
  EXPECT_FALSE(make_hello(Priority::low, 0, std::string("a\0b", 3)));
  EXPECT_FALSE(make_hello(Priority::low, 0, "tab\there"));
  EXPECT_EQ(sanitize_job_name("tab\there"), "tab_here");
  EXPECT_EQ(sanitize_job_name(""), "job");
  EXPECT_EQ(sanitize_job_name(std::string(100, 'x')).size(), 63u);
  EXPECT_TRUE(make_hello(Priority::low, 0, sanitize_job_name("caf\xc3\xa9 \x01")));
}

TEST(Hello, GarbageIsRejectedWithAReason) {
  std::vector<std::byte> bytes = encode(valid_hello());
  expect_rejected(decode_hello(std::span(bytes).first(5)), "too short");
  expect_rejected(decode_hello(std::span(bytes).first(sizeof(Hello) - 1)), "expected 80");

  Hello bad = valid_hello();
  bad.magic = kHelloReplyMagic;
  expect_rejected(decode_hello(raw(bad)), "bad magic");
  bad = valid_hello();
  bad.priority = static_cast<Priority>(7);
  expect_rejected(decode_hello(raw(bad)), "priority 7");
  bad = valid_hello();
  bad.device = kMaxDevices;
  expect_rejected(decode_hello(raw(bad)), "device 64");
  bad = valid_hello();
  std::memset(bad.job_name, 'x', sizeof bad.job_name);
  expect_rejected(decode_hello(raw(bad)), "not NUL-terminated");
  bad = valid_hello();
  bad.job_name[0] = '\0';
  expect_rejected(decode_hello(raw(bad)), "empty");
  bad = valid_hello();
  bad.job_name[2] = '\n';
  expect_rejected(decode_hello(raw(bad)), "non-printable");
}

TEST(Hello, ReservedBytesAreIgnored) {
  Hello hello = valid_hello();
  std::memset(hello.reserved, 0xff, sizeof hello.reserved);
  EXPECT_TRUE(decode_hello(raw(hello)));
}

TEST(Hello, AnotherMajorVersionDecodesForAPoliteRefusal) {
  struct FutureHello {
    std::uint32_t magic;
    std::uint16_t major;
    std::uint16_t minor;
  } future{kHelloMagic, kProtocolVersionMajor + 1, 0};
  auto decoded = decode_hello(raw(future));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_FALSE(decoded->version_matches);
  EXPECT_EQ(decoded->hello.version_major, kProtocolVersionMajor + 1);
}

TEST(Hello, OnlyANewerMinorVersionMayAppendBytes) {
  Hello hello = valid_hello();
  std::vector<std::byte> longer = raw(hello);
  longer.resize(longer.size() + 8);
  expect_rejected(decode_hello(longer), "expected 80");
  hello.version_minor = kProtocolVersionMinor + 1;
  longer = raw(hello);
  longer.resize(longer.size() + 8);
  EXPECT_TRUE(decode_hello(longer));
}

TEST(Hello, MutatedRecordsNeverDecodeIntoInvalidFields) {
  std::mt19937 random(12345);
  const std::vector<std::byte> good = encode(valid_hello());
  int accepted = 0;
  for (int trial = 0; trial < 20'000; ++trial) {
    std::vector<std::byte> bytes = good;
    bytes.resize(random() % (sizeof(Hello) + 16));
    for (int flips = 1 + random() % 4; flips > 0 && !bytes.empty(); --flips) {
      bytes[random() % bytes.size()] = static_cast<std::byte>(random());
    }
    auto decoded = decode_hello(bytes);
    if (!decoded || !decoded->version_matches) continue;
    ++accepted;
    const Hello& hello = decoded->hello;
    ASSERT_LE(static_cast<unsigned>(hello.priority), 1u);
    ASSERT_LT(hello.device, kMaxDevices);
    ASSERT_NE(std::memchr(hello.job_name, '\0', kJobNameBytes), nullptr);
    ASSERT_GT(std::strlen(hello.job_name), 0u);
  }
  EXPECT_GT(accepted, 0);  // some mutations only touch reserved or valid values
}

TEST(HelloReply, RoundTrips) {
  HelloReply reply = make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::high, 4u << 20);
  auto decoded = decode_hello_reply(encode(reply));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->status, HelloStatus::ok);
  EXPECT_EQ(decoded->client_number, 3u);
  EXPECT_STREQ(decoded->segment_name, "/gpuqos-100-3");
  EXPECT_EQ(decoded->version_minor, kProtocolVersionMinor);
  EXPECT_EQ(decoded->effective_priority, Priority::high);
  EXPECT_EQ(decoded->copy_chunk_bytes, 4u << 20);
  EXPECT_EQ(decoded->managed_devices, kAllDevices) << "the default: every device";
  EXPECT_EQ(record_kind(encode(reply)), RecordKind::hello_reply);
  decoded = decode_hello_reply(encode(make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::low, 0, 0b101)));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->managed_devices, 0b101u);
}

TEST(HelloReply, CarriesTheDaemonsClock) {
  const std::int64_t before = monotonic_ns();
  auto decoded = decode_hello_reply(encode(make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::low, 0)));
  const std::int64_t after = monotonic_ns();
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_GE(decoded->daemon_clock_ns, before);
  EXPECT_LE(decoded->daemon_clock_ns, after);
  decoded = decode_hello_reply(
      encode(make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::low, 0, kAllDevices, 3'600'000'000'000)));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_GE(decoded->daemon_clock_ns, after + 3'600'000'000'000) << "another namespace's clock, an hour ahead";
}

// A reply as a daemon of `minor` sends it (its first `bytes`), decoded; a whole reply at that minor
// is refused: a minor's reply has exactly its size.
HelloReply decoded_from_minor(std::uint16_t minor, std::size_t bytes) {
  HelloReply reply = make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::high, 1234, 0b1);
  reply.version_minor = minor;
  const std::vector<std::byte> whole = raw(reply);
  EXPECT_FALSE(decode_hello_reply(whole)) << "a 1." << minor << " reply has exactly the 1." << minor << " size";
  auto decoded = decode_hello_reply(std::span(whole).first(bytes));
  EXPECT_TRUE(decoded) << decoded.error();
  return decoded ? decoded.value() : HelloReply{};
}

// 1.8: the GPUs a daemon schedules by UUID ([devices] uuids) travel as the start of each UUID's text.
TEST(HelloReply, CarriesTheGpusTheDaemonSchedulesByUuid) {
  HelloReply reply = make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::low, 0, 0);
  const std::vector<std::string> prefixes{"5053021f", "8601f82c-036c-8858-b907-c46eb6bf5f92"};
  ASSERT_TRUE(set_managed_uuids(reply, prefixes));
  auto decoded = decode_hello_reply(encode(reply));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(managed_uuids(decoded.value()), prefixes);
  EXPECT_EQ(decoded->managed_devices, 0u) << "no ordinal: the UUIDs alone";
  EXPECT_FALSE(set_managed_uuids(reply, std::vector<std::string>{"GPU-5053021f"})) << "the text past GPU-, lowercase";
  EXPECT_FALSE(set_managed_uuids(reply, std::vector<std::string>{"5053021F"}));
  EXPECT_FALSE(set_managed_uuids(reply, std::vector<std::string>{"5053-021f"})) << "a dash where no UUID has one";
  EXPECT_TRUE(set_managed_uuids(reply, std::vector<std::string>{"5053021f-"}));
  ASSERT_TRUE(set_managed_uuids(reply, prefixes));
  EXPECT_FALSE(set_managed_uuids(reply, std::vector<std::string>(kMaxManagedUuids + 1, "ab")));
  // From another process: garbage in an entry, or a count past the array, is refused.
  std::strcpy(reply.managed_uuids[1], "not-hex!");
  EXPECT_FALSE(decode_hello_reply(encode(reply)));
  reply.managed_uuids[1][0] = '\0';
  EXPECT_FALSE(decode_hello_reply(encode(reply))) << "an empty entry within the count";
  ASSERT_TRUE(set_managed_uuids(reply, prefixes));
  std::memset(reply.managed_uuids[0], 'a', sizeof reply.managed_uuids[0]);
  EXPECT_FALSE(decode_hello_reply(encode(reply))) << "no NUL";
  ASSERT_TRUE(set_managed_uuids(reply, prefixes));
  reply.managed_uuid_count = kMaxManagedUuids + 1;
  EXPECT_FALSE(decode_hello_reply(encode(reply)));
}

TEST(HelloReply, FromA1_7DaemonDecodesWithoutThe1_8Fields) {
  const HelloReply decoded = decoded_from_minor(7, kHelloReplyBytesV1_7);
  EXPECT_EQ(decoded.managed_devices, 0b1u);
  EXPECT_TRUE(managed_uuids(decoded).empty());
}

TEST(HelloReply, FromA1_3DaemonDecodesWithoutThe1_4Fields) {
  const HelloReply decoded = decoded_from_minor(3, kHelloReplyBytesV1_3);
  EXPECT_EQ(decoded.managed_devices, 0b1u);
  EXPECT_EQ(decoded.daemon_clock_ns, 0) << "absent: zero, the shim checks the minor";
}

TEST(HelloReply, FromA1_2DaemonDecodesWithoutThe1_3Fields) {
  const HelloReply decoded = decoded_from_minor(2, kHelloReplyBytesV1_2);
  EXPECT_EQ(decoded.copy_chunk_bytes, 1234u);
  EXPECT_EQ(decoded.managed_devices, 0u) << "absent: zero, the shim checks the minor";
}

TEST(HelloReply, CarriesALoweredPriority) {
  auto decoded =
      decode_hello_reply(encode(make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::low, 0)));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->effective_priority, Priority::low);
  EXPECT_EQ(decoded->copy_chunk_bytes, 0u);
}

TEST(HelloReply, FromA1_0DaemonDecodesWithoutThe1_1Fields) {
  HelloReply reply = make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::high, 1234);
  reply.version_minor = 0;
  const std::vector<std::byte> whole = raw(reply);
  auto decoded = decode_hello_reply(std::span(whole).first(kHelloReplyBytesV1_0));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->version_minor, 0u);
  EXPECT_STREQ(decoded->segment_name, "/gpuqos-100-3");
  EXPECT_EQ(decoded->effective_priority, Priority::low) << "absent: zero, the shim checks the minor";
  EXPECT_EQ(decoded->copy_chunk_bytes, 0u);
  EXPECT_FALSE(decode_hello_reply(whole)) << "a 1.0 reply has exactly the 1.0 size";
}

TEST(HelloReply, OnlyANewerMinorVersionMayAppendBytes) {
  HelloReply reply = make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::high, 1234);
  std::vector<std::byte> longer = raw(reply);
  longer.resize(longer.size() + 8);
  EXPECT_FALSE(decode_hello_reply(longer));
  EXPECT_FALSE(decode_hello_reply(std::span<const std::byte>(raw(reply)).first(sizeof(HelloReply) - 1)));
  reply.version_minor = kProtocolVersionMinor + 1;
  longer = raw(reply);
  longer.resize(longer.size() + 8);
  auto decoded = decode_hello_reply(longer);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->copy_chunk_bytes, 1234u);
}

TEST(HelloReply, RefusalCarriesItsReason) {
  auto decoded = decode_hello_reply(
      encode(make_hello_reply(HelloStatus::refused, 0, "", "device 3 does not exist", Priority::low, 0)));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->status, HelloStatus::refused);
  EXPECT_STREQ(decoded->message, "device 3 does not exist");
}

TEST(HelloReply, GarbageIsRejected) {
  HelloReply reply = make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::high, 4u << 20);
  HelloReply bad = reply;
  bad.status = static_cast<HelloStatus>(9);
  EXPECT_FALSE(decode_hello_reply(raw(bad)));
  bad = reply;
  std::strcpy(bad.segment_name, "../etc/passwd");
  EXPECT_FALSE(decode_hello_reply(raw(bad)));
  bad = reply;
  std::memset(bad.message, 'm', sizeof bad.message);
  EXPECT_FALSE(decode_hello_reply(raw(bad)));
  bad = reply;
  bad.magic = kHelloMagic;
  EXPECT_FALSE(decode_hello_reply(raw(bad)));
  bad = reply;
  bad.effective_priority = static_cast<Priority>(2);
  EXPECT_FALSE(decode_hello_reply(raw(bad)));
  EXPECT_FALSE(decode_hello_reply(std::span<const std::byte>(raw(reply)).first(20)));
}

TEST(HelloReply, FromAnotherMajorVersionMeansVersionMismatch) {
  HelloReply reply = make_hello_reply(HelloStatus::ok, 3, "/gpuqos-100-3", "", Priority::high, 4u << 20);
  reply.version_major = kProtocolVersionMajor + 1;
  auto decoded = decode_hello_reply(std::span<const std::byte>(raw(reply)).first(12));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->status, HelloStatus::version_mismatch);
  EXPECT_EQ(decoded->segment_name[0], '\0');
}

TEST(KernelName, RoundTrips) {
  auto record = encode_kernel_name(7, "_Z6matmulPfS_S_i");
  ASSERT_TRUE(record) << record.error();
  EXPECT_EQ(record_kind(record.value()), RecordKind::kernel_name);
  auto decoded = decode_kernel_name(record.value());
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->kernel_id, 7u);
  EXPECT_EQ(decoded->name, "_Z6matmulPfS_S_i");
}

TEST(KernelName, GarbageIsRejected) {
  EXPECT_FALSE(encode_kernel_name(0, "k"));
  EXPECT_FALSE(encode_kernel_name(1, ""));
  EXPECT_FALSE(encode_kernel_name(1, std::string(kMaxKernelNameBytes + 1, 'k')));
  std::vector<std::byte> record = encode_kernel_name(1, "kernel").value();
  EXPECT_FALSE(decode_kernel_name(std::span(record).first(record.size() - 1)));  // length mismatch
  record.push_back(std::byte{'x'});
  EXPECT_FALSE(decode_kernel_name(record));
  record.pop_back();
  record[sizeof(KernelNameHeader) + 2] = std::byte{0};
  EXPECT_FALSE(decode_kernel_name(record));  // NUL inside the name
  KernelNameHeader huge{kKernelNameMagic, 1, 0xffffffffu, 0};
  EXPECT_FALSE(decode_kernel_name(raw(huge)));
  EXPECT_EQ(record_kind(std::span(record).first(2)), RecordKind::unknown);
}

TEST(KernelName, AnyNameIsSentAsPrintableBytesThatStayDistinct) {
  EXPECT_EQ(wire_kernel_name("_Z6matmulPfS_S_i"), "_Z6matmulPfS_S_i");  // what every mangled name is
  EXPECT_EQ(wire_kernel_name("operator() const"), "operator() const");
  // UTF-8 identifiers, control bytes and the escape character itself.
  EXPECT_EQ(wire_kernel_name("\xd1\x8f\xd0\xb4\xd1\x80\xd0\xbe"), "\\xd1\\x8f\\xd0\\xb4\\xd1\\x80\\xd0\\xbe");
  EXPECT_EQ(wire_kernel_name(std::string("a\0b\tc\x7f", 6)), "a\\x00b\\x09c\\x7f");
  EXPECT_EQ(wire_kernel_name("a\\x41"), "a\\x5cx41");
  EXPECT_NE(wire_kernel_name("a\\x41"), wire_kernel_name("a\x41"));
  // Each is a record gpuqosd takes (before, a byte of 0x80 and up cost the job its registration).
  for (const std::string name : {"\xd1\x8f\xd0\xb4\xd1\x80\xd0\xbe", "k\xff", "\x01"}) {
    auto decoded = decode_kernel_name(encode_kernel_name(3, wire_kernel_name(name)).value());
    ASSERT_TRUE(decoded) << decoded.error();
    EXPECT_EQ(decoded->name, wire_kernel_name(name));
  }
  EXPECT_FALSE(decode_kernel_name(encode_kernel_name(3, "k\xff").value())) << "the raw bytes are still refused";
  // Cut to the record's limit, escapes counted.
  EXPECT_EQ(wire_kernel_name(std::string(kMaxKernelNameBytes + 10, 'k')).size(), kMaxKernelNameBytes);
  EXPECT_EQ(wire_kernel_name(std::string(kMaxKernelNameBytes, '\xe9')).size(), kMaxKernelNameBytes);
}

TEST(UnscheduledDevice, RoundTripsAndRefusesGarbage) {
  const std::array<std::uint8_t, 16> uuid{0x49, 0x82, 0x1f, 0x9d, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xaa};
  std::vector<std::byte> record = encode_unscheduled_device(3, uuid);
  EXPECT_EQ(record_kind(record), RecordKind::unscheduled_device);
  auto decoded = decode_unscheduled_device(record);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->ordinal, 3u);
  EXPECT_TRUE(std::equal(uuid.begin(), uuid.end(), decoded->uuid));
  EXPECT_FALSE(decode_unscheduled_device(std::span(record).first(record.size() - 1)));
  record.push_back(std::byte{0});
  EXPECT_FALSE(decode_unscheduled_device(record));
  EXPECT_FALSE(decode_unscheduled_device(encode_unscheduled_device(kMaxDevices, uuid)));  // no such ordinal
  EXPECT_FALSE(decode_unscheduled_device(std::vector<std::byte>(24, std::byte{0x47})));  // bad magic
}

// A user reading "Connection refused" cannot tell a wrong path from a dead daemon: the message says.
TEST(ConnectFailure, SaysWhatIsAtThePath) {
  const gpuqos::testing::TempDir temp("gpuqos-connect-failure");
  const std::string dir = temp.path().string();
  const std::string file = dir + "/file.sock", stale = dir + "/stale.sock", none = dir + "/none.sock";
  { std::FILE* f = std::fopen(file.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, stale.c_str(), sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ::close(fd);  // bound, never listened: what a killed daemon leaves
  }
  EXPECT_EQ(connect_failure(file, ECONNREFUSED),
            "connect: Connection refused (" + file + " exists and is not a socket: not gpuqosd's socket (its path is "
            "[daemon] socket, or gpuqosd --socket))");
  EXPECT_NE(connect_failure(dir, ECONNREFUSED).find(dir + " is a directory: not gpuqosd's socket"), std::string::npos);
  EXPECT_NE(connect_failure(stale, ECONNREFUSED).find("(no gpuqosd serves " + stale + ": a socket left by one that died?)"),
            std::string::npos);
  EXPECT_NE(connect_failure(none, ENOENT).find("(nothing at " + none + ": is gpuqosd running"), std::string::npos);
  EXPECT_EQ(connect_failure(none, ETIMEDOUT), std::string("connect: ") + std::strerror(ETIMEDOUT));
}

// A connected SOCK_SEQPACKET pair, closed at the end of the test.
struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0); }
  ~SocketPair() {
    for (int fd : fds) if (fd >= 0) ::close(fd);
  }
};

TEST(PeerCredentials, AreThoseOfThePeerProcess) {
  SocketPair pair;
  auto credentials = peer_credentials(pair.fds[0]);
  ASSERT_TRUE(credentials) << credentials.error();
  EXPECT_EQ(credentials->pid, ::getpid());
  EXPECT_EQ(credentials->uid, ::getuid());
  EXPECT_EQ(credentials->gid, ::getgid());
}

TEST(PeerCredentials, FailOnANonSocket) {
  auto credentials = peer_credentials(-1);
  ASSERT_FALSE(credentials);
  EXPECT_NE(credentials.error().find("SO_PEERCRED"), std::string::npos);
}

TEST(Records, TravelWholeOverASeqpacketSocket) {
  SocketPair pair;
  ASSERT_TRUE(send_record(pair.fds[0], encode(valid_hello())));
  std::vector<std::byte> received;
  Status status = receive_record(pair.fds[1], received);
  ASSERT_TRUE(status) << status.error();
  auto decoded = decode_hello(received);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_STREQ(decoded->hello.job_name, "resnet-serve");
}

// The HelloReply of 1.6 carries the doorbell (a socket); any descriptor travels the same way: here
// an eventfd, whose counter shows the receiver's descriptor is the same file. A record without one
// gives -1.
TEST(Records, ADescriptorTravelsWithARecord) {
  SocketPair pair;
  const int sent_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(sent_fd, 0);
  ASSERT_TRUE(send_record(pair.fds[0], encode(valid_hello()), sent_fd));
  std::vector<std::byte> received;
  int got_fd = -1;
  Status status = receive_record(pair.fds[1], received, got_fd);
  ASSERT_TRUE(status) << status.error();
  ASSERT_GE(got_fd, 0);
  EXPECT_NE(got_fd, sent_fd);
  EXPECT_TRUE(decode_hello(received));
  const std::uint64_t one = 1;
  ASSERT_EQ(::write(got_fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));  // the same counter
  std::uint64_t count = 0;
  ASSERT_EQ(::read(sent_fd, &count, sizeof count), static_cast<ssize_t>(sizeof count));
  EXPECT_EQ(count, 1u);
  EXPECT_NE(::fcntl(got_fd, F_GETFD) & FD_CLOEXEC, 0);
  ::close(got_fd);

  ASSERT_TRUE(send_record(pair.fds[0], encode(valid_hello())));
  got_fd = 7;
  ASSERT_TRUE(receive_record(pair.fds[1], received, got_fd));
  EXPECT_EQ(got_fd, -1);
  ::close(sent_fd);
}

// Several descriptors travel in order (protocol 1.10: the segment, then the doorbell); more than
// kMaxPassedDescriptors are not sent.
TEST(Records, SeveralDescriptorsTravelInOrder) {
  SocketPair pair;
  const int first = ::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC), second = ::eventfd(2, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  const int both[] = {first, second};
  ASSERT_TRUE(send_record(pair.fds[0], encode(valid_hello()), both));
  std::vector<std::byte> received;
  std::vector<int> got;
  Status status = receive_record(pair.fds[1], received, got);
  ASSERT_TRUE(status) << status.error();
  ASSERT_EQ(got.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    std::uint64_t count = 0;
    ASSERT_EQ(::read(got[i], &count, sizeof count), static_cast<ssize_t>(sizeof count));
    EXPECT_EQ(count, i + 1) << "in the order sent";
    ::close(got[i]);
  }
  const int five[] = {first, first, first, first, first};
  EXPECT_FALSE(send_record(pair.fds[0], encode(valid_hello()), five));
  EXPECT_FALSE(send_record(pair.fds[0], encode(valid_hello()), std::span<const int>()));
  // One descriptor asked for, two came: the first is kept, the other closed.
  const auto open_descriptors = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"), std::filesystem::directory_iterator{});
  };
  ASSERT_TRUE(send_record(pair.fds[0], encode(valid_hello()), both));
  const auto before = open_descriptors();
  int one = -1;
  ASSERT_TRUE(receive_record(pair.fds[1], received, one));
  EXPECT_EQ(open_descriptors(), before + 1) << "the second closed";
  const std::uint64_t seven = 7;
  ASSERT_EQ(::write(one, &seven, sizeof seven), static_cast<ssize_t>(sizeof seven));
  std::uint64_t count = 0;
  ASSERT_EQ(::read(first, &count, sizeof count), static_cast<ssize_t>(sizeof count));
  EXPECT_EQ(count, 7u) << "the one kept is the first";
  ::close(one);
  ::close(first);
  ::close(second);
}

TEST(Records, AnOversizedRecordIsAnError) {
  SocketPair pair;
  std::vector<std::byte> huge(kMaxRecordBytes + 100, std::byte{1});
  ASSERT_TRUE(send_record(pair.fds[0], huge));
  std::vector<std::byte> received;
  Status status = receive_record(pair.fds[1], received);
  ASSERT_FALSE(status);
  EXPECT_NE(status.error().find("longer than"), std::string::npos) << status.error();
}

TEST(Records, PeerHangUpIsReported) {
  SocketPair pair;
  ::close(pair.fds[0]);
  pair.fds[0] = -1;
  std::vector<std::byte> received;
  Status status = receive_record(pair.fds[1], received);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error(), "peer closed");
  EXPECT_FALSE(send_record(pair.fds[1], encode(valid_hello())));  // EPIPE, and no SIGPIPE
}

}  // namespace
}  // namespace gpuqos::ipc

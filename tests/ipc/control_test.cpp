// Tests of the control records the gpuqos CLI exchanges with gpuqosd (registration.h).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gpuqos/ipc/registration.h"

namespace gpuqos::ipc {
namespace {

TEST(ControlRequest, RoundTrips) {
  const auto record = encode_control_request(ControlKind::status);
  EXPECT_EQ(record_kind(record), RecordKind::control_request);
  auto decoded = decode_control_request(record);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_TRUE(decoded->version_matches);
  EXPECT_EQ(decoded->request.kind, ControlKind::status);
}

TEST(ControlRequest, GarbageIsRejectedAndOtherMajorsAreRecognised) {
  auto record = encode_control_request(ControlKind::status);
  EXPECT_FALSE(decode_control_request(std::span(record).first(3)));
  EXPECT_FALSE(decode_control_request(std::span(record).first(sizeof(ControlRequest) - 1)));
  auto longer = record;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(decode_control_request(longer)) << "same minor version may not append bytes";
  auto hello = encode(make_hello(Priority::low, 0, "job").value());
  EXPECT_FALSE(decode_control_request(hello));

  ControlRequest other{kControlRequestMagic, kProtocolVersionMajor + 1, 0, ControlKind::status, 0};
  std::vector<std::byte> bytes(sizeof other);
  std::memcpy(bytes.data(), &other, sizeof other);
  auto decoded = decode_control_request(std::span(bytes).first(8));
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_FALSE(decoded->version_matches);
}

TEST(ControlReply, RoundTripsUpToItsLimit) {
  const std::string text(kMaxControlTextBytes, 'x');
  auto record = encode_control_reply(ControlStatus::ok, text);
  ASSERT_TRUE(record) << record.error();
  EXPECT_EQ(record->size(), kMaxControlRecordBytes);
  EXPECT_EQ(record_kind(record.value()), RecordKind::control_reply);
  auto decoded = decode_control_reply(record.value());
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->status, ControlStatus::ok);
  EXPECT_EQ(decoded->text, text);
  EXPECT_FALSE(encode_control_reply(ControlStatus::ok, text + "y"));
}

TEST(ControlReply, GarbageIsRejected) {
  auto record = encode_control_reply(ControlStatus::unknown_kind, "no such request").value();
  EXPECT_FALSE(decode_control_reply(std::span(record).first(10)));
  EXPECT_FALSE(decode_control_reply(std::span(record).first(record.size() - 1)));
  auto bad_status = record;
  bad_status[8] = std::byte{9};
  EXPECT_FALSE(decode_control_reply(bad_status));
}

TEST(ControlReply, ALargeRecordTravelsWithALargeBuffer) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
  auto record = encode_control_reply(ControlStatus::ok, std::string(40000, 'j')).value();
  ASSERT_TRUE(send_record(fds[0], record));
  std::vector<std::byte> received;
  Status status = receive_record(fds[1], received, kMaxControlRecordBytes);
  EXPECT_TRUE(status) << status.error();
  EXPECT_EQ(received, record);
  ASSERT_TRUE(send_record(fds[0], record));
  EXPECT_FALSE(receive_record(fds[1], received)) << "the default limit is kMaxRecordBytes";
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace gpuqos::ipc

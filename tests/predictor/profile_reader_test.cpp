// gpuqos profile records (JSON Lines): every record kind, and the message for each bad line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpuqos/predictor/measurements.h"

namespace gpuqos::predictor {
namespace {

using ::testing::HasSubstr;

const std::string kHeader = R"({"format":"gpuqos-profile","version":1,"gpu":"A100","pid":42})" "\n";

ReadReport read(const std::string& text, SampleSet& out) { return read_profile_text(text, "p.jsonl", ReadOptions{}, out); }

TEST(ProfileReader, ReadsKernelsCopiesAndMemsets) {
  SampleSet out;
  const ReadReport r = read(kHeader +
      R"({"kind":"kernel","name":"_Z4gemmPfiii","device":0,"grid":[8,4,1],"block":[256,1,1],"shared_bytes":1024,"args":[512,256,64],"start_ns":1000,"end_ns":51000,"extra":true})" "\n"
      R"({"kind":"kernel","name":"k","grid":[2],"block":[32,2],"start_ns":0,"end_ns":10})" "\n"
      "\n"
      R"({"kind":"copy","direction":"h2d","host_memory":"pageable","bytes":4096,"start_ns":5,"end_ns":2005})" "\n"
      R"({"kind":"copy","direction":"d2d","host_memory":"none","bytes":8,"start_ns":5,"end_ns":6})" "\n"
      R"({"kind":"memset","bytes":1048576,"start_ns":100,"end_ns":300})", out);
  EXPECT_FALSE(r.failed);
  EXPECT_EQ(r.skipped, 0u) << (r.messages.empty() ? "" : r.messages[0]);
  ASSERT_EQ(out.kernels.size(), 2u);
  ASSERT_EQ(out.copies.size(), 3u);
  const KernelSample& k = out.kernels[0];
  EXPECT_EQ(k.name, "_Z4gemmPfiii");
  EXPECT_EQ(k.shape.grid, (std::array<std::uint32_t, 3>{8, 4, 1}));
  EXPECT_EQ(k.shape.shared_bytes, 1024u);
  EXPECT_EQ(k.shape.arg_count, 3);
  EXPECT_EQ(k.shape.args[2], 64u);
  EXPECT_EQ(k.duration_ns, 50'000);
  EXPECT_EQ(out.kernels[1].shape.block, (std::array<std::uint32_t, 3>{32, 2, 1}));
  EXPECT_EQ(out.copies[0].copy.direction, CopyDirection::h2d);
  EXPECT_EQ(out.copies[0].copy.host_memory, HostMemory::pageable);
  EXPECT_EQ(out.copies[0].duration_ns, 2000);
  EXPECT_EQ(out.copies[2].copy.direction, CopyDirection::memset);
  EXPECT_EQ(out.copies[2].copy.bytes, 1048576u);
}

TEST(ProfileReader, EachBadLineIsSkippedWithItsNumberAndReason) {
  SampleSet out;
  const ReadReport r = read(kHeader +
      "{not json\n"                                                                                      // 2
      R"({"kind":"launch","start_ns":0,"end_ns":1})" "\n"                                                  // 3
      R"({"kind":"kernel","name":"k","block":[1,1,1],"start_ns":0,"end_ns":1})" "\n"                        // 4
      R"({"kind":"kernel","name":"k","grid":[0,1,1],"block":[1,1,1],"start_ns":0,"end_ns":1})" "\n"         // 5
      R"({"kind":"kernel","name":"k","grid":[1],"block":[1],"start_ns":10,"end_ns":9})" "\n"                // 6
      R"({"kind":"kernel","name":"k","grid":[1],"block":[1],"args":[1,2,3,4,5,6,7,8,9],"start_ns":0,"end_ns":1})" "\n"  // 7
      R"({"kind":"kernel","name":"k","grid":[1],"block":[1],"shared_bytes":-4,"start_ns":0,"end_ns":1})" "\n"  // 8
      R"({"kind":"copy","direction":"sideways","bytes":4,"start_ns":0,"end_ns":1})" "\n"                    // 9
      R"({"kind":"memset","bytes":4,"start_ns":"0","end_ns":1})" "\n"                                       // 10
      R"({"kind":"kernel","name":"","grid":[1],"block":[1],"start_ns":0,"end_ns":1})" "\n"                  // 11
      "[1,2]\n"                                                                                             // 12
      R"({"kind":"kernel","name":"k","grid":[1],"block":[1],"start_ns":0,"end_ns":9000000000000000000})" "\n"  // 13
      R"({"kind":"copy","direction":"h2d","bytes":4,"start_ns":0,"end_ns":1})" "\n", out);                  // 14: good
  EXPECT_FALSE(r.failed);
  EXPECT_EQ(r.copies, 1u);
  EXPECT_EQ(r.skipped, 12u);
  ASSERT_EQ(r.messages.size(), 12u);
  EXPECT_THAT(r.messages[0], HasSubstr("p.jsonl:2: not valid JSON"));
  EXPECT_THAT(r.messages[1], HasSubstr("p.jsonl:3: launch: unknown \"kind\" \"launch\""));
  EXPECT_THAT(r.messages[2], HasSubstr("p.jsonl:4: kernel: no \"grid\""));
  EXPECT_THAT(r.messages[3], HasSubstr("p.jsonl:5: kernel: \"grid\"[0] must be a positive 32-bit integer, got 0"));
  EXPECT_THAT(r.messages[4], HasSubstr("p.jsonl:6: kernel: end_ns (9) is not after start_ns (10)"));
  EXPECT_THAT(r.messages[5], HasSubstr("p.jsonl:7: kernel: \"args\" must be an array of at most 8"));
  EXPECT_THAT(r.messages[6], HasSubstr("p.jsonl:8: kernel: \"shared_bytes\" must be an integer in [0, 4294967295], got -4"));
  EXPECT_THAT(r.messages[7], HasSubstr("p.jsonl:9: copy: \"direction\" must be \"h2d\"|\"d2h\"|\"d2d\", got \"sideways\""));
  EXPECT_THAT(r.messages[8], HasSubstr("p.jsonl:10: memset: \"start_ns\" and \"end_ns\" must be integers of at least 0"));
  EXPECT_THAT(r.messages[9], HasSubstr("p.jsonl:11: kernel: \"name\" must be a non-empty string"));
  EXPECT_THAT(r.messages[10], HasSubstr("p.jsonl:12: not a JSON object"));
  EXPECT_THAT(r.messages[11], HasSubstr("p.jsonl:13: kernel: end_ns - start_ns (9000000000000000000 ns) is longer than an hour"));
  EXPECT_EQ(out.copies[0].copy.host_memory, HostMemory::none);  // host_memory may be left out
}

// A value nested 200,000 deep in a line: named by its kind, where dump() recursed once a level and
// crashed gpuqos train and eval (an audit).
TEST(ProfileReader, ADeeplyNestedValueIsNamedNotPrinted) {
  SampleSet out;
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  const ReadReport r = read(kHeader + R"({"kind":)" + deep + "}\n" +
                                R"({"kind":"copy","direction":"h2d","bytes":4,"start_ns":0,"end_ns":1})" "\n", out);
  EXPECT_EQ(r.copies, 1u);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_THAT(r.messages[0], HasSubstr("p.jsonl:2: unknown \"kind\" an array of 1"));
}

// A user test: training on a profile of the benchmark printed 20 lines of "end_ns (X) is not after
// start_ns (X)" and "... and 1852 more", where a Kineto trace's same ops get one line. An op that
// took no time by the clock is counted in one line, ahead of the file's real problems.
TEST(ProfileReader, OpsOfZeroDurationAreCountedInOneLine) {
  SampleSet out;
  std::string text = kHeader + "{not json\n";
  for (int i = 0; i < 30; ++i) text += R"({"kind":"memset","bytes":4,"start_ns":7,"end_ns":7})" "\n";
  text += R"({"kind":"memset","bytes":4,"start_ns":7,"end_ns":8})" "\n";
  const ReadReport r = read(text, out);
  EXPECT_EQ(r.copies, 1u);
  EXPECT_EQ(r.skipped, 31u);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_THAT(r.messages[0], HasSubstr("p.jsonl: 30 ops with a zero duration (below the clock's resolution) skipped"));
  EXPECT_THAT(r.messages[1], HasSubstr("p.jsonl:2: not valid JSON"));
  EXPECT_EQ(r.unlisted, 0u);
}

// Timestamps are CUPTI's unsigned nanoseconds: one of 2^63 or more is a timestamp, not a negative
// number (it was read as one, and the record refused with "end_ns (-2)"); a negative one is refused.
TEST(ProfileReader, TimestampsAreUnsigned64Bit) {
  SampleSet out;
  const ReadReport r = read(kHeader +
      R"({"kind":"memset","bytes":4,"start_ns":18446744073709551000,"end_ns":18446744073709551614})" "\n"
      R"({"kind":"memset","bytes":4,"start_ns":1,"end_ns":18446744073709551614})" "\n"
      R"({"kind":"memset","bytes":4,"start_ns":-5,"end_ns":1})" "\n", out);
  EXPECT_EQ(r.copies, 1u);
  ASSERT_EQ(out.copies.size(), 1u);
  EXPECT_DOUBLE_EQ(out.copies[0].duration_ns, 614.0);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_THAT(r.messages[0], HasSubstr("p.jsonl:3: memset: end_ns - start_ns (18446744073709551613 ns) is longer than an hour"))
      << "read as unsigned, and then too long to be one op";
  EXPECT_THAT(r.messages[1], HasSubstr("p.jsonl:4: memset: \"start_ns\" and \"end_ns\" must be integers of at least 0"));
}

TEST(ProfileReader, HeaderIsRequiredAndVersioned) {
  SampleSet out;
  ReadReport r = read(R"({"kind":"memset","bytes":4,"start_ns":0,"end_ns":1})" "\n", out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("p.jsonl:1: not a gpuqos profile"));
  r = read(R"({"format":"gpuqos-profile","version":2})" "\n", out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("p.jsonl:1: unsupported gpuqos-profile version 2"));
  r = read("", out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("empty file"));
  EXPECT_TRUE(out.kernels.empty() && out.copies.empty());
}

}  // namespace
}  // namespace gpuqos::predictor

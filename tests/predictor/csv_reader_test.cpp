// Tables of measured kernels: good rows, and a message naming file and line for every bad one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpuqos/predictor/measurements.h"

namespace gpuqos::predictor {
namespace {

using ::testing::HasSubstr;

const char* kHeader = "OPName,Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z,Kernels,B,M,N,K\n";

ReadReport read(const std::string& text, SampleSet& out, std::vector<std::string> args = {"B", "M", "N", "K"}) {
  return read_csv_text(text, "t.csv", ReadOptions{std::move(args)}, out);
}

TEST(CsvReader, ReadsRowsWithQuotedFieldsAndArgs) {
  SampleSet out;
  const std::string text = std::string(kHeader) +
                           "bmm,0.5,ampere_sgemm_128x128_nn,4,1,6,256,1,1,;ampere_sgemm_128x128_nn,6,27,21,390\r\n"
                           "linear,1.25,\"void k<32, 16>(float*, \"\"x\"\")\",3,4,1,128,1,1,\"a,b\",1,126,115,72\n\n";
  const ReadReport r = read(text, out);
  EXPECT_FALSE(r.failed);
  EXPECT_EQ(r.kernels, 2u);
  EXPECT_EQ(r.skipped, 0u);
  ASSERT_EQ(out.kernels.size(), 2u);
  EXPECT_EQ(out.kernels[0].name, "ampere_sgemm_128x128_nn");
  EXPECT_DOUBLE_EQ(out.kernels[0].duration_ns, 500'000);  // Latency is in ms
  EXPECT_EQ(out.kernels[0].shape.grid, (std::array<std::uint32_t, 3>{4, 1, 6}));
  EXPECT_EQ(out.kernels[0].shape.arg_count, 4);
  EXPECT_EQ(out.kernels[0].shape.args[3], 390u);
  EXPECT_EQ(out.kernels[1].name, "void k<32, 16>(float*, \"x\")");
  EXPECT_EQ(out.kernels[1].shape.args[1], 126u);
}

TEST(CsvReader, WithoutArgsTheKernelsHaveNone) {
  SampleSet out;
  read(std::string(kHeader) + "bmm,0.5,k,4,1,6,256,1,1,x,6,27,21,390\n", out, {});
  ASSERT_EQ(out.kernels.size(), 1u);
  EXPECT_EQ(out.kernels[0].shape.arg_count, 0);
}

TEST(CsvReader, EachBadRowIsSkippedWithItsReason) {
  SampleSet out;
  const std::string text = std::string(kHeader) +
                           "a,0.5,k,4,1,6,256,1,1,x,6,27,21,390\n"      // line 2: good
                           "a,abc,k,4,1,6,256,1,1,x,6,27,21,390\n"      // 3
                           "a,nan,k,4,1,6,256,1,1,x,6,27,21,390\n"      // 4
                           "a,-1,k,4,1,6,256,1,1,x,6,27,21,390\n"       // 5
                           "a,0.5,k,0,1,6,256,1,1,x,6,27,21,390\n"      // 6
                           "a,0.5,k,4,1,6,256,1,1,x,6,27,21\n"          // 7
                           "a,0.5,,4,1,6,256,1,1,x,6,27,21,390\n"       // 8
                           "a,0.5,k,4,1,6,256,1,1,x,6,-27,21,390\n"     // 9
                           "a,0.5,k,4,1,6,256,1.5,1,x,6,27,21,390\n"    // 10
                           "a,1e308,k,4,1,6,256,1,1,x,6,27,21,390\n"    // 11: infinite once in ns
                           "a,1e-300,k,4,1,6,256,1,1,x,6,27,21,390\n"  // 12: under a nanosecond
                           "a,0.5,\"k,4,1,6,256,1,1,x,6,27,21,390\n";   // 13: never closed
  const ReadReport r = read(text, out);
  EXPECT_FALSE(r.failed);
  EXPECT_EQ(r.kernels, 1u);
  EXPECT_EQ(r.skipped, 11u);
  ASSERT_EQ(r.messages.size(), 11u);
  EXPECT_THAT(r.messages[0], HasSubstr("t.csv:3: column 'Latency': 'abc' is not a number"));
  EXPECT_THAT(r.messages[1], HasSubstr("t.csv:4: column 'Latency': duration must be a positive finite number of ms, got 'nan'"));
  EXPECT_THAT(r.messages[2], HasSubstr("t.csv:5: column 'Latency': duration must be a positive finite"));
  EXPECT_THAT(r.messages[3], HasSubstr("t.csv:6: column 'Grid x': '0' is not a positive integer"));
  EXPECT_THAT(r.messages[4], HasSubstr("t.csv:7: expected 14 fields, found 13"));
  EXPECT_THAT(r.messages[5], HasSubstr("t.csv:8: column 'Kernel Name' is empty"));
  EXPECT_THAT(r.messages[6], HasSubstr("t.csv:9: column 'M': '-27' is not a non-negative integer"));
  EXPECT_THAT(r.messages[7], HasSubstr("t.csv:10: column 'Block y': '1.5' is not a positive integer"));
  EXPECT_THAT(r.messages[8], HasSubstr("t.csv:11: column 'Latency': 1e308 ms is longer than an hour"));
  EXPECT_THAT(r.messages[9], HasSubstr("t.csv:12: column 'Latency': 1e-300 ms is shorter than a nanosecond"));
  EXPECT_THAT(r.messages[10], HasSubstr("t.csv:13: unterminated quoted field"));
}

// Named as the shim names kernels to gpuqosd, so a model trained from another tool's table is
// found: bytes outside printable ASCII escaped. A Latin-1 name (not UTF-8) aborted eval --json.
TEST(CsvReader, KernelNamesAreEscapedAsTheShimSendsThem) {
  SampleSet out;
  const ReadReport r = read(std::string(kHeader) + "a,0.5,caf\xe9_k\xd1\x8f,4,1,6,256,1,1,x,6,27,21,390\n", out);
  EXPECT_EQ(r.kernels, 1u);
  ASSERT_EQ(out.kernels.size(), 1u);
  EXPECT_EQ(out.kernels[0].name, "caf\\xe9_k\\xd1\\x8f");
}

TEST(CsvReader, MessagesAreBoundedButEveryRowCounted) {
  SampleSet out;
  std::string text = kHeader;
  for (int i = 0; i < 100; ++i) text += "a,bad,k,4,1,6,256,1,1,x,6,27,21,390\n";
  const ReadReport r = read_csv_text(text, "t.csv", ReadOptions{{}, 5}, out);
  EXPECT_EQ(r.skipped, 100u);
  EXPECT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.unlisted, 95u);
}

TEST(CsvReader, MissingColumnsFailTheFile) {
  SampleSet out;
  ReadReport r = read("Latency,Kernel Name,Grid x\n0.5,k,1\n", out, {});
  EXPECT_TRUE(r.failed);
  ASSERT_FALSE(r.messages.empty());
  EXPECT_THAT(r.messages[0], HasSubstr("t.csv:1: missing column 'Grid y', 'Grid z', 'Block x', 'Block y', 'Block z'"));
  r = read(std::string(kHeader), out, {"B", "Q"});
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("missing column 'Q'"));
  r = read("", out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("t.csv: empty CSV file"));
  EXPECT_TRUE(out.kernels.empty());
}

}  // namespace
}  // namespace gpuqos::predictor

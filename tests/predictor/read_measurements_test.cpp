// Format detection, gzip input, Kineto traces through the replayer's converter, unreadable files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <zlib.h>

#include "gpuqos/predictor/measurements.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::predictor {
namespace {

using ::testing::HasSubstr;

const char* kTrace = R"J({"traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "k1", "ts": 10, "dur": 2.5, "args": {"grid": [4, 2, 1], "block": [128, 1, 1], "shared memory": 512}},
  {"ph": "X", "cat": "Kernel", "name": "k1", "ts": 20, "dur": 0},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 30, "dur": 4, "args": {"bytes": 65536}},
  {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoD (Device -> Device) 1 MB", "ts": 40, "dur": 3},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 50, "dur": 1, "args": {"bytes": 4096}}
]})J";

std::string gzip(const std::string& text) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, uLong(text.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = uInt(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(DetectFormat, ByContentThenExtension) {
  EXPECT_EQ(detect_format("{\"format\":\"gpuqos-profile\",\"version\":1}\n{}", "x.json"), InputFormat::profile);
  EXPECT_EQ(detect_format(kTrace, "x.txt"), InputFormat::kineto);
  EXPECT_EQ(detect_format("  [ ]", "x"), InputFormat::kineto);
  EXPECT_EQ(detect_format("a,b\n1,2\n", "x.dat"), InputFormat::csv);
  EXPECT_EQ(detect_format("anything", "x.CSV"), InputFormat::csv);
  EXPECT_EQ(detect_format("hello world", "x.txt"), std::nullopt);
}

TEST(ReadMeasurements, KinetoTraceGzippedOrNot) {
  const testing::TempDir dir;
  for (const auto& path : {dir.write("t.json", kTrace), dir.write("t.json.gz", gzip(kTrace))}) {
    SampleSet out;
    const ReadReport r = read_measurements(path, ReadOptions{}, out);
    ASSERT_FALSE(r.failed) << r.messages[0];
    EXPECT_EQ(r.format, InputFormat::kineto);
    ASSERT_EQ(out.kernels.size(), 1u);
    EXPECT_EQ(out.kernels[0].name, "k1");
    EXPECT_EQ(out.kernels[0].duration_ns, 2500);
    EXPECT_EQ(out.kernels[0].shape.grid[1], 2u);
    EXPECT_EQ(out.kernels[0].shape.shared_bytes, 512u);
    ASSERT_EQ(out.copies.size(), 3u);
    EXPECT_EQ(out.copies[0].copy.direction, CopyDirection::h2d);
    EXPECT_EQ(out.copies[0].copy.host_memory, HostMemory::pinned);
    EXPECT_EQ(out.copies[1].copy.direction, CopyDirection::d2d);
    EXPECT_EQ(out.copies[1].copy.bytes, 1'000'000u);
    EXPECT_EQ(out.copies[2].copy.direction, CopyDirection::memset);
    EXPECT_EQ(r.skipped, 1u);  // the zero-duration kernel
    ASSERT_EQ(r.messages.size(), 1u);
    EXPECT_THAT(r.messages[0], HasSubstr("1 GPU ops with a zero duration"));
  }
}

// A kernel event without a name was learned under "", and gpuqosd refused the whole store that
// `gpuqos train` then wrote (a review). It is skipped and counted.
TEST(ReadMeasurements, AKinetoKernelWithoutANameIsSkippedAndCounted) {
  const testing::TempDir dir;
  SampleSet out;
  const auto path = dir.write("unnamed.json", R"({"traceEvents": [
    {"ph": "X", "cat": "kernel", "ts": 1, "dur": 5, "args": {"grid": [1, 1, 1], "block": [32, 1, 1]}},
    {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5}]})");
  const ReadReport r = read_measurements(path, ReadOptions{}, out);
  ASSERT_FALSE(r.failed) << r.messages[0];
  ASSERT_EQ(out.kernels.size(), 1u);
  EXPECT_EQ(out.kernels[0].name, "k");
  EXPECT_EQ(r.skipped, 1u);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_THAT(r.messages[0], HasSubstr("1 GPU ops that are kernels without a name skipped"));
}

TEST(ReadMeasurements, MalformedTraceFailsNamingFileAndEvent) {
  const testing::TempDir dir;
  SampleSet out;
  const auto bad_grid = dir.write("bad.json", R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1,
      "args": {"grid": [0, 1, 1]}}]})");
  ReadReport r = read_measurements(bad_grid, ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("bad.json: traceEvents[0]"));
  EXPECT_THAT(r.messages[0], HasSubstr("args.grid[0] is not a positive integer"));
  r = read_measurements(dir.write("trunc.json", std::string(kTrace).substr(0, 100)), ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("trunc.json: not JSON"));
  EXPECT_TRUE(out.kernels.empty());
}

TEST(ReadMeasurements, UnreadableOrUnknownFiles) {
  const testing::TempDir dir;
  SampleSet out;
  ReadReport r = read_measurements(dir.path() / "absent.csv", ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("absent.csv"));
  r = read_measurements(dir.write("notes.txt", "just some words"), ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("notes.txt: unknown format"));
  r = read_measurements(dir.write("bad.gz", std::string("\x1f\x8b\x08\x00garbage", 11)), ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("bad.gz"));
  // A store given as measurements (it failed as a CSV table: "missing column 'Kernel Name'").
  r = read_measurements(dir.write("m.gqp", std::string("GPUQOSPF\x01\x00,,\n", 12)), ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("m.gqp: a gpuqos predictor store (what gpuqos train writes), not measurements"));
  // An empty file, and random bytes with a comma (they read as a CSV table without its columns).
  r = read_measurements(dir.write("empty.csv", " \n"), ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("empty.csv: empty: no measurements in it"));
  std::string noise(2000, '\0');
  std::mt19937 random(11);
  for (char& c : noise) c = static_cast<char>(random());
  noise[5] = ',';
  r = read_measurements(dir.write("noise.csv", noise), ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("noise.csv: binary data: not a gpuqos profile"));
  // A config file whose first line has a comma (a user test: only "missing column 'Kernel Name'").
  r = read_measurements(dir.write("gpuqos.toml", "# gpuqosd, as the demo runs it\n[daemon]\n"), ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("gpuqos.toml:1: missing column"));
  EXPECT_THAT(r.messages[0], HasSubstr("(read as a CSV table because its first line has a comma;"));
  // A profile whose header line was cut off (a user test: a JSON parser's error at line 2).
  r = read_measurements(dir.write("cut.jsonl", "{\"kind\":\"memset\",\"bytes\":4,\"start_ns\":1,\"end_ns\":2}\n"
                                               "{\"kind\":\"memset\",\"bytes\":4,\"start_ns\":3,\"end_ns\":5}\n"),
                        ReadOptions{}, out);
  EXPECT_TRUE(r.failed);
  EXPECT_THAT(r.messages[0], HasSubstr("cut.jsonl:1: JSON Lines, but line 1 is not a gpuqos profile's header"));
  // One that cannot be opened says why (root opens any file: a missing one stands in).
  r = read_measurements(dir.path() / "absent.jsonl", ReadOptions{}, out);
  EXPECT_THAT(r.messages[0], HasSubstr("absent.jsonl: cannot open for reading (No such file or directory)"));
}

}  // namespace
}  // namespace gpuqos::predictor

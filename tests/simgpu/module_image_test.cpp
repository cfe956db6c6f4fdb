// Tests parse_module_image on nvcc-built PTX, cubin and fatbinary fixtures and on hostile input.
#include "gpuqos/simgpu/module_image.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace gpuqos::simgpu {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes read_fixture(const std::string& name) {
  const std::string path = std::string(GPUQOS_SOURCE_DIR) + "/tests/simgpu/data/" + name;
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << path;
  return Bytes(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

ModuleImageResult parse(const Bytes& bytes) { return parse_module_image(bytes.data(), bytes.size()); }

ModuleImageResult parse_text(const std::string& text) { return parse_module_image(text.c_str(), 0); }

const KernelEntry* find_kernel(const ModuleImage& image, const std::string& name) {
  for (const KernelEntry& kernel : image.kernels) {
    if (kernel.name == name) return &kernel;
  }
  return nullptr;
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> layout(const KernelEntry& kernel) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> offsets_and_sizes;
  for (const KernelParam& param : kernel.params) offsets_and_sizes.emplace_back(param.offset, param.size);
  return offsets_and_sizes;
}

using Layout = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// What kernels.cu declares: (float*, int, double); (char, 24-byte struct, float*); ().
void expect_fixture_kernels(const ModuleImageResult& result) {
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.image.kernels.size(), 3u);
  const KernelEntry* scale = find_kernel(result.image, "scale");
  const KernelEntry* with_struct = find_kernel(result.image, "_Z11with_structc6TriplePf");
  const KernelEntry* no_params = find_kernel(result.image, "no_params");
  ASSERT_NE(scale, nullptr);
  ASSERT_NE(with_struct, nullptr);
  ASSERT_NE(no_params, nullptr);
  EXPECT_TRUE(scale->params_known);
  EXPECT_EQ(layout(*scale), (Layout{{0, 8}, {8, 4}, {16, 8}}));
  EXPECT_TRUE(with_struct->params_known);
  EXPECT_EQ(layout(*with_struct), (Layout{{0, 1}, {8, 24}, {32, 8}}));
  EXPECT_TRUE(no_params->params_known);
  EXPECT_TRUE(no_params->params.empty());
  EXPECT_EQ(find_kernel(result.image, "_Z6helperf"), nullptr);  // a .func, not a kernel
}

TEST(ModuleImage, PtxFixture) {
  Bytes ptx = read_fixture("kernels.ptx");
  const ModuleImageResult sized = parse(ptx);
  EXPECT_EQ(sized.image.format, ModuleImage::Format::ptx);
  expect_fixture_kernels(sized);
  ptx.push_back(0);  // cuModuleLoadData's contract: NUL-terminated, no length
  expect_fixture_kernels(parse_module_image(ptx.data(), 0));
}

TEST(ModuleImage, CubinFixture) {
  const Bytes cubin = read_fixture("kernels.cubin");
  const ModuleImageResult sized = parse(cubin);
  EXPECT_EQ(sized.image.format, ModuleImage::Format::elf);
  expect_fixture_kernels(sized);
  expect_fixture_kernels(parse_module_image(cubin.data(), 0));  // extent from the ELF headers
}

TEST(ModuleImage, FatbinFixtureUsesTheCubin) {
  const Bytes fatbin = read_fixture("kernels.fatbin");
  const ModuleImageResult sized = parse(fatbin);
  EXPECT_EQ(sized.image.format, ModuleImage::Format::fatbin);
  expect_fixture_kernels(sized);
  expect_fixture_kernels(parse_module_image(fatbin.data(), 0));
}

void expect_rejected(const ModuleImageResult& result, const std::string& reason_part) {
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find(reason_part), std::string::npos) << result.error;
}

// Offsets of the entries of a fatbinary: header bytes at 6, fat bytes at 8; each entry has its
// header bytes at +4 and payload bytes at +8.
std::vector<std::size_t> fatbin_entry_offsets(const Bytes& fatbin) {
  std::uint16_t header_bytes = 0;
  std::uint64_t fat_bytes = 0;
  std::memcpy(&header_bytes, &fatbin[6], 2);
  std::memcpy(&fat_bytes, &fatbin[8], 8);
  std::vector<std::size_t> offsets;
  for (std::size_t at = header_bytes; at < header_bytes + fat_bytes;) {
    offsets.push_back(at);
    std::uint32_t entry_bytes = 0;
    std::uint64_t payload_bytes = 0;
    std::memcpy(&entry_bytes, &fatbin[at + 4], 4);
    std::memcpy(&payload_bytes, &fatbin[at + 8], 8);
    at += entry_bytes + payload_bytes;
  }
  return offsets;
}

TEST(ModuleImage, FatbinUsesEitherEntry) {
  Bytes fatbin = read_fixture("kernels.fatbin");
  const std::vector<std::size_t> entries = fatbin_entry_offsets(fatbin);
  ASSERT_EQ(entries.size(), 2u);
  ASSERT_EQ(fatbin[entries[0]], 1);       // PTX
  ASSERT_EQ(fatbin[entries[1]], 2);       // cubin
  fatbin[entries[0]] = 0x40;              // an entry kind the parser does not use
  expect_fixture_kernels(parse(fatbin));  // so the cubin alone is enough
  fatbin[entries[0]] = 1;
  fatbin[entries[1]] = 0x40;
  expect_fixture_kernels(parse(fatbin));  // and the PTX alone is enough
  fatbin[entries[0]] = 0x40;
  expect_rejected(parse(fatbin), "no PTX or cubin entry");
  fatbin[entries[0]] = 1;

  fatbin[entries[1]] = 2;
  fatbin[entries[1] + 0x29] |= 0x80;  // flag the cubin as zstd-compressed
  expect_fixture_kernels(parse(fatbin));
}

TEST(ModuleImage, FatbinWithOnlyCompressedEntriesIsRejected) {
  const ModuleImageResult result = parse(read_fixture("kernels_compressed.fatbin"));
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("only compressed entries"), std::string::npos) << result.error;
}

TEST(ModuleImage, FatbinWrapperIsFollowedInMemoryOnly) {
  const Bytes fatbin = read_fixture("kernels.fatbin");
  struct Wrapper {
    std::uint32_t magic;
    std::uint32_t version;
    const void* data;
    const void* unused;
  };
  const Wrapper wrapper{0x466243B1, 1, fatbin.data(), nullptr};
  const ModuleImageResult result = parse_module_image(&wrapper, 0);
  EXPECT_EQ(result.image.format, ModuleImage::Format::fatbin);
  expect_fixture_kernels(result);

  EXPECT_FALSE(parse_module_image(&wrapper, sizeof(wrapper)).ok);
  const Wrapper null_wrapper{0x466243B1, 1, nullptr, nullptr};
  EXPECT_FALSE(parse_module_image(&null_wrapper, 0).ok);
}

TEST(ModuleImage, FormatsAgreeOnNamesAndLayouts) {
  const ModuleImageResult ptx = parse(read_fixture("kernels.ptx"));
  const ModuleImageResult cubin = parse(read_fixture("kernels.cubin"));
  ASSERT_TRUE(ptx.ok && cubin.ok);
  ASSERT_EQ(ptx.image.kernels.size(), cubin.image.kernels.size());
  for (const KernelEntry& from_ptx : ptx.image.kernels) {
    const KernelEntry* from_cubin = find_kernel(cubin.image, from_ptx.name);
    ASSERT_NE(from_cubin, nullptr) << from_ptx.name;
    EXPECT_EQ(layout(from_ptx), layout(*from_cubin)) << from_ptx.name;
  }
}

TEST(ModuleImage, RdcDeviceFunctionIsNotAKernel) {
  const ModuleImageResult result = parse(read_fixture("device_fn_rdc.cubin"));
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.image.kernels.size(), 1u);
  EXPECT_EQ(result.image.kernels[0].name, "k");
  EXPECT_EQ(layout(result.image.kernels[0]), (Layout{{0, 8}}));
}

TEST(ModuleImage, PtxDirectivesCommentsAndAlignment) {
  const ModuleImageResult result = parse_text(R"(
    .version 8.0
    .target sm_80
    // .entry commented_out(.param .u32 a)
    /* .entry also_commented_out(
       .param .u32 a) */
    .file 1 "odd // path.cu"
    .func (.param .b32 ret) not_a_kernel(.param .b32 x) { ret; }
    .extern .entry declared_twice(.param .u32 a);
    .weak .entry declared_twice(.param .u32 a) { ret; }
    .visible .entry mixed(
      .param .u8 c,
      .param .f32 f,
      .param .u64 .ptr .global .align 16 p,
      .param .align 16 .b8 s [2][3],
      .param .v2 .f32 v,
      .param .u16 h
    ) .maxntid 128, 1, 1
    { ret; }
    .entry bare .maxntid 64 { ret; }
    .entry unsized(.param .u32 n, .param .b8 blob[])
    { ret; }
  )");
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.image.kernels.size(), 4u);
  EXPECT_EQ(result.image.kernels[0].name, "declared_twice");
  EXPECT_EQ(layout(result.image.kernels[0]), (Layout{{0, 4}}));
  const KernelEntry& mixed = result.image.kernels[1];
  EXPECT_EQ(mixed.name, "mixed");
  EXPECT_TRUE(mixed.params_known);
  EXPECT_EQ(layout(mixed), (Layout{{0, 1}, {4, 4}, {8, 8}, {16, 6}, {24, 8}, {32, 2}}));
  EXPECT_EQ(result.image.kernels[2].name, "bare");
  EXPECT_TRUE(result.image.kernels[2].params_known);
  EXPECT_TRUE(result.image.kernels[2].params.empty());
  EXPECT_EQ(result.image.kernels[3].name, "unsized");
  EXPECT_FALSE(result.image.kernels[3].params_known);
  EXPECT_TRUE(result.image.kernels[3].params.empty());
}

TEST(ModuleImage, PtxWithoutKernelsIsAnEmptyModule) {
  const ModuleImageResult result = parse_text(".version 8.0\n.target sm_80\n.func f() { ret; }\n");
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_TRUE(result.image.kernels.empty());
}

TEST(ModuleImage, GarbageIsRejectedWithReasons) {
  expect_rejected(parse_text(""), "empty");
  expect_rejected(parse_module_image(nullptr, 0), "null");
  expect_rejected(parse_text("hello world"), ".version");
  expect_rejected(parse(Bytes{0x01, 0x02, 0x03, 0x00, 0x10}), "not PTX text");
  expect_rejected(parse_text(".version 8.0\n.entry (.param .u32 a)"), "without a kernel name");

  const Bytes cubin = read_fixture("kernels.cubin");
  expect_rejected(parse(Bytes(cubin.begin(), cubin.begin() + 40)), "truncated header");
  expect_rejected(parse(Bytes(cubin.begin(), cubin.begin() + 4000)), "overruns");
  Bytes elf32 = cubin;
  elf32[4] = 1;
  expect_rejected(parse(elf32), "64-bit");
  Bytes x86 = cubin;
  x86[18] = 62;
  expect_rejected(parse(x86), "EM_CUDA");

  const Bytes fatbin = read_fixture("kernels.fatbin");
  expect_rejected(parse(Bytes(fatbin.begin(), fatbin.begin() + 12)), "truncated header");
  expect_rejected(parse(Bytes(fatbin.begin(), fatbin.end() - 1)), "overruns");
  Bytes bad_entry = fatbin;
  bad_entry[16 + 4] = 8;  // entry header smaller than its fixed fields
  expect_rejected(parse(bad_entry), "entry 0");
}

TEST(ModuleImage, BrokenKparamInfoLeavesParamsUnknown) {
  Bytes cubin = read_fixture("kernels.cubin");
  // Make the second KPARAM_INFO ordinal of some kernel collide with the first.
  const std::uint8_t record[] = {0x04, 0x17, 0x0c, 0x00};
  const auto first = std::search(cubin.begin(), cubin.end(), std::begin(record), std::end(record));
  ASSERT_NE(first, cubin.end());
  const auto second = std::search(first + 1, cubin.end(), std::begin(record), std::end(record));
  ASSERT_NE(second, cubin.end());
  std::copy(first + 8, first + 10, second + 8);  // same ordinal
  const ModuleImageResult result = parse(cubin);
  ASSERT_TRUE(result.ok) << result.error;
  int unknown = 0;
  for (const KernelEntry& kernel : result.image.kernels) {
    if (!kernel.params_known) {
      ++unknown;
      EXPECT_TRUE(kernel.params.empty());
    }
  }
  EXPECT_EQ(unknown, 1);
}

// nvcc 13 writes attribute 0x45 with a plain byte size instead of 0x17 when a parameter is
// larger than 16383 bytes (seen with a 20000-byte struct; too big a fixture to commit), so the
// fixture's records are rewritten into that form here.
TEST(ModuleImage, LargeParamKparamInfoForm) {
  Bytes cubin = read_fixture("kernels.cubin");
  const std::uint8_t record[] = {0x04, 0x17, 0x0c, 0x00};
  int rewritten = 0;
  for (auto at = cubin.begin();; at += 4) {
    at = std::search(at, cubin.end(), std::begin(record), std::end(record));
    if (at == cubin.end()) break;
    std::uint32_t word = 0;
    std::memcpy(&word, &*(at + 12), 4);
    word >>= 18;
    std::memcpy(&*(at + 12), &word, 4);
    at[1] = 0x45;
    ++rewritten;
  }
  EXPECT_EQ(rewritten, 6);
  expect_fixture_kernels(parse(cubin));
}

// Every prefix and thousands of random corruptions of every fixture: the parser must return
// (ok or not) without reading outside the buffer. Run under ASan or valgrind to see reads.
TEST(ModuleImage, SurvivesTruncationAndBitFlips) {
  std::mt19937 random(12345);
  for (const char* name : {"kernels.ptx", "kernels.cubin", "kernels.fatbin", "kernels_compressed.fatbin",
                           "device_fn_rdc.cubin"}) {
    const Bytes original = read_fixture(name);
    for (std::size_t length = 0; length <= original.size(); ++length) {
      // A fresh copy of exactly `length` bytes, so any over-read leaves the allocation.
      const Bytes prefix(original.begin(), original.begin() + static_cast<std::ptrdiff_t>(length));
      const ModuleImageResult result = parse_module_image(prefix.data(), prefix.size());
      EXPECT_TRUE(result.ok || !result.error.empty()) << name << " length " << length;
    }
    for (int round = 0; round < 3000; ++round) {
      Bytes mutated = original;
      const int flips = 1 + static_cast<int>(random() % 8);
      for (int i = 0; i < flips; ++i) {
        // Half the flips land in the first 256 bytes, where the headers are.
        const std::size_t span =
            (random() % 2 == 0) ? std::min<std::size_t>(256, mutated.size()) : mutated.size();
        mutated[random() % span] ^= static_cast<std::uint8_t>(1u << (random() % 8));
      }
      const ModuleImageResult result = parse(mutated);
      EXPECT_TRUE(result.ok || !result.error.empty()) << name << " round " << round;
    }
  }
}

}  // namespace
}  // namespace gpuqos::simgpu

// CUDA_VISIBLE_DEVICES as the CUDA driver reads it (simgpu's libcuda.so.1 honours it, so the
// product's per-process device numbering is exercised as on a real node).
#include "gpuqos/simgpu/visible_devices.h"

#include <gtest/gtest.h>

namespace gpuqos::simgpu {
namespace {

using Uuid = std::array<std::uint8_t, 16>;

std::vector<Uuid> three_devices() {
  std::vector<Uuid> uuids(3);
  for (std::size_t d = 0; d < uuids.size(); ++d) {
    for (std::size_t b = 0; b < 16; ++b) uuids[d][b] = static_cast<std::uint8_t>(0x10 * (d + 1) + b);
  }
  return uuids;
}

using Visible = std::vector<std::uint32_t>;

TEST(VisibleDevices, ListedIndicesInTheirOrderUpToTheFirstThatNamesNoDevice) {
  const auto uuids = three_devices();
  EXPECT_EQ(visible_devices(std::nullopt, uuids), (Visible{0, 1, 2})) << "unset: every device";
  EXPECT_EQ(visible_devices("", uuids), Visible{}) << "empty: none";
  EXPECT_EQ(visible_devices("2,1", uuids), (Visible{2, 1}));
  EXPECT_EQ(visible_devices("0,2,-1,1", uuids), (Visible{0, 2})) << "the Programming Guide's example";
  EXPECT_EQ(visible_devices("1,7,0", uuids), (Visible{1})) << "no device 7";
  EXPECT_EQ(visible_devices("1,1,0", uuids), Visible{}) << "listed twice: none";
  EXPECT_EQ(visible_devices("1,0,-1,1", uuids), (Visible{1, 0})) << "after the end of the list, not twice";
  EXPECT_EQ(visible_devices(" 1, 2", uuids), (Visible{1, 2})) << "leading blanks";
  EXPECT_EQ(visible_devices("1gpu,2", uuids), (Visible{1, 2})) << "leading digits, as strtoul";
  EXPECT_EQ(visible_devices("gpu1", uuids), Visible{});
  EXPECT_EQ(visible_devices("99999999999999999999999", uuids), Visible{}) << "no overflow into a small index";
  EXPECT_EQ(visible_devices("2,", uuids), (Visible{2}));
}

TEST(VisibleDevices, UuidPrefixesNameOneDeviceEach) {
  const auto uuids = three_devices();
  EXPECT_EQ(uuid_text(uuids[1]), "GPU-20212223-2425-2627-2829-2a2b2c2d2e2f");
  EXPECT_EQ(visible_devices("GPU-20212223-2425-2627-2829-2a2b2c2d2e2f ,GPU-10", uuids), (Visible{1, 0}));
  EXPECT_EQ(visible_devices("GPU-3031,GPU-10", uuids), (Visible{2, 0})) << "a prefix is enough";
  EXPECT_EQ(visible_devices("GPU-3031,0", uuids), (Visible{2})) << "a list of UUIDs ends at an index";
  EXPECT_EQ(visible_devices("GPU-,GPU-10", uuids), Visible{}) << "names all three: the list ends there";
  EXPECT_EQ(visible_devices("GPU-10,GPU-1011", uuids), Visible{}) << "one device twice";
  EXPECT_EQ(visible_devices("0,GPU-10", uuids), (Visible{0})) << "a list of indices ends at a UUID";
}

}  // namespace
}  // namespace gpuqos::simgpu

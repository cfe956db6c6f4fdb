// Reads a fatbinary: finds its first usable cubin or PTX entry and hands it to that reader.
#include "module_image_internal.h"

#include <algorithm>
#include <vector>

namespace gpuqos::simgpu::module_image_detail {
namespace {

constexpr std::uint32_t kFatbinHeaderBytes = 16;
constexpr std::uint32_t kFatbinEntryMinBytes = 0x30;  // up to and including the flags
constexpr std::uint16_t kFatbinKindPtx = 1;
constexpr std::uint16_t kFatbinKindElf = 2;
// Entry flags: 0x2000 is the older LZ-style compression, 0x8000 the zstd of CUDA 12.x and later.
constexpr std::uint64_t kFatbinCompressedFlags = 0x2000 | 0x8000;

// One entry: u16 kind, u16 version, u32 header bytes, u64 payload bytes (padded), ...,
// u64 flags at 0x28. The payload follows the entry header.
struct FatbinEntry {
  std::uint16_t kind = 0;
  bool compressed = false;
  Bytes payload;
};

std::optional<std::vector<FatbinEntry>> read_fatbin_entries(Bytes image, std::string& error) {
  const auto magic = image.read<std::uint32_t>(0);
  const auto header_bytes = image.read<std::uint16_t>(6);
  const auto fat_bytes = image.read<std::uint64_t>(8);
  if (magic != kFatbinMagic || !header_bytes || !fat_bytes) {
    error = "fatbinary: truncated header";
    return std::nullopt;
  }
  const std::optional<Bytes> body =
      image.has(*header_bytes, *fat_bytes) ? image.sub(0, *header_bytes + *fat_bytes) : std::nullopt;
  if (*header_bytes < kFatbinHeaderBytes || !body) {
    error = "fatbinary: declared size overruns the image";
    return std::nullopt;
  }
  std::vector<FatbinEntry> entries;
  for (std::uint64_t at = *header_bytes; at < body->size();) {
    const auto entry_bytes = body->read<std::uint32_t>(at + 4);
    const auto payload_bytes = body->read<std::uint64_t>(at + 8);
    const std::optional<Bytes> payload =
        entry_bytes && payload_bytes ? body->sub(at + *entry_bytes, *payload_bytes) : std::nullopt;
    if (!payload || *entry_bytes < kFatbinEntryMinBytes) {
      error = "fatbinary: entry " + std::to_string(entries.size()) + " is truncated or malformed";
      return std::nullopt;
    }
    FatbinEntry entry;
    entry.kind = *body->read<std::uint16_t>(at);
    entry.compressed = (*body->read<std::uint64_t>(at + 0x28) & kFatbinCompressedFlags) != 0;
    entry.payload = *payload;
    entries.push_back(entry);
    at += *entry_bytes + *payload_bytes;
  }
  return entries;
}

}  // namespace

// The first uncompressed cubin that parses, else the first uncompressed PTX that parses.
ModuleImageResult parse_fatbin(Bytes image) {
  std::string error;
  const std::optional<std::vector<FatbinEntry>> entries = read_fatbin_entries(image, error);
  if (!entries) return fail(error);
  std::string last_error;
  for (const std::uint16_t kind : {kFatbinKindElf, kFatbinKindPtx}) {
    for (const FatbinEntry& entry : *entries) {
      if (entry.kind != kind || entry.compressed) continue;
      ModuleImageResult inner =
          kind == kFatbinKindElf ? parse_elf(entry.payload) : parse_ptx(text_of(entry.payload));
      if (inner.ok) {
        inner.image.format = ModuleImage::Format::fatbin;
        return inner;
      }
      last_error = std::move(inner.error);
    }
  }
  if (!last_error.empty()) return fail("fatbinary: no usable entry; last one: " + last_error);
  const bool any_compressed = std::any_of(entries->begin(), entries->end(),
                                          [](const FatbinEntry& entry) { return entry.compressed; });
  if (any_compressed) return fail("fatbinary holds only compressed entries, which cannot be decoded");
  return fail("fatbinary holds no PTX or cubin entry");
}

// A fatbinary sized by its own header (max_bytes == 0).
ModuleImageResult parse_trusted_fatbin(const void* data) {
  const Bytes header(data, kFatbinHeaderBytes);
  const std::uint64_t declared = *header.read<std::uint16_t>(6) + *header.read<std::uint64_t>(8);
  if (declared > kMaxTrustedImageBytes) return fail("fatbinary: declared size is implausible");
  return parse_fatbin(Bytes(data, static_cast<std::size_t>(declared)));
}

// The __fatBinC_Wrapper_t that nvcc embeds: u32 magic, u32 version, pointer to the fatbinary.
// Only followed for in-memory images: a pointer read from a file means nothing.
ModuleImageResult parse_fatbin_wrapper(const void* data) {
  const Bytes wrapper(data, 16);
  const std::uint64_t address = *wrapper.read<std::uint64_t>(8);
  const void* fatbin = nullptr;
  static_assert(sizeof(fatbin) <= sizeof(address));
  std::memcpy(&fatbin, &address, sizeof(fatbin));
  const std::uint32_t version = *wrapper.read<std::uint32_t>(4);
  if (fatbin == nullptr || version < 1 || version > 2) return fail("fatbinary wrapper: malformed");
  if (Bytes(fatbin, kFatbinHeaderBytes).read<std::uint32_t>(0) != kFatbinMagic) {
    return fail("fatbinary wrapper: does not point at a fatbinary");
  }
  return parse_trusted_fatbin(fatbin);
}

}  // namespace gpuqos::simgpu::module_image_detail

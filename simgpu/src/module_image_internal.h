// What the module-image readers share (module_image*.cpp): the bounded byte view, the result
// helpers and each format's entry point. Private to simgpu/src.
//
// Every read goes through Bytes, which checks its bounds; the only unbounded reads are the few
// header fields that size the image when the caller passes max_bytes == 0 ("trust the headers").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "gpuqos/simgpu/module_image.h"

namespace gpuqos::simgpu::module_image_detail {

// An image whose headers claim more than this is refused rather than trusted.
constexpr std::size_t kMaxTrustedImageBytes = std::size_t{1} << 30;

// A bounded, little-endian view of bytes. Reads outside the view return nullopt.
class Bytes {
 public:
  Bytes() = default;
  Bytes(const void* data, std::size_t size) : data_(static_cast<const std::uint8_t*>(data)), size_(size) {}

  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] const std::uint8_t* data() const { return data_; }
  [[nodiscard]] bool has(std::uint64_t offset, std::uint64_t count) const {
    return offset <= size_ && count <= size_ - offset;
  }

  template <typename T>
  [[nodiscard]] std::optional<T> read(std::uint64_t offset) const {
    if (!has(offset, sizeof(T))) return std::nullopt;
    T value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      value = static_cast<T>(value | static_cast<T>(static_cast<T>(data_[offset + i]) << (8 * i)));
    }
    return value;
  }

  [[nodiscard]] std::optional<Bytes> sub(std::uint64_t offset, std::uint64_t count) const {
    if (!has(offset, count)) return std::nullopt;
    return Bytes(data_ + offset, static_cast<std::size_t>(count));
  }

  // The NUL-terminated string at `offset`; nullopt when no NUL is found inside the view.
  [[nodiscard]] std::optional<std::string_view> c_string(std::uint64_t offset) const {
    if (offset >= size_) return std::nullopt;
    const auto* begin = data_ + offset;
    const void* nul = std::memchr(begin, 0, size_ - static_cast<std::size_t>(offset));
    if (nul == nullptr) return std::nullopt;
    return std::string_view(reinterpret_cast<const char*>(begin),
                            static_cast<std::size_t>(static_cast<const std::uint8_t*>(nul) - begin));
  }

 private:
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Bytes as text: up to the first NUL, or all of them when there is none (a PTX file).
inline std::string_view text_of(Bytes bytes) {
  return bytes.c_string(0).value_or(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

inline ModuleImageResult fail(std::string reason) {
  ModuleImageResult result;
  result.error = std::move(reason);
  return result;
}

constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;
constexpr std::uint32_t kFatbinWrapperMagic = 0x466243B1;

// PTX text (module_image_ptx.cpp).
ModuleImageResult parse_ptx(std::string_view text);

// A cubin ELF within `image` (module_image_elf.cpp).
ModuleImageResult parse_elf(Bytes image);
// How many bytes an ELF at `data` spans according to its own headers (max_bytes == 0); nullopt
// when they declare an implausible size.
std::optional<std::size_t> trusted_elf_extent(const void* data);

// A fatbinary within `image`, one sized by its own header, and nvcc's wrapper struct pointing at
// one (module_image_fatbin.cpp).
ModuleImageResult parse_fatbin(Bytes image);
ModuleImageResult parse_trusted_fatbin(const void* data);
ModuleImageResult parse_fatbin_wrapper(const void* data);

}  // namespace gpuqos::simgpu::module_image_detail

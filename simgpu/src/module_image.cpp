// parse_module_image: finds an image's format from its first bytes and hands it to that format's
// reader (module_image_{ptx,elf,fatbin}.cpp).
#include "gpuqos/simgpu/module_image.h"

#include <exception>

#include "module_image_internal.h"

namespace gpuqos::simgpu {

using namespace module_image_detail;

namespace {

// Compares byte by byte and stops at the first difference, so a short NUL-terminated PTX string
// is never read past its terminator when max_bytes == 0 (none of the magics contains a NUL).
bool starts_with_magic(const std::uint8_t* data, std::size_t max_bytes, std::uint32_t magic) {
  for (std::size_t i = 0; i < 4; ++i) {
    if (max_bytes != 0 && i >= max_bytes) return false;
    if (data[i] != static_cast<std::uint8_t>(magic >> (8 * i))) return false;
  }
  return true;
}

constexpr std::uint32_t kElfMagic = 0x464C457F;  // "\x7fELF" read little-endian

ModuleImageResult parse_any(const void* data, std::size_t max_bytes) {
  if (data == nullptr) return fail("no image (null pointer)");
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  if (starts_with_magic(bytes, max_bytes, kElfMagic)) {
    if (max_bytes != 0) return parse_elf(Bytes(data, max_bytes));
    const std::optional<std::size_t> extent = trusted_elf_extent(data);
    if (!extent) return fail("ELF: headers declare an implausible size");
    return parse_elf(Bytes(data, *extent));
  }
  if (starts_with_magic(bytes, max_bytes, kFatbinMagic)) {
    return max_bytes != 0 ? parse_fatbin(Bytes(data, max_bytes)) : parse_trusted_fatbin(data);
  }
  if (starts_with_magic(bytes, max_bytes, kFatbinWrapperMagic)) {
    if (max_bytes != 0) return fail("fatbinary wrapper found in a sized image; it holds a pointer");
    return parse_fatbin_wrapper(data);
  }
  // PTX: up to the NUL, or up to max_bytes for a file that has none.
  const std::string_view text =
      max_bytes != 0 ? text_of(Bytes(data, max_bytes)) : std::string_view(static_cast<const char*>(data));
  if (text.empty()) return fail("empty image");
  return parse_ptx(text);
}

}  // namespace

ModuleImageResult parse_module_image(const void* data, std::size_t max_bytes) {
  try {
    return parse_any(data, max_bytes);
  } catch (const std::exception& error) {  // allocation failure; the C boundary must not throw
    return fail(std::string("could not parse the image: ") + error.what());
  } catch (...) {
    return fail("could not parse the image");
  }
}

}  // namespace gpuqos::simgpu

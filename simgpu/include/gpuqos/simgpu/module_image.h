// Kernel names and parameter layouts read from a module image: PTX text, a cubin ELF or a fatbinary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpuqos::simgpu {

struct KernelParam {
  std::uint32_t offset = 0;  // byte offset in the packed parameter buffer
  std::uint32_t size = 0;    // bytes
};

struct KernelEntry {
  std::string name;                 // the symbol name, as cuModuleGetFunction is asked for it
  std::vector<KernelParam> params;  // empty with params_known == false when the image does not say
  bool params_known = false;
};

struct ModuleImage {
  enum class Format : std::uint8_t { ptx, elf, fatbin };
  Format format = Format::ptx;
  std::vector<KernelEntry> kernels;
};

struct ModuleImageResult {
  bool ok = false;
  std::string error;  // why the image was rejected, when !ok
  ModuleImage image;
};

// cuModuleLoadData is given a pointer without a length, so the format is found from the first
// bytes: ELF magic, fatbinary magic (0xBA55ED50) or PTX text (NUL-terminated). `max_bytes`
// bounds every read when the caller knows the size (a file); 0 means "trust the headers".
// Never throws; a malformed image is !ok with a reason.
// A fatbinary's first uncompressed cubin is read, else its first uncompressed PTX. The wrapper
// struct nvcc embeds (magic 0x466243B1, pointing at a fatbinary) is followed when max_bytes == 0.
ModuleImageResult parse_module_image(const void* data, std::size_t max_bytes);

}  // namespace gpuqos::simgpu

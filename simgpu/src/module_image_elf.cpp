// Reads kernel names and parameter layouts out of cubin ELFs: the symbol table names the
// kernels, their .nv.info.<name> sections (EIATTR records) the parameters.
#include "module_image_internal.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

namespace gpuqos::simgpu::module_image_detail {
namespace {

constexpr std::uint16_t kEmCuda = 190;
constexpr std::uint32_t kShtSymtab = 2;
constexpr std::uint32_t kShtNobits = 8;
constexpr std::uint8_t kSttFunc = 2;
constexpr std::uint8_t kStoCudaEntry = 0x10;  // st_other bit ptxas sets on __global__ functions
constexpr std::uint32_t kElfHeaderBytes = 64;
constexpr std::uint32_t kElfSectionHeaderBytes = 64;
constexpr std::uint32_t kElfSymbolBytes = 24;

struct ElfHeader {
  std::uint64_t section_table_offset = 0;
  std::uint64_t section_header_bytes = 0;
  std::uint64_t section_count = 0;  // 0 when the count is in section 0 (extended numbering)
  std::uint32_t names_section = 0;
};

struct ElfSection {
  std::uint32_t name_offset = 0;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t link = 0;
  std::uint64_t entry_bytes = 0;
  std::string_view name;
  Bytes contents;
};

struct ElfSymbol {
  std::string_view name;
  std::uint8_t info = 0;
  std::uint8_t other = 0;
};

std::optional<ElfHeader> read_elf_header(Bytes image, std::string& error) {
  if (!image.has(0, kElfHeaderBytes)) {
    error = "ELF: truncated header";
    return std::nullopt;
  }
  const std::uint8_t* ident = image.data();
  if (ident[4] != 2 || ident[5] != 1) {
    error = "ELF: only 64-bit little-endian cubins are supported";
    return std::nullopt;
  }
  if (image.read<std::uint16_t>(18) != kEmCuda) {
    error = "ELF: machine is not EM_CUDA (190)";
    return std::nullopt;
  }
  ElfHeader header;
  header.section_table_offset = *image.read<std::uint64_t>(0x28);
  header.section_header_bytes = *image.read<std::uint16_t>(0x3a);
  header.section_count = *image.read<std::uint16_t>(0x3c);
  header.names_section = *image.read<std::uint16_t>(0x3e);
  if (header.section_header_bytes < kElfSectionHeaderBytes) {
    error = "ELF: section header entries are too small";
    return std::nullopt;
  }
  return header;
}

// The header of section `index`, without its name or contents.
std::optional<ElfSection> read_section_header(Bytes image, const ElfHeader& header, std::uint64_t index) {
  const std::uint64_t at = header.section_table_offset + index * header.section_header_bytes;
  if (index > (std::uint64_t{1} << 24) || at < header.section_table_offset ||
      !image.has(at, kElfSectionHeaderBytes)) {
    return std::nullopt;
  }
  ElfSection section;
  section.name_offset = *image.read<std::uint32_t>(at);
  section.type = *image.read<std::uint32_t>(at + 4);
  section.offset = *image.read<std::uint64_t>(at + 24);
  section.size = *image.read<std::uint64_t>(at + 32);
  section.link = *image.read<std::uint32_t>(at + 40);
  section.entry_bytes = *image.read<std::uint64_t>(at + 56);
  return section;
}

// All section headers, with contents bound to `image`; nullopt (and `error`) if any overruns it.
std::optional<std::vector<ElfSection>> read_sections(Bytes image, ElfHeader header, std::string& error) {
  error = "ELF: section table overruns the image";
  if (header.section_table_offset == 0) {
    error = "ELF: no section table";
    return std::nullopt;
  }
  const std::optional<ElfSection> first = read_section_header(image, header, 0);
  if (!first) return std::nullopt;
  if (header.section_count == 0) header.section_count = first->size;
  if (header.names_section == 0xffff) header.names_section = first->link;
  std::vector<ElfSection> sections;
  for (std::uint64_t i = 0; i < header.section_count; ++i) {
    std::optional<ElfSection> section = read_section_header(image, header, i);
    if (!section) return std::nullopt;
    if (section->type != kShtNobits) {
      const std::optional<Bytes> contents = image.sub(section->offset, section->size);
      if (!contents) {
        error = "ELF: section " + std::to_string(i) + " overruns the image";
        return std::nullopt;
      }
      section->contents = *contents;
    }
    sections.push_back(*section);
  }
  if (header.names_section >= sections.size()) {
    error = "ELF: no section name table";
    return std::nullopt;
  }
  const Bytes names = sections[header.names_section].contents;
  for (ElfSection& section : sections) section.name = names.c_string(section.name_offset).value_or("");
  error.clear();
  return sections;
}

std::optional<std::vector<ElfSymbol>> read_symbols(const std::vector<ElfSection>& sections,
                                                   std::string& error) {
  const auto symtab = std::find_if(sections.begin(), sections.end(),
                                   [](const ElfSection& section) { return section.type == kShtSymtab; });
  if (symtab == sections.end()) {
    error = "ELF: no symbol table";
    return std::nullopt;
  }
  if (symtab->entry_bytes < kElfSymbolBytes || symtab->link >= sections.size()) {
    error = "ELF: malformed symbol table";
    return std::nullopt;
  }
  const Bytes names = sections[symtab->link].contents;
  std::vector<ElfSymbol> symbols;
  for (std::uint64_t at = 0; symtab->contents.has(at, kElfSymbolBytes); at += symtab->entry_bytes) {
    ElfSymbol symbol;
    symbol.name = names.c_string(*symtab->contents.read<std::uint32_t>(at)).value_or("");
    symbol.info = *symtab->contents.read<std::uint8_t>(at + 4);
    symbol.other = *symtab->contents.read<std::uint8_t>(at + 5);
    symbols.push_back(symbol);
  }
  return symbols;
}

// Sections by name, so that a cubin with thousands of kernels is not searched per symbol.
class SectionsByName {
 public:
  explicit SectionsByName(const std::vector<ElfSection>& sections) {
    for (const ElfSection& section : sections) by_name_.emplace(section.name, &section);
  }

  // The section named prefix + name, or null.
  const ElfSection* find(std::string_view prefix, std::string_view name) const {
    key_.assign(prefix);
    key_.append(name);
    const auto found = by_name_.find(key_);
    return found == by_name_.end() ? nullptr : found->second;
  }

 private:
  std::unordered_map<std::string_view, const ElfSection*> by_name_;
  mutable std::string key_;
};

// EIATTR records of .nv.info.<kernel>: u8 format, u8 attribute, then a u16 that is the value
// (formats 1-3) or the byte count of a payload that follows (format 4, EIFMT_SVAL).
constexpr std::uint8_t kEifmtSval = 0x04;
constexpr std::uint8_t kEiattrKparamInfo = 0x17;      // one per parameter, see below
constexpr std::uint8_t kEiattrKparamInfoV2 = 0x45;    // the same, used when a parameter is large
constexpr std::uint8_t kEiattrCbankParamSize = 0x19;  // EIFMT_HVAL: total parameter bytes

// Parameters from EIATTR_KPARAM_INFO payloads: u32 index, u16 ordinal, u16 offset, and a u32
// whose bits 18..31 are the size in bytes. nvcc 13 switches every record of a kernel to
// attribute 0x45 when a parameter exceeds those 14 bits; there the u32 is the size itself.
// Both were checked against nvcc 13 output; a layout that does not fit EIATTR_CBANK_PARAM_SIZE
// is not trusted.
std::optional<std::vector<KernelParam>> decode_kparams(Bytes info) {
  std::map<std::uint32_t, KernelParam> by_ordinal;
  std::optional<std::uint32_t> total_bytes;
  std::uint64_t at = 0;
  while (at < info.size()) {
    const auto format = info.read<std::uint8_t>(at);
    const auto attribute = info.read<std::uint8_t>(at + 1);
    const auto value = info.read<std::uint16_t>(at + 2);
    if (!value || *format < 1 || *format > kEifmtSval) return std::nullopt;
    const std::uint64_t payload_bytes = *format == kEifmtSval ? *value : 0;
    if (!info.has(at + 4, payload_bytes)) return std::nullopt;
    const bool v1 = *attribute == kEiattrKparamInfo;
    if (*format == kEifmtSval && (v1 || *attribute == kEiattrKparamInfoV2) && payload_bytes >= 12) {
      const std::uint32_t ordinal = *info.read<std::uint16_t>(at + 8);
      const std::uint32_t offset = *info.read<std::uint16_t>(at + 10);
      const std::uint32_t word = *info.read<std::uint32_t>(at + 12);
      const std::uint32_t size = v1 ? (word >> 18) & 0x3fff : word;
      if (size > 0xffff) return std::nullopt;  // parameter space is at most 32764 bytes
      if (!by_ordinal.emplace(ordinal, KernelParam{offset, size}).second) return std::nullopt;
    } else if (*format != kEifmtSval && *attribute == kEiattrCbankParamSize) {
      total_bytes = *value;
    }
    at += 4 + payload_bytes;
  }
  std::vector<KernelParam> params;
  for (const auto& [ordinal, param] : by_ordinal) {
    if (ordinal != params.size()) return std::nullopt;  // ordinals must be 0..n-1
    params.push_back(param);
  }
  const bool fits = std::all_of(params.begin(), params.end(), [&](const KernelParam& param) {
    return !total_bytes || std::uint64_t{param.offset} + param.size <= *total_bytes;
  });
  if (!fits || (params.empty() && total_bytes.value_or(0) != 0)) return std::nullopt;
  return params;
}

KernelEntry elf_kernel(const SectionsByName& sections, std::string_view name) {
  KernelEntry kernel;
  kernel.name = std::string(name);
  if (const ElfSection* info = sections.find(".nv.info.", name)) {
    if (std::optional<std::vector<KernelParam>> params = decode_kparams(info->contents)) {
      kernel.params = std::move(*params);
      kernel.params_known = true;
    }
  }
  return kernel;
}

}  // namespace

// Kernels are the STT_FUNC symbols with STO_CUDA_ENTRY that have a .text.<name> section. When no
// symbol carries that flag (a producer that does not set it), any function with a
// .nv.info.<name> section counts, which can also admit -rdc device functions.
ModuleImageResult parse_elf(Bytes image) {
  std::string error;
  const std::optional<ElfHeader> header = read_elf_header(image, error);
  if (!header) return fail(error);
  const std::optional<std::vector<ElfSection>> sections = read_sections(image, *header, error);
  if (!sections) return fail(error);
  const std::optional<std::vector<ElfSymbol>> symbols = read_symbols(*sections, error);
  if (!symbols) return fail(error);
  const SectionsByName by_name(*sections);

  const auto is_function = [&](const ElfSymbol& symbol) {
    return (symbol.info & 0xf) == kSttFunc && !symbol.name.empty() &&
           by_name.find(".text.", symbol.name) != nullptr;
  };
  const bool entry_flag_used = std::any_of(symbols->begin(), symbols->end(), [&](const ElfSymbol& symbol) {
    return is_function(symbol) && (symbol.other & kStoCudaEntry) != 0;
  });
  ModuleImageResult result;
  result.image.format = ModuleImage::Format::elf;
  std::set<std::string_view> seen;
  for (const ElfSymbol& symbol : *symbols) {
    if (!is_function(symbol) || !seen.insert(symbol.name).second) continue;
    const bool kernel = entry_flag_used ? (symbol.other & kStoCudaEntry) != 0
                                        : by_name.find(".nv.info.", symbol.name) != nullptr;
    if (kernel) result.image.kernels.push_back(elf_kernel(by_name, symbol.name));
  }
  result.ok = true;
  return result;
}

std::optional<std::size_t> trusted_elf_extent(const void* data) {
  std::string error;
  const std::optional<ElfHeader> header = read_elf_header(Bytes(data, kElfHeaderBytes), error);
  if (!header) return kElfHeaderBytes;  // parse_elf will say what is wrong with it
  if (header->section_table_offset > kMaxTrustedImageBytes) return std::nullopt;
  const Bytes first_header(data, header->section_table_offset + kElfSectionHeaderBytes);
  const std::optional<ElfSection> first = read_section_header(first_header, *header, 0);
  if (!first) return std::nullopt;
  const std::uint64_t count = header->section_count != 0 ? header->section_count : first->size;
  if (count > (std::uint64_t{1} << 24)) return std::nullopt;
  std::uint64_t extent = header->section_table_offset + count * header->section_header_bytes;
  if (extent > kMaxTrustedImageBytes) return std::nullopt;
  const Bytes table(data, static_cast<std::size_t>(extent));
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::optional<ElfSection> section = read_section_header(table, *header, i);
    if (!section || section->type == kShtNobits) continue;
    if (section->offset > kMaxTrustedImageBytes || section->size > kMaxTrustedImageBytes) return std::nullopt;
    extent = std::max(extent, section->offset + section->size);
  }
  return static_cast<std::size_t>(extent);
}

}  // namespace gpuqos::simgpu::module_image_detail

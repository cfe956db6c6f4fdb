// Reads kernel names and parameter layouts out of PTX text, cubin ELFs and fatbinaries.
//
// Every read goes through Bytes, which checks its bounds; the only unbounded reads are the few
// header fields that size the image when the caller passes max_bytes == 0 ("trust the headers").
#include "gpuqos/simgpu/module_image.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace gpuqos::simgpu {
namespace {

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
std::string_view text_of(Bytes bytes) {
  return bytes.c_string(0).value_or(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

ModuleImageResult fail(std::string reason) {
  ModuleImageResult result;
  result.error = std::move(reason);
  return result;
}

// ------------------------------------------------------------------------------------------------
// PTX
// ------------------------------------------------------------------------------------------------

bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%';
}
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Splits PTX into tokens: directives (".param", one per dot, so ".ptr.global" is two tokens),
// identifiers, numbers, string literals and single punctuation characters. Comments vanish.
class PtxLexer {
 public:
  explicit PtxLexer(std::string_view text) : text_(text) {}

  std::string_view next() {
    skip_space_and_comments();
    if (pos_ >= text_.size()) return {};
    const std::size_t start = pos_;
    const char c = text_[pos_++];
    if (c == '"') {
      skip_string();
    } else if (c == '.' || is_ident_char(c)) {  // a directive, identifier or number
      while (pos_ < text_.size() && is_ident_char(text_[pos_])) ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }

  std::string_view peek() {
    const std::size_t saved = pos_;
    const std::string_view token = next();
    pos_ = saved;
    return token;
  }

 private:
  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        const std::size_t eol = text_.find('\n', pos_);
        pos_ = eol == std::string_view::npos ? text_.size() : eol + 1;
      } else if (text_.substr(pos_, 2) == "/*") {
        const std::size_t close = text_.find("*/", pos_ + 2);
        pos_ = close == std::string_view::npos ? text_.size() : close + 2;
      } else {
        return;
      }
    }
  }

  void skip_string() {
    while (pos_ < text_.size() && text_[pos_] != '"') pos_ += text_[pos_] == '\\' ? 2 : 1;
    pos_ = std::min(pos_ + 1, text_.size());
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

std::optional<std::uint64_t> parse_number(std::string_view token) {
  if (token.empty() || !is_digit(token[0])) return std::nullopt;
  int base = 10;
  if (token.size() > 2 && token[0] == '0' && (token[1] == 'x' || token[1] == 'X')) {
    base = 16;
    token.remove_prefix(2);
  }
  std::uint64_t value = 0;
  for (const char c : token) {
    int digit = 0;
    if (is_digit(c)) {
      digit = c - '0';
    } else if (base == 16 && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      digit = (c | 0x20) - 'a' + 10;
    } else {
      return std::nullopt;
    }
    if (digit >= base || value > (std::uint64_t{1} << 40)) return std::nullopt;
    value = value * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(digit);
  }
  return value;
}

// Bytes of one element of a PTX parameter type; 0 when the token is not a parameter type.
std::uint32_t ptx_type_bytes(std::string_view type) {
  static const std::map<std::string_view, std::uint32_t> kSizes = {
      {".b8", 1},    {".s8", 1},     {".u8", 1},         {".b16", 2},    {".s16", 2}, {".u16", 2},
      {".f16", 2},   {".bf16", 2},   {".b32", 4},        {".s32", 4},    {".u32", 4}, {".f32", 4},
      {".f16x2", 4}, {".bf16x2", 4}, {".b64", 8},        {".s64", 8},    {".u64", 8}, {".f64", 8},
      {".b128", 16}, {".texref", 8}, {".samplerref", 8}, {".surfref", 8}};
  const auto found = kSizes.find(type);
  return found == kSizes.end() ? 0 : found->second;
}

struct ParamShape {
  std::uint32_t size = 0;
  std::uint32_t align = 1;
};

// The size and alignment of one kernel parameter from its tokens, e.g.
// ".param .align 8 .b8 name [ 24 ]" or ".param .u64 .ptr .global .align 16 name".
// An .align before the type aligns the parameter; one after it (in .ptr) describes the pointee.
std::optional<ParamShape> ptx_param_shape(const std::vector<std::string_view>& tokens) {
  if (tokens.empty() || tokens[0] != ".param") return std::nullopt;
  std::uint64_t explicit_align = 0;
  std::uint64_t element = 0;  // bytes of one scalar
  std::uint64_t lanes = 1;    // .v2/.v4 vector width
  std::uint64_t count = 1;    // array elements
  bool named = false;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const std::string_view token = tokens[i];
    if (token == ".align") {
      const auto value = i + 1 < tokens.size() ? parse_number(tokens[++i]) : std::nullopt;
      if (!value || *value == 0 || (*value & (*value - 1)) != 0) return std::nullopt;
      if (element == 0) explicit_align = *value;
    } else if (token == ".v2" || token == ".v4" || token == ".v8") {
      lanes = static_cast<std::uint64_t>(token[2] - '0');
    } else if (const std::uint32_t bytes = ptx_type_bytes(token); bytes != 0) {
      if (element != 0) return std::nullopt;
      element = bytes;
    } else if (token[0] == '.') {
      continue;  // .ptr, state spaces and other attributes that do not change the layout
    } else if (token == "[") {
      const auto dim = i + 2 < tokens.size() ? parse_number(tokens[i + 1]) : std::nullopt;
      if (!dim || tokens[i + 2] != "]") return std::nullopt;  // unsized arrays have no layout
      count *= *dim;
      i += 2;
      if (count > (std::uint64_t{1} << 20)) return std::nullopt;
    } else if (!named && is_ident_start(token[0])) {
      named = true;
    } else {
      return std::nullopt;
    }
  }
  if (element == 0 || !named) return std::nullopt;
  ParamShape shape;
  shape.size = static_cast<std::uint32_t>(element * lanes * count);
  shape.align = static_cast<std::uint32_t>(explicit_align != 0 ? explicit_align : element * lanes);
  return shape;
}

// Appends the parameter spelled by `tokens` at the next offset its alignment allows.
bool append_ptx_param(const std::vector<std::string_view>& tokens, std::uint64_t& offset,
                      KernelEntry& kernel) {
  const std::optional<ParamShape> shape = ptx_param_shape(tokens);
  if (!shape) return false;
  offset = (offset + shape->align - 1) / shape->align * shape->align;
  kernel.params.push_back({static_cast<std::uint32_t>(offset), shape->size});
  offset += shape->size;
  return offset <= (std::uint64_t{1} << 24);
}

// Reads ".param ..., .param ... )" after "kernel_name (". Leaves params_known false when a
// parameter cannot be understood; always consumes up to the closing parenthesis.
void parse_ptx_params(PtxLexer& lexer, KernelEntry& kernel) {
  bool understood = true;
  std::uint64_t offset = 0;
  std::vector<std::string_view> tokens;
  std::string_view token = lexer.next();
  for (; !token.empty() && token != ")"; token = lexer.next()) {
    if (token != ",") {
      tokens.push_back(token);
      continue;
    }
    understood = understood && append_ptx_param(tokens, offset, kernel);
    tokens.clear();
  }
  if (token.empty()) {
    understood = false;  // the list never closes
  } else if (!tokens.empty()) {
    understood = understood && append_ptx_param(tokens, offset, kernel);
  }
  kernel.params_known = understood;
  if (!understood) kernel.params.clear();
}

bool looks_like_text(std::string_view text) {
  return std::none_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r' && byte != '\v' && byte != '\f';
  });
}

ModuleImageResult parse_ptx(std::string_view text) {
  if (!looks_like_text(text)) {
    return fail("not a module image: no ELF or fatbinary magic, and the bytes are not PTX text");
  }
  ModuleImageResult result;
  result.image.format = ModuleImage::Format::ptx;
  std::set<std::string, std::less<>> seen;
  bool has_version = false;
  PtxLexer lexer(text);
  for (std::string_view token = lexer.next(); !token.empty(); token = lexer.next()) {
    if (token == ".version") has_version = true;
    if (token != ".entry") continue;
    const std::string_view name = lexer.next();
    if (name.empty() || !is_ident_start(name[0])) return fail("PTX: .entry without a kernel name");
    KernelEntry kernel;
    kernel.name = std::string(name);
    kernel.params_known = true;
    if (lexer.peek() == "(") {
      lexer.next();
      parse_ptx_params(lexer, kernel);
    }
    // A kernel may be declared (.extern) before it is defined; report it once.
    if (seen.insert(kernel.name).second) result.image.kernels.push_back(std::move(kernel));
  }
  if (!has_version) return fail("not a module image: PTX text without a .version directive");
  result.ok = true;
  return result;
}

// ------------------------------------------------------------------------------------------------
// cubin ELF
// ------------------------------------------------------------------------------------------------

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

// How many bytes an ELF at `data` spans according to its own headers (max_bytes == 0).
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

// ------------------------------------------------------------------------------------------------
// fatbinary
// ------------------------------------------------------------------------------------------------

constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;
constexpr std::uint32_t kFatbinWrapperMagic = 0x466243B1;
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

// ------------------------------------------------------------------------------------------------
// format detection
// ------------------------------------------------------------------------------------------------

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

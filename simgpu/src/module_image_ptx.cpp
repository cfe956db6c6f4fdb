// Reads kernel names and parameter layouts out of PTX text.
#include "module_image_internal.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace gpuqos::simgpu::module_image_detail {
namespace {

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

}  // namespace

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

}  // namespace gpuqos::simgpu::module_image_detail

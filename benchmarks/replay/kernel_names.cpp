// Turns demangled kernel signatures into short, valid, stable PTX identifiers.
#include "gpuqos/replay/kernel_names.h"

#include <cctype>

namespace gpuqos::replay {

namespace {

constexpr std::size_t kMaxBaseChars = 48;

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (std::size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

std::string base_function_name(std::string_view demangled) {
  // "(anonymous namespace)" is the one parenthesis that belongs to a qualified name.
  const std::string text = replace_all(std::string(demangled), "(anonymous namespace)", "anon");
  // The qualified name ends at the first '<' (template arguments) or '(' (parameters).
  std::size_t end = text.find_first_of("<(");
  if (end == std::string::npos) end = text.size();
  std::string qualified = text.substr(0, end);
  while (!qualified.empty() && qualified.back() == ' ') qualified.pop_back();
  // Drop the return type ("void ") and the scopes.
  std::size_t start = qualified.find_last_of(' ');
  start = start == std::string::npos ? 0 : start + 1;
  const std::size_t scope = qualified.rfind("::");
  if (scope != std::string::npos && scope + 2 > start) start = scope + 2;
  std::string base;
  for (char c : qualified.substr(start)) base += ident_char(c) ? c : '_';
  return base;
}

std::string ptx_entry_name(std::size_t index, std::string_view demangled) {
  std::string base = base_function_name(demangled);
  if (base.empty()) {  // e.g. an operator or an odd name: keep whatever identifier characters it has
    for (char c : demangled) base += ident_char(c) ? c : '_';
  }
  std::string collapsed;
  for (char c : base) {
    if (c == '_' && !collapsed.empty() && collapsed.back() == '_') continue;
    collapsed += c;
  }
  if (collapsed.size() > kMaxBaseChars) collapsed.resize(kMaxBaseChars);
  while (!collapsed.empty() && collapsed.back() == '_') collapsed.pop_back();
  if (collapsed.empty() || collapsed == "_") collapsed = "kernel";
  return "gq_" + std::to_string(index) + "_" + collapsed;
}

bool is_valid_ptx_identifier(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  for (char c : name) {
    if (!ident_char(c)) return false;
  }
  return true;
}

}  // namespace gpuqos::replay

// libgpuqos.so as the dynamic loader sees it. Preloaded into every process of a job, it must need no
// library a job may bring its own newer copy of, and export nothing but its hooks, dlsym and the
// query marks (exports.map).
#include <elf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

const std::string kShim = std::string(GPUQOS_BUILD_DIR) + "/lib/libgpuqos.so";

// What a shared object's dynamic section and dynamic symbol table say (from its section headers).
struct DynamicView {
  std::vector<std::string> needed;    // DT_NEEDED, in order
  std::vector<std::string> exported;  // defined, global or weak, default visibility
};

// A T read at `offset` of `image`; nullopt past its end.
template <typename T>
std::optional<T> read_at(const std::string& image, std::size_t offset) {
  if (offset > image.size() || image.size() - offset < sizeof(T)) return std::nullopt;
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

// The NUL-terminated string at `index` of the string table `table`; empty when out of it.
std::string string_at(const std::string& image, const Elf64_Shdr& table, std::size_t index) {
  if (table.sh_offset > image.size()) return {};
  const std::size_t size = std::min<std::size_t>(table.sh_size, image.size() - table.sh_offset);
  if (index >= size) return {};
  const char* start = image.data() + table.sh_offset + index;
  return std::string(start, ::strnlen(start, size - index));
}

// nullopt when `path` is not a 64-bit ELF file whose section headers can be read.
std::optional<DynamicView> read_dynamic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto header = read_at<Elf64_Ehdr>(image, 0);
  if (!header || std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 || header->e_ident[EI_CLASS] != ELFCLASS64 ||
      header->e_shentsize != sizeof(Elf64_Shdr)) {
    return std::nullopt;
  }
  std::vector<Elf64_Shdr> sections;
  for (std::size_t i = 0; i < header->e_shnum; ++i) {
    const auto section = read_at<Elf64_Shdr>(image, header->e_shoff + i * sizeof(Elf64_Shdr));
    if (!section) return std::nullopt;
    sections.push_back(*section);
  }
  DynamicView view;
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strings = sections[section.sh_link];
    if (section.sh_type == SHT_DYNAMIC) {
      for (std::size_t at = section.sh_offset; at + sizeof(Elf64_Dyn) <= section.sh_offset + section.sh_size;
           at += sizeof(Elf64_Dyn)) {
        const auto entry = read_at<Elf64_Dyn>(image, at);
        if (!entry || entry->d_tag == DT_NULL) break;
        if (entry->d_tag == DT_NEEDED) view.needed.push_back(string_at(image, strings, entry->d_un.d_val));
      }
    } else if (section.sh_type == SHT_DYNSYM) {
      for (std::size_t at = section.sh_offset + sizeof(Elf64_Sym);  // entry 0 is the null symbol
           at + sizeof(Elf64_Sym) <= section.sh_offset + section.sh_size; at += sizeof(Elf64_Sym)) {
        const auto symbol = read_at<Elf64_Sym>(image, at);
        if (!symbol) break;
        const int binding = ELF64_ST_BIND(symbol->st_info);
        if (symbol->st_shndx != SHN_UNDEF && ELF64_ST_VISIBILITY(symbol->st_other) == STV_DEFAULT &&
            (binding == STB_GLOBAL || binding == STB_WEAK || binding == STB_GNU_UNIQUE)) {
          view.exported.push_back(string_at(image, strings, symbol->st_name));
        }
      }
    }
  }
  return view;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += name + " ";
  return text;
}

// A job that ships a newer libstdc++ (conda, a virtualenv's wheels, by RPATH) got the system's,
// loaded first for the preloaded shim and then found by soname, and failed at start with
// "version `GLIBCXX_3.4.3x' not found". The shim carries its own C++ runtime instead.
TEST(ShimElf, NeedsNoCxxRuntimeAJobMayBringANewerCopyOf) {
  const auto view = read_dynamic(kShim);
  ASSERT_TRUE(view) << kShim << " is not a readable 64-bit ELF file";
  ASSERT_TRUE(contains(view->needed, "libc.so.6")) << joined(view->needed);
  for (const std::string& library : view->needed) {
    EXPECT_FALSE(library.starts_with("libstdc++") || library.starts_with("libgcc_s")) << library << " is NEEDED";
  }
}

// Its internals (and the C++ runtime linked into it) are its own: exported, they would take the
// place of the program's same-named symbols, or the program's would take theirs.
TEST(ShimElf, ExportsOnlyItsHooksDlsymAndTheQueryMarks) {
  const auto view = read_dynamic(kShim);
  ASSERT_TRUE(view) << kShim << " is not a readable 64-bit ELF file";
  for (const char* expected : {"cuLaunchKernel", "cuGetProcAddress", "dlsym", "gpuqosQueryBegin"}) {
    EXPECT_TRUE(contains(view->exported, expected)) << expected;
  }
  for (const std::string& name : view->exported) {
    EXPECT_TRUE(name.starts_with("cu") || name == "dlsym" || name.starts_with("gpuqosQuery")) << name << " is exported";
  }
}

}  // namespace

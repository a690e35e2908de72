// SPDX-License-Identifier: BSD-2-Clause
// Reads the exported functions of a loaded library from its file: section headers locate .dynsym
// (with its string table), .gnu.version (one version index per symbol) and .gnu.version_d (the
// version names the library defines). Only defined, global or weak STT_FUNC symbols count.
#include "elf_exports.h"

#include <elf.h>
#include <link.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

namespace sweep {
namespace {

struct Found {
  const char* soname;
  std::string path;
};

int find_object(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<Found*>(data);
  if (info->dlpi_name && std::strstr(info->dlpi_name, f->soname)) {
    f->path = info->dlpi_name;
    return 1;
  }
  return 0;
}

template <typename T>
const T* at(const std::string& img, size_t off, size_t count = 1) {
  if (off > img.size() || count * sizeof(T) > img.size() - off) return nullptr;
  return reinterpret_cast<const T*>(img.data() + off);
}

const Elf64_Shdr* section_of_type(const std::string& img, const Elf64_Ehdr& eh, uint32_t type) {
  const auto* sh = at<Elf64_Shdr>(img, eh.e_shoff, eh.e_shnum);
  if (!sh) return nullptr;
  for (int i = 0; i < eh.e_shnum; ++i)
    if (sh[i].sh_type == type) return &sh[i];
  return nullptr;
}

// Version index -> name, from the Verdef chain of .gnu.version_d.
std::map<uint16_t, std::string> version_names(const std::string& img, const Elf64_Shdr& vd,
                                              const Elf64_Shdr& strtab) {
  std::map<uint16_t, std::string> names;
  size_t off = vd.sh_offset;
  for (size_t i = 0; i < vd.sh_info; ++i) {
    const auto* d = at<Elf64_Verdef>(img, off);
    if (!d) break;
    const auto* aux = at<Elf64_Verdaux>(img, off + d->vd_aux);
    if (aux && aux->vda_name < strtab.sh_size)
      names[d->vd_ndx] = img.c_str() + strtab.sh_offset + aux->vda_name;
    if (!d->vd_next) break;
    off += d->vd_next;
  }
  return names;
}

}  // namespace

std::vector<Export> loaded_library_exports(const char* soname, std::string* path,
                                           std::string* error) {
  Found f{soname, {}};
  dl_iterate_phdr(find_object, &f);
  *path = f.path;
  if (f.path.empty()) return *error = std::string(soname) + " is not loaded", std::vector<Export>{};
  std::ifstream in(f.path, std::ios::binary);
  std::string img((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* eh = at<Elf64_Ehdr>(img, 0);
  if (!eh || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
    return *error = f.path + ": not a 64-bit ELF file", std::vector<Export>{};
  const Elf64_Shdr* dynsym = section_of_type(img, *eh, SHT_DYNSYM);
  const Elf64_Shdr* versym = section_of_type(img, *eh, SHT_GNU_versym);
  const Elf64_Shdr* verdef = section_of_type(img, *eh, SHT_GNU_verdef);
  const auto* sh = at<Elf64_Shdr>(img, eh->e_shoff, eh->e_shnum);
  if (!dynsym || !versym || !verdef || dynsym->sh_link >= eh->e_shnum ||
      verdef->sh_link >= eh->e_shnum)
    return *error = f.path + ": no .dynsym/.gnu.version/.gnu.version_d", std::vector<Export>{};
  const Elf64_Shdr& dynstr = sh[dynsym->sh_link];
  auto vnames = version_names(img, *verdef, sh[verdef->sh_link]);
  size_t n = dynsym->sh_size / sizeof(Elf64_Sym);
  const auto* syms = at<Elf64_Sym>(img, dynsym->sh_offset, n);
  const auto* vers = at<Elf64_Half>(img, versym->sh_offset, n);
  if (!syms || !vers) return *error = f.path + ": truncated .dynsym", std::vector<Export>{};
  std::map<std::string, Export> by_name;
  for (size_t i = 1; i < n; ++i) {
    const Elf64_Sym& s = syms[i];
    int bind = ELF64_ST_BIND(s.st_info);
    if (s.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s.st_info) != STT_FUNC ||
        (bind != STB_GLOBAL && bind != STB_WEAK) || s.st_name >= dynstr.sh_size)
      continue;
    std::string name = img.c_str() + dynstr.sh_offset + s.st_name;
    bool hidden = vers[i] & 0x8000;
    std::string ver = vnames.count(vers[i] & 0x7fff) ? vnames[vers[i] & 0x7fff] : "?";
    Export& e = by_name[name];
    e.name = name;
    e.versions.push_back(hidden ? "(" + ver + ")" : ver);
    e.only_private = e.only_private && ver.rfind("IBVERBS_PRIVATE_", 0) == 0;
  }
  std::vector<Export> out;
  for (auto& [name, e] : by_name) out.push_back(std::move(e));
  if (out.empty()) *error = f.path + ": exports no function";
  return out;
}

}  // namespace sweep

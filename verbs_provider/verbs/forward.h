// SPDX-License-Identifier: BSD-2-Clause
// Calls into the real libibverbs for objects that are not ours, by symbol name and version, so an
// unmodified program keeps using real devices (rxe, mlx5) next to the emulated ones.
#pragma once
#include <dlfcn.h>

namespace emu::prov {

void* real_symbol(const char* name, const char* version);
// The same in another library (its soname), for one that may be loaded only locally.
void* real_symbol_of(const char* soname, const char* name, const char* version);

// REAL(ibv_alloc_pd, "IBVERBS_1.1") yields a typed pointer to libibverbs' own function (or null
// when libibverbs is not loaded in this process).
#define REAL(fn, ver) (reinterpret_cast<decltype(&fn)>(::emu::prov::real_symbol(#fn, ver)))

}  // namespace emu::prov

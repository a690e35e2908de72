// SPDX-License-Identifier: BSD-2-Clause
// Moving registered pages between private anonymous memory and the process's registration file
// (page_move.cpp); shared_mr.cpp decides which pages move and when
// (docs/design/registered-memory.md, "Registered memory shared for real"). The program keeps its
// addresses and bytes throughout.
#pragma once
#include <cstdint>

namespace emu::prov {

// Puts the provider's SIGSEGV and SIGBUS handler in front of the process's current ones, if it is
// not there already: a store racing a move waits in it, and a device copy into memory the program
// unmapped ends in it with an error rather than the process (emu/dma_guard.h). Other faults go to
// the handlers it stands in front of. Callers hold shared_mr.cpp's lock.
void install_fault_handler();

// Copies the private anonymous pages [start, start + len) into `fd` at file offset `start` (the
// file mirrors the address space) and maps the file there in their place. A store another thread
// makes meanwhile waits until the move is done and then lands in the new pages, never in the old
// ones. False (nothing changed) if the kernel refused a step.
bool move_into_file(int fd, uint64_t start, uint64_t len);

// The reverse, for pages no MR covers any more: private anonymous pages holding the file's bytes
// take the mapping's place (stores wait as above), and the file's pages are freed.
bool move_out_of_file(int fd, uint64_t start, uint64_t len);

// Frees the file's pages of [start, start + len) without touching any mapping (the program
// unmapped or replaced them itself).
void drop_from_file(int fd, uint64_t start, uint64_t len);

// In a child of fork(), the only thread: [start, start + len), mapped from fd, becomes private
// anonymous memory with the bytes it has now, so parent and child no longer share it (as the kernel
// copies pinned pages for the child at fork).
void privatize_in_child(int fd, uint64_t start, uint64_t len);

}  // namespace emu::prov

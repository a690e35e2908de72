// SPDX-License-Identifier: BSD-2-Clause
// EMU_PCAP: the packets this process's engines put on the wire, appended to a pcapng file that
// several processes share. The file starts with a section header and two interfaces, made once by
// whoever comes first (written aside, then linked into place: nobody appends before it is whole);
// every packet is then one Enhanced Packet Block written with one write() on an O_APPEND
// descriptor, so blocks of several processes interleave whole. Interface 0 is Ethernet (RoCE v2
// frames), 1 is InfiniBand (LINKTYPE_INFINIBAND, LRH first).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace emu::wire {

class Pcap {
 public:
  // The capture EMU_PCAP names, or nullptr (unset, or the file cannot be made: logged).
  static Pcap* from_env();
  Pcap(int fd, uint32_t snaplen, uint64_t limit) : fd_(fd), snaplen_(snaplen), limit_(limit) {}

  // One frame (cut to the snap length); comment may be nullptr. Past EMU_PCAP_LIMIT frames this
  // process writes no more (said once in the log).
  void write(bool ethernet, const uint8_t* frame, size_t len, const char* comment);

  // Whether this process has written all it may (callers skip building frames then).
  bool full() const { return written_.load(std::memory_order_relaxed) > limit_; }

  // The file's first blocks (tests check them): section header and the two interfaces.
  static std::string file_header(uint32_t snaplen);

 private:
  int fd_;
  uint32_t snaplen_;
  uint64_t limit_;
  std::atomic<uint64_t> written_{0};
};

}  // namespace emu::wire

// SPDX-License-Identifier: BSD-2-Clause
// The pcapng writer (pcapng: section header 0x0a0d0d0a, interface description 1, enhanced packet
// 6; options end with code 0; every block is padded to 4 bytes and ends with its length again).
#include "wire/pcap.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "emu/config.h"

namespace emu::wire {
namespace {

constexpr uint16_t kLinkEthernet = 1;
// InfiniBand packets go as ERF records of type INFINIBAND (what ibdump writes; Wireshark has no
// pcap link type of its own for an LRH).
constexpr uint16_t kLinkErf = 197;
constexpr uint8_t kErfTypeInfiniband = 21;
constexpr uint8_t kErfVarLen = 0x04;
constexpr size_t kErfHeader = 16;

void put16(std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
void put32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void pad4(std::string& s) {
  while (s.size() & 3) s.push_back('\0');
}

// A block: type, total length, body, total length.
std::string block(uint32_t type, const std::string& body) {
  std::string b;
  uint32_t total = static_cast<uint32_t>(12 + body.size());
  put32(b, type);
  put32(b, total);
  b += body;
  put32(b, total);
  return b;
}

std::string interface(uint16_t link, uint32_t snaplen) {
  std::string body;
  put16(body, link);
  put16(body, 0);
  put32(body, snaplen);
  return block(1, body);
}

}  // namespace

std::string Pcap::file_header(uint32_t snaplen) {
  std::string shb;
  put32(shb, 0x1a2b3c4d);  // byte-order magic
  put16(shb, 1);
  put16(shb, 0);
  put32(shb, 0xffffffff);  // section length unknown
  put32(shb, 0xffffffff);
  return block(0x0a0d0d0a, shb) + interface(kLinkEthernet, snaplen) +
         interface(kLinkErf, snaplen + kErfHeader);
}

Pcap* Pcap::from_env() {
  const char* path = std::getenv("EMU_PCAP");
  if (!path || !*path) return nullptr;
  auto snaplen = static_cast<uint32_t>(knob_uint("EMU_PCAP_SNAPLEN"));
  uint64_t limit = knob_uint("EMU_PCAP_LIMIT");
  // The header is written aside and linked into place, so a file that exists is whole.
  std::string aside = std::string(path) + ".hdr." + std::to_string(getpid());
  int fd = ::open(aside.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    std::string hdr = file_header(snaplen);
    bool ok = ::write(fd, hdr.data(), hdr.size()) == static_cast<ssize_t>(hdr.size());
    ::close(fd);
    if (ok && ::link(aside.c_str(), path) != 0 && errno != EEXIST)
      log("EMU_PCAP: cannot create %s: %s", path, std::strerror(errno));
    ::unlink(aside.c_str());
  }
  fd = ::open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    log("EMU_PCAP: cannot open %s: %s", path, std::strerror(errno));
    return nullptr;
  }
  return new Pcap(fd, snaplen, limit);  // lives as long as the process
}

void Pcap::write(bool ethernet, const uint8_t* frame, size_t len, const char* comment) {
  uint64_t n = written_.fetch_add(1, std::memory_order_relaxed);
  if (n >= limit_) {
    if (n == limit_)
      log("EMU_PCAP: %llu packets written, capturing no more", (unsigned long long)n);
    return;
  }
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t us =
      static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
  uint32_t cap = static_cast<uint32_t>(len < snaplen_ ? len : snaplen_);
  uint32_t extra = ethernet ? 0 : kErfHeader;
  thread_local std::string body;
  body.clear();
  put32(body, ethernet ? 0 : 1);
  put32(body, static_cast<uint32_t>(us >> 32));
  put32(body, static_cast<uint32_t>(us));
  put32(body, cap + extra);
  put32(body, static_cast<uint32_t>(len + extra));
  if (!ethernet) {
    // ERF: timestamp (32.32 fixed point seconds, little-endian), type, flags, then big-endian
    // record length, loss counter and wire length.
    uint64_t erf_ts = (static_cast<uint64_t>(ts.tv_sec) << 32) |
                      ((static_cast<uint64_t>(ts.tv_nsec) << 32) / 1000000000ull);
    body.append(reinterpret_cast<const char*>(&erf_ts), 8);
    body.push_back(static_cast<char>(kErfTypeInfiniband));
    body.push_back(static_cast<char>(kErfVarLen));
    uint16_t be[3] = {static_cast<uint16_t>(__builtin_bswap16(static_cast<uint16_t>(cap + extra))),
                      0, static_cast<uint16_t>(__builtin_bswap16(static_cast<uint16_t>(len)))};
    body.append(reinterpret_cast<const char*>(be), 6);
  }
  body.append(reinterpret_cast<const char*>(frame), cap);
  pad4(body);
  if (comment && *comment) {
    size_t clen = std::strlen(comment);
    put16(body, 1);  // opt_comment
    put16(body, static_cast<uint16_t>(clen));
    body.append(comment, clen);
    pad4(body);
    put32(body, 0);  // opt_endofopt
  }
  std::string b = block(6, body);
  // One write per block: O_APPEND places it whole after every block before it.
  if (::write(fd_, b.data(), b.size()) != static_cast<ssize_t>(b.size()))
    log("EMU_PCAP: short write: %s", std::strerror(errno));
}

}  // namespace emu::wire

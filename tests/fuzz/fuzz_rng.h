// SPDX-License-Identifier: BSD-2-Clause
// The fuzz targets' seeded generator: splitmix64, so a seed names one run exactly (docs/
// reliability.md "Bad input": why a generator of our own rather than libFuzzer). FUZZ_SEED and
// FUZZ_ITERS override a target's defaults (bench/fuzz.sh runs longer campaigns); FUZZ_PERCENT
// (default 100) scales every target's default step count instead: the sanitizer runs take the
// first steps of the same seeds (ci/sanitize.sh).
#pragma once
#include <cstdint>
#include <cstdlib>

namespace fuzz {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return n ? static_cast<uint32_t>(next() % n) : 0; }
  bool chance(uint32_t percent) { return below(100) < percent; }
  template <class T, size_t N>
  T pick(const T (&v)[N]) {
    return v[below(N)];
  }
  // Mostly values near the edges a bounds check must get right, sometimes anything.
  uint64_t edgy(uint64_t limit) {
    switch (below(6)) {
      case 0:
        return 0;
      case 1:
        return limit;
      case 2:
        return limit + 1;
      case 3:
        return below(static_cast<uint32_t>(limit < 4096 ? limit + 2 : 4096));
      case 4:
        return ~0ull >> below(64);
      default:
        return next();
    }
  }

 private:
  uint64_t s_;
};

inline uint64_t env_or(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : dflt;
}

// A target's step count: FUZZ_ITERS, or its default scaled by FUZZ_PERCENT (at least one step).
inline uint64_t iters(uint64_t dflt) {
  uint64_t scaled = dflt * env_or("FUZZ_PERCENT", 100) / 100;
  return env_or("FUZZ_ITERS", scaled ? scaled : 1);
}

}  // namespace fuzz

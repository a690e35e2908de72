// SPDX-License-Identifier: BSD-2-Clause
#include "options.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "message.h"

namespace stress {
namespace {

bool to_u64(const char* s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || !end || *end || end == s || s[0] == '-') return false;
  *out = v;
  return true;
}

bool to_u32(const char* s, uint32_t lo, uint32_t hi, uint32_t* out) {
  uint64_t v;
  if (!to_u64(s, &v) || v < lo || v > hi) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

bool to_sizes(const char* s, std::vector<uint32_t>* out) {
  out->clear();
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    uint32_t v;
    if (!to_u32(item.c_str(), kMinMessage, kMaxMessage, &v)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

}  // namespace

void print_usage(FILE* out) {
  std::fprintf(
      out,
      "usage: emu-stress [options]   (under emu-run for emulated devices)\n"
      "  --threads N            posting threads (default 2, at most 255)\n"
      "  --qps M                initiator QPs; lanes (thread i%%N, QP i%%M) for i < max(N, M)\n"
      "  --api verbs|direct     ibv_post_send/ibv_poll_cq, or uctlite's own WQEs via emudv.h\n"
      "  --mmio bf_post|bf_post_mt|db_lock   (direct only; default bf_post_mt)\n"
      "  --stores calls|plain   register writes through emudv's MMIO calls, or as plain stores\n"
      "                         into the mapped register, as UCX makes them (direct only)\n"
      "  --thread-mode single|serialized     (default serialized)\n"
      "  --op write|send        (default write)\n"
      "  --sizes a,b,...        message sizes, %u..%u bytes (default 8,64,128,200)\n"
      "  --count K              messages per thread (default 1000)\n"
      "  --duration-ms D        post for D ms instead of --count\n"
      "  --device NAME          ibv device (default emu0)\n"
      "  --td                   each thread's QPs under its own thread domain (ibv_alloc_td)\n"
      "  --json FILE            write a JSON summary\n"
      "  --expect-clean         exit 1 on any race event, corruption, missing/duplicate or error "
      "completion\n"
      "  --drain-ms D           give up draining after D ms without progress (default 2000)\n"
      "  --sq-depth N           max_send_wr per QP (default 64)\n"
      "  --rq-depth N           receives per target QP (default 128)\n"
      "  --max-inline N         max_inline_data asked for (default 256)\n"
      "  --no-inline            every payload through an SGE\n"
      "  --races-shown N        race events listed verbatim (default 8)\n"
      "  --pin block|none       block: posting thread t runs only on allowed CPU t*ncpu/N, so\n"
      "                         threads far apart in number run on different CPUs (default none)\n"
      "  --yield-every N        posting threads yield the CPU after every N posts, so that more\n"
      "                         threads than cores interleave finely (default 0: never)\n"
      "exit: 0 run completed (findings are in the report), 1 --expect-clean violated, 2 setup "
      "failed\n",
      kMinMessage, kMaxMessage);
}

bool parse_options(int argc, char** argv, Options* o, std::string* err) {
  bool count_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    auto bad = [&](const char* v) {
      *err = "bad or missing value for " + a + (v ? std::string(": ") + v : std::string());
      return false;
    };
    const char* v = nullptr;
    if (a == "--td") {
      o->td = true;
      continue;
    }
    if (a == "--expect-clean") {
      o->expect_clean = true;
      continue;
    }
    if (a == "--no-inline") {
      o->sge_only = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      *err = "";
      return false;
    }
    v = value();
    if (!v) return bad(v);
    if (a == "--threads") {
      if (!to_u32(v, 1, 255, &o->threads)) return bad(v);
    } else if (a == "--qps") {
      if (!to_u32(v, 1, 4096, &o->qps)) return bad(v);
    } else if (a == "--api") {
      auto x = uctlite::parse_api(v);
      if (!x) return bad(v);
      o->api = *x;
    } else if (a == "--mmio") {
      auto x = uctlite::parse_mmio(v);
      if (!x) return bad(v);
      o->mmio = *x;
      o->mmio_given = true;
    } else if (a == "--stores") {
      if (std::string(v) != "calls" && std::string(v) != "plain") return bad(v);
      o->plain_stores = std::string(v) == "plain";
      o->stores_given = true;
    } else if (a == "--thread-mode") {
      auto x = uctlite::parse_thread_mode(v);
      if (!x) return bad(v);
      o->thread_mode = *x;
    } else if (a == "--op") {
      auto x = uctlite::parse_op(v);
      if (!x) return bad(v);
      o->op = *x;
    } else if (a == "--sizes") {
      if (!to_sizes(v, &o->sizes)) return bad(v);
    } else if (a == "--count") {
      if (!to_u64(v, &o->count) || o->count == 0 || o->count > (1u << 24)) return bad(v);
      count_given = true;
    } else if (a == "--duration-ms") {
      if (!to_u64(v, &o->duration_ms) || o->duration_ms == 0) return bad(v);
    } else if (a == "--device") {
      o->device = v;
    } else if (a == "--json") {
      o->json_path = v;
    } else if (a == "--drain-ms") {
      if (!to_u64(v, &o->drain_ms) || o->drain_ms == 0) return bad(v);
    } else if (a == "--sq-depth") {
      if (!to_u32(v, 1, 8192, &o->sq_depth)) return bad(v);
    } else if (a == "--rq-depth") {
      if (!to_u32(v, 1, 8192, &o->rq_depth)) return bad(v);
    } else if (a == "--max-inline") {
      if (!to_u32(v, 0, 1024, &o->max_inline)) return bad(v);
    } else if (a == "--pin") {
      if (std::strcmp(v, "block") && std::strcmp(v, "none")) return bad(v);
      o->pin_block = !std::strcmp(v, "block");
    } else if (a == "--yield-every") {
      if (!to_u32(v, 0, 1u << 30, &o->yield_every)) return bad(v);
    } else if (a == "--races-shown") {
      if (!to_u32(v, 0, 1024, &o->races_shown)) return bad(v);
    } else {
      *err = "unknown option " + a;
      return false;
    }
  }
  if (count_given && o->duration_ms) {
    *err = "--count and --duration-ms exclude each other";
    return false;
  }
  if (o->stores_given && o->api != uctlite::Api::direct) {
    *err = "--stores applies to --api direct only";
    return false;
  }
  if (o->mmio_given && o->api != uctlite::Api::direct) {
    *err = "--mmio applies to --api direct only (verbs: the provider chooses)";
    return false;
  }
  if (!count_given && !o->duration_ms) o->count = 1000;
  return true;
}

}  // namespace stress

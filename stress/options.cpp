// SPDX-License-Identifier: BSD-2-Clause
#include "options.h"

#include <string>

#include "emu/cli.h"
#include "message.h"

namespace stress {
namespace {

// An option whose words name one value of an enum (uctlite's parse_* functions say which): its
// check names the words, its callback stores the value.
template <class T>
void add_choice(CLI::App& app, const char* name, T* out,
                std::optional<T> (*parse)(const std::string&), const std::string& words,
                const std::string& help, bool* given = nullptr) {
  const CLI::Validator one_of(
      [parse, words](const std::string& text) {
        return parse(text) ? std::string() : text + " is not " + words;
      },
      words);
  app.add_option_function<std::string>(
         name,
         [out, parse, given](const std::string& text) {
           *out = *parse(text);
           if (given) *given = true;
         },
         help)
      ->check(one_of);
}

// A whole number in [lo, hi].
template <class T>
CLI::Option* add_number(CLI::App& app, const char* name, T* out, uint64_t lo, uint64_t hi,
                        const std::string& help) {
  return app.add_option(name, *out, help)->check(emu::cli::in_range(lo, hi))->capture_default_str();
}

void add_shape(CLI::App& app, Options* o) {
  add_number(app, "--threads", &o->threads, 1, 255, "posting threads");
  add_number(app, "--qps", &o->qps, 1, 4096,
             "initiator QPs; lanes (thread i%N, QP i%M) for i < max(N, M)");
  add_choice(app, "--api", &o->api, uctlite::parse_api, "verbs|direct",
             "ibv_post_send/ibv_poll_cq, or uctlite's own WQEs via emudv.h (default verbs)");
  add_choice(app, "--mmio", &o->mmio, uctlite::parse_mmio, "bf_post|bf_post_mt|db_lock",
             "direct only (default bf_post_mt)", &o->mmio_given);
  app.add_option_function<std::string>(
         "--stores",
         [o](const std::string& v) {
           o->plain_stores = v == "plain";
           o->stores_given = true;
         },
         "register writes through emudv's MMIO calls, or as plain stores into the mapped "
         "register, as UCX makes them (direct only; default calls)")
      ->check(CLI::IsMember({"calls", "plain"}));
  add_choice(app, "--thread-mode", &o->thread_mode, uctlite::parse_thread_mode, "single|serialized",
             "(default serialized)");
  add_choice(app, "--op", &o->op, uctlite::parse_op, "write|send", "(default write)");
  app.add_option("--sizes", o->sizes, "message sizes in bytes")
      ->delimiter(',')
      ->check(emu::cli::in_range(kMinMessage, kMaxMessage))
      ->capture_default_str();
  app.add_option("--device", o->device, "ibv device")->capture_default_str();
  app.add_flag("--td", o->td, "each thread's QPs under its own thread domain (ibv_alloc_td)");
}

void add_amount(CLI::App& app, Options* o) {
  CLI::Option* count = add_number(app, "--count", &o->count, 1, 1u << 24, "messages per thread");
  CLI::Option* duration = add_number(app, "--duration-ms", &o->duration_ms, 1, UINT64_MAX,
                                     "post for D ms instead of --count");
  count->excludes(duration)->default_str("1000");
  duration->default_str("");
  add_number(app, "--drain-ms", &o->drain_ms, 1, UINT64_MAX,
             "give up draining after D ms without progress");
  add_number(app, "--sq-depth", &o->sq_depth, 1, 8192, "max_send_wr per QP");
  add_number(app, "--rq-depth", &o->rq_depth, 1, 8192, "receives per target QP");
  add_number(app, "--max-inline", &o->max_inline, 0, 1024, "max_inline_data asked for");
  app.add_flag("--no-inline", o->sge_only, "every payload through an SGE");
  app.add_option_function<std::string>(
         "--pin", [o](const std::string& v) { o->pin_block = v == "block"; },
         "block: posting thread t runs only on allowed CPU t*ncpu/N, so threads far apart in "
         "number run on different CPUs (default none)")
      ->check(CLI::IsMember({"block", "none"}));
  add_number(app, "--yield-every", &o->yield_every, 0, 1u << 30,
             "posting threads yield the CPU after every N posts, so that more threads than "
             "cores interleave finely (0: never)");
}

void add_report(CLI::App& app, Options* o) {
  app.add_option("--json", o->json_path, "write a JSON summary");
  app.add_flag("--expect-clean", o->expect_clean,
               "exit 1 on any race event, corruption, missing/duplicate or error completion");
  add_number(app, "--races-shown", &o->races_shown, 0, 1024, "race events listed verbatim");
}

}  // namespace

int parse_options(int argc, char** argv, Options* o) {
  CLI::App app(
      "many threads post through shared QPs and every message is checked (run it under "
      "emu-run for emulated devices)",
      "emu-stress");
  add_shape(app, o);
  add_amount(app, o);
  add_report(app, o);
  app.footer(
      "exit: 0 run completed (findings are in the report), 1 --expect-clean violated, 2 "
      "bad command line or setup failed");
  // What the options say together, checked inside the parse so that it fails the same way.
  app.callback([o] {
    if (o->stores_given && o->api != uctlite::Api::direct)
      throw CLI::ValidationError("--stores", "applies to --api direct only");
    if (o->mmio_given && o->api != uctlite::Api::direct)
      throw CLI::ValidationError("--mmio",
                                 "applies to --api direct only (verbs: the provider "
                                 "chooses)");
  });
  const int status = emu::cli::parse(app, argc, argv);
  if (status < 0 && o->count == 0 && o->duration_ms == 0) o->count = 1000;
  return status;
}

}  // namespace stress

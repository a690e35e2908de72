// SPDX-License-Identifier: BSD-2-Clause
// The export sweep (issue 14 item 2): every function libibverbs.so.1 exports (read from the ELF
// file of the library this process loaded, sweep/elf_exports.cpp) has an entry in the case table
// (sweep/cases_*.cpp), and so does every verbs_context operation reachable through verbs.h's
// inline functions. An export missing from the table fails as "untested export: NAME", so a newer
// rdma-core shows what it added. Each case runs in a forked child that opens emu0 itself (this
// process never touches the device before forking), so a crash or a hang costs one case and names
// it; a child also fails when the device recorded a race while it ran.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "emudv_link.h"
#include "sweep/elf_exports.h"
#include "sweep/sweep_case.h"
#include "verbs_fixture.h"

namespace sweep {
extern const char kProviderAbi[];

namespace {

constexpr unsigned kCaseSeconds = 60;  // a bound against a hang, not a timing assertion

int failed_parts() {
  const testing::TestResult* r = testing::UnitTest::GetInstance()->current_test_info()->result();
  int n = 0;
  for (int i = 0; i < r->total_part_count(); ++i) n += r->GetTestPartResult(i).failed();
  return n;
}

bool open_env(Env& env) {
  env.list = ibv_get_device_list(nullptr);
  for (int i = 0; env.list && env.list[i]; ++i)
    if (std::strcmp(ibv_get_device_name(env.list[i]), "emu0") == 0) env.dev = env.list[i];
  if (!env.dev) return false;
  env.ctx = ibv_open_device(env.dev);
  env.pd = env.ctx ? ibv_alloc_pd(env.ctx) : nullptr;
  env.cq = env.pd ? ibv_create_cq(env.ctx, 16, nullptr, nullptr, 0) : nullptr;
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  env.page = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  env.mr = env.cq && env.page ? ibv_reg_mr(env.pd, env.page, 4096, vt::kAllAccess) : nullptr;
  return env.mr != nullptr;
}

void close_env(Env& env) {
  if (env.mr) {
    EXPECT_EQ(ibv_dereg_mr(env.mr), 0);
  }
  if (env.cq) {
    EXPECT_EQ(ibv_destroy_cq(env.cq), 0);
  }
  if (env.pd) {
    EXPECT_EQ(ibv_dealloc_pd(env.pd), 0);
  }
  if (env.ctx) {
    EXPECT_EQ(ibv_close_device(env.ctx), 0);
  }
  if (env.list) ibv_free_device_list(env.list);
}

// The child's whole life: open, run, check for races, close; exit 0 only without a failure.
[[noreturn]] void child(void (*run)(Env&)) {
  alarm(kCaseSeconds);
  int before = failed_parts();
  Env env;
  if (open_env(env)) {
    const uctlite::EmudvFns* dv = uctlite::emudv_fns();
    uint64_t races = dv ? dv->races_recorded() : 0;
    run(env);
    if (dv) {
      EXPECT_EQ(dv->races_recorded(), races) << "the device recorded a race";
    }
  } else {
    ADD_FAILURE() << "emu0 and its PD, CQ and MR could not be made, errno " << errno;
  }
  close_env(env);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(failed_parts() == before ? 0 : 1);
}

// Runs `run` in a child; "" if it passed, else what went wrong.
std::string run_in_child(void (*run)(Env&)) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) child(run);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return WTERMSIG(status) == SIGALRM
               ? "hung (no answer in " + std::to_string(kCaseSeconds) + " s)"
               : std::string("crashed: ") + strsignal(WTERMSIG(status));
  return WEXITSTATUS(status) == 0 ? "" : "wrong answer (see the failures above)";
}

TEST(ExportSweep, EveryExportIsCalledOrExcusedAndNoneCrashes) {
  std::string path, error;
  std::vector<Export> exports = loaded_library_exports("libibverbs.so.1", &path, &error);
  ASSERT_FALSE(exports.empty()) << error;
  std::printf("%zu functions exported by %s\n", exports.size(), path.c_str());

  std::map<std::string, Case> table;
  std::set<std::string> inline_names;
  for (auto family : {device_cases, object_cases, misc_cases, private_cases, inline_cases})
    for (const Case& c : family()) {
      EXPECT_TRUE(table.emplace(c.name, c).second) << "twice in the table: " << c.name;
      if (family == inline_cases) inline_names.insert(c.name);
    }

  std::map<void (*)(Env&), std::vector<std::string>> runs;  // each case once, for all its names
  int excused = 0;
  for (const Export& e : exports) {
    auto it = table.find(e.name);
    if (it == table.end()) {
      ADD_FAILURE() << "untested export: " << e.name;
      continue;
    }
    const Case& c = it->second;
    if (c.run) {
      runs[c.run].push_back(e.name);
    } else {
      ++excused;
      if (c.reason == kProviderAbi) {
        EXPECT_TRUE(e.only_private) << e.name << " is excused as provider ABI but is exported "
                                    << "under a public version too";
      }
    }
  }
  std::set<std::string> exported_names;
  for (const Export& e : exports) exported_names.insert(e.name);
  for (const auto& [name, c] : table) {
    if (inline_names.count(name))
      runs[c.run].push_back(name);
    else if (!exported_names.count(name))
      std::printf("note: %s is in the table but not exported by this libibverbs\n", name.c_str());
  }
  std::printf("%d excused (not callable), %zu cases to run\n", excused, runs.size());

  int passed = 0;
  for (const auto& [run, names] : runs) {
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
    std::string what = run_in_child(run);
    if (what.empty())
      ++passed;
    else
      ADD_FAILURE() << all << ": " << what;
  }
  std::printf("%d of %zu cases passed\n", passed, runs.size());
}

}  // namespace
}  // namespace sweep

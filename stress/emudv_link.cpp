// SPDX-License-Identifier: BSD-2-Clause
#include "emudv_link.h"

#include <dlfcn.h>

namespace uctlite {
namespace {

template <typename Fn>
bool find(Fn* out, const char* name, const char* version = "EMUDV_1.0") {
  *out = reinterpret_cast<Fn>(dlvsym(RTLD_DEFAULT, name, version));
  return *out != nullptr;
}

EmudvFns load() {
  EmudvFns f{};
  bool all = find(&f.init_qp, "emudv_init_qp") && find(&f.init_cq, "emudv_init_cq") &&
             find(&f.db_write64, "emudv_db_write64") && find(&f.bf_copy, "emudv_bf_copy") &&
             find(&f.mmio_flush, "emudv_mmio_flush") && find(&f.sq_write, "emudv_sq_write") &&
             find(&f.sq_dbrec, "emudv_sq_dbrec") &&
             find(&f.races_recorded, "emudv_races_recorded") &&
             find(&f.read_races, "emudv_read_races") &&
             find(&f.sq_device_state, "emudv_sq_device_state") &&
             find(&f.sq_dbrec_unfenced, "emudv_sq_dbrec_unfenced", "EMUDV_1.1") &&
             find(&f.to_device_barrier, "emudv_to_device_barrier", "EMUDV_1.1");
  if (!all) f.init_qp = nullptr;  // a partial set is no set
  return f;
}

}  // namespace

const EmudvFns* emudv_fns() {
  static const EmudvFns fns = load();
  return fns.init_qp ? &fns : nullptr;
}

}  // namespace uctlite

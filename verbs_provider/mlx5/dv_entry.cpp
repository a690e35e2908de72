// SPDX-License-Identifier: BSD-2-Clause
// The mlx5dv entry points a program written for ConnectX calls (infiniband/mlx5dv.h), under the
// versions libmlx5 44 gives them (exports.map), so that they reach us first. A device that is not
// ours goes on to libmlx5. Ours answers as the personality says (EMU_PERSONALITY,
// docs/design/mlx5-personality.md): under `emu` it is no mlx5 device at all, as libmlx5 itself
// would answer; under `mlx5` it is one without DEVX whose queues mlx5dv_init_obj hands out in
// mlx5's form (mlx5/dv_objects.cpp).
#include <infiniband/mlx5dv.h>

#include <cerrno>

#include "dv_objects.h"
#include "emu/config.h"
#include "verbs/forward.h"
#include "verbs/provider.h"

namespace emu::prov {
namespace {

// libmlx5's own definition: in the global scope when the program links it, else the copy a module
// loaded locally brought (UCX's libuct_ib, dlopened without RTLD_GLOBAL).
#define LIBMLX5(fn, ver) (reinterpret_cast<decltype(&fn)>(real_symbol_of("libmlx5.so.1", #fn, ver)))

bool personality_mlx5() { return config().personality_mlx5; }

template <typename T>
T* unsupported() {
  errno = EOPNOTSUPP;
  return nullptr;
}

// The context mlx5dv_init_obj takes the objects' device from: the first object asked about, in
// libmlx5's order (it does not look at the others either).
ibv_context* context_of(const mlx5dv_obj* obj, uint64_t types) {
  if (types & MLX5DV_OBJ_QP) return obj->qp.in->context;
  if (types & MLX5DV_OBJ_CQ) return obj->cq.in->context;
  if (types & MLX5DV_OBJ_SRQ) return obj->srq.in->context;
  if (types & MLX5DV_OBJ_RWQ) return obj->rwq.in->context;
  if (types & MLX5DV_OBJ_DM) return obj->dm.in->context;
  if (types & MLX5DV_OBJ_AH) return obj->ah.in->context;
  if (types & MLX5DV_OBJ_PD) return obj->pd.in->context;
  return nullptr;
}

}  // namespace
}  // namespace emu::prov

using namespace emu::prov;

extern "C" {

bool mlx5dv_is_supported(ibv_device* device) {
  if (is_emu_device(device)) return personality_mlx5();
  auto fn = LIBMLX5(mlx5dv_is_supported, "MLX5_1.8");
  return fn && fn(device);
}

// No DEVX on an emulated device: the answer libmlx5 gives for a device it does not drive, which
// sends UCX to its mlx5dv path without DEVX.
ibv_context* mlx5dv_open_device(ibv_device* device, mlx5dv_context_attr* attr) {
  if (is_emu_device(device)) return unsupported<ibv_context>();
  auto fn = LIBMLX5(mlx5dv_open_device, "MLX5_1.7");
  return fn ? fn(device, attr) : unsupported<ibv_context>();
}

ibv_cq_ex* mlx5dv_create_cq(ibv_context* context, ibv_cq_init_attr_ex* cq_attr,
                            mlx5dv_cq_init_attr* mlx5_cq_attr) {
  if (is_emu(context)) {
    if (!personality_mlx5()) return unsupported<ibv_cq_ex>();
    return dv_create_cq(context, cq_attr, mlx5_cq_attr);
  }
  auto fn = LIBMLX5(mlx5dv_create_cq, "MLX5_1.1");
  return fn ? fn(context, cq_attr, mlx5_cq_attr) : unsupported<ibv_cq_ex>();
}

ibv_qp* mlx5dv_create_qp(ibv_context* context, ibv_qp_init_attr_ex* qp_attr,
                         mlx5dv_qp_init_attr* mlx5_qp_attr) {
  if (is_emu(context)) {
    if (!personality_mlx5()) return unsupported<ibv_qp>();
    return dv_create_qp(context, qp_attr, mlx5_qp_attr);
  }
  auto fn = LIBMLX5(mlx5dv_create_qp, "MLX5_1.3");
  return fn ? fn(context, qp_attr, mlx5_qp_attr) : unsupported<ibv_qp>();
}

int mlx5dv_init_obj(mlx5dv_obj* obj, uint64_t obj_type) {
  ibv_context* context = obj ? context_of(obj, obj_type) : nullptr;
  if (context && is_emu(context))
    return personality_mlx5() ? dv_init_obj(obj, obj_type) : EOPNOTSUPP;
  auto fn = LIBMLX5(mlx5dv_init_obj, "MLX5_1.2");
  return fn ? fn(obj, obj_type) : (context ? EOPNOTSUPP : EINVAL);
}

}  // extern "C"

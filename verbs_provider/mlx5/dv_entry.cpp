// SPDX-License-Identifier: BSD-2-Clause
// The mlx5dv entry points a program written for ConnectX calls (infiniband/mlx5dv.h), under the
// versions libmlx5 44 gives them (exports.map), so that they reach us first. A device that is not
// ours goes on to libmlx5. Ours answers as the personality says (EMU_PERSONALITY,
// docs/design/mlx5-personality.md): under `emu` it is no mlx5 device at all, as libmlx5 itself
// would answer; under `mlx5` it is one without DEVX, whose objects are not yet handed out in
// mlx5dv form (create_cq, create_qp, init_obj answer EOPNOTSUPP).
#include <infiniband/mlx5dv.h>

#include <cerrno>

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

// Whether any object mlx5dv_init_obj is asked about is one of ours.
bool names_emu_object(const mlx5dv_obj* obj, uint64_t types) {
  return ((types & MLX5DV_OBJ_QP) && is_emu(obj->qp.in->context)) ||
         ((types & MLX5DV_OBJ_CQ) && is_emu(obj->cq.in->context)) ||
         ((types & MLX5DV_OBJ_SRQ) && is_emu(obj->srq.in->context)) ||
         ((types & MLX5DV_OBJ_RWQ) && is_emu(obj->rwq.in->context)) ||
         ((types & MLX5DV_OBJ_DM) && is_emu(obj->dm.in->context)) ||
         ((types & MLX5DV_OBJ_AH) && is_emu(obj->ah.in->context)) ||
         ((types & MLX5DV_OBJ_PD) && is_emu(obj->pd.in->context));
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
  if (is_emu(context)) return unsupported<ibv_cq_ex>();
  auto fn = LIBMLX5(mlx5dv_create_cq, "MLX5_1.1");
  return fn ? fn(context, cq_attr, mlx5_cq_attr) : unsupported<ibv_cq_ex>();
}

ibv_qp* mlx5dv_create_qp(ibv_context* context, ibv_qp_init_attr_ex* qp_attr,
                         mlx5dv_qp_init_attr* mlx5_qp_attr) {
  if (is_emu(context)) return unsupported<ibv_qp>();
  auto fn = LIBMLX5(mlx5dv_create_qp, "MLX5_1.3");
  return fn ? fn(context, qp_attr, mlx5_qp_attr) : unsupported<ibv_qp>();
}

int mlx5dv_init_obj(mlx5dv_obj* obj, uint64_t obj_type) {
  if (names_emu_object(obj, obj_type)) return EOPNOTSUPP;
  auto fn = LIBMLX5(mlx5dv_init_obj, "MLX5_1.2");
  return fn ? fn(obj, obj_type) : EOPNOTSUPP;
}

}  // extern "C"

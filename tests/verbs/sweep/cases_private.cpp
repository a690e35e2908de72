// SPDX-License-Identifier: BSD-2-Clause
// Sweep entries for libibverbs' provider ABI (IBVERBS_PRIVATE_34): the ibv_cmd_* marshallers,
// ioctl helpers and driver registration that a provider built against this exact rdma-core
// calls with its own driver structures (verbs_context private part, driver-sized command
// buffers). No application reaches them, and an emu context has no private part to pass; the
// sweep checks that each is defined only under a private version, so the reason stays true.
#include "sweep_case.h"

namespace sweep {

// The reason shared by every provider-ABI entry (the runner checks the version).
extern const char kProviderAbi[] =
    "provider ABI (IBVERBS_PRIVATE_34 only): called by a provider built against this rdma-core "
    "with its own driver structures, never by an application";

std::vector<Case> private_cases() {
  return {
      {"__ioctl_final_num_attrs", nullptr, kProviderAbi},
      {"__verbs_log", nullptr, kProviderAbi},
      {"_verbs_init_and_alloc_context", nullptr, kProviderAbi},
      {"execute_ioctl", nullptr, kProviderAbi},
      {"ibv_cmd_advise_mr", nullptr, kProviderAbi},
      {"ibv_cmd_alloc_dm", nullptr, kProviderAbi},
      {"ibv_cmd_alloc_mw", nullptr, kProviderAbi},
      {"ibv_cmd_alloc_pd", nullptr, kProviderAbi},
      {"ibv_cmd_attach_mcast", nullptr, kProviderAbi},
      {"ibv_cmd_close_xrcd", nullptr, kProviderAbi},
      {"ibv_cmd_create_ah", nullptr, kProviderAbi},
      {"ibv_cmd_create_counters", nullptr, kProviderAbi},
      {"ibv_cmd_create_cq", nullptr, kProviderAbi},
      {"ibv_cmd_create_cq_ex", nullptr, kProviderAbi},
      {"ibv_cmd_create_flow", nullptr, kProviderAbi},
      {"ibv_cmd_create_flow_action_esp", nullptr, kProviderAbi},
      {"ibv_cmd_create_qp", nullptr, kProviderAbi},
      {"ibv_cmd_create_qp_ex", nullptr, kProviderAbi},
      {"ibv_cmd_create_qp_ex2", nullptr, kProviderAbi},
      {"ibv_cmd_create_rwq_ind_table", nullptr, kProviderAbi},
      {"ibv_cmd_create_srq", nullptr, kProviderAbi},
      {"ibv_cmd_create_srq_ex", nullptr, kProviderAbi},
      {"ibv_cmd_create_wq", nullptr, kProviderAbi},
      {"ibv_cmd_dealloc_mw", nullptr, kProviderAbi},
      {"ibv_cmd_dealloc_pd", nullptr, kProviderAbi},
      {"ibv_cmd_dereg_mr", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_ah", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_counters", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_cq", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_flow", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_flow_action", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_qp", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_rwq_ind_table", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_srq", nullptr, kProviderAbi},
      {"ibv_cmd_destroy_wq", nullptr, kProviderAbi},
      {"ibv_cmd_detach_mcast", nullptr, kProviderAbi},
      {"ibv_cmd_free_dm", nullptr, kProviderAbi},
      {"ibv_cmd_get_context", nullptr, kProviderAbi},
      {"ibv_cmd_modify_cq", nullptr, kProviderAbi},
      {"ibv_cmd_modify_flow_action_esp", nullptr, kProviderAbi},
      {"ibv_cmd_modify_qp", nullptr, kProviderAbi},
      {"ibv_cmd_modify_qp_ex", nullptr, kProviderAbi},
      {"ibv_cmd_modify_srq", nullptr, kProviderAbi},
      {"ibv_cmd_modify_wq", nullptr, kProviderAbi},
      {"ibv_cmd_open_qp", nullptr, kProviderAbi},
      {"ibv_cmd_open_xrcd", nullptr, kProviderAbi},
      {"ibv_cmd_poll_cq", nullptr, kProviderAbi},
      {"ibv_cmd_post_recv", nullptr, kProviderAbi},
      {"ibv_cmd_post_send", nullptr, kProviderAbi},
      {"ibv_cmd_post_srq_recv", nullptr, kProviderAbi},
      {"ibv_cmd_query_context", nullptr, kProviderAbi},
      {"ibv_cmd_query_device_any", nullptr, kProviderAbi},
      {"ibv_cmd_query_mr", nullptr, kProviderAbi},
      {"ibv_cmd_query_port", nullptr, kProviderAbi},
      {"ibv_cmd_query_qp", nullptr, kProviderAbi},
      {"ibv_cmd_query_srq", nullptr, kProviderAbi},
      {"ibv_cmd_read_counters", nullptr, kProviderAbi},
      {"ibv_cmd_reg_dm_mr", nullptr, kProviderAbi},
      {"ibv_cmd_reg_dmabuf_mr", nullptr, kProviderAbi},
      {"ibv_cmd_reg_mr", nullptr, kProviderAbi},
      {"ibv_cmd_req_notify_cq", nullptr, kProviderAbi},
      {"ibv_cmd_rereg_mr", nullptr, kProviderAbi},
      {"ibv_cmd_resize_cq", nullptr, kProviderAbi},
      {"ibv_read_ibdev_sysfs_file", nullptr, kProviderAbi},
      {"verbs_init_cq", nullptr, kProviderAbi},
      {"verbs_open_device", nullptr, kProviderAbi},
      {"verbs_register_driver_34", nullptr, kProviderAbi},
      {"verbs_set_ops", nullptr, kProviderAbi},
      {"verbs_uninit_context", nullptr, kProviderAbi},
  };
}

}  // namespace sweep

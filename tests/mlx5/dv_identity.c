// SPDX-License-Identifier: BSD-2-Clause
// What a program written for ConnectX learns of emu0 through mlx5dv and the device's PCI directory,
// under each personality (EMU_PERSONALITY): dv_identity emu|mlx5. Exits 0 when every answer is the
// expected one, else prints the first wrong one and exits 1.
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failed(const char *what) {
  printf("FAIL %s\n", what);
  return 1;
}

// The first line of /sys/class/infiniband/<dev>/device/<file>, parsed as a number.
static long pci_id(const char *dev, const char *file) {
  char path[256];
  snprintf(path, sizeof path, "/sys/class/infiniband/%s/device/%s", dev, file);
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f) {
    if (fscanf(f, "%li", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

// Under emu0's own personality libmlx5's answers for a device it does not drive.
static int emu_objects(struct ibv_context *ctx) {
  struct ibv_cq_init_attr_ex cq_attr = {.cqe = 16};
  errno = 0;
  if (mlx5dv_create_cq(ctx, &cq_attr, NULL) != NULL || errno != EOPNOTSUPP)
    return failed("mlx5dv_create_cq is EOPNOTSUPP");
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (!cq) return failed("ibv_create_cq");
  struct mlx5dv_cq dv_cq;
  struct mlx5dv_obj obj = {.cq = {.in = cq, .out = &dv_cq}};
  if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) != EOPNOTSUPP) return failed("mlx5dv_init_obj");
  ibv_destroy_cq(cq);
  return 0;
}

// Under the mlx5 personality: CQs of 128-byte CQEs as asked, described by mlx5dv_init_obj; DC
// QPs; what this device does not have (CQE compression, DCI streams) refused as libmlx5 does
// (EINVAL).
static int mlx5_objects(struct ibv_context *ctx) {
  struct ibv_cq_init_attr_ex cq_attr = {.cqe = 17};
  struct mlx5dv_cq_init_attr dv_attr = {.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
                                        .cqe_size = 96};
  errno = 0;
  if (mlx5dv_create_cq(ctx, &cq_attr, &dv_attr) != NULL || errno != EINVAL)
    return failed("mlx5dv_create_cq of 96-byte CQEs is EINVAL");
  dv_attr.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE;
  errno = 0;
  if (mlx5dv_create_cq(ctx, &cq_attr, &dv_attr) != NULL || errno != EINVAL)
    return failed("mlx5dv_create_cq with compressed CQEs is EINVAL");
  dv_attr.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
  dv_attr.cqe_size = 128;
  struct ibv_cq_ex *cqx = mlx5dv_create_cq(ctx, &cq_attr, &dv_attr);
  if (!cqx) return failed("mlx5dv_create_cq of 128-byte CQEs");
  struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);
  struct mlx5dv_cq dv_cq;
  struct mlx5dv_obj obj = {.cq = {.in = cq, .out = &dv_cq}};
  if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ)) return failed("mlx5dv_init_obj(CQ)");
  if (dv_cq.cqe_size != 128 || dv_cq.cqe_cnt < 18 || (dv_cq.cqe_cnt & (dv_cq.cqe_cnt - 1)) ||
      !dv_cq.buf || !dv_cq.dbrec || !dv_cq.cq_uar)
    return failed("mlx5dv_cq as made");
  // Every CQE starts invalid (mlx5's opcode 15) with the owner bit of a lap not yet begun.
  for (uint32_t i = 0; i < dv_cq.cqe_cnt; ++i) {
    struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)((char *)dv_cq.buf + 128 * i + 64);
    if (mlx5dv_get_cqe_opcode(cqe) != MLX5_CQE_INVALID) return failed("a fresh CQE is invalid");
  }
  if (dv_cq.dbrec[0] != 0) return failed("the consumer index starts at 0");
  // DC: a DCT on an SRQ as UCX probes for it, moved to INIT and RTR; a DCI; what is not emulated
  // (DCI streams) refused, a DCT without an SRQ invalid.
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 1, .max_sge = 1}};
  struct ibv_srq *srq = pd ? ibv_create_srq(pd, &srq_attr) : NULL;
  if (!srq) return failed("pd/srq");
  struct ibv_qp_init_attr_ex qp_attr = {.qp_type = IBV_QPT_DRIVER,
                                        .send_cq = cq,
                                        .recv_cq = cq,
                                        .srq = srq,
                                        .comp_mask = IBV_QP_INIT_ATTR_PD,
                                        .pd = pd};
  struct mlx5dv_qp_init_attr dc = {
      .comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
      .dc_init_attr = {.dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = 0x1ee7a330}};
  struct ibv_qp *dct = mlx5dv_create_qp(ctx, &qp_attr, &dc);
  if (!dct || dct->qp_type != IBV_QPT_DRIVER) return failed("mlx5dv_create_qp of a DCT");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC};
  if (ibv_modify_qp(dct, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return failed("DCT to INIT");
  struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = IBV_MTU_256,
                            .min_rnr_timer = 1,
                            .ah_attr = {.port_num = 1, .dlid = 1}};
  if (ibv_modify_qp(dct, &rtr, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU))
    return failed("DCT to RTR");
  struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS};
  if (ibv_modify_qp(dct, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN) != EINVAL)
    return failed("a DCT stays in RTR");
  ibv_destroy_qp(dct);
  dc.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
  qp_attr.srq = NULL;
  qp_attr.cap.max_send_wr = 16;
  qp_attr.cap.max_send_sge = 1;
  struct ibv_qp *dci = mlx5dv_create_qp(ctx, &qp_attr, &dc);
  if (!dci) return failed("mlx5dv_create_qp of a DCI");
  struct mlx5dv_qp dv_qp;
  struct mlx5dv_obj qobj = {.qp = {.in = dci, .out = &dv_qp}};
  if (mlx5dv_init_obj(&qobj, MLX5DV_OBJ_QP) || dv_qp.sq.stride != 64 || !dv_qp.bf.reg)
    return failed("mlx5dv_init_obj of a DCI");
  ibv_destroy_qp(dci);
  dc.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
  errno = 0;
  if (mlx5dv_create_qp(ctx, &qp_attr, &dc) != NULL || errno != EINVAL)
    return failed("DCI streams are EINVAL");
  dc.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
  dc.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
  errno = 0;
  if (mlx5dv_create_qp(ctx, &qp_attr, &dc) != NULL || errno != EINVAL)
    return failed("a DCT without an SRQ is EINVAL");
  ibv_destroy_srq(srq);
  ibv_dealloc_pd(pd);
  ibv_destroy_cq(cq);
  return 0;
}

int main(int argc, char **argv) {
  int mlx5 = argc > 1 && strcmp(argv[1], "mlx5") == 0;
  struct ibv_device **list = ibv_get_device_list(NULL);
  if (!list || !list[0] || strcmp(ibv_get_device_name(list[0]), "emu0") != 0)
    return failed("emu0 is the first device");
  struct ibv_device *dev = list[0];
  if (mlx5dv_is_supported(dev) != mlx5) return failed("mlx5dv_is_supported");
  // No DEVX either way: NULL with EOPNOTSUPP, as libmlx5 answers for a device it does not drive.
  errno = 0;
  if (mlx5dv_open_device(dev, NULL) != NULL || errno != EOPNOTSUPP)
    return failed("mlx5dv_open_device is NULL with EOPNOTSUPP");
  struct ibv_context *ctx = ibv_open_device(dev);
  if (!ctx) return failed("ibv_open_device");
  struct ibv_device_attr attr;
  if (ibv_query_device(ctx, &attr)) return failed("ibv_query_device");
  if (attr.vendor_id != (mlx5 ? 0x2c9u : 0xffffffu)) return failed("vendor_id");
  if (pci_id("emu0", "vendor") != (mlx5 ? 0x15b3 : 0xffffff)) return failed("PCI vendor");
  if (pci_id("emu0", "device") != (long)attr.vendor_part_id) return failed("PCI device");
  // Objects in mlx5dv form: only under the mlx5 personality (else refused, not half made).
  if (mlx5 ? mlx5_objects(ctx) : emu_objects(ctx)) return 1;
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  printf("PASS %s\n", mlx5 ? "mlx5" : "emu");
  return 0;
}

// SPDX-License-Identifier: BSD-2-Clause
// The device model keeps its own copies of the mlx5 layouts; they must match the public header.
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <cstddef>

#include "emu/wqe.h"

using namespace emu;

static_assert(sizeof(CtrlSeg) == sizeof(mlx5_wqe_ctrl_seg));
static_assert(offsetof(CtrlSeg, qpn_ds) == offsetof(mlx5_wqe_ctrl_seg, qpn_ds));
static_assert(offsetof(CtrlSeg, fm_ce_se) == offsetof(mlx5_wqe_ctrl_seg, fm_ce_se));
static_assert(offsetof(CtrlSeg, imm) == offsetof(mlx5_wqe_ctrl_seg, imm));
static_assert(sizeof(RaddrSeg) == sizeof(mlx5_wqe_raddr_seg));
static_assert(sizeof(AtomicSeg) == sizeof(mlx5_wqe_atomic_seg));
static_assert(sizeof(DataSeg) == sizeof(mlx5_wqe_data_seg));
static_assert(offsetof(DataSeg, addr) == offsetof(mlx5_wqe_data_seg, addr));
static_assert(sizeof(Cqe64) == sizeof(mlx5_cqe64));
static_assert(offsetof(Cqe64, byte_cnt) == offsetof(mlx5_cqe64, byte_cnt));
static_assert(offsetof(Cqe64, imm_inval_pkey) == offsetof(mlx5_cqe64, imm_inval_pkey));
static_assert(offsetof(Cqe64, sop_drop_qpn) == offsetof(mlx5_cqe64, sop_drop_qpn));
static_assert(offsetof(Cqe64, wqe_counter) == offsetof(mlx5_cqe64, wqe_counter));
static_assert(offsetof(Cqe64, op_own) == offsetof(mlx5_cqe64, op_own));
static_assert(offsetof(Cqe64, slid) == offsetof(mlx5_cqe64, slid));
static_assert(offsetof(Cqe64, flags_rqpn) == offsetof(mlx5_cqe64, flags_rqpn));
static_assert(offsetof(Cqe64, srqn_uidx) == offsetof(mlx5_cqe64, srqn_uidx));
static_assert(offsetof(Cqe64, emu_flags) == offsetof(mlx5_cqe64, app));
static_assert(offsetof(Cqe64, qp_gen) == offsetof(mlx5_cqe64, app_info));
static_assert(kCqeInlineScatter32 == MLX5_INLINE_SCATTER_32);
static_assert(sizeof(AvSeg) == sizeof(mlx5_wqe_av));
static_assert(offsetof(AvSeg, dqp) == offsetof(mlx5_wqe_av, dqp_dct));
static_assert(offsetof(AvSeg, stat_rate_sl) == offsetof(mlx5_wqe_av, stat_rate_sl));
static_assert(offsetof(AvSeg, rlid) == offsetof(mlx5_wqe_av, rlid));
static_assert(offsetof(AvSeg, rmac) == offsetof(mlx5_wqe_av, rmac));
static_assert(offsetof(AvSeg, grh_gid_fl) == offsetof(mlx5_wqe_av, grh_gid_fl));
static_assert(offsetof(AvSeg, rgid) == offsetof(mlx5_wqe_av, rgid));
static_assert(sizeof(SrqNextSeg) == sizeof(mlx5_wqe_srq_next_seg));
static_assert(offsetof(SrqNextSeg, next_wqe_index) ==
              offsetof(mlx5_wqe_srq_next_seg, next_wqe_index));
static_assert(sizeof(Grh) == sizeof(ibv_grh));
static_assert(offsetof(ErrCqe, syndrome) == offsetof(mlx5_err_cqe, syndrome));
static_assert(offsetof(ErrCqe, vendor_err_synd) == offsetof(mlx5_err_cqe, vendor_err_synd));

TEST(WqeLayout, OpcodesAndSyndromesMatchMlx5) {
  EXPECT_EQ(kOpRdmaWrite, MLX5_OPCODE_RDMA_WRITE);
  EXPECT_EQ(kOpRdmaWriteImm, MLX5_OPCODE_RDMA_WRITE_IMM);
  EXPECT_EQ(kOpSend, MLX5_OPCODE_SEND);
  EXPECT_EQ(kOpSendImm, MLX5_OPCODE_SEND_IMM);
  EXPECT_EQ(kOpRdmaRead, MLX5_OPCODE_RDMA_READ);
  EXPECT_EQ(kOpAtomicCs, MLX5_OPCODE_ATOMIC_CS);
  EXPECT_EQ(kOpAtomicFa, MLX5_OPCODE_ATOMIC_FA);
  EXPECT_EQ(kCtrlCqUpdate, MLX5_WQE_CTRL_CQ_UPDATE);
  EXPECT_EQ(kCtrlSolicited, MLX5_WQE_CTRL_SOLICITED);
  EXPECT_EQ(kInlineSegFlag, static_cast<uint32_t>(MLX5_INLINE_SEG));
  EXPECT_EQ(kCqeReqErr, MLX5_CQE_REQ_ERR);
  EXPECT_EQ(kCqeRespErr, MLX5_CQE_RESP_ERR);
  EXPECT_EQ(kSynRemoteAccess, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(kSynRnrRetryExc, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(kSynWrFlush, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
}

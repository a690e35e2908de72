// SPDX-License-Identifier: BSD-2-Clause
// Address vectors as the port they leave from accepts them: ibv_modify_qp's AV (RC/UC) and
// ibv_create_ah both check an ibv_ah_attr here.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>

namespace emu::prov {

// Whether `ah` is a valid address vector from port `port` (1-based) of device `dev`: the port
// exists, the SL is in range, and the GRH fits the link layer — a RoCE port routes by GID only,
// so it needs is_global and a source GID index that names an entry of its table (as rdma-core and
// the kernel require); an InfiniBand port takes a GRH optionally. false: the caller fails with
// EINVAL.
bool av_valid_for_port(uint32_t dev, uint32_t port, const ibv_ah_attr& ah);

}  // namespace emu::prov

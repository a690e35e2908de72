// SPDX-License-Identifier: BSD-2-Clause
#include "av.h"

#include "provider.h"

namespace emu::prov {

// The device model numbers link layers and GID types as verbs does; the verbs edge copies them.
static_assert(int{kLinkLayerIb} == IBV_LINK_LAYER_INFINIBAND);
static_assert(int{kLinkLayerEthernet} == IBV_LINK_LAYER_ETHERNET);
static_assert(int{kGidTypeIb} == IBV_GID_TYPE_IB && int{kGidTypeRoceV1} == IBV_GID_TYPE_ROCE_V1 &&
              int{kGidTypeRoceV2} == IBV_GID_TYPE_ROCE_V2);

bool av_valid_for_port(uint32_t dev, uint32_t port, const ibv_ah_attr& ah) {
  Header* h = segment()->hdr();
  if (dev >= h->num_devices || port < 1 || port > h->devices[dev].num_ports) return false;
  const PortState& ps = h->devices[dev].ports[port - 1];
  if (ah.sl > 15) return false;
  if (ps.link_layer == kLinkLayerEthernet) return ah.is_global && ah.grh.sgid_index < ps.gid_count;
  return !ah.is_global || ah.grh.sgid_index < ps.gid_tbl_len;
}

}  // namespace emu::prov

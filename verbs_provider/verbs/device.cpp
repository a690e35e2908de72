// SPDX-License-Identifier: BSD-2-Clause
// Device discovery, open/close, and the device and port queries.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "emu/inject.h"
#include "emu/notify.h"
#include "emu/objects.h"
#include "emu/port.h"
#include "emu/raw.h"
#include "forward.h"
#include "provider.h"
#include "register_pages.h"

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace emu;
using namespace emu::prov;

namespace emu::prov {
namespace {

EmuDevice g_devices[kMaxDevices];
uint32_t g_num_devices = 0;
std::once_flag g_devices_once;

std::mutex g_lists_mu;
// Our list -> libibverbs' list; never destroyed (docs/design/verbs-provider.md, "Exit").
std::unordered_map<ibv_device**, ibv_device**>& device_lists() {
  static auto* lists = new std::unordered_map<ibv_device**, ibv_device**>;
  return *lists;
}

std::mutex g_reg_mu;
std::unordered_map<uint64_t, void*>* g_registry = new std::unordered_map<uint64_t, void*>();

void init_devices() {
  Segment* seg = segment();
  if (!seg) return;
  Header* h = seg->hdr();
  g_num_devices = h->num_devices;
  for (uint32_t i = 0; i < g_num_devices; ++i) {
    EmuDevice& d = g_devices[i];
    d.index = i;
    d.dev.node_type = IBV_NODE_CA;
    d.dev.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d.dev.name, sizeof d.dev.name, "%s", h->devices[i].name);
    std::snprintf(d.dev.dev_name, sizeof d.dev.dev_name, "uverbs-%s", h->devices[i].name);
    // Where the kernel's sysfs has them; the file view (presence/sysfs_view.h) answers both.
    // Formatted from the segment's name, not from d.dev's own fields: a source inside the
    // destination object is what -Wrestrict (sanitizer builds) rightly refuses.
    std::snprintf(d.dev.dev_path, sizeof d.dev.dev_path, "/sys/class/infiniband_verbs/uverbs-%s",
                  h->devices[i].name);
    std::snprintf(d.dev.ibdev_path, sizeof d.dev.ibdev_path, "/sys/class/infiniband/%s",
                  h->devices[i].name);
  }
}

}  // namespace

void* real_symbol_of(const char* soname, const char* name, const char* version) {
  if (void* p = dlvsym(RTLD_NEXT, name, version)) return p;
  // A library loaded by dlopen without RTLD_GLOBAL (UCX's and Open MPI's transport modules bring
  // libibverbs and libmlx5 so) is not in the scope RTLD_NEXT searches: ask that copy directly, if
  // one is loaded.
  void* lib = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return nullptr;
  void* p = dlvsym(lib, name, version);
  dlclose(lib);  // drops only the reference RTLD_NOLOAD took
  return p;
}

void* real_symbol(const char* name, const char* version) {
  return real_symbol_of("libibverbs.so.1", name, version);
}

bool is_emu_device(const ibv_device* d) {
  auto* p = reinterpret_cast<const EmuDevice*>(d);
  return p >= g_devices && p < g_devices + kMaxDevices;
}

Segment* segment() { return Segment::get(); }

void registry_put(uint64_t uid, void* obj) {
  std::lock_guard<std::mutex> g(g_reg_mu);
  (*g_registry)[uid] = obj;
}
void registry_del(uint64_t uid) {
  std::lock_guard<std::mutex> g(g_reg_mu);
  g_registry->erase(uid);
}
void* registry_find(uint64_t uid) {
  std::lock_guard<std::mutex> g(g_reg_mu);
  auto it = g_registry->find(uid);
  return it == g_registry->end() ? nullptr : it->second;
}
void* registry_take_event(uint64_t uid, EventKind kind) {
  std::lock_guard<std::mutex> g(g_reg_mu);
  auto it = g_registry->find(uid);
  if (it == g_registry->end()) return nullptr;
  switch (kind) {
    case EventKind::completion:
      static_cast<EmuCq*>(it->second)->events_read.fetch_add(1);
      break;
    case EventKind::cq_async:
      static_cast<EmuCq*>(it->second)->async_events_read.fetch_add(1);
      break;
    case EventKind::qp_async:
      to_qp(static_cast<ibv_qp*>(it->second))->async_events_read.fetch_add(1);
      break;
    case EventKind::srq_async:
      to_srq(static_cast<ibv_srq*>(it->second))->async_events_read.fetch_add(1);
      break;
  }
  return it->second;
}

// The port's state if `port` is a port of the context's device, else nullptr.
static const PortState* port_of(ibv_context* context, uint32_t port) {
  Header* h = segment()->hdr();
  uint32_t dev = to_ctx(context)->dev;
  if (port < 1 || port > h->devices[dev].num_ports) return nullptr;
  return &h->devices[dev].ports[port - 1];
}

int port_attr_fill(uint32_t dev, uint8_t port, ibv_port_attr* a) {
  Header* h = segment()->hdr();
  if (dev >= h->num_devices || port < 1 || port > h->devices[dev].num_ports) return EINVAL;
  const PortState& ps = h->devices[dev].ports[port - 1];
  std::memset(a, 0, sizeof *a);
  const uint8_t state = port_state(ps);  // emu-ctl may change it at any time
  a->state = static_cast<ibv_port_state>(state);
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = static_cast<ibv_mtu>(ps.active_mtu);
  a->gid_tbl_len = ps.gid_tbl_len;
  a->port_cap_flags = IBV_PORT_CM_SUP;
  a->max_msg_sz = Limits::max_msg;
  a->bad_pkey_cntr = 0;
  a->qkey_viol_cntr = 0;
  a->pkey_tbl_len = 1;
  a->lid = ps.lid;
  a->sm_lid = 1;
  a->lmc = 0;
  a->max_vl_num = 1;
  a->sm_sl = 0;
  a->subnet_timeout = 18;
  a->init_type_reply = 0;
  a->active_width = 2;   // 4x
  a->active_speed = 32;  // EDR
  a->phys_state = port_phys_state(state);
  a->link_layer = ps.link_layer;
  if (ps.link_layer == kLinkLayerEthernet) {
    // No subnet manager on Ethernet: what rxe and mlx5 report for a RoCE port.
    a->port_cap_flags |= IBV_PORT_IP_BASED_GIDS;
    a->lid = 0;
    a->sm_lid = 0;
    a->subnet_timeout = 0;
  }
  return 0;
}

void device_attr_fill(uint32_t dev, ibv_device_attr* a) {
  Header* h = segment()->hdr();
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "rdmaemu-%s", "0.1");
  a->node_guid = htobe64(h->devices[dev].node_guid);
  a->sys_image_guid = htobe64(h->devices[dev].node_guid);
  a->max_mr_size = Limits::max_mr_size;
  a->page_size_cap = 0xfffff000;
  // No IEEE vendor, as soft-RoCE reports it: never 0 (verbs users treat 0 as "no device
  // answered"), and Mellanox's OUI only for the mlx5 personality (EMU_PERSONALITY), as a
  // ConnectX reports it.
  a->vendor_id = config().personality_mlx5 ? kMellanoxOui : kEmuVendorId;
  a->vendor_part_id = emu_vendor_part_id();
  a->hw_ver = 1;
  a->max_qp = Limits::max_qp;
  a->max_qp_wr = Limits::max_qp_wr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                        IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT |
                        IBV_DEVICE_UD_AV_PORT_ENFORCE | IBV_DEVICE_MEM_WINDOW |
                        IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a->max_sge = Limits::max_sge;
  a->max_sge_rd = Limits::max_sge;
  a->max_cq = Limits::max_cq;
  a->max_cqe = Limits::max_cqe;
  a->max_mr = Limits::max_mr;
  a->max_pd = Limits::max_pd;
  a->max_qp_rd_atom = Limits::max_rd_atom;
  a->max_ee_rd_atom = 0;
  a->max_res_rd_atom = Limits::max_rd_atom * Limits::max_qp;
  a->max_qp_init_rd_atom = Limits::max_rd_atom;
  a->max_ee_init_rd_atom = 0;
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_mcast_grp = Limits::max_mcast_grp;
  a->max_mcast_qp_attach = Limits::max_mcast_qp_attach;
  a->max_total_mcast_qp_attach = Limits::max_mcast_grp * Limits::max_mcast_qp_attach;
  a->max_ah = Limits::max_ah;
  a->max_srq = Limits::max_srq;
  a->max_srq_wr = Limits::max_srq_wr;
  a->max_srq_sge = Limits::max_srq_sge;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = static_cast<uint8_t>(h->devices[dev].num_ports);
}

uint32_t emu_vendor_part_id() { return config().vendor_part_id; }

int emu_query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* in,
                        ibv_device_attr_ex* attr, size_t len) {
  if (in && in->comp_mask) return EINVAL;
  if (len < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full;
  std::memset(&full, 0, sizeof full);
  device_attr_fill(to_ctx(ctx)->dev, &full.orig_attr);
  full.completion_timestamp_mask = ~0ull;
  full.hca_core_clock = 1000000;  // kHz: timestamps are nanoseconds
  full.max_dm_size = kEmuMaxDmSize;
  full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
  // On-demand paging for every transport and operation, implicit MRs included (pd_mr.cpp).
  constexpr uint32_t kOdpAll = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                               IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                               IBV_ODP_SUPPORT_SRQ_RECV;
  full.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  full.odp_caps.per_transport_caps.rc_odp_caps = kOdpAll;
  full.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                 IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
  full.odp_caps.per_transport_caps.ud_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  full.xrc_odp_caps = kOdpAll;
  // Tag matching on RC (tm.cpp, emu/device/engine_tm.cpp): one SGE per tagged buffer.
  full.tm_caps.max_rndv_hdr_size = Limits::max_rndv_hdr;
  full.tm_caps.max_num_tags = Limits::max_tm_tags;
  full.tm_caps.flags = IBV_TM_CAP_RC;
  full.tm_caps.max_ops = Limits::max_tm_ops;
  full.tm_caps.max_sge = 1;
  // Receive-side scaling over raw packet QPs, where there is an Ethernet port (raw/wq.cpp).
  if (device_has_ethernet(to_ctx(ctx)->dev)) {
    full.rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
    full.rss_caps.max_rwq_indirection_tables = kMaxRssQps;
    full.rss_caps.max_rwq_indirection_table_size = 1u << kRssLogTableMax;
    full.rss_caps.rx_hash_fields_mask = kRssFieldsKnown;
    full.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
    full.max_wq_type_rq = kMaxQps;
  }
  std::memcpy(attr, &full, std::min(len, sizeof full));
  return 0;
}

int emu_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) {
  ibv_port_attr a;
  int rc = port_attr_fill(to_ctx(ctx)->dev, port, &a);
  if (rc) return rc;
  std::memcpy(attr, &a, std::min(len, sizeof a));
  return 0;
}

int emu_query_rt_values(ibv_context*, ibv_values_ex* values) {
  if (values->comp_mask & ~static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  values->raw_clock = ts;
  values->comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  return 0;
}

}  // namespace emu::prov

// ---- exported entry points --------------------------------------------------------------------

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  // A malformed EMU_* knob (said on stderr once) fails the program's first verb: a list without
  // emu0, or one of devices set up on defaults the program did not ask for, would hide the typo.
  if (knobs_refused()) {
    errno = EINVAL;
    return nullptr;
  }
  std::call_once(g_devices_once, init_devices);
  int real_n = 0;
  ibv_device** real = nullptr;
  if (auto fn = REAL(ibv_get_device_list, "IBVERBS_1.1")) {
    int saved = errno;
    real = fn(&real_n);
    if (!real) real_n = 0;  // no RDMA in this kernel (ENOSYS): the emulated devices still appear
    errno = saved;
  }
  auto** list = static_cast<ibv_device**>(calloc(real_n + g_num_devices + 1, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  int n = 0;
  for (int i = 0; i < real_n; ++i) list[n++] = real[i];
  for (uint32_t i = 0; i < g_num_devices; ++i) list[n++] = &g_devices[i].dev;
  {
    std::lock_guard<std::mutex> g(g_lists_mu);
    device_lists()[list] = real;
  }
  if (num_devices) *num_devices = n;
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  ibv_device** real = nullptr;
  {
    std::lock_guard<std::mutex> g(g_lists_mu);
    auto it = device_lists().find(list);
    if (it == device_lists().end()) {
      if (auto fn = REAL(ibv_free_device_list, "IBVERBS_1.1")) fn(list);
      return;
    }
    real = it->second;
    device_lists().erase(it);
  }
  if (real)
    if (auto fn = REAL(ibv_free_device_list, "IBVERBS_1.1")) fn(real);
  free(list);
}

const char* ibv_get_device_name(ibv_device* device) {
  if (is_emu_device(device)) return device->name;
  auto fn = REAL(ibv_get_device_name, "IBVERBS_1.1");
  return fn ? fn(device) : nullptr;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  if (is_emu_device(device))
    return htobe64(
        segment()->hdr()->devices[reinterpret_cast<EmuDevice*>(device)->index].node_guid);
  auto fn = REAL(ibv_get_device_guid, "IBVERBS_1.1");
  return fn ? fn(device) : 0;
}

int ibv_get_device_index(ibv_device* device) {
  if (is_emu_device(device))
    return 1000 + static_cast<int>(reinterpret_cast<EmuDevice*>(device)->index);
  auto fn = REAL(ibv_get_device_index, "IBVERBS_1.9");
  return fn ? fn(device) : -1;
}

}  // extern "C"

namespace emu::prov {

ibv_context* open_context(ibv_device* device, int cmd_fd) {
  if (knobs_refused()) return fail_null<ibv_context>(EINVAL);  // as ibv_get_device_list
  Segment* seg = segment();
  if (!seg) return fail_null<ibv_context>(ENODEV);
  inject_from_env(seg);  // EMU_INJECT: before the first verb it can fail
  auto* ctx = new (std::nothrow) EmuContext();
  if (!ctx) return fail_null<ibv_context>(ENOMEM);
  ctx->dev = reinterpret_cast<EmuDevice*>(device)->index;
  // The shared registers QPs are spread over, then the ones dedicated to thread domains.
  ctx->n_uars = config().uar_regs;
  ctx->n_td_uars = config().td_uar_regs;
  int pfd[2] = {-1, -1};
  if (pipe2(pfd, O_CLOEXEC) != 0 ||
      create_ctx(seg, ContextSpec{ctx->dev, ctx->n_uars + ctx->n_td_uars, pfd[1]}, &ctx->slot) !=
          Status::ok) {
    if (pfd[0] >= 0) close(pfd[0]), close(pfd[1]);
    delete ctx;
    return fail_null<ibv_context>(ENOMEM);
  }
  ctx->share_slot = ctx->slot;
  fcntl(pfd[1], F_SETFL, O_NONBLOCK);
  ctx->async_wfd = pfd[1];
  ContextSlot& cs = seg->hdr()->ctxs[ctx->slot];
  ctx->uars = seg->at<UarReg>(cs.uar_off);
  for (uint32_t i = 0; i < cs.uar_count; ++i) {
    // A thread domain's register has one domain's QPs on it, which its user keeps to one thread
    // at a time: no lock (mlx5's need_lock = 0). The shared ones lock unless single-threaded.
    bool unlocked = i >= ctx->n_uars || config().single_threaded;
    ctx->uar_use[i].lock.init(unlocked);
    BlueFlameUse bf = config().blueflame;
    ctx->uar_use[i].blueflame =
        bf == BlueFlameUse::always || (bf == BlueFlameUse::unlocked_registers && unlocked);
  }

  verbs_context& v = ctx->vctx;
  std::memset(&v, 0, sizeof v);
  v.sz = sizeof(verbs_context);
  v.query_port = emu_query_port;
  v.query_device_ex = emu_query_device_ex;
  v.create_cq_ex = emu_create_cq_ex;
  v.create_qp_ex = emu_create_qp_ex;
  v.open_xrcd = emu_open_xrcd;
  v.close_xrcd = emu_close_xrcd;
  v.open_qp = emu_open_qp;
  v.create_srq_ex = emu_create_srq_ex;
  v.post_srq_ops = emu_post_srq_ops;
  v.get_srq_num = emu_get_srq_num;
  v.query_rt_values = emu_query_rt_values;
  v.advise_mr = emu_advise_mr;
  v.alloc_dm = emu_alloc_dm;
  v.free_dm = emu_free_dm;
  v.reg_dm_mr = emu_reg_dm_mr;
  v.alloc_td = emu_alloc_td;
  v.dealloc_td = emu_dealloc_td;
  v.alloc_parent_domain = emu_alloc_parent_domain;
  v.ibv_create_flow = emu_create_flow;
  v.ibv_destroy_flow = emu_destroy_flow;
  v.create_wq = emu_create_wq;
  v.modify_wq = emu_modify_wq;
  v.destroy_wq = emu_destroy_wq;
  v.create_rwq_ind_table = emu_create_rwq_ind_table;
  v.destroy_rwq_ind_table = emu_destroy_rwq_ind_table;
  ibv_context& c = v.context;
  c.device = device;
  c.cmd_fd = cmd_fd;
  c.async_fd = pfd[0];
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c.ops.poll_cq = emu_poll_cq;
  c.ops.req_notify_cq = emu_req_notify_cq;
  c.ops.post_send = emu_post_send;
  c.ops.post_recv = emu_post_recv;
  c.ops.post_srq_recv = emu_post_srq_recv;
  c.ops.alloc_mw = emu_alloc_mw;
  c.ops.dealloc_mw = emu_dealloc_mw;
  c.ops.bind_mw = emu_bind_mw;
  registry_put(cs.uid, &c);
  return &c;
}

}  // namespace emu::prov

extern "C" {

ibv_context* ibv_open_device(ibv_device* device) {
  if (!is_emu_device(device)) {
    auto fn = REAL(ibv_open_device, "IBVERBS_1.1");
    return fn ? fn(device) : fail_null<ibv_context>(ENODEV);
  }
  // The command fd is a memfd of a telling name: there is no kernel behind it, and
  // ibv_import_device (import.cpp) recognises it by that name and its inode.
  int cmd_fd = memfd_create(kEmuCmdFdName, MFD_CLOEXEC);
  if (cmd_fd < 0) return fail_null<ibv_context>(ENOMEM);
  ibv_context* c = open_context(device, cmd_fd);
  if (!c) close(cmd_fd);
  return c;
}

int ibv_close_device(ibv_context* context) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_close_device, "IBVERBS_1.1");
    return fn ? fn(context) : EINVAL;
  }
  EmuContext* ctx = to_ctx(context);
  Segment* seg = segment();
  ContextSlot& cs = seg->hdr()->ctxs[ctx->slot];
  registry_del(cs.uid);
  {
    // Objects the program did not destroy go with the context, as when the kernel's file closes;
    // the program's handles to them are dangling from here on, as with any provider.
    std::lock_guard<std::mutex> g(ctx->mu);
    for (EmuQp* qp : ctx->qps) qp_table_set(qp->qpx.qp_base.qp_num, nullptr);
  }
  register_pages_close(ctx);
  seg->release_context_objects(ctx->slot);  // also frees the context's slot and UAR page
  close(context->async_fd);
  close(ctx->async_wfd);
  close(context->cmd_fd);
  delete ctx;
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_query_device, "IBVERBS_1.1");
    return fn ? fn(context, attr) : EINVAL;
  }
  device_attr_fill(to_ctx(context)->dev, attr);
  return 0;
}

int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_query_port, "IBVERBS_1.1");
    return fn ? fn(context, port_num, port_attr) : EINVAL;
  }
  // libibverbs' own export writes a whole ibv_port_attr here too.
  return emu_query_port(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                        sizeof(ibv_port_attr));
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_query_gid, "IBVERBS_1.1");
    return fn ? fn(context, port_num, index, gid) : -1;
  }
  const PortState* ps = port_of(context, port_num);
  if (!ps || index < 0 || index >= ps->gid_tbl_len) return -1;
  std::memset(gid, 0, sizeof *gid);  // an empty entry reads as zeros
  if (index < ps->gid_count) std::memcpy(gid->raw, ps->gid[index], sizeof gid->raw);
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (!is_emu(context)) {
    auto fn = REAL(_ibv_query_gid_ex, "IBVERBS_1.11");
    return fn ? fn(context, port_num, gid_index, entry, flags, entry_size) : EINVAL;
  }
  if (flags || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  const PortState* ps = port_of(context, port_num);
  if (!ps || gid_index >= ps->gid_tbl_len) return EINVAL;
  if (gid_index >= ps->gid_count) return ENODATA;  // an empty GID table entry
  std::memset(entry, 0, entry_size);
  std::memcpy(entry->gid.raw, ps->gid[gid_index], sizeof entry->gid.raw);
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = ps->gid_type[gid_index];  // GidType numbers as ibv_gid_type
  entry->ndev_ifindex = ps->ndev_ifindex;
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
  if (!is_emu(context)) {
    auto fn = REAL(_ibv_query_gid_table, "IBVERBS_1.11");
    return fn ? fn(context, entries, max_entries, flags, entry_size) : -EINVAL;
  }
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  Header* h = segment()->hdr();
  uint32_t dev = to_ctx(context)->dev;
  size_t n = 0;
  for (uint32_t p = 1; p <= h->devices[dev].num_ports; ++p) {
    for (uint32_t i = 0; i < h->devices[dev].ports[p - 1].gid_count; ++i) {
      if (n >= max_entries) return -EINVAL;
      auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + n * entry_size);
      if (_ibv_query_gid_ex(context, p, i, e, 0, entry_size) == 0) ++n;
    }
  }
  return static_cast<ssize_t>(n);
}

// Private to rdma-core (driver.h), yet ibv_devinfo imports it. The type is an enum there:
// 0 = IB/RoCE v1, 1 = RoCE v2.
int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  if (!is_emu(context)) {
    using Fn = int (*)(ibv_context*, uint8_t, unsigned int, int*);
    auto fn = reinterpret_cast<Fn>(real_symbol("ibv_query_gid_type", "IBVERBS_PRIVATE_34"));
    return fn ? fn(context, port_num, index, type) : -1;
  }
  const PortState* ps = port_of(context, port_num);
  if (!ps || index >= ps->gid_tbl_len) return -1;
  // An empty entry answers 0, as libibverbs does.
  *type = index < ps->gid_count && ps->gid_type[index] == kGidTypeRoceV2 ? 1 : 0;
  return 0;
}

int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_query_pkey, "IBVERBS_1.1");
    return fn ? fn(context, port_num, index, pkey) : -1;
  }
  if (!port_of(context, port_num) || index != 0) return -1;
  *pkey = htobe16(0xffff);
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_get_pkey_index, "IBVERBS_1.5");
    return fn ? fn(context, port_num, pkey) : -1;
  }
  // The one P_Key (full or limited membership) at index 0, on a port that exists.
  if (!port_of(context, port_num)) return -1;
  return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -1;
}

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_get_async_event, "IBVERBS_1.1");
    return fn ? fn(context, event) : -1;
  }
  for (;;) {
    AsyncEventRecord rec;
    ssize_t r = read(context->async_fd, &rec, sizeof rec);
    if (r != sizeof rec) return -1;
    event->event_type = static_cast<ibv_event_type>(rec.type);
    switch (rec.type) {
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
      case IBV_EVENT_GID_CHANGE:
        event->element.port_num = static_cast<int>(rec.element_uid);
        return 0;
      case IBV_EVENT_DEVICE_FATAL:
        event->element.port_num = 0;  // no object: the device itself
        return 0;
      case IBV_EVENT_SRQ_ERR:
      case IBV_EVENT_SRQ_LIMIT_REACHED: {
        void* srq = registry_take_event(rec.element_uid, EventKind::srq_async);
        if (!srq) continue;
        event->element.srq = static_cast<ibv_srq*>(srq);
        return 0;
      }
      case IBV_EVENT_CQ_ERR: {
        void* cq = registry_take_event(rec.element_uid, EventKind::cq_async);
        if (!cq) continue;  // destroyed since: the kernel drops such events too
        event->element.cq = static_cast<ibv_cq*>(cq);
        return 0;
      }
      default: {
        void* qp = registry_take_event(rec.element_uid, EventKind::qp_async);
        if (!qp) continue;
        event->element.qp = static_cast<ibv_qp*>(qp);
        return 0;
      }
    }
  }
}

// Counts the acknowledgement on the event's object as libibverbs does (its public mutex, counter
// and condition variable, which destroy waits on). Done here rather than forwarded: where
// libibverbs is loaded privately (UCX's and Open MPI's transport modules dlopen it), the forward
// would not be found and the destroy that waits for this ack would never return.
void ibv_ack_async_event(ibv_async_event* event) {
  ibv_context* owner = nullptr;
  pthread_mutex_t* mu = nullptr;
  pthread_cond_t* cond = nullptr;
  uint32_t* completed = nullptr;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = event->element.cq;
      owner = cq->context, mu = &cq->mutex, cond = &cq->cond;
      completed = &cq->async_events_completed;
      break;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      ibv_qp* qp = event->element.qp;
      owner = qp->context, mu = &qp->mutex, cond = &qp->cond, completed = &qp->events_completed;
      break;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      ibv_srq* srq = event->element.srq;
      owner = srq->context, mu = &srq->mutex, cond = &srq->cond;
      completed = &srq->events_completed;
      break;
    }
    default:
      return;  // port and device events carry no object to count
  }
  if (!is_emu(owner)) {
    if (auto fn = REAL(ibv_ack_async_event, "IBVERBS_1.1")) fn(event);
    return;
  }
  pthread_mutex_lock(mu);
  ++*completed;
  pthread_cond_signal(cond);
  pthread_mutex_unlock(mu);
}

}  // extern "C"

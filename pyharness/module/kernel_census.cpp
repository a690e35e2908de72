// SPDX-License-Identifier: BSD-2-Clause
// RDMA netlink is its own netlink family (NETLINK_RDMA), not generic netlink: a request is a bare
// nlmsghdr of type RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, command) followed by attributes, and every
// resource dump (RES_QP_GET, ...) needs the device's index, so the device list is dumped first
// (RDMA_NLDEV_CMD_GET), as iproute2's `rdma` does. A reply carries the device's index and name
// and one nested table of entries, each entry the object's attributes (include/uapi/rdma/
// rdma_netlink.h); a large table spans several replies of one dump.
#include "kernel_census.h"

#include <netlink/attr.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <rdma/rdma_netlink.h>

#include <cerrno>
#include <functional>

namespace pyh {

namespace {

constexpr int kMaxAttr = RDMA_NLDEV_ATTR_MAX - 1;
using Attrs = nlattr * [kMaxAttr + 1];
using OnReply = std::function<void(Attrs&)>;

// One object family's dump: its command, its table, the table's entry and the entry's number.
struct Family {
  const char* kind;
  int cmd, table, entry, number;
};

// Each family's names follow one pattern in rdma_netlink.h: RES_<F>_GET, RES_<F>, RES_<F>_ENTRY.
#define EMU_NLDEV_FAMILY(kind, F, number)                                                         \
  {                                                                                               \
    kind, RDMA_NLDEV_CMD_RES_##F##_GET, RDMA_NLDEV_ATTR_RES_##F, RDMA_NLDEV_ATTR_RES_##F##_ENTRY, \
        RDMA_NLDEV_ATTR_RES_##number                                                              \
  }
const Family kFamilies[] = {
    EMU_NLDEV_FAMILY("context", CTX, CTXN), EMU_NLDEV_FAMILY("pd", PD, PDN),
    EMU_NLDEV_FAMILY("mr", MR, MRN),        EMU_NLDEV_FAMILY("cq", CQ, CQN),
    EMU_NLDEV_FAMILY("qp", QP, LQPN),       EMU_NLDEV_FAMILY("srq", SRQ, SRQN),
};
#undef EMU_NLDEV_FAMILY

// enum ib_qp_type, named as the emulated census names the types a verbs program can make.
std::string qp_type_name(unsigned t) {
  static const char* const names[] = {"SMI",      "GSI",           "RC", "UC",         "UD",
                                      "RAW_IPV6", "RAW_ETHERTYPE", "",   "RAW_PACKET", "XRC_SEND",
                                      "XRC_RECV"};
  if (t < sizeof names / sizeof *names && *names[t]) return names[t];
  return "TYPE_" + std::to_string(t);
}

std::string srq_type_name(unsigned t) {
  static const char* const names[] = {"BASIC", "XRC", "TM"};
  return t < 3 ? names[t] : "TYPE_" + std::to_string(t);
}

std::string qp_state_name(unsigned s) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < 7 ? names[s] : "STATE_" + std::to_string(s);
}

class Socket {
 public:
  Socket() : sk_(nl_socket_alloc()) {}
  ~Socket() {
    if (sk_) nl_socket_free(sk_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int connect() {
    if (!sk_) return ENOMEM;
    errno = 0;
    if (nl_connect(sk_, NETLINK_RDMA) < 0) return errno ? errno : EPROTONOSUPPORT;
    // A dump ends with NLMSG_DONE; an ACK requested on top would be one more reply to read.
    nl_socket_disable_auto_ack(sk_);
    return 0;
  }

  // Sends one dump request (for device `dev` unless negative) and hands each reply's top-level
  // attributes to `on_reply`. Returns 0 or the errno the kernel answered (EIO: libnl failed).
  int dump(int cmd, int64_t dev, const OnReply& on_reply) {
    nl_msg* msg = nlmsg_alloc_simple(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd), NLM_F_DUMP);
    if (!msg) return ENOMEM;
    if (dev >= 0 && nla_put_u32(msg, RDMA_NLDEV_ATTR_DEV_INDEX, uint32_t(dev)) < 0) {
      nlmsg_free(msg);
      return ENOMEM;
    }
    int sent = nl_send_auto(sk_, msg);
    nlmsg_free(msg);
    if (sent < 0) return EIO;
    Call call{&on_reply, 0};
    nl_cb* cb = nl_cb_alloc(NL_CB_DEFAULT);
    if (!cb) return ENOMEM;
    nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, &Socket::on_valid, &call);
    nl_cb_err(cb, NL_CB_CUSTOM, &Socket::on_error, &call);
    int rc = nl_recvmsgs(sk_, cb);
    nl_cb_put(cb);
    if (call.err) return call.err;
    return rc < 0 ? EIO : 0;
  }

 private:
  struct Call {
    const OnReply* on_reply;
    int err;  // the errno of the kernel's NLMSG_ERROR, if any
  };

  static int on_valid(nl_msg* msg, void* arg) {
    Attrs tb{};
    if (nlmsg_parse(nlmsg_hdr(msg), 0, tb, kMaxAttr, nullptr) == 0)
      (*static_cast<Call*>(arg)->on_reply)(tb);
    return NL_OK;
  }

  static int on_error(sockaddr_nl*, nlmsgerr* e, void* arg) {
    static_cast<Call*>(arg)->err = e->error < 0 ? -e->error : EIO;
    return NL_STOP;
  }

  nl_sock* sk_;
};

KernelObject entry_object(const Family& f, uint32_t dev, nlattr* entry) {
  Attrs a{};
  KernelObject o;
  o.kind = f.kind;
  o.dev = dev;
  if (nla_parse_nested(a, kMaxAttr, entry, nullptr) < 0) return o;
  if (a[f.number]) o.number = nla_get_u32(a[f.number]);
  if (a[RDMA_NLDEV_ATTR_RES_PID]) o.pid = int(nla_get_u32(a[RDMA_NLDEV_ATTR_RES_PID]));
  if (a[RDMA_NLDEV_ATTR_RES_KERN_NAME])
    o.kern_name = nla_get_string(a[RDMA_NLDEV_ATTR_RES_KERN_NAME]);
  nlattr* type = a[RDMA_NLDEV_ATTR_RES_TYPE];
  if (o.kind == "qp") {
    if (type) o.type = qp_type_name(nla_get_u8(type));
    if (a[RDMA_NLDEV_ATTR_RES_STATE])
      o.state = qp_state_name(nla_get_u8(a[RDMA_NLDEV_ATTR_RES_STATE]));
  } else if (o.kind == "srq" && type) {
    o.type = srq_type_name(nla_get_u8(type));
  }
  return o;
}

}  // namespace

int kernel_census(const std::string& device, std::vector<KernelObject>* out, std::string* what) {
  Socket sk;
  if (int rc = sk.connect()) {
    *what = "socket(NETLINK_RDMA)";
    return rc;
  }
  int64_t dev = -1;
  int rc = sk.dump(RDMA_NLDEV_CMD_GET, -1, [&](Attrs& tb) {
    if (tb[RDMA_NLDEV_ATTR_DEV_INDEX] && tb[RDMA_NLDEV_ATTR_DEV_NAME] &&
        device == nla_get_string(tb[RDMA_NLDEV_ATTR_DEV_NAME]))
      dev = nla_get_u32(tb[RDMA_NLDEV_ATTR_DEV_INDEX]);
  });
  if (rc || dev < 0) {
    *what = "RDMA_NLDEV_CMD_GET " + device;
    return rc ? rc : ENODEV;
  }
  for (const Family& f : kFamilies) {
    rc = sk.dump(f.cmd, dev, [&](Attrs& tb) {
      if (!tb[f.table]) return;
      nlattr* entry;
      int rem;
      nla_for_each_nested(entry, tb[f.table], rem) {
        if (nla_type(entry) == f.entry) out->push_back(entry_object(f, uint32_t(dev), entry));
      }
    });
    if (rc) {
      *what = std::string("the kernel's ") + f.kind + " dump of " + device;
      return rc;
    }
  }
  return 0;
}

}  // namespace pyh

// SPDX-License-Identifier: BSD-2-Clause
/* The verbs side of accept.private_libibverbs: a module that, like UCX's and Open MPI's transport
 * modules, is linked with libibverbs and loaded by dlopen without RTLD_GLOBAL, so libibverbs is
 * outside the scope the preloaded provider's RTLD_NEXT lookups search. It takes a QP on an SRQ to
 * ERR, reads and acknowledges IBV_EVENT_QP_LAST_WQE_REACHED and destroys the QP: the destroy waits
 * for the acknowledgement, so it returns only if the ack was counted (UCX's RC teardown hung here).
 * Returns 0 and prints PASS lines, or prints FAIL and returns 1. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#define CHECK(cond, what)        \
  do {                           \
    if (!(cond)) {               \
      printf("FAIL %s\n", what); \
      return 1;                  \
    }                            \
  } while (0)

int private_ibverbs_last_wqe_ack(const char* dev_name) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list, "ibv_get_device_list");
  struct ibv_device* dev = NULL;
  for (int i = 0; i < n; ++i)
    if (strcmp(ibv_get_device_name(list[i]), dev_name) == 0) dev = list[i];
  CHECK(dev, "device not listed");
  struct ibv_context* ctx = ibv_open_device(dev);
  CHECK(ctx, "ibv_open_device");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_srq_init_attr sattr = {.attr = {.max_wr = 16, .max_sge = 1}};
  struct ibv_srq* srq = pd && cq ? ibv_create_srq(pd, &sattr) : NULL;
  CHECK(srq, "pd, cq or srq");
  struct ibv_qp_init_attr qattr = {.send_cq = cq,
                                   .recv_cq = cq,
                                   .srq = srq,
                                   .qp_type = IBV_QPT_RC,
                                   .cap = {.max_send_wr = 4, .max_send_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &qattr);
  CHECK(qp, "ibv_create_qp");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
        "modify to INIT");
  a.qp_state = IBV_QPS_ERR;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "modify to ERR");
  struct ibv_async_event ev;
  CHECK(ibv_get_async_event(ctx, &ev) == 0, "ibv_get_async_event");
  CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == qp,
        "the event is not LAST_WQE_REACHED on the QP");
  printf("PASS event %s on the QP\n", ibv_event_type_str(ev.event_type));
  ibv_ack_async_event(&ev);
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
  printf("PASS destroy after the ack returned\n");
  CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 &&
            ibv_close_device(ctx) == 0,
        "teardown");
  ibv_free_device_list(list);
  return 0;
}

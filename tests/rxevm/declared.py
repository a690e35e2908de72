# SPDX-License-Identifier: BSD-2-Clause
"""Where soft-RoCE (rdma_rxe, Linux 6.1) and emu0 are known to answer differently in the comparison
suite, each with its reason and the specification's answer (the InfiniBand Architecture
Specification, vol. 1, and ibv_poll_cq(3)/ibv_query_qp(3); these are rxe's known departures, where
mlx5 gives the specification's answer). emu0 follows the specification.
tests/rxevm/rxe_compare.py fails on any difference not listed here, and on a row that no longer
occurs (so the table stays true). docs/guides/comparison.md shows it.

One row per differing field of a recorded stream: scenario | player | step | field | emu0's value |
rxe0's value | why rxe differs | what the specification says."""
from typing import NamedTuple, Optional


class Departure(NamedTuple):
    scenario: str  # the recorded scenario (the test's name)
    player: str
    step: str
    field: str  # the record's field that differs (status0, cur_state, errno, ...)
    emu: Optional[int]  # None: the record exists on one side only
    rxe: Optional[int]
    reason: str
    spec: str


TABLE = """
test_send_with_an_invalid_lkey | a | poll | status0 | 4 | 2 | rxe reports a bad local key as a QP operation error | LOC_PROT_ERR: the local key check of the gather list fails (mlx5 agrees)
test_send_longer_than_the_receive | a | poll | status0 | 9 | 11 | rxe's responder NAKs a too-long SEND as a remote operation error | REM_INV_REQ_ERR at the requester: the responder NAKs an invalid request
test_send_longer_than_the_receive | b | poll | status0 | 1 | 2 | rxe completes the receive with a QP operation error | LOC_LEN_ERR at the responder: the message exceeds the receive buffer
test_query_qp_in_rts | a | query_qp | cap_send_wr | 16 | 31 | rxe rounds a queue up (2^n - 1 slots of a 2^n ring) and reports that | any size >= the request is allowed; emu0 reports what was asked, as it created
test_query_qp_in_rts | a | query_qp | cap_recv_wr | 16 | 31 | as cap_send_wr: rxe's receive ring, rounded up | any size >= the request is allowed; emu0 reports what was asked
test_query_qp_in_rts | a | query_qp | cur_state | 3 | 0 | rxe's ibv_query_qp always reports cur_qp_state RESET | cur_qp_state is the QP's current state (RTS here; ibv_query_qp(3))
test_posts_refused_in_reset_and_init_leave_nothing_behind | b | poll | imm0 | 3 | 1 | rxe's library queues a SEND before its kernel refuses it (EINVAL in RESET and INIT) and executes it once the QP is in RTS | a refused work request was never posted: the first SEND to arrive is the one posted in RTS (tag 3)
test_receive_posted_in_err_is_flushed | a | poll_tries | n | 1 | 0 | rxe takes a receive posted in ERR into its ring and never completes it | a work request posted to a QP in ERR completes with WR_FLUSH_ERR
test_receive_posted_in_err_is_flushed | a | poll_tries | status0 | 5 | None | as n: no completion on rxe | WR_FLUSH_ERR
test_receive_posted_in_err_is_flushed | a | poll_tries | imm0 | -1 | None | as n: no completion on rxe | an error completion carries no immediate
test_write_with_a_bad_rkey_raises_the_responders_access_event | b | events | n | 1 | 0 | rxe NAKs the bad rkey (REM_ACCESS_ERR at the requester, as the spec) but raises no async event at the responder | the responder's QP enters ERR and raises the affiliated asynchronous event Local Access Violation Work Queue Error, IBV_EVENT_QP_ACCESS_ERR
test_write_with_a_bad_rkey_raises_the_responders_access_event | b | events | event0 | 3 | None | as n: no event on rxe | IBV_EVENT_QP_ACCESS_ERR
"""


def _value(cell: str) -> Optional[int]:
    return None if cell == "None" else int(cell)


def _row(line: str) -> Departure:
    s, player, step, field, emu, rxe, reason, spec = (c.strip() for c in line.split("|"))
    return Departure(s, player, step, field, _value(emu), _value(rxe), reason, spec)


DECLARED = [_row(line) for line in TABLE.strip().splitlines()]

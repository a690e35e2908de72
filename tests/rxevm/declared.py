"""Where soft-RoCE (rdma_rxe, Linux 6.1) and emu0 are known to answer differently in the comparison
suite, each with its reason and the specification's answer (InfiniBand Architecture Specification
vol. 1, rel. 1.4 and its RoCE annex; mlx5 gives the specification's answer in each case). emu0 follows
the specification. tests/rxevm/rxe_compare.py fails on any difference not listed here, and on a row
that no longer occurs (so the table stays true). docs/comparison.md shows it."""
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


DECLARED = [
    Departure("test_send_with_an_invalid_lkey", "a", "poll", "status0", 4, 2,
              "rxe reports a bad local key as a QP operation error",
              "LOC_PROT_ERR: the local key check fails (o10-2.2; mlx5 agrees)"),
    Departure("test_send_longer_than_the_receive", "a", "poll", "status0", 9, 11,
              "rxe's responder NAKs a too-long SEND as a remote operation error",
              "REM_INV_REQ_ERR at the requester (NAK invalid request, C9-151)"),
    Departure("test_send_longer_than_the_receive", "b", "poll", "status0", 1, 2,
              "rxe completes the receive with a QP operation error",
              "LOC_LEN_ERR at the responder: the message exceeds the receive buffer"),
    Departure("test_query_qp_in_rts", "a", "query_qp", "cur_state", 3, 0,
              "rxe's ibv_query_qp always reports cur_qp_state RESET",
              "cur_qp_state is the QP's current state (RTS here)"),
]

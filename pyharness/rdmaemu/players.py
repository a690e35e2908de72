# SPDX-License-Identifier: BSD-2-Clause
"""Players: processes started by the harness that run verbs steps on command (build/bin/emu-player
under emu-run for an emulated device, directly for a real one), so that a scenario across several
processes reads as plain Python. Every step waits for its reply for at most `timeout` seconds; a
failed verb raises VerbsError with its errno; a player that dies raises PlayerGone."""
import os
import select
import signal
import subprocess
import time
from typing import Dict, List, Optional, Tuple

from ._paths import BIN_DIR
from ._rdmaemu import VerbsError

IBV_WC_SUCCESS = 0
IBV_WC_LOC_LEN_ERR = 1
IBV_WC_LOC_PROT_ERR = 4
IBV_WC_WR_FLUSH_ERR = 5
IBV_WC_REM_INV_REQ_ERR = 9
IBV_WC_REM_ACCESS_ERR = 10
IBV_WC_RETRY_EXC_ERR = 12
IBV_WC_RNR_RETRY_EXC_ERR = 13
IBV_EVENT_QP_ACCESS_ERR = 3  # enum ibv_event_type


class PlayerGone(RuntimeError):
    """The player exited or was killed before it answered."""


class Player:
    def __init__(self, name: str, device: str = "emu0", fabric: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None, timeout: float = 20,
                 stream: Optional[list] = None):
        """stream: a list each step's record is appended to (rdmaemu.compare's input)."""
        self.name, self.device, self.timeout, self.stream = name, device, timeout, stream
        penv = dict(os.environ)
        penv.pop("LD_PRELOAD", None)  # the harness's interposer is not the player's business
        if fabric:
            penv["EMU_FABRIC"] = fabric
        penv.update(env or {})
        argv = [os.path.join(BIN_DIR, "emu-player")]
        if device.startswith("emu"):
            argv.insert(0, os.path.join(BIN_DIR, "emu-run"))
        self.proc = subprocess.Popen(argv, env=penv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        self._buf = b""
        self.pid = self.call("pid")["pid"]
        self.lid = self.call("open", device)["lid"]

    # ---- the wire ----
    def _readline(self) -> str:
        deadline = time.monotonic() + self.timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise PlayerGone(f"{self.name}: no answer within {self.timeout}s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise PlayerGone(f"{self.name}: exited")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def send_only(self, *words) -> None:
        """Sends a command without waiting for its reply (to kill the player inside it)."""
        try:
            self.proc.stdin.write((" ".join(str(w) for w in words) + "\n").encode())
        except BrokenPipeError as e:
            raise PlayerGone(f"{self.name}: exited") from e

    def reply(self) -> Dict[str, int]:
        words = self._readline().split()
        if words and words[0] == "err":
            raise VerbsError(int(words[1]), f"{self.name}: {' '.join(words[2:])}")
        return {k: int(v) for k, v in (w.split("=") for w in words[1:])}

    def call(self, *words) -> Dict[str, int]:
        """One step: the values of its reply; VerbsError(errno) if the verb failed."""
        self.send_only(*words)
        try:
            values = self.reply()
        except VerbsError as e:
            self._record(words[0], e.errno, {})
            raise
        self._record(words[0], 0, values)
        return values

    def _record(self, step, err, values):
        # What two runs can compare: the step, its errno and its completions (per WR: status and
        # immediate, in order); not handles, numbers or pids, which differ between runs.
        if self.stream is not None:
            kept = {k: v for k, v in values.items()
                    if k == "n" or k.startswith(("status", "imm", "state", "cur_state", "cap_", "event"))}
            self.stream.append({"player": self.name, "step": step, "errno": err, **kept})

    # ---- verbs steps ----
    def alloc_pd(self) -> int:
        return self.call("pd")["handle"]

    def reg_mr(self, pd: int, length: int = 4096) -> int:
        return self.call("mr", pd, length)["handle"]

    def create_cq(self, depth: int = 64) -> int:
        return self.call("cq", depth)["handle"]

    def create_srq(self, pd: int, depth: int = 16) -> int:
        return self.call("srq", pd, depth)["handle"]

    def create_xrc_srq(self, xrcd: int, pd: int, cq: int, mr: int, recvs: int = 16) -> Tuple[int, int]:
        """An XRC SRQ with `recvs` receives posted: (handle, srq number)."""
        r = self.call("xrc_srq", xrcd, pd, cq, mr, recvs)
        return r["handle"], r["srqn"]

    def create_qp(self, qp_type: str, owner: int, send_cq: int = 0, recv_cq: int = 0,
                  srq: int = -1) -> Tuple[int, int]:
        """rc, uc, ud, xrc_send (owner: a PD) or xrc_recv (owner: a domain): (handle, qpn)."""
        r = self.call("qp", qp_type, owner, send_cq, recv_cq, srq)
        return r["handle"], r["qpn"]

    def open_xrcd(self, path: str, oflags: int = 0) -> int:
        return self.call("xrcd", path, oflags)["handle"]

    def open_qp(self, xrcd: int, qpn: int) -> int:
        return self.call("open_qp", xrcd, qpn)["handle"]

    def to_rts(self, qp: int, lid: int = 0, qpn: int = 0, timeout: int = 14, retry: int = 7) -> None:
        """RESET to RTS with the peer (lid, qpn); a UD QP ignores the peer."""
        self.call("rts", qp, lid, qpn, timeout, retry)

    def send(self, qp: int, mr: int, srqn: int = 0, tag: int = 0, length: int = 16,
             lkey_delta: int = 0) -> None:
        """One signalled SEND of `length` bytes with immediate `tag` (XRC: to SRQ `srqn`);
        lkey_delta != 0: with an lkey that names no MR."""
        self.call("send", qp, mr, srqn, tag, length, lkey_delta)

    def modify_state(self, qp: int, state: str) -> None:
        """One state change and nothing else: "init" (from RESET), "err" or "reset"."""
        self.call("state", qp, state)

    def write(self, qp: int, mr: int, rkey_delta: int = 0) -> None:
        """One signalled 16-byte RDMA WRITE from mr to the peer at mr's own address and rkey +
        rkey_delta (a probe of the responder's access check: a delta that names no MR there)."""
        self.call("write", qp, mr, rkey_delta)

    def async_events(self) -> List[int]:
        """The async events pending on the player's context (enum ibv_event_type, in order), read
        without blocking and acknowledged."""
        r = self.call("events")
        return [r[f"event{i}"] for i in range(r["n"])]

    def query_qp(self, qp: int) -> Dict[str, int]:
        """state, cur_state (enum ibv_qp_state), cap_send_wr, cap_recv_wr as ibv_query_qp says."""
        return self.call("query_qp", qp)

    def recv(self, qp: int, mr: int, count: int = 1) -> None:
        self.call("recv", qp, mr, count)

    def poll(self, cq: int, max: int = 1, ms: int = 5000) -> List[Tuple[int, int]]:
        """Up to `max` completions within `ms` (the wait bound): [(status, imm or -1)]."""
        r = self.call("poll", cq, max, ms)
        return [(r[f"status{i}"], r[f"imm{i}"]) for i in range(r["n"])]

    def poll_tries(self, cq: int, max: int = 1, tries: int = 1000) -> List[Tuple[int, int]]:
        """Up to `max` completions in at most `tries` calls of ibv_poll_cq (bounded by a count, not
        a clock): [(status, imm or -1)]."""
        r = self.call("poll_tries", cq, max, tries)
        return [(r[f"status{i}"], r[f"imm{i}"]) for i in range(r["n"])]

    def destroy(self, handle: int) -> None:
        """ibv_dealloc_pd, dereg_mr, destroy_cq/srq/qp or close_xrcd, by what the handle is."""
        self.call("destroy", handle)

    # ---- the process ----
    def exit(self) -> None:
        """Exits normally without releasing anything; reaped here."""
        self.call("exit")
        self.proc.wait(timeout=self.timeout)
        self.close()

    def kill(self) -> None:
        """SIGKILL and reap: the pid is gone when this returns."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=self.timeout)
        self.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Ends the player if it still runs (SIGKILL) and closes the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=self.timeout)
        for f in (self.proc.stdin, self.proc.stdout):
            if f and not f.closed:
                f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

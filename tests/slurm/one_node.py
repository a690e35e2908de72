# SPDX-License-Identifier: BSD-2-Clause
"""A one-node Slurm cluster of its own: munged, slurmctld and slurmd on localhost, every file
(munge key, slurm.conf, state, spool, logs, sockets) under one temporary directory, no systemd,
no cgroups. `with OneNodeSlurm() as env:` gives the environment a Slurm client needs (SLURM_CONF);
leaving the block stops the daemons and removes the directory, on every exit path. The daemons
are children that the kernel signals when this process dies (PR_SET_PDEATHSIG), even by SIGKILL;
what they start (slurmstepd, the jobs) and the clients are not, so a guardian in a session of its
own waits for this process's end (the EOF of a pipe) and then ends every process whose
environment names this cluster's slurm.conf — only processes of this cluster carry it — and
removes the directory (and the extra ones it was given).
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# The daemons' ports come from a block below the kernel's ephemeral range (net.ipv4.
# ip_local_port_range, 32768-60999 by default), which no other test of the suite uses: a port the
# kernel handed out for bind(0) and that was released before slurmctld bound it could meanwhile go
# to any process's outgoing connection (under ctest -j2 it did), while the kernel never hands out
# one of these.
PORT_BLOCK = range(20600, 20700)


def _ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    return range(low, high + 1)


def _free_ports(n):
    """n ports of PORT_BLOCK that nothing holds now (another user of the machine may hold some)."""
    ephemeral = _ephemeral_range()
    ports = []
    for port in PORT_BLOCK:
        if port in ephemeral:
            raise RuntimeError(f"port {port} is in the ephemeral range {ephemeral}: move PORT_BLOCK")
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # held by something else on this machine: the next one
        ports.append(port)
        if len(ports) == n:
            return ports
    raise RuntimeError(f"fewer than {n} free ports in {PORT_BLOCK}")


CONF = """ClusterName=emucampaign
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
# A container: no cgroups, no accounting, no job containers.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobContainerType=job_container/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
SlurmdTimeout=300
MinJobAge=300
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=campaign Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _cluster_pids(conf):
    mark = b"SLURM_CONF=" + conf.encode() + b"\0"
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read() and int(pid) != os.getpid():
                    pids.append(int(pid))
        except OSError:
            pass  # gone, or not ours to read
    return pids


def _signal(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def guard(conf, dirs):
    """The guardian: after EOF on stdin, SIGTERM then (10 s later) SIGKILL to the cluster's
    processes, then the directories go."""
    sys.stdin.buffer.read()
    _signal(_cluster_pids(conf), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _cluster_pids(conf) and time.monotonic() < deadline:
        time.sleep(0.1)  # polling their end, bounded
    _signal(_cluster_pids(conf), signal.SIGKILL)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


class OneNodeSlurm:
    def __init__(self, cpus=None, extra_dirs=()):
        self.cpus = cpus or os.cpu_count()
        self.extra_dirs = list(extra_dirs)
        self.procs = []

    def _start(self, cmd, log):
        out = open(os.path.join(self.dir, log), "w")
        self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                           preexec_fn=_die_with_parent, env=self.env))

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="emu-slurm-")
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.guardian = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), self.conf, self.dir, *self.extra_dirs],
            stdin=subprocess.PIPE, start_new_session=True)
        try:
            self._setup()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.env

    def _setup(self):
        d = self.dir
        for sub in ("state", "spool", "munge"):
            os.makedirs(os.path.join(d, sub))
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(os.path.join(d, "munge"), 0o700)
        host = socket.gethostname().split(".")[0]
        ctld_port, d_port = _free_ports(2)
        conf = self.conf
        with open(conf, "w") as f:
            f.write(CONF.format(host=host, ctld_port=ctld_port, d_port=d_port, dir=d,
                                cpus=self.cpus, user=os.environ.get("USER", "root")))
        # Only slurm.conf's own name: an empty cgroup.conf keeps slurmd from reading /etc's.
        open(os.path.join(d, "cgroup.conf"), "w").close()
        self.env = dict(os.environ, SLURM_CONF=conf)
        # munged runs as root here: --force accepts a key and directories that root owns.
        self._start(["munged", "--foreground", "--force", f"--key-file={key}",
                     f"--socket={d}/munge.socket", f"--pid-file={d}/munge/munged.pid",
                     f"--log-file={d}/munge/munged.log", f"--seed-file={d}/munge/munged.seed"],
                    "munged.out")
        self._start(["slurmctld", "-D", "-c", "-i", "-f", conf], "slurmctld.out")
        self._start(["slurmd", "-D", "-f", conf, "-N", host], "slurmd.out")

    def logs(self):
        """The daemons' logs, for a failure's message."""
        text = []
        for name in ("munged.out", "slurmctld.out", "slurmd.out", "slurmctld.log", "slurmd.log"):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text.append(f"==== {name}\n" + f.read()[-4000:])
        return "\n".join(text)

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.guardian.stdin.close()
        self.guardian.wait(timeout=120)
        return False


if __name__ == "__main__":
    guard(sys.argv[1], sys.argv[2:])

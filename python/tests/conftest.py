"""Shared helpers: ranks as Python threads (the GIL is released in every sparrow call), settings for
loopback, and the path of the package under test (build tree unless SPARROW_PYTHONPATH says)."""
import os
import socket
import subprocess
import sys
import textwrap
import threading

os.environ.setdefault("SPARROW_SOCKET_IFNAME", "lo")
os.environ.setdefault("SPARROW_PROBE_MS", "30")
os.environ.setdefault("SPARROW_TIMEOUT_S", "60")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PKG = os.environ.get("SPARROW_PYTHONPATH", os.path.join(ROOT, "build", "python"))
if PKG not in sys.path:
    sys.path.insert(0, PKG)

import pytest  # noqa: E402

import sparrow  # noqa: E402


def run_ranks(n, fn, uid=None):
    """Runs fn(comm, rank) for n ranks on n threads over one communicator; returns per-rank results,
    raising the first exception (with its rank) if any rank raised."""
    uid = uid or sparrow.get_unique_id()
    comms = [None] * n
    out = [None] * n
    errs = [None] * n

    def body(r):
        try:
            comms[r] = sparrow.Communicator(n, uid, r)
            out[r] = fn(comms[r], r)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errs[r] = e

    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
        assert not t.is_alive(), "a rank hung"
    for c in comms:
        if c is not None:
            c.destroy()
    for r, e in enumerate(errs):
        if e is not None:
            raise AssertionError(f"rank {r} raised {type(e).__name__}: {e}") from e
    return out


class Ranks:
    """n communicators kept across several collective calls: ranks.call(fn) runs fn(comm, rank) on
    every rank at once and returns the per-rank results or exceptions (not raised)."""

    def __init__(self, n):
        self.n = n
        uid = sparrow.get_unique_id()
        self.comms = [None] * n
        errs = [None] * n

        def init(r):
            try:
                self.comms[r] = sparrow.Communicator(n, uid, r)
            except BaseException as e:  # noqa: BLE001
                errs[r] = e

        ts = [threading.Thread(target=init, args=(r,)) for r in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for e in errs:
            if e is not None:
                raise e

    def call(self, fn):
        out = [None] * self.n

        def body(r):
            try:
                out[r] = fn(self.comms[r], r)
            except BaseException as e:  # noqa: BLE001
                out[r] = e

        ts = [threading.Thread(target=body, args=(r,)) for r in range(self.n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=300)
            assert not t.is_alive(), "a rank hung"
        return out

    def close(self):
        for c in self.comms:
            if c is not None:
                c.destroy()


@pytest.fixture
def ranks():
    made = []

    def make(n):
        r = Ranks(n)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def free_port():
    """A TCP port on loopback that was free a moment ago (a MASTER_PORT for ranks started as processes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_envs(n, **extra):
    """The environments of n ranks started as processes (RANK, WORLD_SIZE), meeting at a fresh
    MASTER_PORT on loopback; `extra` is added to each."""
    port = free_port()
    return [dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **extra)
            for r in range(n)]


def run_script(body, env=None, timeout=120):
    """Runs `body` in a fresh interpreter with the package under test; (returncode, stdout, stderr)."""
    script = f"import sys; sys.path.insert(0, {PKG!r})\n" + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **(env or {})), capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def run_ranks_as_scripts(body, envs, timeout=120):
    """Runs `body` once per environment in `envs`, as processes at once; their outputs (stdout and
    stderr). Ends every process it started."""
    script = f"import sys; sys.path.insert(0, {PKG!r})\n" + textwrap.dedent(body)
    procs = [subprocess.Popen([sys.executable, "-c", script], env=e, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for e in envs]
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

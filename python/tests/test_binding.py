"""The Python binding over real sockets: ranks as threads in this process (processes where a rank
must die), torch tensors and numpy arrays used in place."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import sparrow
from conftest import PKG, free_port, run_ranks, run_ranks_as_scripts, run_script

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/setup.sh installs python3-torch)")

TORCH_DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64,
                torch.bfloat16]
INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    """The tensor's bit patterns, for bit-exact comparison (NaN payloads and -0.0 included)."""
    return t.view(INT_VIEW[t.element_size()]) if t.dtype not in (torch.uint8,) else t


def mutate(t, frac, gen):
    """Changes ~frac of the elements' bits (random bit patterns, so NaNs and -0.0 appear too)."""
    v = bits(t).view(-1)
    k = max(1, int(v.numel() * frac))
    idx = torch.randint(0, v.numel(), (k,), generator=gen)
    v[idx] = torch.randint(-100, 100, (k,), generator=gen).to(v.dtype) ^ v[idx]


def test_unique_id_and_version():
    uid = sparrow.get_unique_id()
    assert isinstance(uid, bytes) and len(uid) == sparrow.UNIQUE_ID_BYTES == 128
    assert uid != sparrow.get_unique_id()
    assert sparrow.version() >= 100


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_every_torch_dtype_in_place_over_steps(ranks, dtype):
    rs = ranks(3)
    gen = torch.Generator().manual_seed(7)
    src = bits(torch.zeros(10007, dtype=dtype))
    src.copy_(torch.randint(-(2 ** 7), 2 ** 7 - 1, src.shape, generator=gen).to(src.dtype))
    src = src.view(dtype)
    recv = [src.clone() if r == 1 else torch.zeros_like(src) for r in range(3)]
    for step in range(4):
        if step:
            mutate(src, 0.01, gen)
        recv[1].copy_(src)  # the root (rank 1) sends its own tensor, in place
        out = rs.call(lambda c, r: c.sparse_broadcast(recv[r], root=1))
        for r in range(3):
            assert not isinstance(out[r], Exception), out[r]
            assert out[r] is recv[r]
            assert torch.equal(bits(recv[r]), bits(src)), f"step {step} rank {r}"
        st = rs.comms[0].stats()
        assert st["full"] == (step == 0)
        if step:
            assert st["wire_bytes"] * 5 < st["dense_bytes"], st


@pytest.mark.parametrize("name", list(sparrow.DTYPES)[:-1])  # numpy has no bfloat16
def test_every_numpy_dtype_out_of_place(ranks, name):
    rs = ranks(3)
    rng = np.random.default_rng(3)
    src = rng.integers(0, 255, 4099 * np.dtype(name).itemsize, dtype=np.uint8).view(name)
    outs = [np.zeros_like(src) for _ in range(3)]
    for step in range(3):
        if step:
            src.view(np.uint8)[rng.integers(0, src.nbytes, 40)] ^= 0x5A
        res = rs.call(lambda c, r: c.sparse_broadcast(src if r == 0 else outs[r], root=0, out=outs[r] if r == 0 else None))
        for r in range(3):
            assert not isinstance(res[r], Exception), res[r]
            assert outs[r].tobytes() == src.tobytes(), f"step {step} rank {r}"


def test_dense_broadcast_and_stats_keys(ranks):
    rs = ranks(4)
    src = torch.arange(100003, dtype=torch.float32)
    dst = [src.clone() if r == 2 else torch.full_like(src, -1) for r in range(4)]
    res = rs.call(lambda c, r: c.broadcast(dst[r], root=2))
    for r in range(4):
        assert not isinstance(res[r], Exception), res[r]
        assert torch.equal(dst[r], src)
    st = rs.comms[1].stats()
    for k in ("ops", "dense_bytes", "wire_bytes", "changed", "density", "encode_s", "apply_s", "time_s", "resyncs",
              "full", "catch_ups", "catch_up_bytes"):
        assert k in st, k
    assert st["dense_bytes"] == src.numel() * 4


def test_peer_stats_progress_and_stage_times(ranks):
    rs = ranks(3)
    src = torch.arange(1 << 18, dtype=torch.float32)
    dst = [src.clone() if r == 0 else torch.zeros_like(src) for r in range(3)]
    for step in range(2):
        if step:
            src[::97] += 1
            dst[0].copy_(src)
        res = rs.call(lambda c, r: c.sparse_broadcast(dst[r], root=0))
        for r in range(3):
            assert not isinstance(res[r], Exception), res[r]
            assert torch.equal(dst[r], src)
    wire = rs.comms[0].stats()["wire_bytes"]
    sent = {p["rank"]: p for p in rs.comms[0].peer_stats()}
    assert set(sent) <= {1, 2} and sent, sent  # the root's children in this tree
    assert sum(p["bytes_sent"] for p in sent.values()) >= wire
    st = rs.comms[2].stage_times()
    assert st["role"] == "receiver" and st["op"] == 2
    secs = st["seconds"]
    assert secs["extract"] is None and secs["first_byte"] is not None
    assert 0 <= secs["first_byte"] <= secs["last_byte"] and secs["commit"] is not None
    assert st["peers"] and all(p["received"] >= 0 for p in st["peers"])
    assert rs.comms[0].stage_times()["role"] == "root"
    pr = rs.comms[2].progress()
    assert pr["in_call"] is False and pr["bytes_received"] >= wire


def test_group_is_one_step_and_weight_sync(ranks):
    rs = ranks(3)
    torch.manual_seed(0)
    shapes = [(64, 33), (1000,), (7, 3, 5), (1,)]
    trainer = [torch.randn(s).to(torch.bfloat16) for s in shapes]
    workers = {r: [torch.zeros(s, dtype=torch.bfloat16) for s in shapes] for r in (1, 2)}
    syncs = rs.call(lambda c, r: sparrow.WeightSync(
        c, [(f"p{i}", t) for i, t in enumerate(trainer if r == 0 else workers[r])], root=0))
    before = rs.comms[0].stats()["ops"] if rs.comms[0].stats() else 0
    for step in range(4):
        if step:
            for t in trainer:
                flat = t.view(-1)
                flat[torch.randint(0, flat.numel(), (max(1, flat.numel() // 50),))] += 0.5
        res = rs.call(lambda c, r: syncs[r].step())
        for r in (1, 2):
            assert not isinstance(res[r], Exception), res[r]
            for a, b in zip(workers[r], trainer):
                assert torch.equal(a.view(torch.int16), b.view(torch.int16)), f"step {step} rank {r}"
    assert rs.comms[0].stats()["ops"] == before + 4, "each WeightSync.step is one operation"
    assert syncs[0].names == ["p0", "p1", "p2", "p3"] and syncs[0].steps == 4


def test_parameters_of_a_module_sync_in_place(ranks):
    rs = ranks(2)
    torch.manual_seed(1)
    models = [torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).to(torch.bfloat16)
              for _ in range(2)]
    syncs = rs.call(lambda c, r: sparrow.WeightSync(c, models[r].named_parameters(), root=0))
    res = rs.call(lambda c, r: syncs[r].step())
    assert not any(isinstance(x, Exception) for x in res), res
    for (n0, p0), (n1, p1) in zip(models[0].named_parameters(), models[1].named_parameters()):
        assert n0 == n1 and torch.equal(p0.view(torch.int16), p1.view(torch.int16)), n0
    x = torch.randn(3, 16).to(torch.bfloat16)
    assert torch.equal(models[0](x), models[1](x))


def test_bad_arguments_raise_specific_errors(ranks):
    rs = ranks(2)
    c = rs.comms[0]
    with pytest.raises(sparrow.InvalidArgument, match="not contiguous"):
        c.sparse_broadcast(torch.zeros(10, 10).t())
    with pytest.raises(sparrow.InvalidArgument, match="not supported"):
        c.sparse_broadcast(torch.zeros(4, dtype=torch.bool))
    with pytest.raises(sparrow.InvalidArgument, match="root must be"):
        c.sparse_broadcast(torch.zeros(4), root=2)
    with pytest.raises(sparrow.InvalidArgument, match="expected a torch.Tensor or a numpy array"):
        c.broadcast([1, 2, 3])
    with pytest.raises(sparrow.InvalidArgument, match="read-only"):
        rs.comms[1].sparse_broadcast(np.frombuffer(b"\0" * 16, dtype=np.uint8), root=0)
    with pytest.raises(sparrow.InvalidArgument, match="out has"):
        c.sparse_broadcast(torch.zeros(4), out=torch.zeros(5))
    with pytest.raises(sparrow.InvalidArgument, match="uid must be"):
        sparrow.Communicator(2, b"short", 0)
    with pytest.raises(sparrow.InvalidArgument, match="rank must be"):
        sparrow.Communicator(2, sparrow.get_unique_id(), 5)
    assert issubclass(sparrow.InvalidArgument, ValueError) and issubclass(sparrow.Timeout, TimeoutError)


def test_mismatched_counts_fail_every_rank_with_invalid_usage(ranks):
    rs = ranks(3)
    bufs = [torch.zeros(100 + (r == 2)) for r in range(3)]
    res = rs.call(lambda c, r: c.sparse_broadcast(bufs[r], root=0))
    for r in range(3):
        assert isinstance(res[r], sparrow.InvalidUsage), (r, res[r])
        assert "differ between ranks" in str(res[r])


def test_destroyed_communicator_is_rejected():
    def fn(c, r):
        return c

    comms = run_ranks(2, fn)
    with pytest.raises(sparrow.InvalidUsage, match="destroyed"):
        comms[0].sparse_broadcast(torch.zeros(3))
    comms[0].destroy()  # idempotent
    with sparrow.Communicator(1, sparrow.get_unique_id(), 0) as c:
        assert c.size == 1
    with pytest.raises(sparrow.InvalidUsage):
        _ = c.rank


def test_modified_receiver_is_refused_then_repaired(ranks):
    rs = ranks(3)
    gen = torch.Generator().manual_seed(11)
    src = torch.randn(50000, generator=gen).to(torch.bfloat16)
    dst = [src if r == 0 else torch.zeros_like(src) for r in range(3)]
    res = rs.call(lambda c, r: c.sparse_broadcast(dst[r], root=0))
    assert not any(isinstance(x, Exception) for x in res), res
    for unchanged in (True, False):
        old = src.clone()
        src.view(torch.int16)[torch.randint(0, src.numel(), (500,), generator=gen)] ^= 3
        # rank 2 scribbles on one element: one the step leaves alone, or one it changes
        diff = (old.view(torch.int16) != src.view(torch.int16)).nonzero().view(-1)
        same = (old.view(torch.int16) == src.view(torch.int16)).nonzero().view(-1)
        at = int(same[17] if unchanged else diff[3])
        dst[2].view(torch.int16)[at] ^= 1
        scribbled = dst[2].clone()
        res = rs.call(lambda c, r: c.sparse_broadcast(dst[r], root=0))
        assert res[0] is dst[0] and res[1] is dst[1]
        assert isinstance(res[2], sparrow.VersionMismatch), res[2]
        assert "written to since that step" in str(res[2])
        assert torch.equal(dst[2].view(torch.int16), scribbled.view(torch.int16)), "refused untouched"
        assert torch.equal(dst[1].view(torch.int16), src.view(torch.int16))
        src.view(torch.int16)[torch.randint(0, src.numel(), (500,), generator=gen)] ^= 5
        res = rs.call(lambda c, r: c.sparse_broadcast(dst[r], root=0))
        assert not any(isinstance(x, Exception) for x in res), res
        for r in (1, 2):
            assert torch.equal(dst[r].view(torch.int16), src.view(torch.int16)), f"rank {r} repaired"
    assert rs.comms[2].stats()["resyncs"] == 2


WORKER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["SPARROW_TEST_PKG"])
    import torch, sparrow
    elastic = os.environ.get("ELASTIC") == "1"
    comm = sparrow.Communicator.from_env(**({"elastic": True, "lease_ms": 2000} if elastic else {}))
    buf = torch.zeros(200000, dtype=torch.bfloat16)
    steps = int(os.environ["STEPS"])
    for step in range(steps):
        if comm.rank == 0:
            buf.view(torch.int16)[step * 1000:(step + 1) * 1000] += 1
        try:
            comm.sparse_broadcast(buf, root=0)
            print(f"rank {comm.rank} step {step} ok", flush=True)
        except sparrow.Error as e:
            print(f"rank {comm.rank} step {step} {type(e).__name__}: {e}", flush=True)
            sys.exit(3)
        if comm.rank != 0:
            expect = torch.zeros(200000, dtype=torch.int16)
            expect[: (step + 1) * 1000] = 1
            assert torch.equal(buf.view(torch.int16), expect), "wrong bits"
        if step == 1 and comm.rank == 2:
            print("rank 2 waiting to be killed", flush=True)
            time.sleep(600)
        if step == 1 and comm.rank == 0:
            sys.stdin.readline()  # the test kills rank 2, then lets the root go on
    print(f"rank {comm.rank} members {comm.members()}", flush=True)
    comm.destroy()
""")


def spawn(n, steps, extra_env=None):
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               SPARROW_TEST_PKG=PKG, STEPS=str(steps), SPARROW_TIMEOUT_S="20", **(extra_env or {}))
    procs = []
    for r in range(n):
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=dict(env, RANK=str(r)),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    return procs


def test_from_env_processes_and_killed_worker_is_peer_lost():
    procs, out0, out1 = run_killing_rank_2(3, 4)
    assert "rank 0 step 1 ok" in out0 and "rank 1 step 1 ok" in out1, (out0, out1)
    assert "PeerLost" in out0 or "PeerLost" in out1, (out0, out1)
    assert procs[0].returncode == 3 or procs[1].returncode == 3, (out0, out1)


def run_killing_rank_2(n, steps, extra_env=None):
    """Spawns the workers, kills rank 2 once it parks after step 1, lets the root go on; ends every
    process it started. (procs, out0, out1)."""
    procs = spawn(n, steps, extra_env)
    try:
        out0, out1 = kill_parked_rank_2(procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return procs, out0, out1


def kill_parked_rank_2(procs):
    """Waits until rank 2 parks after step 1, kills it, then releases the root; (out0, out1)."""
    line = ""
    deadline = time.monotonic() + 120
    while "waiting to be killed" not in line and time.monotonic() < deadline:
        line = procs[2].stdout.readline()
        assert line or procs[2].poll() is None, "rank 2 exited early"
    assert "waiting to be killed" in line
    procs[2].send_signal(signal.SIGKILL)
    procs[2].wait(timeout=30)
    procs[0].stdin.write("\n")
    procs[0].stdin.flush()
    out0, _ = procs[0].communicate(timeout=120)
    out1, _ = procs[1].communicate(timeout=120)
    return out0, out1


def test_elastic_communicator_drops_a_killed_worker_and_the_others_succeed():
    procs, out0, out1 = run_killing_rank_2(3, 4, {"ELASTIC": "1"})
    assert procs[0].returncode == 0 and procs[1].returncode == 0, (out0, out1)
    assert "rank 0 step 3 ok" in out0 and "rank 1 step 3 ok" in out1, (out0, out1)
    assert "rank 0 members [0, 1]" in out0, out0


def test_elastic_arguments_are_checked():
    uid = sparrow.get_unique_id()
    with pytest.raises(sparrow.InvalidArgument):
        sparrow.Communicator(2, uid, 0, elastic=True, lease_ms=5)
    with pytest.raises(sparrow.InvalidArgument):
        sparrow.Communicator(2, uid, 0, elastic="yes")
    with pytest.raises(sparrow.InvalidArgument):
        sparrow.Communicator(2, uid, 0, region="")
    with pytest.raises(sparrow.InvalidArgument):  # the C library's check: a lease needs elastic
        sparrow.Communicator(2, uid, 0, lease_ms=1000)


def test_members_of_a_fixed_communicator_are_every_rank():
    assert run_ranks(3, lambda c, r: c.members()) == [[0, 1, 2]] * 3


def test_stage_ready_commit_keeps_the_old_version_readable(ranks):
    rs = ranks(3)
    torch.manual_seed(5)
    shapes = [(300, 300), (4097,)]
    trainer = [torch.randn(s).to(torch.bfloat16) for s in shapes]
    workers = {r: [torch.zeros(s, dtype=torch.bfloat16) for s in shapes] for r in (1, 2)}
    syncs = rs.call(lambda c, r: sparrow.WeightSync(c, trainer if r == 0 else workers[r], root=0))
    for step in range(3):
        if step:
            for t in trainer:
                t.view(torch.int16).view(-1)[::97] += 1
        old = {r: [w.clone() for w in workers[r]] for r in (1, 2)}

        def body(c, r):
            syncs[r].stage()
            if r == 0:
                return syncs[r].commit()
            for w, o in zip(workers[r], old[r]):  # still readable, still the previous version
                assert torch.equal(w.view(torch.int16), o.view(torch.int16))
            deadline = time.monotonic() + 60
            while not syncs[r].ready():
                assert time.monotonic() < deadline, "never ready"
                time.sleep(0.001)
            st = c.stats()
            assert st["stage_pending"] and st["stage_ready"] and st["stage_bytes_received"] > 0
            with pytest.raises(sparrow.InvalidUsage, match="staged"):
                c.broadcast(torch.zeros(1), root=0)
            for w, o in zip(workers[r], old[r]):
                assert torch.equal(w.view(torch.int16), o.view(torch.int16))
            return syncs[r].commit()

        res = rs.call(body)
        for r in (1, 2):
            assert not isinstance(res[r], Exception), res[r]
            for w, t in zip(workers[r], trainer):
                assert torch.equal(w.view(torch.int16), t.view(torch.int16)), f"step {step} rank {r}"
            assert not res[r]["stage_pending"]


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_join_takes_the_slot_of_a_dropped_rank_and_gets_whole_then_deltas(dense):
    """Ranks as threads in an elastic communicator: rank 2 is aborted (its connections close, as when
    a worker dies), the root drops it, and a new communicator joins with rank=None: it gets slot 2,
    its first sparse_broadcast brings the whole version, the next ones deltas, bit-exact. Dense: every
    call a broadcast (the root admits the joiner at one), every step whole."""
    import threading
    n, count = 3, 50000
    uid = sparrow.get_unique_id()
    comms = [None] * n
    ts = [threading.Thread(target=lambda r=r: comms.__setitem__(
        r, sparrow.Communicator(n, uid, r, elastic=True, lease_ms=1000))) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert all(c is not None for c in comms)

    def version(step):
        v = torch.zeros(count, dtype=torch.int16)
        v[: (step + 1) * 100] = step + 1
        return v.view(torch.bfloat16)

    bufs = [torch.zeros(count, dtype=torch.bfloat16) for _ in range(n)]

    def call(c, buf):
        return c.broadcast(buf, root=0) if dense else c.sparse_broadcast(buf, root=0)

    def step(s, who):
        bufs[0].copy_(version(s))
        errs = []

        def one(r):
            try:
                call(comms[r], bufs[r])
            except sparrow.Error as e:
                errs.append((r, e))
        th = [threading.Thread(target=one, args=(r,)) for r in who]
        for t in th:
            t.start()
        for t in th:
            t.join(timeout=120)
            assert not t.is_alive(), f"step {s} hung"
        assert not errs, errs
        for r in who:
            assert torch.equal(bufs[r].view(torch.int16), version(s).view(torch.int16)), f"rank {r} step {s}"

    step(0, range(n))
    step(1, range(n))
    comms[2].abort()  # not destroyed: this process's store serves joiners until its last communicator goes
    step(2, [0, 1])
    assert comms[0].members() == [0, 1]
    joined = {}
    got = []

    def joiner():
        try:
            c = sparrow.Communicator.join(uid, None, lease_ms=1000)
            joined["comm"] = c
            buf = torch.zeros(count, dtype=torch.bfloat16)
            for _ in range(3):
                call(c, buf)
                got.append(buf.clone())
        except sparrow.Error as e:
            joined["error"] = e
    jt = threading.Thread(target=joiner)
    jt.start()
    s, first = 3, None
    while s < 300 and jt.is_alive():
        step(s, [0, 1])
        if first is None and comms[0].members() == [0, 1, 2]:
            first = s  # the operation that admitted the joiner: its first
        s += 1
        if first is not None and s == first + 3:
            break
    jt.join(timeout=120)
    assert "error" not in joined, joined
    assert first is not None, "the joiner was never admitted"
    c = joined["comm"]
    assert c.rank == 2 and c.members() == [0, 1, 2]
    assert len(got) == 3
    for k, b in enumerate(got):
        assert torch.equal(b.view(torch.int16), version(first + k).view(torch.int16)), f"joiner call {k}"
    assert c.stats()["full"] is dense and comms[0].stats()["ops"] > 0
    for cc in [c, comms[0], comms[1]]:
        cc.destroy()


GROW = textwrap.dedent("""
    import os, sys, threading
    sys.path.insert(0, os.environ["SPARROW_TEST_PKG"])
    import torch, sparrow
    n, count = 2, 50000
    uid = sparrow.get_unique_id()
    comms = [None] * n
    ts = [threading.Thread(target=lambda r=r: comms.__setitem__(
        r, sparrow.Communicator(n, uid, r, elastic=True, lease_ms=1000))) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert all(c is not None for c in comms)
    assert comms[1].size == 3 and comms[0].members() == [0, 1], (comms[1].size, comms[0].members())
    src = torch.zeros(count, dtype=torch.bfloat16)
    dst = torch.zeros(count, dtype=torch.bfloat16)

    def version(step):
        v = torch.zeros(count, dtype=torch.int16)
        v[: (step + 1) * 100] = step + 1
        return v.view(torch.bfloat16)

    joined, got = {}, []

    def joiner():
        try:
            c = sparrow.Communicator.join(uid, None)
            joined["comm"] = c
            buf = torch.zeros(count, dtype=torch.bfloat16)
            for _ in range(3):
                c.sparse_broadcast(buf, root=0)
                got.append(buf.clone())
        except sparrow.Error as e:
            joined["error"] = e
    jt = threading.Thread(target=joiner)
    jt.start()
    s, first = 0, None
    while s < 300 and (first is None or s < first + 3):
        src.copy_(version(s))
        r1 = threading.Thread(target=lambda: comms[1].sparse_broadcast(dst, root=0))
        r1.start()
        comms[0].sparse_broadcast(src, root=0)
        r1.join(timeout=120)
        assert torch.equal(dst.view(torch.int16), version(s).view(torch.int16)), f"step {s}"
        if first is None and comms[0].members() == [0, 1, 2]:
            first = s  # the operation that admitted the joiner: its first
        s += 1
    jt.join(timeout=120)
    assert "error" not in joined, joined
    assert first is not None, "the joiner was never admitted"
    c = joined["comm"]
    assert c.rank == 2 and c.size == 3 and c.members() == [0, 1, 2], (c.rank, c.size, c.members())
    for k, b in enumerate(got):
        assert torch.equal(b.view(torch.int16), version(first + k).view(torch.int16)), f"joiner call {k}"
    for cc in [c, comms[0], comms[1]]:
        cc.destroy()
    print("grown", flush=True)
""")


def test_join_grows_the_communicator_into_a_vacant_slot():
    """SPARROW_MAX_RANKS=3 for 2 ranks (in a process of its own: settings are read once per process):
    size is 3 and slot 2 starts vacant; a joiner with rank=None takes it while nobody died, and gets
    every later step bit-exact."""
    env = dict(os.environ, SPARROW_TEST_PKG=PKG, SPARROW_MAX_RANKS="3", SPARROW_TIMEOUT_S="20")
    r = subprocess.run([sys.executable, "-c", GROW], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "grown" in r.stdout, r.stdout + r.stderr


def test_join_arguments_are_checked():
    uid = sparrow.get_unique_id()
    for bad in (0, -1, True, "2"):
        with pytest.raises(sparrow.InvalidArgument):
            sparrow.Communicator.join(uid, bad)
    with pytest.raises(sparrow.InvalidArgument):
        sparrow.Communicator.join(b"x" * 5)
    with pytest.raises(sparrow.InvalidArgument):
        sparrow.Communicator.join(uid, 1, lease_ms=5)


# ---- Ctrl-C, settings, errors reported once, rendezvous beside torch.distributed -------------------

CTRL_C = """
    import os, signal, threading, time
    import numpy as np
    import sparrow
    uid = sparrow.get_unique_id()
    comms = [None, None]
    def make(r):
        comms[r] = sparrow.Communicator(2, uid, r)
    t = threading.Thread(target=make, args=(0,))
    t.start()
    make(1)
    t.join()
    buf = np.arange(4096, dtype=np.float32)
    sent = []
    def interrupt_once_waiting():  # the root never calls: rank 1 waits for a header
        while not comms[1].progress()["in_call"]:
            time.sleep(0.01)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt_once_waiting, daemon=True).start()
    try:
        comms[1].sparse_broadcast(buf, root=0)
        print("returned")
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - sent[0]:.2f} s")
    print("buffer unchanged", bool((buf == np.arange(4096, dtype=np.float32)).all()))
    try:
        comms[1].sparse_broadcast(buf, root=0)
    except sparrow.InvalidUsage as e:
        print("then:", e)
    comms[0].abort()
"""


def test_ctrl_c_interrupts_a_waiting_call_within_a_second():
    rc, out, err = run_script(CTRL_C, {"SPARROW_TIMEOUT_S": "60"})
    assert rc == 0, out + err
    assert "interrupted after" in out, out + err
    took = float(out.split("interrupted after ")[1].split()[0])
    assert took < 2.0, f"KeyboardInterrupt came {took} s after SIGINT (SPARROW_TIMEOUT_S is 60)"
    assert "buffer unchanged True" in out, out
    assert "then: " in out and "destroyed or aborted" in out, out  # the communicator was aborted


def test_settings_use_the_librarys_parser_and_errors_are_reported_once():
    rc, out, err = run_script("""
        import sparrow
        print(sparrow.setting("TIMEOUT_S"))
        try:
            sparrow.Communicator(2, sparrow.get_unique_id(), 0, lease_ms=1000)  # the C library refuses it
        except sparrow.InvalidArgument as e:
            print("raised", e)
    """, {"SPARROW_TIMEOUT_S": "1K"})
    assert rc == 0, out + err
    assert out.splitlines()[0] == "1024", out
    assert "raised" in out, out
    assert "WARN" not in err, f"the error was also logged: {err}"
    rc, out, err = run_script("import sparrow; sparrow.setting('TIMEOUT_S')", {"SPARROW_TIMEOUT_S": "soon"})
    assert rc != 0 and "sparrow.InvalidArgument" in err and "SPARROW_TIMEOUT_S" in err, err


BESIDE_TORCH = """
    import os, torch, torch.distributed as dist, sparrow
    dist.init_process_group("gloo")  # env://: MASTER_ADDR/MASTER_PORT, RANK, WORLD_SIZE
    comm = sparrow.Communicator.from_env()
    t = torch.arange(1000, dtype=torch.float32) if comm.rank == 0 else torch.zeros(1000)
    comm.sparse_broadcast(t, root=0)
    print("rank", comm.rank, "ok", bool((t == torch.arange(1000, dtype=torch.float32)).all()))
    comm.destroy()
    dist.destroy_process_group()
"""


def test_from_env_shares_the_id_through_an_initialised_torch_distributed():
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    outs = run_ranks_as_scripts(BESIDE_TORCH, [dict(env, RANK=str(r), WORLD_SIZE="2") for r in range(2)])
    for r, out in enumerate(outs):
        assert f"rank {r} ok True" in out, out


def test_from_env_on_a_port_another_service_holds_says_what_to_do():
    with socket.create_server(("127.0.0.1", 0)) as taken:  # listening, like torch.distributed's store
        port = taken.getsockname()[1]
        rc, out, err = run_script("""
            import sparrow
            try:
                sparrow.Communicator.from_env(timeout=30)
            except sparrow.InvalidUsage as e:
                print("raised", e)
        """, {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    assert rc == 0 and "raised" in out and "torch.distributed" in out and "SPARROW_MASTER_PORT" in out, out + err


def test_from_env_rank_that_reaches_another_service_fails_fast():
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        import threading

        def answer_junk():
            conn, _ = srv.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        th = threading.Thread(target=answer_junk)
        th.start()
        t0 = time.monotonic()
        rc, out, err = run_script("""
            import sparrow
            try:
                sparrow.Communicator.from_env(timeout=30)
            except sparrow.InvalidUsage as e:
                print("raised", e)
        """, {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        th.join(timeout=30)
    assert rc == 0 and "raised" in out and "another service answered" in out, out + err
    assert time.monotonic() - t0 < 20, "it waited for its timeout"


def test_from_env_with_disagreeing_world_sizes_fails_fast_naming_them():
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), SPARROW_TIMEOUT_S="60")
    body = """
        import time, sparrow
        t0 = time.monotonic()
        try:
            sparrow.Communicator.from_env()
        except sparrow.InvalidUsage as e:
            print(f"raised after {time.monotonic() - t0:.1f} s:", e)
    """
    # rank 0 has the larger size
    outs = run_ranks_as_scripts(body, [dict(env, RANK=str(r), WORLD_SIZE=str(n)) for r, n in ((0, 3), (1, 2))])
    for out in outs:
        assert "raised after" in out and "says there are 2 ranks, rank 0 said 3" in out, out
        assert float(out.split("raised after ")[1].split()[0]) < 10, out

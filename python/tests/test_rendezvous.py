"""Communicator.from_env's id exchange over MASTER_PORT (sparrow/rendezvous.py): a connection that
does not prove itself gets nothing and takes no rank's place. Ranks are processes."""
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from conftest import PKG, free_port, run_ranks_as_scripts, run_script
from sparrow import rendezvous

BROADCAST = """
    import sys, numpy as np, sparrow
    try:
        comm = sparrow.Communicator.from_env(timeout=30)
    except sparrow.Error as e:
        print("raised", type(e).__name__, e, flush=True)
        sys.exit(0)
    a = np.arange(1000, dtype=np.float32) if comm.rank == 0 else np.zeros(1000, dtype=np.float32)
    comm.sparse_broadcast(a, root=0)
    print("rank", comm.rank, "ok", bool((a == np.arange(1000, dtype=np.float32)).all()), flush=True)
    comm.destroy()
"""


@pytest.fixture
def secret_dir():
    with tempfile.TemporaryDirectory() as d:
        yield d


def secret_file(d, name, text, mode=0o600):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text + "\n")
    os.chmod(path, mode)
    return path


def env_for(rank, port, **extra):
    return dict(os.environ, **dict(dict(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                        MASTER_PORT=str(port), SPARROW_TIMEOUT_S="30"), **extra))


def start_rank(rank, env):
    script = f"import sys; sys.path.insert(0, {PKG!r})\n" + textwrap.dedent(BROADCAST)
    return subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def connect_when_listening(port, deadline_s=30):
    end = time.monotonic() + deadline_s
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def read_all(s, limit=4096):
    s.settimeout(5)
    got = b""
    try:
        while len(got) < limit:
            chunk = s.recv(limit - len(got))
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    return got


def finish(procs):
    try:
        return [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_with_a_secret_file_a_stranger_gets_no_id_and_takes_no_place(secret_dir):
    port = free_port()
    key_file = secret_file(secret_dir, "s", "a-secret-that-every-rank-of-this-job-holds")
    root = start_rank(0, env_for(0, port, SPARROW_SECRET_FILE=key_file))
    with connect_when_listening(port) as stranger:
        hello = stranger.recv(25)
        assert hello.startswith(rendezvous.MAGIC) and hello[8] == 1, hello
        stranger.sendall(b"\0" * 52)  # a rank number, a nonce and a made-up proof
        rest = read_all(stranger)
    assert rest == b"", f"rank 0 answered a wrong proof with {len(rest)} bytes"
    worker = start_rank(1, env_for(1, port, SPARROW_SECRET_FILE=key_file))
    out0, out1 = finish([root, worker])
    assert "rank 0 ok True" in out0 and "rank 1 ok True" in out1, (out0, out1)
    assert "refused a connection to the id port" in out0 and "wrong proof" in out0, out0


def test_a_rank_with_another_secret_is_refused_and_says_why(secret_dir):
    port = free_port()
    mine = secret_file(secret_dir, "mine", "a-secret-that-every-rank-of-this-job-holds")
    theirs = secret_file(secret_dir, "theirs", "not-the-secret-that-rank-0-holds-at-all")
    outs = run_ranks_as_scripts(BROADCAST, [env_for(0, port, SPARROW_SECRET_FILE=mine, SPARROW_TIMEOUT_S="8"),
                                            env_for(1, port, SPARROW_SECRET_FILE=theirs)])
    assert "raised AuthError" in outs[1] and "another secret" in outs[1], outs[1]
    # and one without a file, facing a rank 0 that has one
    port = free_port()
    outs = run_ranks_as_scripts(BROADCAST, [env_for(0, port, SPARROW_SECRET_FILE=mine, SPARROW_TIMEOUT_S="8"),
                                            env_for(1, port)])
    assert "raised InvalidUsage" in outs[1] and "set the same file on this rank" in outs[1], outs[1]


def test_without_a_secret_file_an_address_off_this_host_is_refused_at_once():
    t0 = time.monotonic()
    rc, out, err = run_script(BROADCAST, dict(env_for(1, free_port()), MASTER_ADDR="192.0.2.1"))
    assert rc == 0 and "raised InvalidUsage" in out and "SPARROW_SECRET_FILE" in out, out + err
    assert time.monotonic() - t0 < 20


def test_a_secret_file_others_can_read_is_refused(secret_dir):
    loose = secret_file(secret_dir, "loose", "a-secret-that-every-rank-of-this-job-holds", 0o644)
    rc, out, err = run_script(BROADCAST, env_for(1, free_port(), SPARROW_SECRET_FILE=loose))
    assert rc == 0 and "raised InvalidUsage" in out and "chmod 600" in out, out + err


def test_the_rendezvous_key_comes_from_the_library_with_its_checks(secret_dir):
    import hashlib
    import hmac
    text = "a-secret-that-every-rank-of-this-job-holds"
    path = secret_file(secret_dir, "k", text)
    assert rendezvous.read_key(path) == hmac.new(b"sparrow rendezvous v1", text.encode(), hashlib.sha256).digest()
    link = os.path.join(secret_dir, "link")
    os.symlink(path, link)
    bad = {secret_file(secret_dir, "short", "too-short"): "at least 16",
           secret_file(secret_dir, "group", text, 0o640): "chmod 600",
           link: "cannot open",
           os.path.join(secret_dir, "missing"): "cannot open"}
    for p, why in bad.items():
        with pytest.raises(rendezvous.RendezvousError) as e:
            rendezvous.read_key(p)
        assert e.value.kind == "usage" and why in str(e.value) and p in str(e.value), str(e.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_on_loopback_another_user_gets_no_id_and_takes_no_place():
    port = free_port()
    root = start_rank(0, env_for(0, port))
    connect_when_listening(port).close()  # the listener is up (an own-user probe; it takes no place either)
    probe = textwrap.dedent(f"""
        import os, socket
        os.setgid(65534); os.setuid(65534)
        s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
        s.settimeout(5)
        got = b""
        while True:
            c = s.recv(4096)
            if not c:
                break
            got += c
        print("got", len(got))
    """)
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "got 0" in r.stdout, r.stdout + r.stderr
    worker = start_rank(1, env_for(1, port))
    out0, out1 = finish([root, worker])
    assert "rank 0 ok True" in out0 and "rank 1 ok True" in out1, (out0, out1)
    assert "does not run as this user" in out0, out0

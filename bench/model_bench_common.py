# SPDX-License-Identifier: Apache-2.0
"""What the model benchmarks (model_layout_bench.py, model_sources_bench.py) share: an RL step's
change, ranks as threads, and ranks as processes on an emulated network (wanemu), one per host."""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

import torch

# The SparrowRL-format ablation's settings: its format (leb128 index, raw values), its static
# two-level tree and 4 TCP streams per peer, as its paper ran.
ABLATION = {"SPARROW_CODEC": "paper", "SPARROW_NSTREAMS": "4", "SPARROW_ALGO": "two_level"}


def mutate(tensors, density, g):
    """An RL step's change: `density` of each tensor's elements moved by one unit in the last place."""
    for t in tensors.values():
        flat = t.view(-1).view(torch.int16)
        flat[torch.randint(0, flat.numel(), (max(1, int(flat.numel() * density)),), generator=g)] += 1


def run_threads(n, body):
    """Runs body(r, barrier) for r in range(n) on threads that share a barrier; raises SystemExit
    naming the first rank that failed (the others are released from the barrier)."""
    barrier = threading.Barrier(n, timeout=600)
    errors = []

    def guarded(r):
        try:
            body(r, barrier)
        except BaseException as e:  # noqa: BLE001
            errors.append((r, e))
            barrier.abort()

    ts = [threading.Thread(target=guarded, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit(f"rank {errors[0][0]}: {errors[0][1]}")


def emulated_rank(nranks):
    """This process's rank on an emulated network (wanemu's environment), with RANK, WORLD_SIZE and
    MASTER_ADDR set for sparrow.Communicator.from_env; exits when the scenario has another size."""
    r, n = int(os.environ["WANEMU_RANK"]), int(os.environ["WANEMU_NRANKS"])
    if n != nranks:
        raise SystemExit(f"the scenario has {n} hosts; this run needs {nranks}")
    os.environ.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR=os.environ["WANEMU_ADDRS"].split(",")[0])
    os.environ.setdefault("SPARROW_MASTER_PORT", "29533")
    return r


def write_rows(out_dir, r, rows):
    with open(os.path.join(out_dir, f"{r}.json"), "w") as f:
        json.dump(rows, f)


def run_emulated(wanemu, scenario, script, args, nranks):
    """Runs `script args --out-dir D` once per host of `scenario` under wanemu; every rank's rows
    (what it passed to write_rows), by rank. The id exchange crosses hosts, so the ranks share a
    secret file made for the run unless SPARROW_SECRET_FILE names one."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [wanemu, "run", scenario, "--", sys.executable, os.path.abspath(script)] + args + ["--out-dir", d]
        env = {k: v for k, v in os.environ.items() if k != "SPARROW_SOCKET_IFNAME"}  # wanemu names each host's
        if not env.get("SPARROW_SECRET_FILE"):
            env["SPARROW_SECRET_FILE"] = os.path.join(d, "secret")
            with os.fdopen(os.open(env["SPARROW_SECRET_FILE"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(os.urandom(32).hex())
        if subprocess.run(cmd, env=env).returncode != 0:
            raise SystemExit(f"the emulated run failed: {' '.join(cmd)}")
        return [json.load(open(os.path.join(d, f"{r}.json"))) for r in range(nranks)]


def scenario_with_first(base, first, path):
    """BASE written to `path` with its first host holding `first` ranks and every other host one (a
    host without a count is one rank); returns the number of ranks."""
    parts = re.split(r"(?m)^(?=\[\[host\]\])", open(base).read())
    out = [parts[0]]
    for i, h in enumerate(parts[1:]):
        h = re.sub(r"(?m)^count\s*=.*\n", "", h)
        out.append(h.replace("[[host]]\n", f"[[host]]\ncount = {first}\n", 1) if i == 0 and first != 1 else h)
    with open(path, "w") as f:
        f.write("".join(out))
    return len(parts) - 2 + first

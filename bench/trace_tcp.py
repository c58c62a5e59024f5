#!/usr/bin/python3
"""Traces a rank's TCP streams during a step: what the kernel says of each connection over time.

    bench/trace_tcp.py record --pid PID [--interval-ms 20] [--seconds S] -o OUT.jsonl
    bench/trace_tcp.py show OUT.jsonl [--bucket-ms 50] [--from S] [--to S]

record samples `ss -tinpH` in the network namespace of process PID (`nsenter -t PID -n`, so it works
for a rank inside the emulator's namespaces; needs root there) every interval, until PID exits or S
seconds pass, and keeps PID's own established sockets: one JSON line per sample with the time and,
per socket, its peer, congestion window (segments), pacing and delivery rates (bit/s), round trip,
bytes sent and acknowledged, bytes not yet sent (notsent) and the send and receive queues. Each
sample runs `ss` once (a few ms of CPU): on a small machine that is part of the picture.

show prints the trace as a timeline: per bucket, the bytes acknowledged across all streams as a rate
(Mbit/s, with a bar), then for every stream its cwnd, pacing rate and not-yet-sent bytes; buckets
where nothing moved are folded. Where acknowledged bytes rise in steps with idle buckets between
them, the sender had nothing to send (the encoder was behind); where notsent stays high while the
rate sits under the link, TCP held the step back.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

UNITS = {"bps": 1.0, "Kbps": 1e3, "Mbps": 1e6, "Gbps": 1e9}


def rate(text):
    m = re.fullmatch(r"([0-9.]+)([KMG]?bps)", text)
    if not m:
        raise ValueError(f"not a rate: {text!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


def parse_ss(text, pid):
    """The sockets of process `pid` in `ss -tinpH` output, as dicts."""
    socks, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # a socket's first line: state, queues, addresses, users
            cur = None
            f = line.split()
            if len(f) < 5 or f[0] != "ESTAB" or f"pid={pid}," not in line:
                continue
            cur = {"local": f[3], "peer": f[4], "recv_q": int(f[1]), "send_q": int(f[2])}
            socks.append(cur)
            continue
        if cur is None:
            continue
        toks = line.split()
        for i, t in enumerate(toks):
            if t in ("pacing_rate", "delivery_rate") and i + 1 < len(toks):
                cur[t] = rate(toks[i + 1])
            elif ":" in t and not t.startswith("bbr:"):
                k, _, v = t.partition(":")
                if k == "rtt":
                    cur["rtt_ms"] = float(v.split("/")[0])
                elif k in ("cwnd", "bytes_sent", "bytes_acked", "bytes_received", "notsent", "unacked", "retrans"):
                    try:
                        cur[k] = int(v.split("/")[0])
                    except ValueError:
                        pass
    return socks


def record(args):
    if not os.path.isdir(f"/proc/{args.pid}"):
        sys.exit(f"trace_tcp: no process {args.pid}")
    cmd = ["nsenter", "-t", str(args.pid), "-n", "ss", "-tinpH"]
    t0 = time.monotonic()
    n = 0
    with open(args.o, "w") as out:
        while os.path.isdir(f"/proc/{args.pid}") and (args.seconds <= 0 or time.monotonic() - t0 < args.seconds):
            t = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                if not os.path.isdir(f"/proc/{args.pid}"):
                    break
                sys.exit(f"trace_tcp: {' '.join(cmd)} failed: {r.stderr.strip()}")
            socks = parse_ss(r.stdout, args.pid)
            if socks:
                out.write(json.dumps({"t": t, "socks": socks}) + "\n")
                n += 1
            time.sleep(max(0.0, args.interval_ms / 1000 - (time.time() - t)))
    print(f"trace_tcp: {n} samples to {args.o}", file=sys.stderr)


def load(path):
    rows = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"trace_tcp: {path}:{i}: not JSON ({e})")
    if not rows:
        sys.exit(f"trace_tcp: {path} has no samples")
    return rows


def stream(s):
    return s["local"] + ">" + s["peer"]


def data_streams(rows):
    """The streams that carried data (at least 64 KiB acknowledged over the trace), not the launcher's."""
    first, last = {}, {}
    for r in rows:
        for s in r["socks"]:
            first.setdefault(stream(s), s.get("bytes_acked", 0))
            last[stream(s)] = s.get("bytes_acked", 0)
    return sorted(k for k in last if last[k] - first[k] >= 65536)


def show(args):
    rows = load(args.trace)
    t0 = rows[0]["t"]
    keys = data_streams(rows)
    wanted = set(keys)
    bucket = args.bucket_ms / 1000
    buckets = {}  # bucket index -> [bytes acknowledged in it, the streams at its last sample]
    last_acked = {}
    for r in rows:
        t = r["t"] - t0
        if t < args.from_s or (args.to_s > 0 and t > args.to_s):
            continue
        by = {stream(s): s for s in r["socks"] if stream(s) in wanted}
        moved = 0
        for k, s in by.items():
            a = s.get("bytes_acked", 0)
            moved += max(0, a - last_acked.get(k, a))
            last_acked[k] = a
        acc = buckets.setdefault(int(t / bucket), [0, by])
        acc[0] += moved
        acc[1] = by
    print(f"# {len(keys)} stream(s); bucket {args.bucket_ms} ms; rate = bytes acknowledged in the bucket")
    print(f"# {'t (s)':>7} {'Mbit/s':>7}  per stream: cwnd/pacing Mbit/s/notsent KB")
    shown = folded = 0
    for b, (moved, by) in buckets.items():
        mbit = moved * 8 / bucket / 1e6
        if moved == 0 and all(s.get("notsent", 0) == 0 for s in by.values()):
            folded += 1
            continue
        streams = " ".join(
            f"{by[k].get('cwnd', 0)}/{by[k].get('pacing_rate', 0) / 1e6:.0f}/{by[k].get('notsent', 0) // 1024}"
            if k in by else "-" for k in keys)
        print(f"{b * bucket:9.3f} {mbit:7.1f} {'#' * min(60, int(mbit / 20))} {streams}")
        shown += 1
    print(f"# {shown} bucket(s) shown, {folded} idle bucket(s) folded")


def main():
    p = argparse.ArgumentParser(description="Trace a rank's TCP streams (cwnd, pacing, bytes) during a step.")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="sample ss in PID's network namespace")
    r.add_argument("--pid", type=int, required=True)
    r.add_argument("--interval-ms", type=float, default=20)
    r.add_argument("--seconds", type=float, default=0, help="stop after this long (0: when PID exits)")
    r.add_argument("-o", required=True)
    s = sub.add_parser("show", help="print a recorded trace as a timeline")
    s.add_argument("trace")
    s.add_argument("--bucket-ms", type=float, default=50)
    s.add_argument("--from", dest="from_s", type=float, default=0, help="seconds after the first sample")
    s.add_argument("--to", dest="to_s", type=float, default=0)
    a = p.parse_args()
    if a.cmd == "record":
        if a.interval_ms <= 0:
            p.error("--interval-ms must be > 0")
        record(a)
    else:
        if a.bucket_ms <= 0:
            p.error("--bucket-ms must be > 0")
        show(a)


if __name__ == "__main__":
    main()

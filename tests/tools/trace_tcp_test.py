#!/usr/bin/python3
"""bench/trace_tcp.py: it reads `ss -tinpH` output as the kernel writes it (a rank's data streams
under BBR, recorded under the emulator), keeps only the traced process's sockets, turns a recorded
trace into a timeline of acknowledged bytes per bucket, and fails with a message on bad input.
    trace_tcp_test.py SOURCE_DIR"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

src = sys.argv[1]
tool = os.path.join(src, "bench", "trace_tcp.py")


spec = importlib.util.spec_from_file_location("trace_tcp", tool)
tt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tt)

# Recorded in a rank's namespace under scripts/wanemu-mpirun.sh (us_canada.toml), trimmed.
SS = """ESTAB 0      18     127.0.0.1:39899 127.0.0.1:59610 users:(("mpirun",pid=17442,fd=25))
\t bbr wscale:10,10 rto:204 rtt:2.861/3.906 ato:40 mss:32768 cwnd:15 bytes_sent:405 bytes_acked:387 bbr:(bw:52428796872bps,mrtt:0.005,pacing_gain:2.88672,cwnd_gain:2.88672) pacing_rate 277469835240bps delivery_rate 52428800000bps app_limited busy:32ms unacked:1
ESTAB 0      4096   10.77.1.1:41234 10.77.2.2:33942 users:(("sparse_bcast_pe",pid=17464,fd=23))
\t bbr wscale:10,10 rto:232 rtt:30.327/8.577 ato:40 mss:1448 cwnd:1862 bytes_sent:7006386 bytes_acked:6992000 bytes_received:15 bbr:(bw:764336bps,mrtt:30.178,pacing_gain:1,cwnd_gain:2) send 4965608bps pacing_rate 414000000bps delivery_rate 198500000bps delivered:4 busy:56ms unacked:10 notsent:2048 minrtt:30.178
ESTAB 0      0      127.0.0.1:59610 127.0.0.1:39899 users:(("sparse_bcast_pe",pid=17464,fd=14))
\t bbr wscale:10,10 rto:204 rtt:3.697/7.234 mss:32768 cwnd:15 bytes_sent:295 bytes_acked:296 pacing_rate 1.5Gbps delivery_rate 2Mbps
"""
socks = tt.parse_ss(SS, 17464)
expect(len(socks) == 2, f"the process's two sockets, not mpirun's: {socks}")
d = socks[0]
expect(d["peer"] == "10.77.2.2:33942" and d["send_q"] == 4096, f"addresses and queues: {d}")
expect(d["cwnd"] == 1862 and d["bytes_acked"] == 6992000 and d["notsent"] == 2048, f"counters: {d}")
expect(abs(d["pacing_rate"] - 414e6) < 1 and abs(d["delivery_rate"] - 198.5e6) < 1, f"rates: {d}")
expect(abs(d["rtt_ms"] - 30.327) < 1e-9, f"round trip: {d}")
expect(abs(socks[1]["pacing_rate"] - 1.5e9) < 1, f"a rate with a unit prefix: {socks[1]}")
expect(tt.parse_ss(SS, 999) == [], "another process has no sockets here")

with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "t.jsonl")
    with open(trace, "w") as f:
        # Two streams; 1 MB acknowledged on each between 0.1 and 0.2 s, then nothing moves.
        for t, acked in ((0.0, 0), (0.05, 0), (0.15, 1000000), (0.25, 1000000), (0.35, 1000000)):
            socks = [{"local": f"a:{i}", "peer": "b:1", "cwnd": 100 + i, "pacing_rate": 3e8,
                      "bytes_acked": acked, "notsent": 0} for i in (1, 2)]
            socks.append({"local": "lo:9", "peer": "lo:8", "bytes_acked": 10})  # the launcher's: left out
            f.write(json.dumps({"t": 100 + t, "socks": socks}) + "\n")
    out = subprocess.run([sys.executable, tool, "show", trace, "--bucket-ms", "100"], capture_output=True, text=True)
    expect(out.returncode == 0, f"show: {out.stderr}")
    expect("# 2 stream(s)" in out.stdout, out.stdout)
    expect(" 160.0 " in out.stdout, f"2 MB in a 100 ms bucket is 160 Mbit/s: {out.stdout}")
    expect("101/300/0 102/300/0" in out.stdout, f"each stream's cwnd/pacing/notsent: {out.stdout}")
    expect("idle bucket(s) folded" in out.stdout and "# 1 bucket(s) shown, 3 idle" in out.stdout, out.stdout)
    empty = os.path.join(tmp, "e.jsonl")
    open(empty, "w").close()
    out = subprocess.run([sys.executable, tool, "show", empty], capture_output=True, text=True)
    expect(out.returncode != 0 and "no samples" in out.stderr, f"an empty trace: {out.stderr}")
    with open(empty, "w") as f:
        f.write("{not json\n")
    out = subprocess.run([sys.executable, tool, "show", empty], capture_output=True, text=True)
    expect(out.returncode != 0 and "not JSON" in out.stderr, f"junk: {out.stderr}")
    out = subprocess.run([sys.executable, tool, "record", "--pid", "999999999", "-o", trace], capture_output=True, text=True)
    expect(out.returncode != 0 and "no process" in out.stderr, f"a process that is not there: {out.stderr}")
    out = subprocess.run([sys.executable, tool, "show", trace, "--bucket-ms", "0"], capture_output=True, text=True)
    expect(out.returncode != 0 and "bucket-ms" in out.stderr, f"a zero bucket: {out.stderr}")

print(f"trace_tcp test: {checks.fails} failed")
sys.exit(1 if checks.fails else 0)

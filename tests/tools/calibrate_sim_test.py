#!/usr/bin/python3
"""bench/calibrate_sim.py on four recorded emulator runs (us_canada 1 GiB, encode-bound,
four_regions with one host per region, 64 MiB, and two 2-rank runs on eu_us_1g and
transpacific_200m): it runs sparrow-sim on each with the run's tree, bytes and CPU costs; the
encode-bound run is predicted within 5%; bad input fails with a message.
    calibrate_sim_test.py SOURCE_DIR BIN_DIR"""
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

src, bindir = sys.argv[1], sys.argv[2]


def calibrate(*args):
    return subprocess.run([sys.executable, os.path.join(src, "bench", "calibrate_sim.py"),
                           "--sim", os.path.join(bindir, "sparrow-sim")] + list(args), capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(src, "bench", "scenarios", "four_regions.toml")) as f:
        one = f.read().replace("count = 2\n", "count = 1\n")
    with open(os.path.join(d, "four_regions_1.toml"), "w") as f:
        f.write(one)
    rows = os.path.join(d, "rows.jsonl")
    with open(os.path.join(src, "tests", "tools", "data", "calibration_rows.jsonl")) as f:
        text = f.read()
    for sc in ("us_canada.toml", "eu_us_1g.toml", "transpacific_200m.toml"):
        text = text.replace("SCENARIOS/" + sc, os.path.join(src, "bench", "scenarios", sc))
    with open(rows, "w") as f:
        f.write(text.replace("SCENARIOS/four_regions_1.toml", os.path.join(d, "four_regions_1.toml")))
    out = calibrate("--json", os.path.join(d, "cal.json"), rows)
    expect(out.returncode == 0, f"calibrate_sim ran: {out.stderr}")
    if out.returncode == 0:
        cal = json.load(open(os.path.join(d, "cal.json")))
        expect(cal["summary"]["rows"] == 4, f"four rows compared: {cal['summary']}")
        # Two-rank steps on scenarios sparrow was not tuned on (1 Gbit/s at 80 ms with the realistic
        # qwen3-8b step, 200 Mbit/s at 150 ms with 1 GiB), recorded 2026-12-06: within 15%.
        for sc in ("eu_us_1g.toml", "transpacific_200m.toml"):
            got = [r for r in cal["rows"] if r["scenario"] == sc]
            expect(len(got) == 1 and abs(got[0]["error"]) < 0.15, f"{sc} within 15%: {got}")
        us = [r for r in cal["rows"] if r["scenario"] == "us_canada.toml"]
        expect(len(us) == 1 and abs(us[0]["error"]) < 0.05, f"the encode-bound run within 5%: {us}")
        four = [r for r in cal["rows"] if r["ranks"] == 4]
        expect(len(four) == 1 and len(four[0]["per_rank_error"]) == 3, f"three receivers compared: {four}")
        expect(four and len(four[0]["edge_mbit"]) == 3, "every edge's measured rate")
        expect("us_canada.toml" in out.stdout and "within 15%" in out.stdout, out.stdout)
    # A different window changes the prediction of the network-bound run.
    small = calibrate("--window", "64K", "--json", os.path.join(d, "small.json"), rows)
    expect(small.returncode == 0, small.stderr)
    if small.returncode == 0 and out.returncode == 0:
        a = [r for r in json.load(open(os.path.join(d, "cal.json")))["rows"] if r["ranks"] == 4][0]
        b = [r for r in json.load(open(os.path.join(d, "small.json")))["rows"] if r["ranks"] == 4][0]
        expect(b["predicted_s"] > a["predicted_s"] * 1.2, f"64K windows are slower: {a['predicted_s']} vs {b['predicted_s']}")
    bad = os.path.join(d, "bad.jsonl")
    with open(bad, "w") as f:
        f.write("{not json\n")
    r = calibrate(bad)
    expect(r.returncode != 0 and "not JSON" in r.stderr, f"junk is refused: {r.stderr}")
    empty = os.path.join(d, "empty.jsonl")
    open(empty, "w").close()
    r = calibrate(empty)
    expect(r.returncode != 0 and "no sparse_bcast_perf rows" in r.stderr, f"no rows is refused: {r.stderr}")
print("calibrate_sim:", "ok" if checks.fails == 0 else f"{checks.fails} failure(s)")
sys.exit(1 if checks.fails else 0)

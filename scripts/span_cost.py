#!/usr/bin/python3
"""What recording the per-worker spans costs: the same `parbench run` with spans on (default)
and off (PARBENCH_SPANS=0), interleaved, median ms/iteration per configuration of each.

usage: span_cost.py PARBENCH ROUNDS [run flags...]
e.g.   span_cost.py build-cpu/parbench 5 --workload linear --strategies regular,ddp,pipeline --devices 1,2 --iterations 200
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    exe, rounds, flags = argv[1], int(argv[2]), argv[3:]
    times = {"on": {}, "off": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                out = os.path.join(tmp, f"{mode}-{r}")
                env = dict(os.environ, PARBENCH_SPANS="1" if mode == "on" else "0")
                subprocess.run([exe, "run", *flags, "--out", out], env=env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with open(os.path.join(out, "report.json")) as f:
                    for g in json.load(f)["groups"]:
                        for row in g["rows"]:
                            if row.get("median_ms"):
                                key = f"{row['strategy']} x{row['devices']}"
                                times[mode].setdefault(key, []).append(row["median_ms"])
    print(f"{'configuration':<16} {'spans on ms':>12} {'spans off ms':>13} {'on/off':>8}   ({rounds} interleaved runs, medians)")
    for key in times["on"]:
        on, off = statistics.median(times["on"][key]), statistics.median(times["off"].get(key, [float('nan')]))
        print(f"{key:<16} {on:>12.4f} {off:>13.4f} {on / off:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/python3
"""Throughput against device count, one line per strategy, with the ideal line N x thr(1).

Reads the report JSON of `parbench report --out PREFIX` (PREFIX.json) or a run folder's
report.json; writes a PNG. Called by `parbench report --chart` and `parbench run`.
usage: chart.py REPORT.json OUT.png
Exit status: 0 written, 2 bad input, 3 matplotlib missing.
"""
import json
import sys


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if len(argv) != 2 else sys.stdout)
        return 0 if len(argv) == 2 else 2
    src, out = argv[1], argv[2]
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: render straight to the file
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"chart.py: warning: matplotlib is not available to {sys.executable} ({e}); "
              "no chart written (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 3
    try:
        with open(src) as f:
            report = json.load(f)
        groups = report["groups"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"chart.py: error: {src}: not a parbench report JSON ({e})", file=sys.stderr)
        return 2
    if not groups:
        print(f"chart.py: error: {src}: the report has no groups", file=sys.stderr)
        return 2

    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 4.8 * len(groups)), squeeze=False)
    for ax, group in zip(axes[:, 0], groups):
        rows = [r for r in group["rows"] if r.get("samples_per_s")]
        strategies = []
        for r in rows:
            if r["strategy"] not in strategies:
                strategies.append(r["strategy"])
        devices = sorted({r["devices"] for r in group["rows"]})
        for s in strategies:
            pts = sorted((r["devices"], r["samples_per_s"]) for r in rows if r["strategy"] == s)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s)
        base = group.get("ideal_base_samples_per_s")
        if base and devices:
            ax.plot(devices, [base * n for n in devices], linestyle="--", color="black", alpha=0.6,
                    label="ideal: N x thr(1)")
        failed = sorted({(r["strategy"], r["devices"]) for r in group["rows"] if r.get("error")})
        if failed:
            ax.text(0.01, 0.01, "failed: " + ", ".join(f"{s} x{d}" for s, d in failed),
                    transform=ax.transAxes, fontsize=8, color="firebrick", va="bottom")
        if len(devices) > 1 and devices[-1] / devices[0] >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(devices)
        ax.set_xticklabels([str(d) for d in devices])
        ax.set_xlabel("devices")
        ax.set_ylabel("throughput (samples/s)")
        ax.set_ylim(bottom=0)
        ax.set_title(group.get("title", group.get("workload", "")), fontsize=10)
        ax.grid(True, alpha=0.3)
        if strategies or base:
            ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=120)
    except OSError as e:
        print(f"chart.py: error: cannot write {out}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

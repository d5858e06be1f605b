#!/usr/bin/python3
"""A Gantt chart of one step per worker: for each strategy of a run, its configuration at the
largest device count, one row per worker and lane (compute, comm), bars coloured by phase
(forward, backward, loss, optimizer, transfer, idle); a black strip over a layer span that ran below
10% of its roofline (its args' roofline_fraction, where the run knew a peak and a bandwidth).

Reads the trace-*.json files `parbench run --trace` writes into its run folder (Chrome
trace-event files; they load in Perfetto and chrome://tracing too); writes a PNG.
usage: timeline.py RUN_DIR OUT.png
Exit status: 0 written, 2 bad input, 3 matplotlib missing.
"""
import glob
import json
import os
import sys

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "loss": "#8172b3", "optimizer": "#55a868",
           "transfer": "#c44e52", "idle": "#d9d9d9"}
ORDER = ["regular", "dp", "ddp", "mp", "pipeline", "pipeline-1f1b", "pipeline-recompute", "pipeline-1f1b-recompute",
         "fsdp", "zero2", "fsdp-prefetch", "zero2-prefetch", "tp"]  # the registry's display order
SLOW = 0.10  # below this fraction of its roofline a span is marked (as report.html flags it)
SLOW_COLOUR = "black"  # apart from transfer red


def load(run_dir):
    traces = []
    for path in sorted(glob.glob(os.path.join(run_dir, "trace-*.json"))):
        with open(path) as f:
            doc = json.load(f)
        meta = doc.get("otherData", {})
        if "strategy" not in meta or "devices" not in meta:
            raise ValueError(f"{path}: no otherData.strategy / otherData.devices (not a parbench trace)")
        traces.append((meta, doc["traceEvents"]))
    return traces


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if len(argv) != 2 else sys.stdout)
        return 0 if len(argv) == 2 else 2
    run_dir, out = argv[1], argv[2]
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: render straight to the file
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as e:
        print(f"timeline.py: warning: matplotlib is not available to {sys.executable} ({e}); "
              "no timeline written (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 3
    try:
        traces = load(run_dir)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"timeline.py: error: {e}", file=sys.stderr)
        return 2
    if not traces:
        print(f"timeline.py: error: {run_dir}: no trace-*.json files (run parbench run --trace)", file=sys.stderr)
        return 2
    # Per strategy, the configuration at the largest device count.
    chosen = {}
    for meta, events in traces:
        s, n = meta["strategy"], int(meta["devices"])
        if s not in chosen or n > int(chosen[s][0]["devices"]):
            chosen[s] = (meta, events)
    names = sorted(chosen, key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER), s))

    heights = []
    for s in names:
        workers = {e["pid"] for e in chosen[s][1] if e.get("ph") == "X"}
        heights.append(max(1, len(workers)) * 2)
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 0.9 + 0.42 * sum(heights) + 0.5 * len(names)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, s in zip(axes[:, 0], names):
        meta, events = chosen[s]
        pnames = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
        spans = [e for e in events if e.get("ph") == "X"]
        pids = sorted({e["pid"] for e in spans} | set(pnames))
        step_ms = float(meta.get("step_ms", 0))
        labels, idle, busy = [], 0.0, 0.0
        for row, pid in enumerate(pids):
            for tid in (0, 1):
                y = row * 2 + tid
                bars, slow = {}, []
                for e in spans:
                    if e["pid"] == pid and e["tid"] == tid:
                        bars.setdefault(e["cat"], []).append((e["ts"] / 1e3, e["dur"] / 1e3))
                        if e.get("args", {}).get("roofline_fraction", 1) < SLOW:
                            slow.append((e["ts"] / 1e3, e["dur"] / 1e3))
                        if e["cat"] == "idle":
                            idle += e["dur"] / 1e3
                for cat, xs in bars.items():
                    ax.broken_barh(xs, (y - 0.4, 0.8), facecolors=COLOURS.get(cat, "black"), linewidth=0)
                if slow:
                    ax.broken_barh(slow, (y - 0.48, 0.16), facecolors=SLOW_COLOUR, linewidth=0)
                labels.append(f"{pnames.get(pid, f'worker {pid}')} {'compute' if tid == 0 else 'comm'}")
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, step_ms if step_ms > 0 else None)
        ax.set_xlabel("ms since the step began", fontsize=8)
        title = f"{s} x{meta['devices']}: step {step_ms:.1f} ms, global batch {meta.get('global_batch', '?')}"
        if (s == "mp" or s.startswith("pipeline")) and step_ms > 0:
            title += (f"; bubble measured {100 * idle / (len(pids) * step_ms):.0f}%, formula "
                      f"{100 * float(meta.get('bubble_fraction', 0)):.0f}% (M = {meta.get('micro_batches', '?')})")
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    handles.append(Patch(color=SLOW_COLOUR, label=f"under {SLOW:.0%} of roofline"))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        print(f"timeline.py: error: cannot write {out}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

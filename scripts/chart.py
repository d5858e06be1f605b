#!/usr/bin/python3
"""Charts of a parbench report, one PNG per call:

  throughput  samples/s against device count, one line per strategy and the ideal N x thr(1),
              in panels by strategy family (data parallel, pipeline, tensor parallel)
  pareto      per device count: peak memory per device against samples/s, one point per
              strategy, the Pareto front (nothing both faster and smaller) and the device's
              memory as a line where the run knows it (GPU runs)
  breakdown   per device count: one bar per strategy, its step in ms split into compute,
              transfer, idle and the remainder no span covers

Reads the report JSON of `parbench report --out PREFIX` (PREFIX.json) or a run folder's
report.json. Called by `parbench report --chart/--html` and `parbench run`.
usage: chart.py [--kind throughput|pareto|breakdown] [--context RESULTS.json]
                [--layout LAYOUT.json] REPORT.json OUT.png
  --context   the run's Google Benchmark JSON: its gpu_names give the device memory line
  --layout    also write each panel's and legend's box in pixels (what the tests check)
Exit status: 0 written, 2 bad input, 3 matplotlib missing.
"""
import json
import math
import re
import sys
import textwrap

import chart_style as cs

DPI = 110


def usage_error(msg):
    print(f"chart.py: error: {msg} (see chart.py --help)", file=sys.stderr)
    return 2


def parse_args(argv):
    opts = {"kind": "throughput", "context": None, "layout": None}
    pos = []
    it = iter(argv[1:])
    for a in it:
        if a in ("-h", "--help"):
            return None, None
        if a in ("--kind", "--context", "--layout"):
            v = next(it, None)
            if v is None:
                raise ValueError(f"{a} expects a value")
            opts[a[2:]] = v
        elif a.startswith("--"):
            raise ValueError(f"unknown flag '{a}'")
        else:
            pos.append(a)
    if opts["kind"] not in ("throughput", "pareto", "breakdown"):
        raise ValueError(f"--kind expects throughput, pareto or breakdown, got '{opts['kind']}'")
    if len(pos) != 2:
        raise ValueError(f"expected REPORT.json OUT.png, got {len(pos)} argument(s)")
    return opts, pos


def device_memory_mib(context_path):
    """The smallest GPU's memory from the run context's gpu_names ('NAME (cc 9.0, 140 GiB); ...')."""
    if not context_path:
        return None, None
    with open(context_path) as f:
        ctx = json.load(f).get("context", {})
    if ctx.get("device_kind") != "cuda":
        return None, None
    found = [(float(m.group(2)) * 1024, m.group(1).strip())
             for m in re.finditer(r"([^;(]+)\(cc [^,]*, ([0-9.]+) GiB\)", ctx.get("gpu_names", ""))]
    return min(found) if found else (None, None)


def wrap(title, width_in, fontsize):
    chars = max(20, int(width_in * 72 / (fontsize * 0.55)))  # about 0.55 em a character
    return "\n".join(textwrap.wrap(title, chars))


def ok_rows(group):
    return [r for r in group["rows"] if not r.get("error") and r.get("samples_per_s")]


def peak_mib(r):
    v = r.get("device_peak_mib")
    return v if v is not None else r.get("allocated_mib_worker_max")


def legend_cols(labels, width_in, most=3):
    k = most
    while k > 1 and k * (max(map(len, labels), default=0) * 0.06 + 0.5) > width_in - 0.3:
        k -= 1  # about 0.06 in a character at 8 pt, plus the marker
    return k


def legend_height(labels, width_in):
    return 0.1 + math.ceil(len(labels) / legend_cols(labels, width_in)) * 0.19


def panel_figure(plt, rows, panel_w, panel_h, title):
    """rows: [(row title or None, [legend labels of each panel])]. Each panel gets an axes and,
    below it, a legend strip sized to its entries, so no legend ever covers data and constrained
    layout keeps every label inside the image. Returns fig, [[(ax, legend_ax)] per row]."""
    ncols = max(len(p) for _, p in rows)
    width = panel_w * ncols
    heights = [panel_h + max(legend_height(l, panel_w) for l in p) + (0.3 * len(wrap(t, width, 9).splitlines())
                                                                     if t else 0) for t, p in rows]
    top = 0.3 * len(wrap(title, width, 10).splitlines()) if title else 0
    fig = plt.figure(figsize=(width, sum(heights) + top), layout="constrained", dpi=DPI)
    if title:
        fig.suptitle(wrap(title, width, 10), fontsize=10)
    subs = [fig] if len(rows) == 1 else list(fig.subfigures(len(rows), 1, height_ratios=heights))
    out = []
    for sub, (t, panels), h in zip(subs, rows, heights):
        if t:
            sub.suptitle(wrap(t, width, 9), fontsize=9)
        leg_h = max(legend_height(l, panel_w) for l in panels)
        gs = sub.add_gridspec(2, ncols, height_ratios=[h - leg_h, leg_h])
        row = []
        for j in range(len(panels)):
            ax, lax = sub.add_subplot(gs[0, j]), sub.add_subplot(gs[1, j])
            lax.axis("off")
            lax.pb_legend_strip = panel_w  # its width in inches
            row.append((ax, lax))
        out.append(row)
    return fig, out


def legend_below(ax, lax, most=3):
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        lax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1.0), fontsize=8, frameon=False,
                   borderaxespad=0, ncol=legend_cols(labels, lax.pb_legend_strip, most))


def throughput(plt, report, styles):
    groups = report["groups"]
    fams = []
    for g in groups:
        for r in g["rows"]:
            f = cs.family(r["strategy"])
            if f and f not in fams:
                fams.append(f)
    fams = sorted(fams, key=cs.FAMILIES.index) or [cs.FAMILIES[0]]

    def entries(group, fam):
        names = [x for x in cs.strategies_of(ok_rows(group)) if cs.family(x) in (fam, None)]
        return names + ([cs.IDEAL["label"]] if group.get("ideal_base_samples_per_s") else [])

    one = len(groups) == 1
    fig, panels = panel_figure(plt, [(None if one else g.get("title", ""), [entries(g, f) for f in fams])
                                     for g in groups], 4.4, 4.2,
                               groups[0].get("title", groups[0].get("workload", "")) if one else None)
    for gi, group in enumerate(groups):
        rows = ok_rows(group)
        devices = sorted({r["devices"] for r in group["rows"]})
        base = group.get("ideal_base_samples_per_s")
        ymax = max([r["samples_per_s"] for r in rows] + [base * devices[-1] if base and devices else 0] + [1])
        for fi, fam in enumerate(fams):
            ax, lax = panels[gi][fi]
            for s in cs.strategies_of(rows):
                if cs.family(s) not in (fam, None):
                    continue
                pts = sorted((r["devices"], r["samples_per_s"]) for r in rows if r["strategy"] == s)
                st = styles[s]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=s, markersize=7 if s != "regular" else 11,
                        **st)
            if base and devices:
                ax.plot(devices, [base * n for n in devices], **cs.IDEAL)
            failed = sorted({(r["strategy"], r["devices"]) for r in group["rows"]
                             if r.get("error") and (cs.family(r["strategy"]) or fams[0]) == fam})
            if failed:
                ax.text(0.01, 0.99, wrap("failed: " + ", ".join(f"{s} x{d}" for s, d in failed), 4.0, 7),
                        transform=ax.transAxes, fontsize=7, color="firebrick", va="top")
            if len(devices) > 1 and devices[-1] / devices[0] >= 4:
                ax.set_xscale("log", base=2)
            ax.set_xticks(devices)
            ax.set_xticklabels([str(d) for d in devices])
            ax.minorticks_off()
            ax.set_xlabel("devices")
            if fi == 0:
                ax.set_ylabel("throughput (samples/s)")
            ax.set_ylim(0, ymax * 1.08)
            ax.set_title(fam, fontsize=10)
            ax.grid(True, alpha=0.3)
            legend_below(ax, lax)
    return fig


def pareto_front(points):
    """(mem, thr, label) -> those no other point beats on both (less or equal memory, more throughput)."""
    front, best = [], -math.inf
    for p in sorted(points, key=lambda p: (p[0], -p[1])):
        if p[1] > best:
            front.append(p)
            best = p[1]
    return front


def panels_by_devices(groups):
    out = []
    for g in groups:
        for n in sorted({r["devices"] for r in ok_rows(g)}):
            out.append((g, n))
    return out


def grid(plt, panels, labels, w, h, title):
    """Up to three panels a row; labels(panel) -> its legend entries."""
    rows = [panels[i:i + 3] for i in range(0, len(panels), 3)]
    fig, axes = panel_figure(plt, [(None, [labels(p) for p in row]) for row in rows], w, h, title)
    return fig, [pair for row in axes for pair in row]


def pareto(plt, report, styles, mem_mib, mem_name):
    panels = [(g, n) for g, n in panels_by_devices(report["groups"])
              if any(peak_mib(r) for r in ok_rows(g) if r["devices"] == n)]
    if not panels:
        raise ValueError("no configuration has both samples/s and a peak memory figure")
    def labels(panel):
        g, n = panel
        return (cs.strategies_of([r for r in ok_rows(g) if r["devices"] == n and peak_mib(r)]) + ["Pareto front"]
                + ([f"device memory ({mem_name}, {mem_mib / 1024:.0f} GiB)"] if mem_mib else []))

    fig, axes = grid(plt, panels, labels, 4.6, 4.0, "fastest, and at what memory cost (up and left is better): "
                     + report["groups"][0].get("title", ""))
    for (ax, lax), (g, n) in zip(axes, panels):
        rows = [r for r in ok_rows(g) if r["devices"] == n and peak_mib(r)]
        pts = [(peak_mib(r), r["samples_per_s"], r["strategy"]) for r in rows]
        for m, t, s in pts:
            st = styles[s]
            ax.plot([m], [t], linestyle="none", marker=st["marker"], color=st["color"], markersize=9, label=s)
        front = pareto_front(pts)
        ax.plot([p[0] for p in front], [p[1] for p in front], drawstyle="steps-post", color="black", linewidth=1,
                alpha=0.6, zorder=0, label="Pareto front")
        lo, hi = min(p[0] for p in pts), max(p[0] for p in pts)
        if mem_mib:
            ax.axvline(mem_mib, color="firebrick", linestyle="--", linewidth=1.2,
                       label=f"device memory ({mem_name}, {mem_mib / 1024:.0f} GiB)")
            hi = max(hi, mem_mib)
        if hi / lo > 20:  # the device's memory far beyond the peaks: a log axis keeps both readable
            ax.set_xscale("log")
            ax.set_xlim(lo / 1.5, hi * 1.5)
        else:  # the peaks' own range, so close ones stay apart
            pad = max((hi - lo) * 0.08, hi * 0.01)
            ax.set_xlim(max(0, lo - pad), hi + pad)
        ax.set_ylim(0, max(p[1] for p in pts) * 1.12)
        ax.set_xlabel("peak memory per device (MiB)")
        ax.set_ylabel("throughput (samples/s)")
        title = f"{n} device{'s' if n > 1 else ''}"
        if len(report["groups"]) > 1:
            title += " - " + g.get("title", "")
        ax.set_title(wrap(title, 4.4, 10), fontsize=10)
        ax.grid(True, alpha=0.3)
        legend_below(ax, lax)
    return fig


def breakdown(plt, report, styles):
    parts = [("compute", "compute_share"), ("transfer", "transfer_share"), ("idle", "idle_share"),
             ("other", "other_share")]
    panels = [(g, n) for g, n in panels_by_devices(report["groups"])
              if any(r.get("compute_share") is not None and r.get("median_ms")
                     for r in ok_rows(g) if r["devices"] == n)]
    if not panels:
        raise ValueError("no configuration has a step breakdown (compute_share) and ms/iteration")
    tallest = max(sum(1 for r in ok_rows(g) if r["devices"] == n) for g, n in panels)
    fig, axes = grid(plt, panels, lambda p: [name for name, _ in parts], 4.6, 1.2 + 0.32 * tallest,
                     "where a step goes: " + report["groups"][0].get("title", ""))
    for (ax, lax), (g, n) in zip(axes, panels):
        rows = [r for r in ok_rows(g) if r["devices"] == n and r.get("compute_share") is not None
                and r.get("median_ms")]
        labels = [r["strategy"] for r in rows]
        left = [0.0] * len(rows)
        for name, key in parts:
            # Spans on a GPU's two streams may overlap: the remainder is then negative; not drawn.
            w = [max(0.0, (r.get(key) or 0.0)) * r["median_ms"] for r in rows]
            ax.barh(range(len(rows)), w, left=left, color=cs.PART_COLOURS[name], label=name, height=0.7)
            left = [a + b for a, b in zip(left, w)]
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_ylim(tallest - 0.5, -0.5)  # top to bottom, bars as thick in every panel
        ax.set_xlabel("ms per step (median)")
        title = f"{n} device{'s' if n > 1 else ''}"
        if len(report["groups"]) > 1:
            title += " - " + g.get("title", "")
        ax.set_title(wrap(title, 4.4, 10), fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
        legend_below(ax, lax, most=4)
    return fig


def layout_of(fig):
    """Every visible panel's and legend's box in pixels, origin bottom left."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = lambda b: [b.x0, b.y0, b.x1, b.y1]
    every = fig.get_axes()  # subfigures' too
    axes = [ax for ax in every if not getattr(ax, "pb_legend_strip", False)]
    strips = [ax for ax in every if getattr(ax, "pb_legend_strip", False)]
    width, height = fig.canvas.get_width_height()
    return {"width": width, "height": height,
            "axes": [box(ax.get_window_extent(r)) for ax in axes],
            "legends": [box(ax.get_legend().get_window_extent(r)) for ax in strips if ax.get_legend()],
            "legend_texts": [[t.get_text() for t in ax.get_legend().get_texts()] for ax in strips if ax.get_legend()],
            "titles": [box(t.get_window_extent(r)) for t in [f._suptitle for f in [fig] + list(fig.subfigs)]
                       + [ax.title for ax in axes] if t is not None and t.get_text()]}


def main(argv):
    try:
        opts, pos = parse_args(argv)
    except ValueError as e:
        return usage_error(str(e))
    if opts is None:
        print(__doc__.strip())
        return 0
    src, out = pos
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
        for g in groups:
            for r in g["rows"]:
                r["strategy"], r["devices"]  # every row names its configuration
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"chart.py: error: {src}: not a parbench report JSON ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    if not groups:
        print(f"chart.py: error: {src}: the report has no groups", file=sys.stderr)
        return 2
    try:
        mem_mib, mem_name = device_memory_mib(opts["context"])
    except (OSError, ValueError, AttributeError) as e:
        print(f"chart.py: error: --context {opts['context']}: not a Google Benchmark JSON ({e})", file=sys.stderr)
        return 2
    styles = cs.styles_for([r["strategy"] for g in groups for r in g["rows"]])
    try:
        if opts["kind"] == "throughput":
            fig = throughput(plt, report, styles)
        elif opts["kind"] == "pareto":
            fig = pareto(plt, report, styles, mem_mib, mem_name)
        else:
            fig = breakdown(plt, report, styles)
    except ValueError as e:
        print(f"chart.py: error: {src}: no {opts['kind']} chart: {e}", file=sys.stderr)
        return 2
    try:
        fig.savefig(out, dpi=DPI, format="png")  # whatever OUT is called
        if opts["layout"]:
            with open(opts["layout"], "w") as f:
                json.dump(layout_of(fig), f)
    except OSError as e:
        print(f"chart.py: error: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

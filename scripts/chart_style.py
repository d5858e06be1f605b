"""Strategy families and per-strategy styles shared by parbench's charts (chart.py, html_report.py).

A strategy keeps one colour, marker and line style in every chart of a report; no two of a
report's strategies share any of the three while there are at most 20 (more cycle the markers).
"""

FAMILIES = ["data parallel (dp, ddp, fsdp, zero2)", "pipeline (mp, pipeline, dp x pp)",
            "tensor parallel (tp, dp x tp)"]

# 20 colours told apart at a glance: tab10, then ten of other hues; black is regular's.
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#000080", "#e6ab02", "#00a087", "#a6761d", "#7b0051", "#66a61e", "#f08080", "#4b0082",
           "#808000", "#00ced1"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "H", "d", "8", "1", "2", "3", "4", "+", "x"]
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 2)), (0, (8, 2, 2, 2))]

REGULAR = {"color": "black", "marker": "*", "linestyle": "none"}
IDEAL = {"color": "#555555", "linestyle": (0, (2, 3)), "linewidth": 1.2, "label": "ideal: N x thr(1)"}
PART_COLOURS = {"compute": "#4c72b0", "transfer": "#c44e52", "idle": "#d9d9d9", "other": "#937860"}


def family(strategy):
    """The family panel a strategy (or a projection's label, 'pipeline (M=8, 1f1b)') is drawn in;
    None for regular, which every panel shows as the one-device reference."""
    s = strategy.split(" ")[0]
    if s == "regular":
        return None
    if s in ("mp",) or s.startswith("pipeline") or "xpp" in s:
        return FAMILIES[1]
    if s == "tp" or "xtp" in s:
        return FAMILIES[2]
    return FAMILIES[0]


def strategies_of(rows):
    out = []
    for r in rows:
        if r["strategy"] not in out:
            out.append(r["strategy"])
    return out


def styles_for(strategies):
    """strategy -> plot keywords (color, marker, linestyle), in the order they first appear."""
    styles, i = {}, 0
    for s in strategies:
        if s in styles:
            continue
        if s.split(" ")[0] == "regular" and "regular" not in [k.split(" ")[0] for k in styles]:
            styles[s] = dict(REGULAR)
            continue
        styles[s] = {"color": COLOURS[i % len(COLOURS)], "marker": MARKERS[i % len(MARKERS)],
                     "linestyle": LINESTYLES[i % len(LINESTYLES)]}
        i += 1
    return styles

#!/usr/bin/python3
"""One self-contained HTML page of a parbench report: the tables (click a heading to sort),
the charts, the run's context (machine, libraries, commit, settings) and links to its traces
with how to open them in Perfetto. Nothing is fetched when it is opened: styles, script and
images are inline.

Reads DIR/report.md (the tables, as `parbench report` prints them), every DIR/*.png (the
charts), the context of DIR/results.json or of each --results file, and links the
trace-*.json files beside those. From the same files, "How close to the hardware": each
benchmark's MFU, peak and warm-up (counters mfu, peak_flop_per_s, warmup_s), and per traced
configuration its layer spans' roofline fractions by layer and pass, those under 10% in red. Called by `parbench run` (report.html in the run folder) and
`parbench report --html`.
usage: html_report.py [--results GB.json ...] [--base FOLDER] DIR OUT.html
  --base   the folder the page will be opened from, where the trace links start (default: OUT's)
Exit status: 0 written, 2 bad input.
"""
import base64
import glob
import html
import json
import os
import re
import sys


CHARTS = [("pareto.png", "Fastest, and at what memory cost"),
          ("throughput.png", "Throughput against devices"),
          ("breakdown.png", "Where a step goes"),
          ("timeline.png", "One step per worker (the traced configurations)")]

SECTIONS = [
    ("Machine", ["host_name", "hosts", "device_kind", "cpu_model", "cpu_threads", "num_cpus", "mhz_per_cpu",
                 "cpu_scaling_enabled", "gpu_count", "gpu_names", "load_avg", "world_size"]),
    ("Libraries", ["conv_backend", "cuda_driver", "cuda_runtime", "cudnn", "nccl", "library_build_type"]),
    ("Build", ["parbench_version", "parbench_commit", "executable", "date"]),
]

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px}
th,td{border:1px solid #ccc;padding:3px 7px;white-space:nowrap}
th{background:#f0f3f7;position:sticky;top:0}
table.sortable th{cursor:pointer}table.sortable th:hover{background:#dde5ef}
th[data-dir=asc]::after{content:" \\25B2"}th[data-dir=desc]::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.best td{background:#eef8ee}
tr.slow td{background:#fde8e8}tr.slow td.frac{color:#b00020;font-weight:600}
.notes{font-size:12.5px;color:#444;max-width:1200px}
.scroll{overflow-x:auto}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
code{background:#f4f4f4;padding:1px 4px}
"""

# Sorting: numbers by their leading figure ('12.8%*', '1.21x !', '10.58 (0.05 + ...)'), '-' last.
SCRIPT = """
function cellKey(td){var t=td.textContent.trim();var m=t.match(/^-?[0-9.]+(e[-+]?[0-9]+)?/i);
  return m?{n:parseFloat(m[0]),t:t}:{n:null,t:t};}
function sortBy(th){var table=th.closest('table'),body=table.tBodies[0],col=th.cellIndex;
  var dir=th.dataset.dir==='desc'?'asc':'desc';
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(c){delete c.dataset.dir;});
  th.dataset.dir=dir;var rows=Array.prototype.slice.call(body.rows);
  rows.sort(function(a,b){var x=cellKey(a.cells[col]),y=cellKey(b.cells[col]);
    if(x.n===null&&y.n===null)return dir==='asc'?x.t.localeCompare(y.t):y.t.localeCompare(x.t);
    if(x.n===null)return 1;if(y.n===null)return -1;return dir==='asc'?x.n-y.n:y.n-x.n;});
  rows.forEach(function(r){body.appendChild(r);});}
document.querySelectorAll('table.sortable th').forEach(function(th){
  th.addEventListener('click',function(){sortBy(th);});});
window.addEventListener('load',function(){
  document.querySelectorAll('img').forEach(function(i){i.dataset.naturalWidth=i.naturalWidth;});
  var m=location.hash.match(/^#sort=(\\d+)$/);  // a test's way to click a heading
  if(m){var th=document.querySelector('table.sortable th:nth-child('+(parseInt(m[1])+1)+')');if(th)sortBy(th);}
  document.body.dataset.ready='1';});
"""


def md_blocks(md):
    """report.md -> [('h', title) | ('table', header, rows) | ('p', text)]."""
    out, lines, i = [], md.splitlines(), 0
    split = lambda line: [c.strip() for c in line.strip().strip("|").split(" | ")]
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            out.append(("h", line.lstrip("#").strip()))
        elif line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1].strip()):
            header, rows, i = split(line), [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(split(lines[i]))
                i += 1
            out.append(("table", header, rows))
            continue
        elif line.strip():
            out.append(("p", line.strip()))
        i += 1
    return out


def inline(text):
    """The markdown the tables and their notes use: **bold**, `code` and backslash escapes."""
    text = html.escape(text)
    text = re.sub(r"(?<!\\)\*\*([^*]+)\*\*", r"<strong>\1</strong>", text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return text.replace("\\*", "*")


def table_html(header, rows):
    out = ['<div class="scroll"><table class="sortable"><thead><tr>']
    out += [f"<th>{inline(h)}</th>" for h in header]
    out.append("</tr></thead><tbody>")
    best_col = header.index("best") if "best" in header else -1
    for r in rows:
        cls = ' class="best"' if best_col >= 0 and best_col < len(r) and r[best_col].strip("*").startswith("best") else ""
        out.append(f"<tr{cls}>")
        for c in r:
            num = ' class="num"' if re.match(r"^-?[0-9.]", c) else ""
            out.append(f"<td{num}>{inline(c)}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def context_html(contexts):
    if not contexts:
        return "<p>No run context (no Google Benchmark JSON given).</p>"
    out = []
    for path, ctx in contexts:
        if len(contexts) > 1:
            out.append(f"<h3>{html.escape(os.path.basename(path))}</h3>")
        shown = set()
        for title, keys in SECTIONS + [("Run settings", sorted(k for k in ctx if k != "caches"))]:
            rows = [(k, ctx[k]) for k in keys if k in ctx and k not in shown]
            shown.update(k for k, _ in rows)
            if not rows:
                continue
            out.append(f"<h3>{title}</h3><table><tbody>")
            for k, v in rows:
                v = ", ".join(map(str, v)) if isinstance(v, list) else str(v)
                out.append(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>")
            out.append("</tbody></table>")
    return "".join(out)


SLOW = 0.10  # a span below this fraction of its roofline is flagged


def seconds_text(s):
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def hardware_html(results_docs):
    """Per benchmark: MFU, the peak it is against, warm-up against the fastest timed step."""
    out = []
    for path, doc in results_docs:
        ctx = doc["context"]
        source = ctx.get("roofline_source")
        if source is None:
            continue  # a run from before the roofline was recorded
        if len(results_docs) > 1:
            out.append(f"<h3>{html.escape(os.path.basename(path))}</h3>")
        peak = ctx.get("roofline_peak_flop_per_s")
        bw = ctx.get("roofline_bytes_per_s")
        facts = [f"peak {float(peak) / 1e9:.4g} GFLOP/s a device ({html.escape(ctx.get('roofline_scope', ''))})"
                 if peak else "no peak known: no MFU"]
        if bw:
            facts.append(f"bandwidth {float(bw) / 1e9:.4g} GB/s")
        out.append(f'<p class="notes">{"; ".join(facts)}. Source: {html.escape(source)}. MFU = achieved FLOP/s '
                   "(3 x forward FLOPs x samples / time) / peak_flop_per_s. warm-up: "
                   f"{html.escape(ctx.get('warmup_timing', ''))}</p>")
        rows, times = [], doc.get("iteration_times_s", {})
        for b in doc.get("benchmarks", []):
            if b.get("run_type") != "iteration" or b.get("error_occurred"):
                continue
            name = re.sub(r"(/(iterations|repeats|min_time|min_warmup_time):[^/]+|/process_time|/real_time|/manual_time)+$",
                          "", b.get("run_name", b["name"]))
            if any(r[0] == name for r in rows):
                continue  # one row per benchmark (its first repetition)
            steps = [t for rep in times.get(name, []) for t in rep]
            rows.append((name, b.get("mfu"), b.get("flop_per_s"), b.get("peak_flop_per_s"), b.get("warmup_s"),
                         min(steps) if steps else None))
        if not rows:
            continue
        out.append('<div class="scroll"><table class="sortable"><thead><tr><th>benchmark</th><th>MFU</th>'
                   "<th>flop_per_s (GFLOP/s)</th><th>peak_flop_per_s (GFLOP/s)</th><th>warmup_s</th>"
                   "<th>fastest timed step</th><th>warm-up / fastest</th></tr></thead><tbody>")
        for name, mfu, flops, peak_b, warm, fastest in rows:
            cells = [f"<td>{html.escape(name)}</td>",
                     f'<td class="num">{mfu * 100:.3g}%</td>' if mfu is not None else "<td>-</td>",
                     f'<td class="num">{flops / 1e9:.4g}</td>' if flops else "<td>-</td>",
                     f'<td class="num">{peak_b / 1e9:.4g}</td>' if peak_b else "<td>-</td>",
                     f'<td class="num">{seconds_text(warm)}</td>' if warm else "<td>-</td>",
                     f'<td class="num">{seconds_text(fastest)}</td>' if fastest else "<td>-</td>",
                     f'<td class="num">{warm / fastest:.3g}x</td>' if warm and fastest else "<td>-</td>"]
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table></div>")
    return "".join(out)


def span_kind(name):
    """'L3 conv2d' -> 'conv2d' (the kind of layer a span ran)."""
    m = re.match(r"^L\d+ (.+)$", name)
    return m.group(1) if m else name


def roofline_rows(trace):
    """A trace's layer spans with work, by layer and phase over every worker: count, FLOPs,
    bytes, their own time, the roofline time at the worker's rates, the fraction."""
    meta = trace.get("otherData", {})
    peak = float(meta.get("worker_peak_flop_per_s", 0) or 0)
    bw = float(meta.get("worker_bytes_per_s", 0) or 0)
    agg = {}
    for e in trace.get("traceEvents", []):
        a = e.get("args", {})
        if e.get("ph") != "X" or "flops" not in a:
            continue
        key = (e["name"], a.get("phase", ""))
        r = agg.setdefault(key, {"n": 0, "flops": 0.0, "bytes": 0.0, "busy": 0.0, "roof": 0.0})
        r["n"] += 1
        r["flops"] += a["flops"]
        r["bytes"] += a["bytes"]
        r["busy"] += a["busy_us"] * 1e-6
        if peak > 0 and bw > 0:  # the same max(FLOPs / peak, bytes / bandwidth) as bench/roofline.h
            r["roof"] += max(a["flops"] / peak, a["bytes"] / bw)
    rows = []
    for (name, phase), r in agg.items():
        frac = r["roof"] / r["busy"] if r["roof"] > 0 and r["busy"] > 0 else None
        rows.append((name, phase, r, frac))
    rows.sort(key=lambda x: -x[2]["busy"])
    return rows, peak > 0 and bw > 0


def roofline_html(traces):
    """Per traced configuration: its layers' passes against their rooflines, slow ones red."""
    out = []
    for path in traces:
        try:
            with open(path) as f:
                trace = json.load(f)
        except ValueError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
        rows, known = roofline_rows(trace)
        if not rows:
            continue
        meta = trace.get("otherData", {})
        out.append(f"<h3>{html.escape(meta.get('benchmark', os.path.basename(path)))}</h3>")
        if not known:
            out.append('<p class="notes">No roofline: the run knew no peak or bandwidth '
                       f"({html.escape(meta.get('roofline_source', 'not recorded'))}).</p>")
            continue
        slow = sum(1 for r in rows if r[3] is not None and r[3] < SLOW)
        out.append(f'<p class="notes">{len(rows)} layer passes, {slow} below {SLOW:.0%} of their roofline (red). '
                   "roofline time = max(FLOPs / peak, bytes / bandwidth) at each worker's rates "
                   f"({html.escape(meta.get('roofline_source', ''))}); fraction = roofline time / measured time, "
                   "summed over the workers' spans.</p>")
        out.append('<div class="scroll"><table class="sortable"><thead><tr><th>span</th><th>kind</th><th>phase</th>'
                   "<th>spans</th><th>GFLOP</th><th>MiB moved</th><th>measured</th><th>roofline</th>"
                   "<th>of roofline</th></tr></thead><tbody>")
        for name, phase, r, frac in rows:
            cls = ' class="slow"' if frac is not None and frac < SLOW else ""
            out.append(f"<tr{cls}><td>{html.escape(name)}</td><td>{html.escape(span_kind(name))}</td>"
                       f"<td>{html.escape(phase)}</td><td class=\"num\">{r['n']}</td>"
                       f"<td class=\"num\">{r['flops'] / 1e9:.4g}</td><td class=\"num\">{r['bytes'] / 2**20:.4g}</td>"
                       f"<td class=\"num\">{seconds_text(r['busy'])}</td><td class=\"num\">{seconds_text(r['roof'])}</td>"
                       + (f'<td class="num frac">{frac:.1%}</td>' if frac is not None else "<td>-</td>") + "</tr>")
        out.append("</tbody></table></div>")
    if not out:
        return ("<p>No traced layer spans (<code>parbench run --trace</code> records one step of each configuration "
                "with each layer's FLOPs, bytes and time).</p>")
    return "".join(out)


def traces_html(traces, out_dir):
    if not traces:
        return ("<p>No traces in this run (<code>parbench run --trace</code> writes one step of each "
                "configuration as <code>trace-*.json</code>).</p>")
    items = "".join(f'<li><a href="{html.escape(os.path.relpath(t, out_dir))}">{html.escape(os.path.basename(t))}'
                    f"</a></li>" for t in traces)
    return ("<p>One step of each traced configuration, as Chrome trace events. To open one: go to "
            "<code>https://ui.perfetto.dev</code>, choose <em>Open trace file</em> and pick the file (it is read "
            "in the browser, not uploaded), or drag it onto the page; <code>chrome://tracing</code> loads it too. "
            "Each worker is a process row with its compute and communication lanes.</p>"
            f"<ul>{items}</ul>")


def build(run_dir, out, results, base):
    md_path = os.path.join(run_dir, "report.md")
    with open(md_path) as f:
        blocks = md_blocks(f.read())
    if not any(b[0] == "table" for b in blocks):
        raise ValueError(f"{md_path}: no table (not a parbench report.md)")
    if not results and os.path.exists(os.path.join(run_dir, "results.json")):
        results = [os.path.join(run_dir, "results.json")]
    contexts, traces, docs = [], [], []
    for p in results:
        with open(p) as f:
            try:
                doc = json.load(f)
            except ValueError as e:
                raise ValueError(f"{p}: not JSON ({e})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("context"), dict):
            raise ValueError(f"{p}: no 'context' object (not a Google Benchmark JSON)")
        contexts.append((p, doc["context"]))
        docs.append((p, doc))
        traces += sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(p)), "trace-*.json")))
    title = next((b[1] for b in blocks if b[0] == "h"), "parbench report")
    body = [f"<h1>parbench report: {html.escape(title)}</h1>",
            '<p><a href="#charts">Charts</a> &middot; <a href="#tables">Tables</a> &middot; '
            '<a href="#hardware">How close to the hardware</a> &middot; '
            '<a href="#context">Context</a> &middot; <a href="#traces">Traces</a></p>',
            '<h2 id="charts">Charts</h2>']
    pngs = [(os.path.join(run_dir, n), t) for n, t in CHARTS]
    known = {p for p, _ in pngs}
    pngs += [(p, os.path.basename(p)) for p in sorted(glob.glob(os.path.join(run_dir, "*.png"))) if p not in known]
    shown = 0
    for path, caption in pngs:
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(b"\x89PNG"):
            raise ValueError(f"{path}: not a PNG")
        body.append(f"<h3>{html.escape(caption)}</h3><img alt=\"{html.escape(caption)}\" "
                    f"src=\"data:image/png;base64,{base64.b64encode(data).decode()}\">")
        shown += 1
    if not shown:
        body.append("<p>No charts (they need matplotlib: <code>apt-get install python3-matplotlib</code>).</p>")
    body += ['<h2 id="tables">Tables</h2>',
             "<p>Click a column heading to sort by it (again to reverse). Columns and formulas: "
             "<code>docs/reports.md</code>.</p>"]
    for b in blocks:
        if b[0] == "h":
            body.append(f"<h3>{inline(b[1])}</h3>")
        elif b[0] == "table":
            body.append(table_html(b[1], b[2]))
        else:
            body.append(f'<p class="notes">{inline(b[1])}</p>')
    body += ['<h2 id="hardware">How close to the hardware</h2>', hardware_html(docs),
             "<h3>Layers against their rooflines (traced step)</h3>", roofline_html(traces)]
    body += ['<h2 id="context">Context</h2>', context_html(contexts), '<h2 id="traces">Traces</h2>',
             traces_html(traces, base or os.path.dirname(os.path.abspath(out)))]
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>parbench: {html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + f"\n<script>{SCRIPT}</script>\n</body></html>\n")
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(page)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv):
    results, base, pos, it = [], None, [], iter(argv[1:])
    for a in it:
        if a in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if a in ("--results", "--base"):
            v = next(it, None)
            if v is None:
                print(f"html_report.py: error: {a} expects a path (see --help)", file=sys.stderr)
                return 2
            if a == "--results":
                results.append(v)
            else:
                base = os.path.abspath(v)
        elif a.startswith("--"):
            print(f"html_report.py: error: unknown flag '{a}' (see --help)", file=sys.stderr)
            return 2
        else:
            pos.append(a)
    if len(pos) != 2:
        print(f"html_report.py: error: expected DIR OUT.html, got {len(pos)} argument(s) (see --help)",
              file=sys.stderr)
        return 2
    try:
        build(pos[0], pos[1], results, base)
    except OSError as e:
        print(f"html_report.py: error: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"html_report.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

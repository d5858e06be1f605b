#!/usr/bin/python3
"""`parbench report --html` on the fixture run (tests/fixtures/charts_run), opened in a real
headless browser (Debian's chromium): the page is self-contained, its tables and images render,
a click on a heading sorts, its script logs no console message, and the traces are linked.
usage: html_test.py PARBENCH SOURCE_DIR [SCREENSHOT.png]
(ctest: the `html_report` test; exit 77, a skip, without chromium or matplotlib)
"""
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

PARBENCH, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SCREENSHOT = sys.argv[3] if len(sys.argv) > 3 else None
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "charts_run")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    print("html_test.py: SKIP: no chromium on PATH (scripts/install-deps.sh installs Debian's chromium)")
    sys.exit(77)
if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode != 0:
    print("html_test.py: SKIP: matplotlib is not available to /usr/bin/python3 (apt-get install python3-matplotlib)")
    sys.exit(77)


class Dom(html.parser.HTMLParser):
    """Tables (header and cell texts), images and links of a page."""

    def __init__(self):
        super().__init__()
        self.tables, self.imgs, self.links, self.body, self.cell = [], [], [], {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"cls": a.get("class", ""), "head": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("th", "td") and self.tables:
            self.cell = [tag, ""]
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "a":
            self.links.append(a.get("href", ""))
        elif tag == "body":
            self.body = a

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[1] += data

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self.cell is not None:
            self.tables[-1]["rows"][-1].append(self.cell[1].strip())
            self.cell = None


def browse(page, *args):
    """chromium --headless on a file: (stdout, stderr)."""
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                            "--enable-logging=stderr", "--v=1", "--virtual-time-budget=5000", *args, page],
                           capture_output=True, text=True, timeout=120)
    return p.stdout, p.stderr


class HtmlReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        run = os.path.join(cls.tmp.name, "run")
        shutil.copytree(FIXTURE, run)
        cls.page = os.path.join(cls.tmp.name, "out", "report.html")
        os.makedirs(os.path.dirname(cls.page))
        p = subprocess.run([PARBENCH, "report", os.path.join(run, "results.json"), "--html", cls.page],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        with open(cls.page) as f:
            cls.source = f.read()
        with open(os.path.join(FIXTURE, "report.md")) as f:
            cls.md_rows = [line for line in f if re.match(r"^\| [a-z]", line) and not line.startswith("| strategy")]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_self_contained(self):
        for pattern in [r'src="(?!data:)', r"<link", r"url\(", r"@import", r"<iframe"]:
            self.assertIsNone(re.search(pattern, self.source), f"the page loads something: {pattern}")
        self.assertGreaterEqual(self.source.count('src="data:image/png;base64,'), 3)
        # The best row of each device count stands out, its mark in bold, not as markdown.
        self.assertNotIn("**", self.source)
        self.assertEqual(self.source.count('<tr class="best">'), sum("**best**" in r for r in self.md_rows))
        self.assertGreater(self.source.count('<tr class="best">'), 0)

    def test_renders_tables_images_and_no_console_message(self):
        dom_text, log = browse("file://" + self.page, "--dump-dom")
        console = [line for line in log.splitlines() if ":CONSOLE" in line]
        self.assertEqual(console, [], "console messages")
        dom = Dom()
        dom.feed(dom_text)
        self.assertEqual(dom.body.get("data-ready"), "1", "the page's script did not run to its end")
        # Every chart decoded (the script records each image's natural width once loaded).
        self.assertGreaterEqual(len(dom.imgs), 3)
        for img in dom.imgs:
            self.assertGreater(int(img.get("data-natural-width", "0")), 300, img.get("alt"))
        sortable = [t for t in dom.tables if "sortable" in t["cls"]]
        self.assertGreaterEqual(len(sortable), 1)
        # The first table: report.md's rows of the run, one row each, same cells.
        body = sortable[0]["rows"][1:]
        self.assertEqual(len(body), len([r for r in self.md_rows if r.count("|") == self.md_rows[0].count("|")]))
        self.assertEqual(body[0][:2], ["regular", "1"])
        # The context and the traces beside results.json.
        text = dom_text
        self.assertIn("parbench_commit", text)
        self.assertIn("cpu_model", text)
        traces = [l for l in dom.links if l.endswith(".json")]
        self.assertEqual(len(traces), 2)
        for t in traces:
            self.assertTrue(os.path.exists(os.path.join(os.path.dirname(self.page), t)), t)
        self.assertIn("ui.perfetto.dev", text)

    def test_a_click_on_a_heading_sorts(self):
        dom = Dom()
        dom.feed(self.source)
        head = dom.tables[0]["rows"][0]
        col = head.index("samples/s")
        dom_text, log = browse(f"file://{self.page}#sort={col}", "--dump-dom")
        dom = Dom()
        dom.feed(dom_text)
        values = [float(r[col]) for r in dom.tables[0]["rows"][1:]]
        before = [float(r[col]) for r in head_dom_rows(self.source)]
        self.assertNotEqual(before, sorted(before, reverse=True), "the fixture's rows come sorted already")
        self.assertEqual(values, sorted(before, reverse=True))

    def test_screenshot_shows_the_page(self):
        import matplotlib.image
        shot = SCREENSHOT or os.path.join(self.tmp.name, "shot.png")
        browse("file://" + self.page, "--hide-scrollbars", "--window-size=1400,1500", f"--screenshot={shot}")
        img = matplotlib.image.imread(shot)
        self.assertEqual(img.shape[:2], (1500, 1400))
        ink = (img[:, :, :3] < 0.95).any(axis=2).mean()
        self.assertGreater(ink, 0.05, "the screenshot is almost blank")

    def test_every_run_folder_has_its_page(self):
        out = os.path.join(self.tmp.name, "linear-run")
        p = subprocess.run([PARBENCH, "run", "--workload", "linear", "--strategies", "regular,ddp", "--devices", "1,2",
                            "--iterations", "2", "--warmup", "1", "--trace", "--out", out],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        for name in ["report.html", "throughput.png", "pareto.png", "breakdown.png", "timeline.png"]:
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        with open(os.path.join(out, "report.html")) as f:
            page = f.read()
        self.assertEqual(page.count('src="data:image/png;base64,'), 4)
        dom = Dom()
        dom.feed(page)
        traces = sorted(l for l in dom.links if l.endswith(".json"))
        self.assertEqual(traces, sorted(n for n in os.listdir(out) if n.startswith("trace-")))

    def test_layers_below_a_tenth_of_their_roofline_are_red(self):
        # A machine file whose peak and bandwidth no CPU reaches (1 PFLOP/s, 10 TB/s): every traced
        # layer pass is below 10% of its roofline, each row red, its fraction the trace's.
        import json
        machine = os.path.join(self.tmp.name, "fast.json")
        with open(machine, "w") as f:
            json.dump({"parbench_machine": 1, "name": "fast", "devices_per_node": 1024, "nodes": 1, "overlap": False,
                       "device": {"kind": "cpu", "model": "cpu", "peak_flops": 1e15, "memory_bytes": 1e10,
                                  "copy_bytes_per_s": 5e12},
                       "links": {"intra_node": {"send_recv": {"direct": {"alpha_s": 1e-6, "bus_bytes_per_s": 1e9}}}}}, f)
        out = os.path.join(self.tmp.name, "roofline-run")
        p = subprocess.run([PARBENCH, "run", "--workload", "great_net", "--image", "8", "--width", "0.125",
                            "--strategies", "regular", "--devices", "1", "--iterations", "2", "--warmup", "1",
                            "--trace", "--machine", machine, "--out", out], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "report.html")) as f:
            page = f.read()
        # The main table's MFU column, and the hardware table's MFU, the record's mfu.
        dom = Dom()
        dom.feed(page)
        self.assertIn("MFU", dom.tables[0]["rows"][0])
        with open(os.path.join(out, "results.json")) as f:
            record = json.load(f)
        mfu = [b["mfu"] for b in record["benchmarks"] if b["run_type"] == "iteration"][0]
        hw = next(t for t in dom.tables if t["rows"][0][:2] == ["benchmark", "MFU"])
        self.assertEqual(hw["rows"][1][1], f"{mfu * 100:.3g}%")
        self.assertGreater(float(hw["rows"][1][4].split()[0]), 0)  # warmup_s
        # The per-layer roofline table: every row red, fraction = sum of roofline times / sum of busy.
        layers = next(t for t in dom.tables if t["rows"][0][:3] == ["span", "kind", "phase"])
        self.assertGreater(len(layers["rows"]), 10)
        with open(next(os.path.join(out, n) for n in os.listdir(out) if n.startswith("trace-"))) as f:
            trace = json.load(f)
        roof, busy = {}, {}
        for e in trace["traceEvents"]:
            a = e.get("args", {})
            if e.get("ph") == "X" and "flops" in a:
                k = (e["name"], a["phase"])
                roof[k] = roof.get(k, 0) + max(a["flops"] / 1e15, a["bytes"] / 1e13)
                busy[k] = busy.get(k, 0) + a["busy_us"] * 1e-6
                self.assertLess(a["roofline_fraction"], 0.1)
        self.assertEqual(len(layers["rows"]) - 1, len(roof))
        for row in layers["rows"][1:]:
            k = (row[0], row[2])
            self.assertEqual(row[-1], f"{roof[k] / busy[k]:.1%}")
        self.assertEqual(page.count('<tr class="slow">'), len(roof))

    def test_the_projection_chart_has_a_panel_per_family(self):
        # parbench project's chart (render_chart on its own report JSON): every strategy of an
        # 8-GPU machine, in the three family panels of one row per table (weak, strong).
        import matplotlib.image
        prefix = os.path.join(self.tmp.name, "proj")
        p = subprocess.run([PARBENCH, "project", "--profile", os.path.join(ROOT, "tests/fixtures/projection/uniform.json"),
                            "--machine", os.path.join(ROOT, "machines/h200_hgx.json"), "--from-profile-peak", "0.3",
                            "--out", prefix], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        img = matplotlib.image.imread(prefix + ".png")
        self.assertAlmostEqual(img.shape[1], 3 * 4.4 * 110, delta=1)
        self.assertGreater(img.shape[0], 2 * 4.2 * 110)

    def test_unwritable_page_is_an_error(self):
        bad = os.path.join(self.tmp.name, "no", "such", "dir", "r.html")
        p = subprocess.run([PARBENCH, "report", os.path.join(FIXTURE, "results.json"), "--html", bad],
                           capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(bad, p.stderr)
        self.assertFalse(os.path.exists(bad))


def head_dom_rows(source):
    dom = Dom()
    dom.feed(source)
    return dom.tables[0]["rows"][1:]


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)

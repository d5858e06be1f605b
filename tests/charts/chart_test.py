#!/usr/bin/python3
"""scripts/chart.py on a fixture run (tests/fixtures/charts_run, a real `parbench run`): each
chart kind is rendered and its image checked: a PNG of the size its panels ask for, not blank,
every legend outside every panel's box, titles inside the image, and the series' styles distinct.
usage: chart_test.py [SOURCE_DIR]   (ctest: the `charts` test; skips, exit 77, without matplotlib)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "chart.py")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "charts_run")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

try:
    import matplotlib.image
except ImportError:
    print("chart_test.py: SKIP: matplotlib is not available to /usr/bin/python3 (apt-get install python3-matplotlib)")
    sys.exit(77)

import chart  # noqa: E402
import chart_style  # noqa: E402


def overlap(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class Charts(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        with open(os.path.join(FIXTURE, "report.json")) as f:
            self.report = json.load(f)

    def tearDown(self):
        self.tmp.cleanup()

    def render(self, kind, report=None, context=None):
        src = os.path.join(FIXTURE, "report.json")
        if report is not None:
            src = os.path.join(self.tmp.name, "in.json")
            with open(src, "w") as f:
                json.dump(report, f)
        png, layout = os.path.join(self.tmp.name, kind + ".png"), os.path.join(self.tmp.name, kind + ".json")
        cmd = ["/usr/bin/python3", SCRIPT, "--kind", kind, "--layout", layout] + (
            ["--context", context] if context else []) + [src, png]
        p = subprocess.run(cmd, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(layout) as f:
            lay = json.load(f)
        img = matplotlib.image.imread(png)
        return img, lay

    def check_image(self, img, lay, panels):
        self.assertEqual((img.shape[1], img.shape[0]), (lay["width"], lay["height"]))
        self.assertEqual(len(lay["axes"]), panels)
        # Not blank: a fair part of the pixels is not the white background, in several colours.
        rgb = img[:, :, :3]
        ink = (rgb < 0.95).any(axis=2).mean()
        self.assertGreater(ink, 0.03, "the image is almost empty")
        colours = {tuple(c) for c in (rgb[::7, ::7].reshape(-1, 3) * 255).astype(int)}
        self.assertGreater(len(colours), 20)
        self.assertEqual(len(lay["legends"]), panels, "every panel has its legend")
        for leg in lay["legends"]:
            for ax in lay["axes"]:
                self.assertFalse(overlap(leg, ax), f"legend {leg} over the panel {ax}")
            self.assertGreaterEqual(leg[0], 0)
            self.assertGreaterEqual(leg[1], 0)
            self.assertLessEqual(leg[2], lay["width"])
        for t in lay["titles"]:
            self.assertGreaterEqual(t[0], 0, f"title cut off on the left: {t}")
            self.assertLessEqual(t[2], lay["width"], f"title cut off on the right: {t}")
            self.assertLessEqual(t[3], lay["height"], f"title cut off at the top: {t}")

    def test_throughput_panels_by_family(self):
        img, lay = self.render("throughput")
        strategies = {r["strategy"] for r in self.report["groups"][0]["rows"]}
        fams = {chart_style.family(s) for s in strategies} - {None}
        self.check_image(img, lay, len(fams))
        self.assertAlmostEqual(lay["width"], 4.4 * len(fams) * chart.DPI, delta=1)
        # A 4.2 in panel, its title and its legend's rows below it.
        self.assertGreater(lay["height"], 4.5 * chart.DPI)
        self.assertLess(lay["height"], 7 * chart.DPI)
        # Each strategy appears in exactly one panel, regular and the ideal in every one.
        seen = [s for texts in lay["legend_texts"] for s in texts]
        for s in strategies - {"regular"}:
            self.assertEqual(seen.count(s), 1, s)
        self.assertEqual(seen.count("regular"), len(fams))
        self.assertEqual(seen.count("ideal: N x thr(1)"), len(fams))

    def test_pareto_per_device_count_with_the_device_memory_where_known(self):
        counts = sorted({r["devices"] for r in self.report["groups"][0]["rows"] if r.get("samples_per_s")})
        img, lay = self.render("pareto")
        self.check_image(img, lay, len(counts))
        self.assertFalse(any(t.startswith("device memory") for texts in lay["legend_texts"] for t in texts))
        # A GPU run's context names each GPU's memory: the smallest is drawn.
        ctx = os.path.join(self.tmp.name, "results.json")
        with open(ctx, "w") as f:
            json.dump({"context": {"device_kind": "cuda", "gpu_names": "NVIDIA H200 (cc 9.0, 140 GiB); "
                                   "NVIDIA H100 80GB HBM3 (cc 9.0, 80 GiB)"}}, f)
        img, lay = self.render("pareto", context=ctx)
        self.check_image(img, lay, len(counts))
        for texts in lay["legend_texts"]:
            self.assertIn("device memory (NVIDIA H100 80GB HBM3, 80 GiB)", texts)

    def test_pareto_front_keeps_only_the_undominated(self):
        pts = [(10, 5, "a"), (12, 4, "b"), (12, 9, "c"), (8, 2, "d"), (20, 9, "e"), (30, 11, "f")]
        self.assertEqual([p[2] for p in chart.pareto_front(pts)], ["d", "a", "c", "f"])

    def test_breakdown_bars_per_device_count(self):
        counts = sorted({r["devices"] for r in self.report["groups"][0]["rows"] if r.get("compute_share") is not None})
        img, lay = self.render("breakdown")
        self.check_image(img, lay, len(counts))
        self.assertEqual(lay["legend_texts"][0], ["compute", "transfer", "idle", "other"])

    def test_twenty_strategies_twenty_styles(self):
        names = ["regular"] + [f"s{i}" for i in range(20)]
        st = chart_style.styles_for(names)
        others = [st[n] for n in names[1:]]
        self.assertEqual(len({s["color"] for s in others}), 20)
        self.assertEqual(len({s["marker"] for s in others}), 20)
        self.assertEqual(st["regular"]["color"], "black")
        self.assertNotIn("black", {s["color"] for s in others})
        self.assertNotIn(st["regular"]["marker"], {s["marker"] for s in others})

    def test_many_series_and_groups_still_fit(self):
        # The projection's chart: 19 strategy labels and a long title in one group, twice.
        group = json.loads(json.dumps(self.report["groups"][0]))
        base = [r for r in group["rows"] if r.get("samples_per_s")]
        labels = [f"pipeline (M={m}, {s})" for m in (2, 4, 8) for s in ("gpipe", "1f1b")] + \
                 [f"dp{d}xpp2" for d in (2, 4)] + ["dp", "ddp", "fsdp", "zero2", "tp", "dp2xtp2", "dp4xtp2"]
        group["rows"] = [dict(base[i % len(base)], strategy=l) for i, l in enumerate(labels)] + \
                        [dict(base[0], strategy="regular", devices=1)]
        group["title"] = "great_net image 512 width 1: batch 1 per device, weak scaling, fp32, projected on " \
                         "h200_hgx (8x NVIDIA H200 SXM, NVLink 900 GB/s), compute x 0.031 from this CPU's profile"
        img, lay = self.render("throughput", report={"groups": [group, group]})
        self.check_image(img, lay, 6)

    def test_bad_input_is_named(self):
        bad = os.path.join(self.tmp.name, "bad.json")
        with open(bad, "w") as f:
            f.write("{\"groups\": [{\"rows\": [{\"devices\": 1}]}]}")
        p = subprocess.run(["/usr/bin/python3", SCRIPT, bad, os.path.join(self.tmp.name, "x.png")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn(bad, p.stderr)
        self.assertIn("strategy", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "x.png")))
        p = subprocess.run(["/usr/bin/python3", SCRIPT, "--kind", "pie", bad, "x.png"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--kind expects throughput, pareto or breakdown, got 'pie'", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)

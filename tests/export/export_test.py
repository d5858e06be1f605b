#!/usr/bin/python3
"""scripts/torch_export.py: the fixture nets round-trip, a user's module replays as PyTorch trains it, and
what parbench cannot run is refused by name with nothing written.

usage: export_test.py PARBENCH SOURCE_DIR   (ctest: the `torch_export` test; skips, exit 77, without torch)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

PARBENCH, SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(SOURCE, "scripts"))
try:
    import numpy as np
    import torch
except ImportError:
    print("export_test: no torch in /usr/bin/python3 (scripts/install-deps.sh --with-torch): skipped")
    sys.exit(77)

import torch_export  # noqa: E402
import torchnet  # noqa: E402

EXPORT = os.path.join(SOURCE, "scripts", "torch_export.py")
MODELS = os.path.join(SOURCE, "tests", "export", "user_models.py")
FIXTURES = os.path.join(SOURCE, "tests", "fixtures")


def canonical(layers):
    """Layers with [a, a] pairs written as a, defaults spelled out, inputs as indices and only
    parameter files' names kept, so two spellings compare equal."""
    names = {layer["name"]: k for k, layer in enumerate(layers) if "name" in layer}
    out = []
    for k, layer in enumerate(layers):
        c = dict(layer)
        c["inputs"] = [-1 if v == "input" else names[v] if isinstance(v, str) else v for v in c.get("inputs", [k - 1])]
        if c["type"] not in ("conv2d", "conv_transpose2d", "linear"):
            c.pop("name", None)
        if c["type"] in ("conv2d", "conv_transpose2d"):
            c.setdefault("stride", 1)
            c.setdefault("padding", 0)
            for k in ("kernel_size", "stride", "padding"):
                if isinstance(c[k], list) and c[k][0] == c[k][1]:
                    c[k] = c[k][0]
        out.append(c)
    return out


def export_cli(cls, out, shape="3,8,8"):
    return subprocess.run([sys.executable, EXPORT, "--module", f"{MODELS}:{cls}", "--input-shape", shape, "--out", out],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class RoundTrip(unittest.TestCase):
    def test_every_fixture_net_exports_to_its_own_description(self):
        names = sorted(d for d in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, d, "net.json")))
        graphs = sorted(os.path.join("graph", d) for d in os.listdir(os.path.join(FIXTURES, "graph")))
        self.assertGreaterEqual(len(names), 8)
        self.assertGreaterEqual(len(graphs), 2)
        for name in names + graphs:
            with self.subTest(net=name):
                net = torchnet.load_net(os.path.join(FIXTURES, name, "net.json"))
                model, _ = torchnet.build_model(net)
                got, params = torch_export.export(model, net["input"])
                self.assertEqual(got["input"], net["input"])
                if net.get("target", "input") == "input":  # a random target of the input's shape exports as "input"
                    self.assertEqual(got["target"], "input")
                self.assertEqual(canonical(got["layers"]), canonical(net["layers"]))
                self.assertFalse(any("name" in layer for layer in got["layers"]), "an nn.Sequential needs no names")
                self.assertEqual(sorted(params), sorted(model.state_dict()))


class BuiltinNets(unittest.TestCase):
    def test_pytorch_definitions_export_to_the_nets_parbench_builds(self):
        """scripts/make_fixtures.py's ResNet and UNet, exported, are `parbench net`'s resnet and unet
        (layers, the layers each reads, input and target; the exported names are module paths)."""
        import make_fixtures

        def strip(layers):
            return [{k: v for k, v in layer.items() if k != "name"} for layer in canonical(layers)]

        for name, image, width in (("resnet", 32, 0.125), ("resnet", 64, 0.5), ("unet", 16, 0.25), ("unet", 32, 0.5)):
            with self.subTest(net=name, image=image, width=width):
                p = subprocess.run([PARBENCH, "net", "--workload", name, "--image", str(image), "--width", str(width)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                self.assertEqual(p.returncode, 0, p.stderr)
                want = json.loads(p.stdout)
                torch.manual_seed(0)
                model = make_fixtures.ResNet(image, width) if name == "resnet" else make_fixtures.UNet(width)
                got, params = torch_export.export(model, [3, image, image])
                self.assertEqual(got["input"], want["input"])
                self.assertEqual(got["target"], want["target"])
                self.assertEqual(strip(got["layers"]), strip(want["layers"]))
                self.assertEqual(sorted(params), sorted(model.state_dict()))
                self.assertGreater(sum(layer["type"] in ("add", "concat") for layer in want["layers"]), 2)


class UserModule(unittest.TestCase):
    def test_named_parts_replay_as_pytorch_trains_them(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "exported")
            r = export_cli("EncoderDecoder", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "net.json")) as f:
                net = json.load(f)
            self.assertEqual([(layer.get("name"), layer["type"]) for layer in net["layers"]],
                             [("encoder.0", "conv2d"), (None, "relu"), (None, "maxpool2d"), ("middle", "conv2d"),
                              (None, "relu"), ("decoder", "conv_transpose2d"), (None, "relu"), ("head", "conv2d")])
            self.assertEqual(net["target"], "input")
            self.replays_as_pytorch_trains("EncoderDecoder", out, tmp, (("regular", 1), ("pipeline", 2), ("ddp", 2)))

    def test_skips_export_as_layers_reading_their_inputs(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "exported")
            r = export_cli("SkipNet", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "net.json")) as f:
                net = json.load(f)
            self.assertEqual([(layer["type"], layer.get("inputs")) for layer in net["layers"]],
                             [("conv2d", None), ("relu", None), ("conv2d", None), ("relu", None), ("conv2d", None),
                              ("add", [1, 4]), ("relu", None), ("maxpool2d", None), ("conv2d", None), ("relu", None),
                              ("conv_transpose2d", None), ("concat", [10, 6, "input"]), ("conv2d", None)])
            self.assertEqual(net["layers"][2]["name"], "body.0")
            self.replays_as_pytorch_trains("SkipNet", out, tmp, (("regular", 1), ("dp", 3), ("ddp", 2)))

    def replays_as_pytorch_trains(self, cls, out, tmp, strategies):
        """`replay` of the exported net under each (strategy, devices) follows PyTorch's 4 Adam steps of
        the module from the exported parameters."""
        torchnet.configure()
        sys.path.insert(0, os.path.dirname(MODELS))
        import user_models
        torch.manual_seed(1)
        model = getattr(user_models, cls)()
        for key, value in model.state_dict().items():
            value.copy_(torch.from_numpy(np.load(os.path.join(out, "params", key + ".npy"))))
        x = torch.randn(3, 3, 8, 8)
        np.save(os.path.join(tmp, "x.npy"), x.numpy())
        losses = torchnet.train(model, x, x, 1e-3, 0.0, 4)
        for strategy, devices in strategies:
            with self.subTest(strategy=strategy):
                run = os.path.join(tmp, f"replay-{strategy}")
                cmd = [PARBENCH, "replay", "--workload", os.path.join(out, "net.json"), "--params",
                       os.path.join(out, "params"), "--input", os.path.join(tmp, "x.npy"), "--steps", "4", "--lr",
                       "1e-3", "--strategy", strategy, "--devices", str(devices), "--out", run]
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                self.assertEqual(p.returncode, 0, p.stdout)
                with open(os.path.join(run, "losses.json")) as f:
                    got = json.load(f)["losses"]
                for a, b in zip(got, losses):
                    self.assertLess(abs(a - b) / abs(b), 1e-5, (got, losses))
                for key, value in model.state_dict().items():  # files named by the module's own keys
                    final = np.load(os.path.join(run, "params", key + ".npy"))
                    self.assertLess(float(np.max(np.abs(final - value.numpy()))), 1e-5, key)

    def test_sequential_parts_are_named_by_their_module_path(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = export_cli("Classifier", os.path.join(tmp, "c"), "2,6,6")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(tmp, "c", "net.json")) as f:
                net = json.load(f)
            self.assertEqual([layer["type"] for layer in net["layers"]],
                             ["conv2d", "relu", "upsample", "flatten", "linear"])  # the identity dropped
            self.assertEqual(net["layers"][0]["name"], "features.0")
            self.assertEqual(net["layers"][4]["name"], "fc")
            self.assertEqual(net["target"], "random")
            self.assertTrue(os.path.isfile(os.path.join(tmp, "c", "params", "features.0.weight.npy")))


class Refusals(unittest.TestCase):
    def check_refused(self, cls, *phrases):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "never")
            r = export_cli(cls, out)
            self.assertEqual(r.returncode, 1, r.stderr)
            for phrase in phrases:
                self.assertIn(phrase, r.stderr)
            self.assertIn("nothing written", r.stderr)
            self.assertEqual(os.listdir(tmp), [], "no output, not even a staging folder")

    def test_an_unsupported_module_is_named_with_its_path(self):
        self.check_refused("WithBatchNorm", "unsupported op BatchNorm2d at module 'bn'")

    def test_an_add_of_a_number_is_refused(self):
        self.check_refused("AddsAScalar", "add", "an add other than tensor + tensor")

    def test_bad_arguments_exit_2(self):
        r = subprocess.run([sys.executable, EXPORT, "--module", f"{MODELS}:NoSuchNet", "--input-shape", "3,8,8", "--out",
                            "/nonexistent/x"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("defines no NoSuchNet", r.stderr)
        r = subprocess.run([sys.executable, EXPORT, "--module", f"{MODELS}:SkipNet", "--input-shape", "3,x", "--out",
                            "/nonexistent/x"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--input-shape '3,x'", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)

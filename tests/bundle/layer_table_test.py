#!/usr/bin/env python3
"""ctest driver for scripts/layer_table.py (gpu_check.sh's stage 3b join), no GPU: an engine profile
made by `parbench profile` on the CPU (as the NCHW side) and an NHWC side made from it here, joined
with a PyTorch profile written here; the roofline of each row against the formula computed here
from the layer's shapes and H200 datasheet figures; the fractions and ratios; the bias rows the
engine does not time apart; n/a for a GPU without figures; exit 2 on a net that does not match or
a profile whose precision or layout is not the one named.

usage: layer_table_test.py PARBENCH SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

parbench, src = sys.argv[1], sys.argv[2]
script = os.path.join(src, "scripts", "layer_table.py")
tmp = tempfile.mkdtemp(prefix="parbench_layer_table_")


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def join(*args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)


engine = os.path.join(tmp, "e-tf32.json")
r = subprocess.run([parbench, "profile", "--workload", "great_net", "--image", "8", "--width", "0.125", "--batch", "2",
                    "--device-kind", "cpu", "--precision", "tf32", "--warmup", "0", "--reps", "1", "--out", engine],
                   capture_output=True, text=True)
if r.returncode:
    fail(f"parbench profile exited {r.returncode}: {r.stderr}")
eng = json.load(open(engine))

# A PyTorch side whose times are known: 1 ms a pass in NCHW, 0.5 ms in channels_last.
layers = []
for l in eng["layers"]:
    t = {"index": l["index"], "type": l["type"], "in": l["in"], "out": l["out"], "forward_s": 1e-3,
         "backward_data_s": 1e-3}
    if l["type"] == "conv2d":
        t.update(backward_weights_s=1e-3, bias_add_s=1e-3, bias_grad_s=1e-3)
    layers.append(t)
half = [{k: (v / 2 if k.endswith("_s") else v) for k, v in l.items()} for l in layers]
torch_doc = {"torch_layer_profile": 1, "context": {"batch": 2, "device": "cpu"},
             "runs": [{"precision": "tf32", "layout": "nchw", "layers": layers},
                      {"precision": "tf32", "layout": "channels_last", "layers": half}]}
tjson = os.path.join(tmp, "t.json")
json.dump(torch_doc, open(tjson, "w"))

# The engine's NHWC side: the CPU profile, said to be NHWC, at a quarter of its times except
# layer 2's forward, which it leaves 3x slower (the faster layout is chosen per row).
nhwc = json.loads(json.dumps(eng))
nhwc["context"]["conv_layout"] = "nhwc"
for l in nhwc["layers"]:
    for k in ("forward_s", "backward_data_s", "backward_weights_s"):
        l[k] = [t * (3 if (l["index"], k) == (2, "forward_s") else 0.25) for t in l[k]]
engine_nhwc = os.path.join(tmp, "e-tf32-nhwc.json")
json.dump(nhwc, open(engine_nhwc, "w"))

out_json = os.path.join(tmp, "layers.json")
r = join("--engine", f"tf32={engine}", "--engine", f"tf32/nhwc={engine_nhwc}", "--torch", tjson,
         "--gpu", "NVIDIA H200 141GB HBM3e", "--json", out_json)
if r.returncode:
    fail(f"layer_table.py exited {r.returncode}: {r.stderr}")
rows = json.load(open(out_json))["rows"]
by = {(row["layer"], row["pass"]): row for row in rows}
n_conv = sum(l["type"] == "conv2d" for l in eng["layers"])
n_relu = sum(l["type"] == "relu" for l in eng["layers"])
if len(rows) != 5 * n_conv + 2 * n_relu:
    fail(f"{len(rows)} rows, expected 5 per convolution and 2 per ReLU ({5 * n_conv + 2 * n_relu})")

# The roofline, computed here: layer 2 (conv 2->4 at width 0.125, 8x8, batch 2), forward, fp32 bytes.
conv = eng["layers"][2]
ci, co, hw = conv["in"][0], conv["out"][0], conv["out"][1] * conv["out"][2]
flops = 2 * ci * co * 9 * hw * 2
nbytes = 4 * (ci * hw * 2 + co * ci * 9 + co * hw * 2 + co)
want = max(flops / 494e12, nbytes / 4.8e12)
row = by[(2, "forward")]
if abs(row["roofline_s"] - want) > 1e-9 * want:
    fail(f"layer 2 forward roofline {row['roofline_s']}, expected {want}")
e = conv["forward_s"][0]
if row["engine_s"] != e or row["engine_nhwc_s"] != 3 * e or abs(row["engine_over_best_torch"] - e / 0.5e-3) > 1e-9:
    fail(f"layer 2 forward: engine NCHW {row['engine_s']} (profile: {e}), NHWC {row['engine_nhwc_s']} (expected "
         f"{3 * e}), the faster over the faster PyTorch {row['engine_over_best_torch']} (expected {e / 0.5e-3})")
# Where NHWC is the faster engine layout, the ratio is its.
bw = eng["layers"][2]["backward_weights_s"][0]
got = by[(2, "backward-weights")]["engine_over_best_torch"]
if abs(got - 0.25 * bw / 0.5e-3) > 1e-9 * max(1, got):
    fail(f"layer 2 backward-weights: faster engine over faster PyTorch {got}, expected {0.25 * bw / 0.5e-3}")
md = r.stdout
frac = f"{want / 0.5e-3:.0%}"
cells = f"| 2 | conv2d {ci}->{co} | forward | {want * 1e3:.3f} | {e * 1e3:.3f} ({want / e:.0%}) | " \
        f"{3 * e * 1e3:.3f} ({want / (3 * e):.0%}) | 1.000 ({want / 1e-3:.0%}) | 0.500 ({frac}) |"
if cells not in md or "| engine NCHW | engine NHWC | PyTorch NCHW | PyTorch NHWC |" not in md:
    fail(f"the markdown lacks layer 2's forward row {cells!r} or the four time columns:\n{md}")
# A ReLU's backward: 3 tensors of the output's size, memory bound.
relu = eng["layers"][3]
y = relu["out"][0] * relu["out"][1] * relu["out"][2] * 2
if abs(by[(3, "backward-data")]["roofline_s"] - 3 * 4 * y / 4.8e12) > 1e-15:
    fail(f"ReLU backward roofline {by[(3, 'backward-data')]['roofline_s']}, expected {3 * 4 * y / 4.8e12}")
if by[(2, "bias add")]["engine_s"] is not None or "n/a (engine does not time it apart)" not in md:
    fail("the bias add has an engine time, or its cell does not say the engine does not time it apart")
if by[(2, "bias add")]["torch_nchw_s"] != 1e-3:
    fail("the bias add lost PyTorch's time")
print(f"rows: {len(rows)}; layer 2 forward roofline {want * 1e3:.6f} ms, NHWC at {frac} of it; bias rows n/a for the engine")

# A GPU without datasheet figures: no roofline, no fraction.
r = join("--engine", f"tf32={engine}", "--torch", tjson, "--gpu", "Tesla V100-SXM2-16GB", "--json", out_json)
d = json.load(open(out_json))
if r.returncode or d["datasheet"] is not None or any(row["roofline_s"] is not None for row in d["rows"]) \
        or "roofline n/a" not in r.stdout or "%)" in r.stdout:
    fail(f"an unknown GPU got roofline figures (exit {r.returncode}):\n{r.stdout[:600]}")
print("unknown GPU: roofline n/a")

# Bad input, exit 2 and a line naming what is wrong: another net on one side, a profile of another
# precision or layout than named, an unknown layout.
bad = json.loads(json.dumps(torch_doc))
bad["runs"][0]["layers"][2]["out"][0] += 1
json.dump(bad, open(tjson, "w"))
for args, want, what in [
        (["--engine", f"tf32={engine}", "--torch", tjson], "layer 2", "a mismatched net"),
        (["--engine", f"bf16={engine}"], "precision tf32", "a profile under the wrong precision"),
        (["--engine", f"tf32={engine_nhwc}"], "conv_layout nhwc, not nchw", "an NHWC profile named as NCHW"),
        (["--engine", f"tf32/nhwc={engine}"], "conv_layout n/a, not nhwc", "a CPU profile named as NHWC"),
        (["--engine", f"tf32/nwhc={engine}"], "LAYOUT nchw or nhwc", "an unknown layout")]:
    r = join(*args)
    if r.returncode != 2 or want not in r.stderr:
        fail(f"{what}: exit {r.returncode}, stderr {r.stderr!r}")
print("bad input: exit 2 naming the layer, the precision or the layout")
print("PASS")

#!/usr/bin/python3
# Compares two `parbench replay` output folders: losses within 1e-5 relative, every parameter
# within 1e-5 absolute (--exact: equal, bit for bit); prints the worst mismatch. Exit 0 when they agree.
import json
import os
import sys

import numpy as np

exact = "--exact" in sys.argv[1:]
a, b = [x for x in sys.argv[1:] if x != "--exact"][:2]
tol = 0.0 if exact else 1e-5
la = json.load(open(os.path.join(a, "losses.json")))["losses"]
lb = json.load(open(os.path.join(b, "losses.json")))["losses"]
ok = len(la) == len(lb)
rel = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(la, lb)) if la else 0.0
print(f"losses: {len(la)} vs {len(lb)} steps, worst relative difference {rel:.3g}")
ok = ok and rel <= tol
names = sorted(os.listdir(os.path.join(a, "params")))
if names != sorted(os.listdir(os.path.join(b, "params"))):
    print("parameter files differ")
    ok = False
worst, where = 0.0, ""
for n in names:
    pa, pb = np.load(os.path.join(a, "params", n)), np.load(os.path.join(b, "params", n))
    if pa.shape != pb.shape:
        print(f"{n}: shape {pa.shape} vs {pb.shape}")
        ok = False
        continue
    d = float(np.max(np.abs(pa.astype(np.float64) - pb))) if pa.size else 0.0
    if d > worst:
        worst, where = d, n
print(f"params: {len(names)} arrays, worst absolute difference {worst:.3g} ({where or '-'})")
ok = ok and worst <= tol
sys.exit(0 if ok else 1)

#!/usr/bin/env python3
"""Predicted iteration time (joule analyze) against the measured training step for every zoo net at two
batch sizes, on this CPU.

1. joule probe measures the bandwidth (STREAM triad), the GEMM peak and the fixed per-op cost.
2. joule profile measures every configuration (per-node steady-clock times) into a fresh database.
3. Three predictions per configuration:
   - roofline: the memory model on the probe's figures alone (a lower bound);
   - leave-one-net-out: efficiency curves from joule calibrate fitted on the *other* eight nets' records
     (the net predicted was never seen);
   - held-out configuration: curves fitted on every other configuration (the same net at its other batch
     size is seen, this one is not).
   The error is (predicted - measured) / measured of the step; the mean absolute error is reported.

    /usr/bin/python3 bench/validate_analyze.py [--joule build/joule] [--capacity 2MiB] [--iters 3] [--db F] [--probe F]
"""
import argparse
import json
import os
import subprocess
import tempfile

NETS = [  # net, image size, two batch sizes (small enough for a 2-core machine)
    ("lenet5", 28, (16, 64)), ("alexnet", 224, (2, 4)), ("vgg11", 224, (1, 2)), ("vgg16", 224, (1, 2)),
    ("resnet18", 224, (2, 8)), ("resnet50", 224, (1, 4)), ("mobilenet_v2", 224, (2, 8)),
    ("bert-tiny", 0, (8, 32)), ("bert-base", 0, (1, 4)),
]


def run(cmd, parse=True):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out) if parse else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--capacity", default="2MiB", help="on-chip capacity given to the model (2 x 1 MiB L2 here)")
    ap.add_argument("--iters", type=int, default=5, help="measured steps per configuration")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--db", default="", help="profile database to (re)use; default: a fresh temporary one")
    ap.add_argument("--probe", default="", help="joule probe --json output to reuse instead of probing now")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="joule-validate-")
    db = a.db or os.path.join(tmp, "profile.db")

    p = json.load(open(a.probe)) if a.probe else run([a.joule, "probe", "--json", "--threads", str(a.threads)])
    bw, peak, peak16, ovh = p["triad_gbps"], p["gemm_gflops_f32"], p["gemm_gflops_bf16"], p["op_overhead_seconds"]
    print(f"probe (measured): triad {bw:.1f} GB/s, GEMM f32 {peak:.1f} GFLOP/s, per-op overhead {ovh * 1e6:.1f} us; model capacity {a.capacity}")
    hw = ["--capacity", a.capacity, "--bandwidth", f"{bw}GB/s", "--peak", f"{peak}GFLOPS", "--peak-bf16", f"{peak16}GFLOPS",
          "--overhead", f"{ovh * 1e6}us"]

    for net, _, batches in NETS:
        run([a.joule, "profile", "--db", db, "--net", net, "--batch", ",".join(map(str, batches)), "--iters", str(a.iters), "--warmup", "1",
             "--threads", str(a.threads), "--meter", "modelled"], parse=False)
    measured = {(c["net"], c["batch"]): c["step_seconds"] for c in run([a.joule, "profile", "--db", db, "--report", "--json"])["configs"]
                if c["threads"] == a.threads and c["dtype"] == "f32"}

    def predict(net, size, b, efficiency=None):
        shape = ["--image-size", str(size)] if size else ["--seq-len", "128"]
        eff = ["--efficiency", efficiency] if efficiency else []
        return run([a.joule, "analyze", "--net", net, "--batch", str(b), "--optimizer", "sgd", "--json"] + hw + eff + shape)["results"][0]["seconds"]

    def calibrate(exclude):
        out = os.path.join(tmp, f"eff-{exclude.replace(':', '-')}.yaml")
        run([a.joule, "calibrate", "--db", db, "--out", out, "--threads", str(a.threads), "--exclude", exclude, "--json"] + hw)
        return out

    print(f"{'net':14} {'batch':>5} {'measured ms':>12} {'roofline':>16} {'leave-one-net-out':>20} {'held-out config':>20}")
    errors = {"roofline": [], "net": [], "config": []}
    for net, size, batches in NETS:
        lono = calibrate(net)
        for b in batches:
            m = measured[(net, b)]
            row = {"roofline": predict(net, size, b), "net": predict(net, size, b, lono), "config": predict(net, size, b, calibrate(f"{net}:{b}"))}
            cells = []
            for k, v in row.items():
                err = (v - m) / m
                errors[k].append(abs(err))
                cells.append(f"{v * 1e3:9.2f} {100 * err:+6.1f}%")
            print(f"{net:14} {b:5d} {m * 1e3:12.2f} {cells[0]:>16} {cells[1]:>20} {cells[2]:>20}", flush=True)
    n = len(errors["roofline"])
    print(f"mean absolute error over {n} configurations: roofline {100 * sum(errors['roofline']) / n:.1f} %, "
          f"leave-one-net-out {100 * sum(errors['net']) / n:.1f} %, held-out configuration {100 * sum(errors['config']) / n:.1f} %")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""One process with 2 threads against 2 processes (mpirun) with 1 thread each, on this machine, for the
same global batch: step time of each, and the all-reduce's share of the 2-process step (time in the
all-reduce nodes: packing, waiting for the sum, averaging; and of it, waiting -- what backward did not
hide). The configurations alternate, --repeats times, in one run (this machine is shared and noisy);
medians are printed. Everything here is measured (steady clock).

    python3 bench/data_parallel_local.py [--joule build/joule] [--repeats 3]
"""
import argparse
import json
import statistics
import subprocess

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
CASES = [  # (name, flags): the global batch is --batch
    ("lenet5 b64 (Fashion-MNIST)", ["--net", "lenet5", "--batch", "64", "--steps", "40", "--warmup", "5", "--eval-samples", "0"]),
    ("resnet18 32x32 b32 (synthetic)", ["--net", "resnet18", "--dataset", "synthetic", "--image-size", "32", "--batch", "32", "--steps", "8", "--warmup", "2"]),
]


def train(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{\n"):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(f"{'net':32} | {'1x2 step ms':>11} | {'2x1 step ms':>11} {'2x1 / 1x2':>9} | {'all-reduce ms':>13} {'share':>6} {'waiting ms':>10} | buckets")
    for name, flags in CASES:
        one, two, ar, wait = [], [], [], []
        buckets = 0
        for _ in range(a.repeats):
            j1 = train([a.joule, "train", "--threads", "2", "--quiet", "--json"] + flags)
            one.append(j1["step_wall_seconds"])
            j2 = train(MPIRUN + [a.joule, "train", "--threads", "1", "--quiet", "--json"] + flags)
            slowest = max(j2["ranks"], key=lambda r: r["step_seconds"])
            two.append(slowest["step_seconds"])
            ar.append(statistics.mean(r["allreduce_seconds"] for r in j2["ranks"]))
            wait.append(statistics.mean(r["allreduce_wait_seconds"] for r in j2["ranks"]))
            buckets = j2["allreduce_buckets"]
        m1, m2, mar, mw = (statistics.median(v) * 1e3 for v in (one, two, ar, wait))
        print(f"{name:32} | {m1:11.2f} | {m2:11.2f} {m2 / m1:9.2f} | {mar:13.2f} {100 * mar / m2:5.1f}% {mw:10.2f} | {buckets}")
        print(f"{'':32}   spread 1x2 {min(one) * 1e3:.2f}-{max(one) * 1e3:.2f} ms, 2x1 {min(two) * 1e3:.2f}-{max(two) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""One process with 2 threads against 2 processes (mpirun) with 1 thread each, on this machine, for the
same global batch: the measured step of each, the all-reduce's share of the 2-process step (time in the
all-reduce nodes: packing, waiting for the sum, averaging) and the part of it spent waiting (what
backward did not hide); beside them what `joule predict` models for the same runs (this CPU's spec,
cpu-amd-epyc-turin-2vcpu: the whole CPU for 1 x 2, a core per process for 2 x 1, the all-reduce over
link-shm-turin-2vcpu, Open MPI's shared memory measured by bench/mpi_pingpong.c). The measured
configurations alternate, --repeats times, in one run (this machine is shared and noisy); medians.

    python3 bench/data_parallel_local.py [--joule build/joule] [--repeats 3]
"""
import argparse
import json
import statistics
import subprocess

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
CASES = [  # (name, net flags; --batch is the global batch, train flags)
    ("lenet5 b64 (Fashion-MNIST)", ["--net", "lenet5"], 64, ["--steps", "40", "--warmup", "5", "--eval-samples", "0"]),
    ("resnet18 32x32 b32 (synthetic)", ["--net", "resnet18", "--image-size", "32"], 32, ["--dataset", "synthetic", "--steps", "8", "--warmup", "2"]),
]
SPEC, LINK = "cpu-amd-epyc-turin-2vcpu", "shm-turin-2vcpu"


def last_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{\n"):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(f"{'':32} | {'1 x 2 threads':>15} | {'2 x 1 thread':>15} | {'2x1 / 1x2':>13} | {'all-reduce ms':>15} | {'waiting ms':>15} | share")
    print(f"{'net':32} | {'meas ms':>7} {'pred':>7} | {'meas ms':>7} {'pred':>7} | {'meas':>6} {'pred':>6} | {'meas':>7} {'pred':>7} | "
          f"{'meas':>7} {'pred':>7} | meas")
    for name, net, batch, flags in CASES:
        one, two, ar, wait = [], [], [], []
        for _ in range(a.repeats):
            j1 = last_json([a.joule, "train", "--threads", "2", "--quiet", "--json", "--batch", str(batch)] + net + flags)
            one.append(j1["step_wall_seconds"])
            j2 = last_json(MPIRUN + [a.joule, "train", "--threads", "1", "--quiet", "--json", "--batch", str(batch)] + net + flags)
            two.append(max(r["step_seconds"] for r in j2["ranks"]))
            ar.append(statistics.mean(r["allreduce_seconds"] for r in j2["ranks"]))
            wait.append(statistics.mean(r["allreduce_wait_seconds"] for r in j2["ranks"]))
        p1 = last_json([a.joule, "predict", "--json", "--device", SPEC, "--optimizer", "adam", "--batch", str(batch)] + net)["iteration"]["seconds"]
        dp = last_json([a.joule, "predict", "--json", "--device", SPEC, "--threads", "1", "--optimizer", "adam", "--batch", str(batch // 2), "--nodes", "1",
                        "--per-node", "2", "--intra-link", LINK] + net)["data_parallel"]["rows"][0]
        m1, m2, mar, mw = (statistics.median(v) * 1e3 for v in (one, two, ar, wait))
        p2, par, pw = dp["iteration_seconds"] * 1e3, dp["allreduce_seconds"] * 1e3, dp["exposed_seconds"] * 1e3
        print(f"{name:32} | {m1:7.2f} {p1 * 1e3:7.2f} | {m2:7.2f} {p2:7.2f} | {m2 / m1:6.2f} {p2 / (p1 * 1e3):6.2f} | {mar:7.2f} {par:7.2f} | "
              f"{mw:7.2f} {pw:7.2f} | {100 * mar / m2:4.1f}%")
        print(f"{'':32}   spread: 1 x 2 {min(one) * 1e3:.2f}-{max(one) * 1e3:.2f} ms, 2 x 1 {min(two) * 1e3:.2f}-{max(two) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

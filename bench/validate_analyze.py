#!/usr/bin/env python3
"""Predicted iteration time (joule analyze, fed by joule probe's measured bandwidth and GEMM peak) against the
measured training step (joule train, sum of per-node steady-clock times) for every zoo net at two batch sizes.

    /usr/bin/python3 bench/validate_analyze.py [--joule build/joule] [--capacity 2MiB] [--steps 3]
"""
import argparse
import json
import subprocess

NETS = [  # net, image size, two batch sizes (small enough for a 2-core machine)
    ("lenet5", 28, (16, 64)), ("alexnet", 224, (2, 4)), ("vgg11", 224, (1, 2)), ("vgg16", 224, (1, 2)),
    ("resnet18", 224, (2, 8)), ("resnet50", 224, (1, 4)), ("mobilenet_v2", 224, (2, 8)),
    ("bert-tiny", 0, (8, 32)), ("bert-base", 0, (1, 4)),
]


def run(cmd):
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--capacity", default="2MiB", help="on-chip capacity given to the model (2 x 1 MiB L2 here)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    p = run([a.joule, "probe", "--json", "--threads", str(a.threads)])
    bw, peak, peak16, ovh = p["triad_gbps"], p["gemm_gflops_f32"], p["gemm_gflops_bf16"], p["op_overhead_seconds"]
    print(f"probe (measured): triad {bw:.1f} GB/s, GEMM f32 {peak:.1f} GFLOP/s, per-op overhead {ovh * 1e6:.1f} us; model capacity {a.capacity}")
    print(f"{'net':14} {'batch':>5} {'measured ms':>12} {'predicted ms':>13} {'error':>8}")
    errors = []
    for net, size, batches in NETS:
        for b in batches:
            shape = ["--image-size", str(size)] if size else ["--seq-len", "128"]
            m = run([a.joule, "train", "--net", net, "--dataset", "synthetic", "--batch", str(b), "--optimizer", "sgd", "--steps",
                     str(a.steps + 1), "--warmup", "1", "--threads", str(a.threads), "--json", "--quiet"] + shape)
            q = run([a.joule, "analyze", "--net", net, "--batch", str(b), "--optimizer", "sgd", "--capacity", a.capacity, "--bandwidth",
                     f"{bw}GB/s", "--peak", f"{peak}GFLOPS", "--peak-bf16", f"{peak16}GFLOPS", "--overhead", f"{ovh * 1e6}us",
                     "--json"] + shape)
            measured, predicted = m["step_seconds"], q["results"][0]["seconds"]
            err = (predicted - measured) / measured
            errors.append(abs(err))
            print(f"{net:14} {b:5d} {measured * 1e3:12.2f} {predicted * 1e3:13.2f} {100 * err:+7.1f}%", flush=True)
    print(f"mean absolute error {100 * sum(errors) / len(errors):.1f} % over {len(errors)} configurations")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bf16 under plans: one training step (SGD-momentum) of the same nets in f32 and bf16, in joule (this build and,
optionally, an earlier build for a before/after) and in PyTorch 1.13 with CPU autocast bf16, all in one run.

    /usr/bin/python3 bench/precision.py [--threads 2] [--steps 5] [--rounds 3] [--joule build/joule] [--before OLD/joule]

Every figure is a measured mean step time (joule: `train --json` step_seconds, the sum of its nodes' steady-clock
times; PyTorch: wall time). Rounds interleave the variants so that the machine's drift hits them alike. On this shared
machine other tenants' bursts only ever slow a run down, so the table gives each variant's best round (the least
disturbed) and the ratio of best rounds, beside the spread of the per-round ratios (min..max)."""
import argparse
import json
import subprocess
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from compare_pytorch import torch_step_seconds  # noqa: E402
from pytorch_models import Bert, MobileNetV2, ResNet18  # noqa: E402

CONFIGS = [
    # name, joule net, batch, image size (0: tokens), PyTorch model, input
    ("ResNet-18 b32 32x32", "resnet18", 32, 32, ResNet18, lambda b: torch.randn(b, 3, 32, 32)),
    ("ResNet-18 b8 224x224", "resnet18", 8, 224, ResNet18, lambda b: torch.randn(b, 3, 224, 224)),
    ("MobileNetV2 b16 224x224", "mobilenet_v2", 16, 224, MobileNetV2, lambda b: torch.randn(b, 3, 224, 224)),
    ("bert-tiny b8 seq128", "bert-tiny", 8, 0, Bert, lambda b: torch.randint(0, 30522, (b, 128))),
]


def joule_step(binary, net, batch, size, threads, steps, warmup, dtype, scope):
    cmd = [binary, "train", "--net", net, "--dataset", "synthetic", "--batch", str(batch), "--optimizer", "sgd", "--lr", "0.01",
           "--threads", str(threads), "--steps", str(steps + warmup), "--warmup", str(warmup), "--json", "--quiet",
           "--dtype", dtype, "--dtype-scope", scope]
    if size:
        cmd += ["--image-size", str(size)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["step_seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--before", default="", help="an earlier joule binary (bf16 before plans)")
    ap.add_argument("--only", default="", help="substring of a config name")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    variants = [("f32", a.joule, "f32", "gemm"), ("bf16 gemm", a.joule, "bf16", "gemm"), ("bf16 all", a.joule, "bf16", "all")]
    if a.before:
        variants += [("before bf16 gemm", a.before, "bf16", "gemm"), ("before bf16 all", a.before, "bf16", "all")]
    print(f"PyTorch {torch.__version__}, {a.threads} threads, {a.steps} timed steps after {a.warmup} warm-up, {a.rounds} rounds "
          "(measured; best round, ratio spread min..max over rounds)")
    for name, net, batch, size, make_model, make_input in CONFIGS:
        if a.only and a.only not in name:
            continue
        classes = 2 if net.startswith("bert") else 1000
        t = {v[0]: [] for v in variants}
        t["torch f32"], t["torch autocast bf16"] = [], []
        for _ in range(a.rounds):
            for label, binary, dtype, scope in variants:
                t[label].append(joule_step(binary, net, batch, size, a.threads, a.steps, a.warmup, dtype, scope))
            t["torch f32"].append(torch_step_seconds(make_model, make_input, batch, classes, a.steps, a.warmup, False))
            try:
                t["torch autocast bf16"].append(torch_step_seconds(make_model, make_input, batch, classes, a.steps, a.warmup, True))
            except RuntimeError as e:  # PyTorch 1.13 on CPU lacks some bf16 backward kernels (ReLU6's hardtanh)
                t["torch autocast bf16"].append(float("nan"))
                print(f"  (PyTorch autocast bf16 failed: {e})", flush=True)
        print(f"\n{name}")
        print(f"  {'variant':22} {'ms/step':>9} {'joule f32 / this':>18} {'spread':>14}")
        for label, times in t.items():
            if any(x != x for x in times):
                print(f"  {label:22} {'n/a':>9}")
                continue
            ratios = [f / x for f, x in zip(t["f32"], times)]
            print(f"  {label:22} {min(times) * 1e3:9.2f} {min(t['f32']) / min(times):17.2f}x "
                  f"{min(ratios):6.2f}..{max(ratios):.2f}x", flush=True)


if __name__ == "__main__":
    main()

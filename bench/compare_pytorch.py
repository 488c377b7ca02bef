#!/usr/bin/env python3
"""Times one training step (forward, loss, backward, SGD-momentum update) of the same nets in joule and in
PyTorch 1.13 (Debian's python3-torch), same threads and batch, in one run, and prints the ratio.

    /usr/bin/python3 bench/compare_pytorch.py [--threads 2] [--steps 10] [--joule build/joule]

Both sides run warm-up steps first; joule's figure is its measured mean step time (steady clock per node,
`joule train --json` step_seconds), PyTorch's the wall time of the same number of steps."""
import argparse
import json
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pytorch_models import Bert, LeNet5, ResNet18  # noqa: E402

CONFIGS = [
    # name, joule net, batch, image size (0: tokens), PyTorch model factory, input factory
    ("LeNet-5 b64 28x28", "lenet5", 64, 28, lambda: LeNet5(), lambda b: torch.randn(b, 1, 28, 28)),
    ("ResNet-18 b32 32x32", "resnet18", 32, 32, lambda: ResNet18(), lambda b: torch.randn(b, 3, 32, 32)),
    ("ResNet-18 b8 224x224", "resnet18", 8, 224, lambda: ResNet18(), lambda b: torch.randn(b, 3, 224, 224)),
    ("bert-tiny b8 seq128", "bert-tiny", 8, 0, lambda: Bert(), lambda b: torch.randint(0, 30522, (b, 128))),
]


def torch_step_seconds(make_model, make_input, batch, classes, steps, warmup, bf16=False):
    """Mean wall time of an SGD-momentum step; bf16: under CPU autocast (PyTorch's mixed precision)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = make_input(batch), torch.randint(0, classes, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def joule_step_seconds(binary, net, batch, size, threads, steps, warmup):
    cmd = [binary, "train", "--net", net, "--dataset", "synthetic", "--batch", str(batch), "--optimizer", "sgd", "--lr", "0.01",
           "--threads", str(threads), "--steps", str(steps + warmup), "--warmup", str(warmup), "--json", "--quiet"]
    if size:
        cmd += ["--image-size", str(size)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["step_seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--only", default="", help="substring of a config name")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"PyTorch {torch.__version__}, {a.threads} threads, {a.steps} timed steps after {a.warmup} warm-up (measured, wall clock)")
    print(f"{'config':24} {'joule ms':>10} {'PyTorch ms':>11} {'PyTorch/joule':>14}")
    for name, net, batch, size, make_model, make_input in CONFIGS:
        if a.only and a.only not in name:
            continue
        classes = 2 if net.startswith("bert") else (10 if net == "lenet5" else 1000)
        tj = joule_step_seconds(a.joule, net, batch, size, a.threads, a.steps, a.warmup)
        tp = torch_step_seconds(make_model, make_input, batch, classes, a.steps, a.warmup)
        print(f"{name:24} {tj * 1e3:10.2f} {tp * 1e3:11.2f} {tp / tj:13.2f}x", flush=True)


if __name__ == "__main__":
    main()

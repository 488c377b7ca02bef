#!/usr/bin/env python3
"""PyTorch 1.13 reference for joule's convergence test: LeNet-5 (ReLU, max-pool), batch 64, 1 epoch on
Fashion-MNIST with joule's preprocessing ((x/255 - 0.2860) / 0.3530), shuffled, last partial batch dropped.

    /usr/bin/python3 bench/pytorch_lenet_reference.py [--optimizer adam|sgd] [--seed 1]
"""
import argparse
import gzip
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pytorch_models import LeNet5  # noqa: E402

DIR = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(split):
    x = torch.tensor((idx(f"{DIR}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255 - 0.2860) / 0.3530).unsqueeze(1)
    return x, torch.tensor(idx(f"{DIR}/{split}-labels-idx1-ubyte.gz").astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    model = LeNet5()
    opt = torch.optim.Adam(model.parameters(), 2e-3) if a.optimizer == "adam" else torch.optim.SGD(model.parameters(), 0.05, momentum=0.9)
    perm = torch.randperm(len(ytr))
    for b in range(len(ytr) // 64):
        i = perm[b * 64:(b + 1) * 64]
        opt.zero_grad()
        F.cross_entropy(model(xtr[i]), ytr[i]).backward()
        opt.step()
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    print(f"PyTorch {torch.__version__} LeNet-5 {a.optimizer} seed {a.seed}: test accuracy {100 * acc:.2f} %")


if __name__ == "__main__":
    main()

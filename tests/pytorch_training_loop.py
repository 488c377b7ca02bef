"""PyTorch's side of tests/test_training_loop.cpp: LeNet-5 from joule's initial weights, trained on the
given micro-batches with PyTorch's own optimizer, gradient accumulation (loss / k, backward per
micro-batch), clip_grad_norm_ and schedulers (LinearLR warm-up, then CosineAnnealingLR or StepLR, joined
by SequentialLR). Writes each step's learning rate, mean loss and gradient norm, and the final weights.

    /usr/bin/python3 tests/pytorch_training_loop.py in.json out.json
"""
import json
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main():
    warnings.filterwarnings("ignore", category=UserWarning)  # SequentialLR's own step(0) warns in 1.13
    torch.set_num_threads(1)
    c = json.load(open(sys.argv[1]))
    model = LeNet5()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.tensor(c["params"][name], dtype=torch.float32).reshape(p.shape))
    o = c["optimizer"]
    if o["kind"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"], weight_decay=o["weight_decay"])
    elif o["kind"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=o["lr"], weight_decay=o["weight_decay"])
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], weight_decay=o["weight_decay"])
    s, steps, k = c["schedule"], c["steps"], c["accumulate"]
    if s["kind"] == "cosine":
        main_sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps - s["warmup"], eta_min=s["min_lr"])
    elif s["kind"] == "step":
        main_sched = torch.optim.lr_scheduler.StepLR(opt, step_size=s["step_size"], gamma=s["gamma"])
    else:
        main_sched = torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)
    sched = main_sched
    if s["warmup"] > 0:
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=s["warmup_start"], end_factor=1.0, total_iters=s["warmup"])
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, main_sched], milestones=[s["warmup"]])
    batch = c["batch"]
    images = torch.tensor(c["images"], dtype=torch.float32).reshape(steps, k, batch, 1, 28, 28)
    labels = torch.tensor(c["labels"], dtype=torch.int64).reshape(steps, k, batch)
    out = {"lr": [], "loss": [], "grad_norm": []}
    for t in range(steps):
        opt.zero_grad()
        loss_sum = 0.0
        for i in range(k):
            loss = F.cross_entropy(model(images[t, i]), labels[t, i])
            (loss / k).backward()
            loss_sum += loss.item() / k
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip_norm"]) if c["clip_norm"] > 0 else torch.tensor(0.0)
        out["lr"].append(opt.param_groups[0]["lr"])
        out["loss"].append(loss_sum)
        out["grad_norm"].append(float(norm))
        opt.step()
        sched.step()
    out["params"] = {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()

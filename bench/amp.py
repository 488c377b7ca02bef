#!/usr/bin/env python3
"""Mixed-precision policies measured on this CPU: joule's off / greedy (TF-AMP) / autocast / campo / optimal plans
(`joule amp --measure`: each plan trained here, SGD-momentum, the mean step of its node times) beside PyTorch 1.13 f32
and CPU autocast bf16, all in one run, best of --rounds rounds (other tenants only ever slow a run down).

    /usr/bin/python3 bench/amp.py [--threads 2] [--steps 3] [--rounds 2] [--joule build/joule] [--only NAME]

Also printed: campo's and optimal's gain over greedy, optimal against the fastest of off / greedy / autocast, and the
model's error on optimal's step (its prediction is the cost interface with this CPU's fitted curves)."""
import argparse
import json
import subprocess
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from compare_pytorch import torch_step_seconds  # noqa: E402
from precision import CONFIGS  # noqa: E402

POLICIES = ["off", "greedy", "autocast", "campo", "optimal"]


def joule_amp(binary, net, batch, size, threads, steps):
    cmd = [binary, "amp", "--net", net, "--batch", str(batch), "--threads", str(threads), "--measure", str(steps), "--json"]
    if size:
        cmd += ["--image-size", str(size)]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {p["policy"]: (p["measured_seconds"], p["predicted_seconds"], p["casts"]) for p in out["policies"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"PyTorch {torch.__version__}, {a.threads} threads, {a.steps} timed steps after 1 warm-up, best of {a.rounds} rounds (measured, ms/step)\n")
    print("| config | " + " | ".join(POLICIES) + " | PyTorch f32 | PyTorch autocast | campo vs greedy | optimal vs best other | optimal: predicted, error |")
    print("|---" * (len(POLICIES) + 6) + "|")
    for name, net, batch, size, make_model, make_input in CONFIGS:
        if a.only and a.only not in name:
            continue
        classes = 2 if net.startswith("bert") else 1000
        best = {}
        torch_f32, torch_amp = [], []
        for _ in range(a.rounds):
            for p, (m, pred, casts) in joule_amp(a.joule, net, batch, size, a.threads, a.steps).items():
                if p not in best or m < best[p][0]:
                    best[p] = (m, pred, casts)
            torch_f32.append(torch_step_seconds(make_model, make_input, batch, classes, a.steps, 1, False))
            try:
                torch_amp.append(torch_step_seconds(make_model, make_input, batch, classes, a.steps, 1, True))
            except RuntimeError:  # PyTorch 1.13 lacks some bf16 backward kernels on CPU (ReLU6's hardtanh)
                torch_amp.append(float("nan"))
        ms = {p: best[p][0] * 1e3 for p in POLICIES}
        others = min(ms["off"], ms["greedy"], ms["autocast"])
        amp = min(torch_amp) * 1e3 if all(x == x for x in torch_amp) else float("nan")
        pred = best["optimal"][1] * 1e3
        print(f"| {name} | " + " | ".join(f"{ms[p]:.1f}" for p in POLICIES) +
              f" | {min(torch_f32) * 1e3:.1f} | {'fails' if amp != amp else f'{amp:.1f}'} | {ms['greedy'] / ms['campo']:.2f}x | "
              f"{others / ms['optimal']:.2f}x | {pred:.1f} ({100 * (pred - ms['optimal']) / ms['optimal']:+.0f} %) |", flush=True)


if __name__ == "__main__":
    main()

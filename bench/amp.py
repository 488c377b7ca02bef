#!/usr/bin/env python3
"""Mixed-precision policies measured on this CPU: joule's off / greedy (TF-AMP) / autocast / campo / optimal plans
(`joule amp --measure`: each plan trained here, SGD-momentum, the mean step of its node times) beside PyTorch 1.13 f32
and CPU autocast bf16, all in one run, best of --rounds rounds (other tenants only ever slow a run down).

    /usr/bin/python3 bench/amp.py [--threads 2] [--steps 3] [--rounds 2] [--joule build/joule] [--only NAME]
    /usr/bin/python3 bench/amp.py --modelled        # predicted tables for the modelled f16 GPUs (V100, RTX 2080 Ti)

Also printed per configuration: campo's and optimal's gain over greedy, optimal against the fastest of off / greedy /
autocast, the casts greedy pays (predicted and measured share of its step), and the model's error on optimal's step
(its prediction is the cost interface with this CPU's fitted curves). A configuration is "fit" when the curves were
fitted from its net (bench/fit_cpu_curves.sh: ResNet-18, MobileNetV2, bert-tiny) and "held out" otherwise."""
import argparse
import json
import math
import subprocess
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from compare_pytorch import torch_step_seconds  # noqa: E402
from pytorch_models import Bert, BertBase, MobileNetV2, ResNet18, ResNet50, VGG16  # noqa: E402

POLICIES = ["off", "greedy", "autocast", "campo", "optimal"]
FITTED = {"resnet18", "mobilenet_v2", "bert-tiny"}


def image(size):
    return lambda b: torch.randn(b, 3, size, size)


def tokens(b):
    return torch.randint(0, 30522, (b, 128))


CONFIGS = [
    # name, joule net, batch, image size (0: tokens, seq 128), PyTorch model
    ("ResNet-18 b32 32x32", "resnet18", 32, 32, ResNet18, image(32)),
    ("ResNet-18 b8 224x224", "resnet18", 8, 224, ResNet18, image(224)),
    ("ResNet-50 b4 224x224", "resnet50", 4, 224, ResNet50, image(224)),
    ("ResNet-50 b8 224x224", "resnet50", 8, 224, ResNet50, image(224)),
    ("VGG-16 b2 224x224", "vgg16", 2, 224, VGG16, image(224)),
    ("VGG-16 b4 224x224", "vgg16", 4, 224, VGG16, image(224)),
    ("MobileNetV2 b8 224x224", "mobilenet_v2", 8, 224, MobileNetV2, image(224)),
    ("MobileNetV2 b16 224x224", "mobilenet_v2", 16, 224, MobileNetV2, image(224)),
    ("bert-tiny b8 seq128", "bert-tiny", 8, 0, Bert, tokens),
    ("bert-tiny b32 seq128", "bert-tiny", 32, 0, Bert, tokens),
    ("bert-base b2 seq128", "bert-base", 2, 0, BertBase, tokens),
    ("bert-base b4 seq128", "bert-base", 4, 0, BertBase, tokens),
]

# Modelled: the nets at a training batch on the f16 GPUs Campo measured on (predicted only).
MODELLED = [("resnet50", 64, 224), ("resnet18", 128, 32), ("vgg16", 32, 224), ("mobilenet_v2", 64, 224), ("bert-base", 16, 0)]


def joule_amp(binary, net, batch, size, extra):
    cmd = [binary, "amp", "--net", net, "--batch", str(batch), "--json"] + extra
    if size:
        cmd += ["--image-size", str(size)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def modelled(binary):
    print("Predicted (MODELLED: joule's device models, f16 with dynamic loss scaling), ms per step; Campo's published average over TF-AMP:"
          " +20.9 % on V100, +20.8 % on RTX 2080 Ti (USENIX ATC'22 abstract)\n")
    print("| device | net | batch | off | greedy | campo | optimal | greedy's casts (ms, share) | campo vs greedy | optimal vs greedy |")
    print("|---" * 10 + "|")
    for device in ["v100", "2080ti"]:
        for net, batch, size in MODELLED:
            out = joule_amp(binary, net, batch, size, ["--device", device])
            p = {r["policy"]: r for r in out["policies"]}
            ms = {k: p[k]["predicted_seconds"] * 1e3 for k in POLICIES}
            cast = p["greedy"]["predicted_cast_seconds"] * 1e3
            print(f"| {device} | {net}{f' {size}x{size}' if size else ''} | {batch} | " + " | ".join(f"{ms[k]:.1f}" for k in ["off", "greedy", "campo", "optimal"]) +
                  f" | {cast:.2f} ({100 * cast / ms['greedy']:.1f} %) | {ms['greedy'] / ms['campo']:.3f}x | {ms['greedy'] / ms['optimal']:.3f}x |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--only", default="")
    ap.add_argument("--modelled", action="store_true")
    a = ap.parse_args()
    if a.modelled:
        return modelled(a.joule)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"PyTorch {torch.__version__}, {a.threads} threads, {a.steps} timed steps after 1 warm-up, best of {a.rounds} rounds (measured, ms/step)\n")
    print("| config | " + " | ".join(POLICIES) + " | PyTorch f32 | PyTorch autocast | campo vs greedy | optimal vs greedy | optimal vs best other"
          " | greedy's casts: predicted, measured | optimal: predicted, error |")
    print("|---" * (len(POLICIES) + 8) + "|")
    gains, errors = [], {"fit": [], "held out": []}
    for name, net, batch, size, make_model, make_input in CONFIGS:
        if a.only and a.only not in name:
            continue
        classes = 2 if net.startswith("bert") else 1000
        best = {}
        torch_f32, torch_amp = [], []
        for _ in range(a.rounds):
            out = joule_amp(a.joule, net, batch, size, ["--threads", str(a.threads), "--measure", str(a.steps)])
            for p in out["policies"]:
                if p["policy"] not in best or p["measured_seconds"] < best[p["policy"]]["measured_seconds"]:
                    best[p["policy"]] = p
            torch_f32.append(torch_step_seconds(lambda: make_model(), make_input, batch, classes, a.steps, 1, False))
            try:
                torch_amp.append(torch_step_seconds(lambda: make_model(), make_input, batch, classes, a.steps, 1, True))
            except RuntimeError:  # PyTorch 1.13 lacks some bf16 backward kernels on CPU (ReLU6's hardtanh)
                torch_amp.append(float("nan"))
        ms = {p: best[p]["measured_seconds"] * 1e3 for p in POLICIES}
        others = min(ms["off"], ms["greedy"], ms["autocast"])
        amp = min(torch_amp) * 1e3 if all(x == x for x in torch_amp) else float("nan")
        pred = best["optimal"]["predicted_seconds"] * 1e3
        err = 100 * (pred - ms["optimal"]) / ms["optimal"]
        errors["fit" if net in FITTED else "held out"].append(abs(err))
        g = best["greedy"]
        gcast_p, gcast_m = g["predicted_cast_seconds"] * 1e3, g["measured_cast_seconds"] * 1e3
        gains.append(ms["greedy"] / ms["optimal"])
        print(f"| {name} | " + " | ".join(f"{ms[p]:.1f}" for p in POLICIES) +
              f" | {min(torch_f32) * 1e3:.1f} | {'fails' if amp != amp else f'{amp:.1f}'} | {ms['greedy'] / ms['campo']:.2f}x | "
              f"{ms['greedy'] / ms['optimal']:.2f}x | {others / ms['optimal']:.2f}x | {g['casts']}: {gcast_p:.1f} ({100 * gcast_p / g['predicted_seconds'] / 1e3:.0f} %), "
              f"{gcast_m:.1f} ({100 * gcast_m / ms['greedy']:.0f} %) | {pred:.1f} ({err:+.0f} %, {'fit' if net in FITTED else 'held out'}) |", flush=True)
    if gains:
        print(f"\noptimal vs greedy, geometric mean over {len(gains)} configurations: {math.prod(gains) ** (1 / len(gains)):.3f}x")
        for k, v in errors.items():
            if v:
                print(f"model error on optimal's step, {k}: mean |error| {sum(v) / len(v):.0f} % over {len(v)} configurations")


if __name__ == "__main__":
    main()

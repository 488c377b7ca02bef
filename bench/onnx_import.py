#!/usr/bin/env python3
"""Users' models through ONNX against joule's own: torchvision's ResNet-18 and ResNet-50 exported by
PyTorch 1.13 (training mode, as a user would), imported by joule -- the import's time (bench_import, best
of 5), the parameter count beside the zoo net's, and the training step of the imported model against the
zoo net's at the same batch and size (synthetic data; the two alternate --repeats times in one run, this
machine being shared and noisy; medians).

    /usr/bin/python3 bench/onnx_import.py [--build build] [--batch 8] [--size 224] [--repeats 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

import torch
import torchvision


def last_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    joule = os.path.join(a.build, "joule")
    tmp = tempfile.mkdtemp(prefix="joule-onnx-bench-")
    print(f"{'model':10} | {'file MB':>7} | {'import ms':>9} | {'params (onnx)':>13} | {'params (zoo)':>12} | "
          f"{'step ms onnx':>12} | {'step ms zoo':>11} | onnx / zoo")
    for net in ("resnet18", "resnet50"):
        torch.manual_seed(0)
        model = getattr(torchvision.models, net)().train()
        path = os.path.join(tmp, net + ".onnx")
        torch.onnx.export(model, (torch.randn(a.batch, 3, a.size, a.size),), path, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=13, input_names=["x"], output_names=["logits"])
        imp = last_json([os.path.join(a.build, "bench_import"), path, "5"])
        zoo_params = last_json([joule, "nets", "--json"])
        zoo_params = next(n["parameters"] for n in zoo_params["nets"] if n["name"] == net)
        common = ["--dataset", "synthetic", "--batch", str(a.batch), "--steps", str(a.steps), "--warmup", "1", "--quiet", "--json",
                  "--optimizer", "sgd"]
        onnx_ms, zoo_ms = [], []
        for _ in range(a.repeats):
            onnx_ms.append(last_json([joule, "train", "--model", path] + common)["step_wall_seconds"] * 1e3)
            zoo_ms.append(last_json([joule, "train", "--net", net, "--image-size", str(a.size)] + common)["step_wall_seconds"] * 1e3)
        o, z = statistics.median(onnx_ms), statistics.median(zoo_ms)
        print(f"{net:10} | {os.path.getsize(path) / 1e6:7.1f} | {imp['best_ms']:9.1f} | {imp['parameters']:13,} | {zoo_params:12,} | "
              f"{o:12.1f} | {z:11.1f} | {o / z:.3f}")


if __name__ == "__main__":
    main()

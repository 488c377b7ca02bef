#!/usr/bin/env python3
"""The seed thesis's observations from joule's memory model: for each zoo net, off-chip traffic of one
training iteration against on-chip capacity, the knee of that curve, and which layer types carry the
traffic when the capacity is small. All figures modelled (joule analyze).

    /usr/bin/python3 bench/analyze_observations.py [--joule build/joule] [--bandwidth 900GB/s] [--peak 15.7TFLOPS]
"""
import argparse
import json
import subprocess

NETS = [("lenet5", 64, 28), ("alexnet", 32, 224), ("vgg11", 32, 224), ("vgg16", 32, 224), ("resnet18", 32, 224),
        ("resnet50", 32, 224), ("mobilenet_v2", 32, 224), ("bert-tiny", 32, 0), ("bert-base", 8, 0)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--bandwidth", default="900GB/s")
    ap.add_argument("--peak", default="15.7TFLOPS")
    ap.add_argument("--sweep", default="256KiB..1GiB")
    a = ap.parse_args()
    print(f"modelled; capacity sweep {a.sweep}, bandwidth {a.bandwidth}, peak {a.peak}; traffic in GiB per iteration")
    print(f"{'net':13} {'batch':>5} {'smallest':>9} {'largest':>9} {'knee':>10}  {'top layer types at the smallest capacity'}")
    for net, batch, size in NETS:
        shape = ["--image-size", str(size)] if size else ["--seq-len", "128"]
        out = json.loads(subprocess.run([a.joule, "analyze", "--net", net, "--batch", str(batch), "--bandwidth", a.bandwidth, "--peak", a.peak,
                                         "--capacity", "1MiB", "--sweep", f"capacity={a.sweep}", "--json"] + shape,
                                        check=True, capture_output=True, text=True).stdout)["results"]
        traffic = [(r["capacity_bytes"], r["read_bytes"] + r["write_bytes"]) for r in out]
        lo, hi = traffic[0][1], traffic[-1][1]
        # knee: the smallest capacity that removes 90 % of the traffic that capacity can remove at all
        knee = next(c for c, t in traffic if t - hi <= 0.1 * (lo - hi)) if lo > hi else traffic[0][0]
        types = out[0]["by_layer_type"]
        total = sum(v["read_bytes"] + v["write_bytes"] for v in types.values())
        top = sorted(((v["read_bytes"] + v["write_bytes"]) / total, k) for k, v in types.items())[::-1][:3]
        print(f"{net:13} {batch:5d} {lo / 2**30:9.2f} {hi / 2**30:9.2f} {knee / 2**20:8.1f}MiB  " + ", ".join(f"{k} {100 * s:.0f}%" for s, k in top))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""joule predict --nodes against published single- and multi-node data-parallel scaling (data/validation/data_parallel.yaml,
sources in data/validation/data-parallel-sources.md): per row the predicted one-GPU throughput, the predicted
N-GPU throughput and scaling (N x efficiency) beside the published ones; then where the model's scaling
efficiency breaks down as nodes are added. Everything predicted is modelled; nothing is fitted to these rows.

    python3 bench/validate_data_parallel.py [--joule build/joule]
"""
import argparse
import json
import subprocess

import yaml


def predict(joule, args):
    return json.loads(subprocess.run([joule, "predict", "--json"] + args, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--rows", default="data/validation/data_parallel.yaml")
    a = ap.parse_args()
    rows = yaml.safe_load(open(a.rows))["rows"]
    print(f"{'row':4} {'net':10} {'device':5} {'dtype':5} {'batch':>5} {'GPUs':>4} | {'1 GPU pub':>9} {'pred':>8} {'err':>7} | "
          f"{'N GPUs pub':>10} {'pred':>8} {'err':>7} | {'scaling pub':>11} {'pred':>5} {'err':>7}")
    errs = {"one": [], "many": [], "scaling": []}
    multi = {"one": [], "many": [], "scaling": []}
    for r in rows:
        nodes = r.get("nodes", 1)
        args = ["--device", r["device"], "--net", r["net"], "--batch", str(r["batch"]), "--dtype", r["dtype"], "--dtype-scope", r["scope"],
                "--optimizer", "sgd", "--nodes", str(nodes), "--per-node", str(r["gpus"] // nodes), "--intra-link", r["link"]]
        if nodes > 1:
            args += ["--inter-link", r["inter"], "--nics", str(r["nics"])]
        if r["seq_len"]:
            args += ["--seq-len", str(r["seq_len"])]
        p = predict(a.joule, args)
        one = p["iteration"]["samples_per_second"]
        dp = p["data_parallel"]["rows"][0]
        many, scaling = dp["samples_per_second"], dp["efficiency"] * r["gpus"]
        pub_scaling = r["many"] / r["one"]
        e = {"one": one / r["one"] - 1, "many": many / r["many"] - 1, "scaling": scaling / pub_scaling - 1}
        for k, v in e.items():
            errs[k].append(v)
            if nodes > 1:
                multi[k].append(v)
        print(f"{r['id']:4} {r['net']:10} {r['device']:5} {r['dtype']:5} {r['batch']:5} {r['gpus']:4} | {r['one']:9.1f} {one:8.1f} {100 * e['one']:+6.1f}% | "
              f"{r['many']:10.1f} {many:8.1f} {100 * e['many']:+6.1f}% | {pub_scaling:11.2f} {scaling:5.2f} {100 * e['scaling']:+6.1f}%")
    for label, group in (("", errs), (" (multi-node rows)", multi)):
        for k, v in group.items():
            if v:
                print(f"mean |error| {k}{label}: {100 * sum(abs(x) for x in v) / len(v):.1f} % over {len(v)} rows")
    # where scaling breaks down: weak scaling of ResNet-50 (AMP, batch 64 per GPU) on 8-GPU V100 nodes
    print("\nResNet-50, f16 (all ops), batch 64 per V100, 8 per node on NVLink 2; efficiency by nodes and network (modelled):")
    nodes = "1,4,16,64,256,1024"
    print(f"{'network':22} " + " ".join(f"{n:>7}" for n in nodes.split(",")))
    for label, extra in [("4 x InfiniBand HDR", ["--inter-link", "ib-hdr", "--nics", "4"]), ("1 x InfiniBand HDR", ["--inter-link", "ib-hdr"]),
                         ("1 x 100G Ethernet", ["--inter-link", "eth-100g"])]:
        p = predict(a.joule, ["--device", "v100", "--net", "resnet50", "--batch", "64", "--dtype", "f16", "--dtype-scope", "all", "--optimizer", "sgd",
                              "--nodes", nodes, "--per-node", "8", "--intra-link", "nvlink2"] + extra)
        print(f"{label:22} " + " ".join(f"{100 * r['efficiency']:6.1f}%" for r in p["data_parallel"]["rows"]))


if __name__ == "__main__":
    main()

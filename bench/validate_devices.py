#!/usr/bin/env python3
"""The device models against published figures (data/validation/published.md; sources per row): training throughput
of ResNet-50 and BERT on V100 and A100, time and power of training under V100 power limits (Zeus, NSDI'23), the DVFS
energy savings of Tang et al. (e-Energy'19), GEMM efficiency curves, and how fast the cost interface answers.

    python3 bench/validate_devices.py [--joule build/joule] [--bench build/bench_cost] [--markdown]

No model parameter was tuned to any row here: the efficiency curves come from GEMM and copy rates
(bench/gpu_efficiency.py, which prints its own fit and held-out error), the power model from the specs. Every row is
therefore held out. Mixed-precision ("AMP") rows are modelled twice, with joule's two built-in f16 plans: `gemm`
(conv / linear / matmul in f16, casts around them) and `all` (every op in f16 but the loss, the updates and embeddings).
Real AMP sits between: TF-AMP and autocast keep some ops (softmax, layer norm, losses) in fp32 behind casts; cuDNN's
batch norm takes fp16 activations. A policy faithful to them is the mixed-precision issue's. "fp32" rows are IEEE
fp32; A100 TF32 rows are not compared (TF32 is not a joule dtype)."""
import argparse
import json
import subprocess
import sys

# (label, device, net, batch, seq_len, dtype, scope, published, unit, source)
THROUGHPUT = [
    ("ResNet-50 V100 fp32 bs112", "v100", "resnet50", 112, 0, "f32", "gemm", 367, "img/s", "DLE PyTorch 21.03, V100 16GB (published.md 1a)"),
    ("ResNet-50 V100 fp32 bs128", "v100", "resnet50", 128, 0, "f32", "gemm", 412, "img/s", "DLE TF1 20.06 + XLA, V100 16GB (1b)"),
    ("ResNet-50 V100 AMP bs256", "v100", "resnet50", 256, 0, "f16", "all", 1200, "img/s", "DLE PyTorch 21.03 AMP, V100 16GB (1a)"),
    ("ResNet-50 V100 AMP bs256 (TF)", "v100", "resnet50", 256, 0, "f16", "all", 1270, "img/s", "DLE TF1 20.06 AMP + XLA (1b)"),
    ("ResNet-50 A100 AMP bs256", "a100", "resnet50", 256, 0, "f16", "all", 2375, "img/s", "DLE TF1 20.06 AMP + XLA, A100 40GB (1b)"),
    ("BERT-large seq128 V100 fp32 bs32", "v100", "bert-large", 32, 128, "f32", "gemm", 46.78, "seq/s", "DLE TF1 20.06, V100 32GB (2d)"),
    ("BERT-large seq128 V100 AMP bs64", "v100", "bert-large", 64, 128, "f16", "all", 168.63, "seq/s", "DLE TF1 20.06, V100 32GB (2d)"),
    ("BERT-large seq512 V100 fp32 bs8", "v100", "bert-large", 8, 512, "f32", "gemm", 10.67, "seq/s", "DLE TF1 20.06, V100 32GB (2d)"),
    ("BERT-large seq512 V100 AMP bs8", "v100", "bert-large", 8, 512, "f16", "all", 31.23, "seq/s", "DLE TF1 20.06, V100 32GB (2d)"),
    ("BERT-large SQuAD384 V100 fp32 bs10", "v100", "bert-large", 10, 384, "f32", "gemm", 10.42, "seq/s", "DLE TF1 20.06, V100 32GB (2d)"),
    ("BERT-large SQuAD384 V100 AMP bs24", "v100", "bert-large", 24, 384, "f16", "all", 51.02, "seq/s", "DLE TF1 20.06, V100 32GB (2d)"),
    ("BERT-large seq128 A100 AMP bs64", "a100", "bert-large", 64, 128, "f16", "all", 356.85, "seq/s", "DLE TF1 20.06, A100 40GB (2d)"),
    ("BERT-large seq512 A100 AMP bs16", "a100", "bert-large", 16, 512, "f16", "all", 70.86, "seq/s", "DLE TF1 20.06, A100 40GB (2d)"),
    ("BERT-large SQuAD384 A100 AMP bs32", "a100", "bert-large", 32, 384, "f16", "all", 102.26, "seq/s", "DLE TF1 20.06, A100 40GB (2d)"),
    ("BERT-base SQuAD384 V100 fp32 bs24", "v100", "bert-base", 24, 384, "f32", "gemm", 42, "seq/s", "Lambda, V100 16GB; seq 384 assumed (2e)"),
    ("BERT-base SQuAD384 V100 AMP bs48", "v100", "bert-base", 48, 384, "f16", "all", 189, "seq/s", "Lambda, V100 16GB; seq 384 assumed (2e)"),
]

# Zeus (NSDI'23) V100 trace (published.md 4a): 250 W range => the PCIe board; fp32 assumed. limit -> (time/epoch s, avg W)
ZEUS = {
    ("ResNet-50 bs256", "resnet50", 256, 0): {100: (6781.2, 98.4), 125: (5065.0, 122.0), 150: (4148.7, 144.6), 175: (3852.2, 166.4),
                                              200: (3701.0, 184.9), 225: (3584.3, 205.4), 250: (3515.0, 220.3)},
    ("BERT-base SQuAD bs32", "bert-base", 32, 384): {100: (3583.4, 99.5), 125: (2734.5, 121.8), 150: (2221.1, 146.4), 175: (1939.2, 170.6),
                                                      200: (1843.1, 191.2), 225: (1776.2, 212.6), 250: (1733.3, 228.2)},
}

# Tang et al. e-Energy'19: 8.7-23.1 % training energy saved at the best core clock vs the default, three GPUs (the
# co-author's harness has V100, P100 and 2080 Ti configs; joule has no P100 spec), PyTorch ResNet-50 b64 among the cases.
TANG_RANGE = (8.7, 23.1)
DVFS = [("v100", [607, 810, 1012, 1200, 1327, 1432, 1530]), ("2080ti", list(range(300, 1951, 75)))]


def predict(joule, device, net, batch, seq, dtype="f32", scope="gemm", extra=()):
    args = [joule, "predict", "--device", device, "--net", net, "--batch", str(batch), "--dtype", dtype, "--dtype-scope", scope, "--json"]
    args += ["--optimizer", "adam" if net.startswith("bert") else "sgd"]
    if seq:
        args += ["--seq-len", str(seq)]
    r = subprocess.run(args + list(extra), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {r.stdout}{r.stderr}")
    return json.loads(r.stdout)


def err(model, published):
    return 100.0 * (model - published) / published


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--bench", default="build/bench_cost")
    a = ap.parse_args()

    print("## Training throughput (model: joule predict; every row held out)\n")
    print("| configuration | published | model (f16 plan: gemm / all) | error (gemm / all) | source |\n|---|---|---|---|---|")
    errors, inside = [], 0
    for label, dev, net, batch, seq, dtype, scope, pub, unit, src in THROUGHPUT:
        scopes = ["gemm", "all"] if dtype != "f32" else ["gemm"]
        models = [predict(a.joule, dev, net, batch, seq, dtype, sc)["iteration"]["samples_per_second"] for sc in scopes]
        if len(models) == 1:
            errors.append(abs(err(models[0], pub)))
        else:
            inside += min(models) <= pub <= max(models)
        print(f"| {label} | {pub:g} {unit} | {' / '.join(f'{m:.1f}' for m in models)} | {' / '.join(f'{err(m, pub):+.0f} %' for m in models)} | {src} |")
    amp = sum(1 for r in THROUGHPUT if r[5] != "f32")
    print(f"\nfp32 rows: mean |error| {sum(errors) / len(errors):.0f} % over {len(errors)} rows; mixed-precision rows: published within "
          f"[gemm, all] in {inside} of {amp}\n")

    print("## Training under power limits: V100 PCIe, Zeus trace (fp32 assumed); time relative to 250 W, average board power\n")
    print("| workload | limit W | published time | model time | error | published W | model W | error |\n|---|---|---|---|---|---|---|---|")
    terr, perr = [], []
    for (label, net, batch, seq), rows in ZEUS.items():
        base = predict(a.joule, "v100-pcie", net, batch, seq)["iteration"]["seconds"]
        t250 = rows[250][0]
        for limit, (t, w) in sorted(rows.items()):
            it = predict(a.joule, "v100-pcie", net, batch, seq, extra=("--power-limit", str(limit)))["iteration"]
            rel_model, rel_pub = it["seconds"] / base, t / t250
            terr.append(abs(err(rel_model, rel_pub)))
            perr.append(abs(err(it["average_watts"], w)))
            print(f"| {label} | {limit} | {rel_pub:.3f} | {rel_model:.3f} | {err(rel_model, rel_pub):+.0f} % | {w:.1f} | {it['average_watts']:.1f} | "
                  f"{err(it['average_watts'], w):+.0f} % |")
    print(f"\nmean |error|: relative time {sum(terr) / len(terr):.0f} %, average power {sum(perr) / len(perr):.0f} % over {len(terr)} rows\n")

    print(f"## DVFS: training energy saved at the best core clock vs the default (Tang et al.: {TANG_RANGE[0]}-{TANG_RANGE[1]} % on three GPUs)\n")
    print("| device | default clock | best clock | energy saved | time cost | within the published range |\n|---|---|---|---|---|---|")
    for dev, clocks in DVFS:
        base = predict(a.joule, dev, "resnet50", 64, 0)
        e0, t0 = base["iteration"]["joules"], base["iteration"]["seconds"]
        best = min(((predict(a.joule, dev, "resnet50", 64, 0, extra=("--clock", str(c)))["iteration"]["joules"], c) for c in clocks))
        it = predict(a.joule, dev, "resnet50", 64, 0, extra=("--clock", str(best[1])))["iteration"]
        saved = 100 * (1 - best[0] / e0)
        inside = TANG_RANGE[0] <= saved <= TANG_RANGE[1]
        print(f"| {dev} ResNet-50 b64 fp32 | {base['clock_mhz']:.0f} MHz | {best[1]} MHz | {saved:.1f} % | {100 * (it['seconds'] / t0 - 1):+.1f} % | "
              f"{'yes' if inside else 'no'} |")

    print("\n## Cost interface speed\n")
    r = subprocess.run([a.bench], capture_output=True, text=True)
    print(r.stdout.strip() or r.stderr.strip())


if __name__ == "__main__":
    sys.exit(main())

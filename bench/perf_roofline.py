#!/usr/bin/env python3
"""How close joule's training step comes to its own roofline bound, and how it compares with PyTorch 1.13, for
every zoo net at the two batch sizes of bench/validate_analyze.py's NETS, in f32 and bf16, in one run.

Per (net, batch, dtype) row:
1. measured: `joule train --dataset synthetic --optimizer sgd --json` step_seconds (the sum of the step's
   steady-clock node times), bf16 with `--dtype bf16` (joule's built-in bf16 plan: conv/linear/matmul in bf16,
   autocast's list); --repeats separate runs, reported as median [min..max];
2. roofline: `joule analyze` on `joule probe`'s figures (triad bandwidth, GEMM f32/bf16 peaks, per-op overhead
   and, where the probe has it, a small op's on one thread as `--overhead-small`; probed at the start,
   --probe-repeats times, each figure's best kept) with a 2 MiB on-chip capacity, as validate_analyze.py's
   predict() (bf16 rows with `--dtype bf16`; validate_analyze charges every node the one overhead that
   `joule calibrate` keeps): a lower bound. share of bound = roofline /
   measured (median run; the JSON also has the shares of the slowest and the fastest run);
3. PyTorch: the same step (SGD momentum 0.9, lr 0.01, cross-entropy, same threads and batch) in f32 and under
   CPU autocast bf16, warm-up then timed steps, wall clock, --repeats rounds each; its best mode is the faster
   median of the two (where bf16 autocast raises, as it does in MobileNetV2's backward on 1.13, f32 is used and
   the row says so). PyTorch/joule > 1: joule is ahead.
Goals: share of bound >= 70 % for the GEMM-heavy nets, >= 50 % for lenet5 and mobilenet_v2; and ahead of PyTorch.
joule and PyTorch runs alternate within each configuration (joule f32, PyTorch f32, joule bf16, PyTorch bf16,
once per repeat) so that the shared machine's drift hits both alike. The PyTorch models (bench/pytorch_models.py,
torchvision for alexnet and vgg11) are checked against `joule inspect`'s parameter count first.

    /usr/bin/python3 bench/perf_roofline.py [--joule build/joule] [--threads 2] [--steps 3] [--warmup 1] [--repeats 3]
        [--probe-repeats 3] [--probe FILE] [--only lenet5,bert-tiny] [--dtypes f32,bf16] [--json FILE] [--params-only]

(needs /usr/bin/python3, which has torch 1.13 and torchvision 0.14; started with another python it re-runs itself
under /usr/bin/python3). The full sweep takes long on a 2-core machine; --only and --repeats 1 --steps 1 for a check.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_models import Bert, BertBase, LeNet5, MobileNetV2, ResNet18, ResNet50, VGG16  # noqa: E402
from validate_analyze import NETS  # noqa: E402

GOAL_SHARE = {"lenet5": 0.50, "mobilenet_v2": 0.50}  # the others (GEMM-heavy): 0.70
GOAL_SHARE_GEMM = 0.70
SEQ_LEN = 128


def torchvision_model(name):
    import torchvision
    return getattr(torchvision.models, name)(weights=None, num_classes=1000)


MODELS = {  # joule net -> (PyTorch model factory, classes)
    "lenet5": (lambda: LeNet5(10), 10),
    "alexnet": (lambda: torchvision_model("alexnet"), 1000),
    "vgg11": (lambda: torchvision_model("vgg11"), 1000),
    "vgg16": (lambda: VGG16(1000), 1000),
    "resnet18": (lambda: ResNet18(1000), 1000),
    "resnet50": (lambda: ResNet50(1000), 1000),
    "mobilenet_v2": (lambda: MobileNetV2(1000), 1000),
    "bert-tiny": (lambda: Bert(), 2),
    "bert-base": (lambda: BertBase(), 2),
}


def make_input(net, size, batch):
    if not size:
        return torch.randint(0, 30522, (batch, SEQ_LEN))
    return torch.randn(batch, 1 if net == "lenet5" else 3, size, size)


def shape_flags(size):
    return ["--image-size", str(size)] if size else ["--seq-len", str(SEQ_LEN)]


def wait_for(binary, seconds=600):
    """build/joule may be briefly missing while it is being rebuilt: wait for it rather than fail."""
    t0 = time.time()
    while not os.access(binary, os.X_OK):
        if time.time() - t0 > seconds:
            raise SystemExit(f"{binary}: not found (waited {seconds} s)")
        time.sleep(5)


def run_json(binary, args):
    wait_for(binary)
    return json.loads(subprocess.run([binary] + args, check=True, capture_output=True, text=True).stdout)


def joule_step_seconds(binary, net, batch, size, dtype, threads, steps, warmup):
    d = run_json(binary, ["train", "--net", net, "--dataset", "synthetic", "--batch", str(batch), "--optimizer", "sgd", "--lr", "0.01",
                          "--threads", str(threads), "--steps", str(steps + warmup), "--warmup", str(warmup), "--json", "--quiet",
                          "--dtype", dtype] + shape_flags(size))
    if d.get("dtype", dtype) != dtype:
        raise RuntimeError(f"joule train ran {d.get('dtype')} instead of {dtype}")
    return d["step_seconds"]


def joule_roofline_seconds(binary, net, batch, size, dtype, hw):
    d = run_json(binary, ["analyze", "--net", net, "--batch", str(batch), "--optimizer", "sgd", "--json"] + hw + shape_flags(size)
                 + ["--dtype", dtype])
    if d.get("dtype", dtype) != dtype:
        raise RuntimeError(f"joule analyze modelled {d.get('dtype')} instead of {dtype}")
    return d["results"][0]["seconds"]


def joule_parameters(binary, net, size):
    return run_json(binary, ["inspect", net, "--json", "--optimizer", "sgd"] + shape_flags(size))["parameters"]


class TorchStep:
    """One model and SGD-momentum optimizer, timed in f32 or under CPU autocast bf16 (as compare_pytorch.py's
    torch_step_seconds, but built once per configuration and reused by every repeat and both modes)."""

    def __init__(self, net, size, batch):
        make_model, classes = MODELS[net]
        self.model = make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.x, self.y = make_input(net, size, batch), torch.randint(0, classes, (batch,))

    def step(self, bf16):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()

    def seconds(self, bf16, steps, warmup):
        for _ in range(warmup):
            self.step(bf16)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step(bf16)
        return (time.perf_counter() - t0) / steps


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs} if xs else None


def ms_spread(s):
    return f"{s['median'] * 1e3:.2f} [{s['min'] * 1e3:.2f}..{s['max'] * 1e3:.2f}]" if s else "failed"


def check_parameters(a, configs):
    """joule inspect's parameter count against the PyTorch model's; returns {net: (joule, torch)}."""
    counts = {}
    for net, size, _ in configs:
        pj = joule_parameters(a.joule, net, size)
        model = MODELS[net][0]()
        pt = sum(p.numel() for p in model.parameters())
        del model
        gc.collect()
        counts[net] = (pj, pt)
        rel = abs(pt - pj) / pj
        if rel > 0.01:
            print(f"WARNING: {net}: PyTorch model has {pt} parameters, joule {pj} ({100 * rel:+.1f} %): the comparison is not like for like")
        else:
            print(f"parameters {net:13} joule {pj:>10}  PyTorch {pt:>10}" + ("  (same)" if pt == pj else f"  ({100 * (pt - pj) / pj:+.2f} %)"))
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up steps per run (left out of the time)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per configuration; median and min..max are reported")
    ap.add_argument("--only", default="", help="comma-separated net names (default: all of validate_analyze.py's NETS)")
    ap.add_argument("--dtypes", default="f32,bf16", help="joule dtypes, comma-separated (f32, bf16)")
    ap.add_argument("--capacity", default="2MiB", help="on-chip capacity given to the roofline model (as validate_analyze.py)")
    ap.add_argument("--probe", default="", help="joule probe --json output to reuse instead of probing now")
    ap.add_argument("--probe-repeats", type=int, default=3, help="joule probe runs; each figure's best is used")
    ap.add_argument("--json", default="", help="write every row (and the probe, settings) to this file")
    ap.add_argument("--params-only", action="store_true", help="only check the PyTorch models' parameter counts against joule's")
    a = ap.parse_args()

    only = [n for n in a.only.split(",") if n]
    unknown = [n for n in only if n not in {net for net, _, _ in NETS}]
    if unknown:
        ap.error(f"unknown net(s) {', '.join(unknown)}; choose from {', '.join(net for net, _, _ in NETS)}")
    configs = [c for c in NETS if not only or c[0] in only]
    dtypes = [d for d in a.dtypes.split(",") if d]
    if not dtypes or any(d not in ("f32", "bf16") for d in dtypes):
        ap.error("--dtypes: f32 and/or bf16")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    counts = check_parameters(a, configs)
    if a.params_only:
        return

    if a.probe:
        p = json.load(open(a.probe))
    else:  # other tenants only ever slow a probe down: keep each figure's best over --probe-repeats probes
        probes = [run_json(a.joule, ["probe", "--json", "--threads", str(a.threads)]) for _ in range(a.probe_repeats)]
        p = dict(probes[0])
        for k in ("triad_gbps", "copy_gbps", "gemm_gflops_f32", "gemm_gflops_bf16"):
            if k in p:
                p[k] = max(q[k] for q in probes)
        for k in ("op_overhead_seconds", "small_op_overhead_seconds", "core_round_trip_seconds"):
            if k in p:
                p[k] = min(q[k] for q in probes)
        p["probes"] = probes
    bw, peak, peak16, ovh = p["triad_gbps"], p["gemm_gflops_f32"], p["gemm_gflops_bf16"], p["op_overhead_seconds"]
    hw = ["--capacity", a.capacity, "--bandwidth", f"{bw}GB/s", "--peak", f"{peak}GFLOPS", "--peak-bf16", f"{peak16}GFLOPS",
          "--overhead", f"{ovh * 1e6}us"]
    small = p.get("small_op_overhead_seconds")  # a small node's, on one thread (probes of joule before it lack it)
    if small is not None:
        hw += ["--overhead-small", f"{small * 1e6}us"]
    print(f"probe (measured): triad {bw:.1f} GB/s, GEMM f32 {peak:.1f} / bf16 {peak16:.1f} GFLOP/s, per-op overhead {ovh * 1e6:.1f} us"
          + (f" ({small * 1e6:.2f} us for a small op on one thread)" if small is not None else "")
          + (f", a cache line's round trip between two cores {p['core_round_trip_seconds'] * 1e6:.2f} us" if p.get("core_round_trip_seconds") else "")
          + f"; model capacity {a.capacity}")
    print(f"PyTorch {torch.__version__}, {a.threads} threads; per run {a.steps} timed steps after {a.warmup} warm-up; {a.repeats} runs "
          f"per figure, median [min..max] in ms; share = roofline / measured joule; PyTorch best of f32 and bf16 autocast")
    head = (f"{'net':13} {'batch':>5} {'dtype':5} {'joule ms':>26} {'roofline':>9} {'share':>6} {'goal':>9} "
            f"{'PyTorch best ms':>26} {'mode':>5} {'PT/joule':>8} {'ahead':>5}")
    print(head)
    print("-" * len(head))

    rows = []
    for net, size, batches in configs:
        for b in batches:
            roof = {}
            for dt in dtypes:
                try:
                    roof[dt] = joule_roofline_seconds(a.joule, net, b, size, dt, hw)
                except subprocess.CalledProcessError as e:
                    print(f"{net} b{b} {dt}: joule analyze failed: {e.stderr.strip()[-300:]}", flush=True)
                    roof[dt] = None
            ts = TorchStep(net, size, b)
            joule_runs = {dt: [] for dt in dtypes}
            joule_err = {}
            torch_runs = {"f32": [], "bf16": []}
            bf16_error = None
            # alternate within each repeat: joule f32, PyTorch f32, joule bf16, PyTorch bf16 autocast
            schedule = []
            for i in range(max(len(dtypes), 2)):
                schedule += [("joule", dtypes[i])] if i < len(dtypes) else []
                schedule += [("torch", ("f32", "bf16")[i])] if i < 2 else []
            for _ in range(a.repeats):
                for who, mode in schedule:
                    if who == "joule":
                        if mode in joule_err:
                            continue
                        try:
                            joule_runs[mode].append(joule_step_seconds(a.joule, net, b, size, mode, a.threads, a.steps, a.warmup))
                        except (subprocess.CalledProcessError, RuntimeError, KeyError, ValueError) as e:
                            msg = e.stderr.strip()[-300:] if isinstance(e, subprocess.CalledProcessError) else str(e)
                            joule_err[mode] = msg
                            print(f"{net} b{b} {mode}: joule train failed: {msg}", flush=True)
                    elif mode == "f32":
                        torch_runs["f32"].append(ts.seconds(False, a.steps, a.warmup))
                    elif bf16_error is None:
                        try:
                            torch_runs["bf16"].append(ts.seconds(True, a.steps, a.warmup))
                        except Exception as e:  # noqa: BLE001 - bf16 autocast raises in MobileNetV2's backward on 1.13
                            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                            bf16_error = f"{type(e).__name__}: {first[:200]}"
                            torch_runs["bf16"] = []
            del ts
            gc.collect()

            tstats = {m: spread(v) for m, v in torch_runs.items()}
            best = min((m for m in tstats if tstats[m]), key=lambda m: tstats[m]["median"])
            tbest = tstats[best]
            for dt in dtypes:
                js, r = spread(joule_runs[dt]), roof[dt]
                goal = GOAL_SHARE.get(net, GOAL_SHARE_GEMM)
                share = r / js["median"] if js and r else None
                ratio = tbest["median"] / js["median"] if js else None
                row = {"net": net, "batch": b, "image_size": size, "seq_len": 0 if size else SEQ_LEN, "dtype": dt,
                       "joule_seconds": js, "joule_error": joule_err.get(dt), "roofline_seconds": r,
                       "share_of_bound": share, "share_of_bound_min": r / js["max"] if js and r else None,
                       "share_of_bound_max": r / js["min"] if js and r else None, "goal_share": goal,
                       "goal_met": share is not None and share >= goal,
                       "torch_seconds": tstats, "torch_best_mode": best, "torch_best_seconds": tbest["median"],
                       "torch_bf16_error": bf16_error, "torch_over_joule": ratio, "ahead_of_torch": ratio is not None and ratio > 1,
                       "parameters_joule": counts[net][0], "parameters_torch": counts[net][1]}
                rows.append(row)
                share_s = f"{100 * share:5.1f}%" if share is not None else "   n/a"
                goal_s = f">={100 * goal:.0f}% " + ("ok" if row["goal_met"] else "no")
                ratio_s = f"{ratio:7.2f}x" if ratio is not None else "     n/a"
                roof_s = f"{r * 1e3:9.2f}" if r else "      n/a"
                line = (f"{net:13} {b:5d} {dt:5} {ms_spread(js):>26} {roof_s} {share_s:>6} {goal_s:>9} "
                        f"{ms_spread(tbest):>26} {best:>5} {ratio_s:>8} {'yes' if row['ahead_of_torch'] else 'no':>5}")
                if bf16_error:
                    line += f"  (PyTorch bf16 autocast failed, f32 used: {bf16_error[:80]})"
                print(line, flush=True)

    ok = [r for r in rows if r["share_of_bound"] is not None]
    if any(r["share_of_bound"] > 1 for r in ok):
        print("share > 100 %: a measured step beat its lower bound: the probe (or that run) was disturbed; "
              "rerun, or pass --probe FILE from a quiet `joule probe --json`")
    print(f"{sum(r['goal_met'] for r in ok)}/{len(rows)} rows meet their share-of-bound goal; "
          f"{sum(r['ahead_of_torch'] for r in rows)}/{len(rows)} rows ahead of PyTorch's best mode")
    # like for like: joule's faster mode against PyTorch's faster mode, per configuration
    best = {}
    for r in rows:
        k = (r["net"], r["batch"])
        if r["joule_seconds"] and (k not in best or r["joule_seconds"]["median"] < best[k]["joule_seconds"]["median"]):
            best[k] = r
    ahead = [k for k, r in best.items() if r["torch_best_seconds"] > r["joule_seconds"]["median"]]
    print(f"best mode against best mode: joule ahead on {len(ahead)}/{len(best)} configurations; PyTorch/joule from "
          f"{min(r['torch_best_seconds'] / r['joule_seconds']['median'] for r in best.values()):.2f}x to "
          f"{max(r['torch_best_seconds'] / r['joule_seconds']['median'] for r in best.values()):.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "joule.bench.perf_roofline/1", "torch": torch.__version__, "threads": a.threads, "steps": a.steps,
                       "warmup": a.warmup, "repeats": a.repeats, "capacity": a.capacity, "probe": p, "rows": rows}, f, indent=2)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()

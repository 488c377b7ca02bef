#!/usr/bin/env python3
"""The placement planner's results table (README): per net and system, all MODELLED by `joule plan`.

  python3 bench/placement.py [--joule build/joule] [--nets lenet5,alexnet,...] [--systems cpu+v100+s10,cpu+k40+de5]

1. energy (no throughput loss): the energy strategy's plan against the GPU-only plan -- energy saved,
   time ratio -- beside Hype-training's -44.3 % on V100 + Stratix 10;
2. power caps of 150 / 200 / 250 W: powercap's iteration time against GPU power limiting (the GPU-only
   plan with the GPU's limit at the cap), and the power each draws as the cap counts it;
3. optimality gaps where exact solves (LeNet-5's layers): energy, heft, cnnlab and powercap against the
   exact optimum of their objective;
4. device and precision together (`--strategy joint`) against placement then precision (`--strategy
   energy --amp optimal`) and against the GPU alone under the optimal precision policy.
"""
import argparse
import json
import subprocess
import sys
import time

NETS = {"lenet5": 64, "alexnet": 32, "vgg16": 32, "resnet18": 32, "resnet50": 32, "mobilenet_v2": 32, "bert-base": 8}
CAPS = [150, 200, 250]


def plan(joule, net, system, strategy, extra=()):
    cmd = [joule, "plan", "--net", net, "--batch", str(NETS[net]), "--system", system, "--strategy", strategy, "--json", *extra]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"placement.py: {' '.join(cmd)} failed:\n{out.stderr}")
    j = json.loads(out.stdout)
    j["wall"] = time.perf_counter() - t0
    return j


def plan_amp(joule, net, system, strategy, amp):
    """`joule plan --strategy S --amp P`: placement, then a precision policy."""
    return plan(joule, net, system, strategy, ["--amp", amp])


def pct(x):
    return f"{100 * x:+.1f} %"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--joule", default="build/joule")
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--systems", default="cpu+v100+s10,cpu+k40+de5")
    a = ap.parse_args()
    nets, systems = a.nets.split(","), a.systems.split(",")

    print("## energy with no throughput loss (`--strategy energy`) against the GPU-only plan\n")
    print("| system | net | GPU-only ms | GPU-only J | energy ms | energy J | energy saved | time | devices used | planning s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    saved = {s: [] for s in systems}
    for s in systems:
        for n in nets:
            j = plan(a.joule, n, s, "energy")
            gpu = next(b for b in j["baselines"] if b["strategy"].startswith("single:cuda"))
            e = j["plans"][0]
            used = [d for d, busy in zip(j["devices"], e["busy_seconds"]) if busy > 0]
            saved[s].append(e["joules"] / gpu["joules"] - 1)
            print(f"| {s} | {n} | {gpu['seconds'] * 1e3:.2f} | {gpu['joules']:.3f} | {e['seconds'] * 1e3:.2f} | {e['joules']:.3f} | "
                  f"{pct(e['joules'] / gpu['joules'] - 1)} | {e['seconds'] / gpu['seconds']:.3f}x | {', '.join(used)} | {j['wall']:.2f} |")
    for s in systems:
        v = saved[s]
        print(f"\n{s}: energy against GPU-only {pct(sum(v) / len(v))} on average (best {pct(min(v))}); Hype-training: -44.3 % on average, up to -59.7 % (V100 + Stratix 10)")

    print("\n## power caps: `--strategy powercap:W` against GPU power limiting (the GPU-only plan, the GPU's limit at W)\n")
    print("| system | net | cap W | powercap ms | its W | GPU limit at the cap: ms | its W | speed-up | GPU limit holding the cap: W | ms | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in systems:
        for n in nets:
            for cap in CAPS:
                j = plan(a.joule, n, s, f"powercap:{cap}")
                p = j["plans"][0]
                g = j["gpu_power_limiting"][0]
                over = " (over)" if g["capped_watts"] > cap * (1 + 1e-9) else ""
                mine = "" if p["meets"] else " (cannot meet)"
                h = g.get("holding")
                held = f"{h['limit_w']:.0f} | {h['seconds'] * 1e3:.2f} | {h['seconds'] / p['seconds']:.2f}x" if h else "none holds it | - | -"
                print(f"| {s} | {n} | {cap} | {p['seconds'] * 1e3:.2f}{mine} | {p['capped_watts']:.1f} | {g['seconds'] * 1e3:.2f} | {g['capped_watts']:.1f}{over} | "
                      f"{g['seconds'] / p['seconds']:.2f}x | {held} |")

    print("\n## optimality gaps where exact solves (LeNet-5 b64: 13 layers on 3 devices)\n")
    print("| system | objective | exact | energy / powercap | heft | cnnlab |")
    print("|---|---|---|---|---|---|")
    for s in systems:
        ex = {k: plan(a.joule, "lenet5", s, k)["plans"][0] for k in ("exact", "exact:time", "exact:powercap:200")}
        h = {k: plan(a.joule, "lenet5", s, k)["plans"][0] for k in ("energy", "heft", "cnnlab", "powercap:200")}
        print(f"| {s} | energy, no throughput loss | {ex['exact']['joules']:.4f} J | {pct(h['energy']['joules'] / ex['exact']['joules'] - 1)} | "
              f"{pct(h['heft']['joules'] / ex['exact']['joules'] - 1)} | {pct(h['cnnlab']['joules'] / ex['exact']['joules'] - 1)} |")
        print(f"| {s} | time | {ex['exact:time']['seconds'] * 1e3:.4f} ms | - | {pct(h['heft']['seconds'] / ex['exact:time']['seconds'] - 1)} | "
              f"{pct(h['cnnlab']['seconds'] / ex['exact:time']['seconds'] - 1)} |")
        print(f"| {s} | time under 200 W | {ex['exact:powercap:200']['seconds'] * 1e3:.4f} ms | "
              f"{pct(h['powercap:200']['seconds'] / ex['exact:powercap:200']['seconds'] - 1)} | - | - |")

    print("\n## device and precision together (`--strategy joint`) against placement, then precision\n")
    print("| system | net | GPU f32 ms / J | GPU + amp optimal ms / J | energy + amp optimal ms / J | joint ms / J | joint vs GPU + amp | "
          "joint vs energy + amp | low-precision nodes per device | planning s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    vs_gpu = {s: [] for s in systems}
    vs_then = {s: [] for s in systems}
    for s in systems:
        for n in nets:
            j = plan(a.joule, n, s, "joint")
            t = plan_amp(a.joule, n, s, "energy", "optimal")
            gpu = next(b for b in j["baselines"] if b["strategy"].startswith("single:cuda") and "amp" not in b["strategy"])
            gpu_amp = next(b for b in j["baselines"] if b["strategy"].startswith("single:cuda") and b["strategy"].endswith("amp optimal"))
            p, q = j["plans"][0], t["plans"][0]
            low = ", ".join(f"{d} {k}" for d, k in p["low_nodes"].items() if k)
            vs_gpu[s].append(p["joules"] / gpu_amp["joules"] - 1)
            vs_then[s].append(p["joules"] / q["joules"] - 1)
            fmt = lambda x: f"{x['seconds'] * 1e3:.2f} / {x['joules']:.3f}"
            print(f"| {s} | {n} | {fmt(gpu)} | {fmt(gpu_amp)} | {fmt(q)} | {fmt(p)} | {pct(p['joules'] / gpu_amp['joules'] - 1)} energy, "
                  f"{p['seconds'] / gpu_amp['seconds']:.3f}x time | {pct(p['joules'] / q['joules'] - 1)} energy, {p['seconds'] / q['seconds']:.3f}x time | "
                  f"{low or 'none'} | {j['wall']:.2f} |")
    for s in systems:
        print(f"\n{s}: joint against the GPU under amp optimal {pct(sum(vs_gpu[s]) / len(vs_gpu[s]))} energy on average; "
              f"against energy + amp optimal {pct(sum(vs_then[s]) / len(vs_then[s]))}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes data/efficiency/gpu-*.yaml: the efficiency curves of the GPUs joule models, set from published figures
(data/validation/published.md, data/hw/reference/*.md), in the form the CPU calibration fits (predict/efficiency.hpp):

    time = fixed_s + compute_scale * (1 + h/M)(1 + h/N)(1 + h/K) * compute + memory_scale * memory

    python3 bench/gpu_efficiency.py            # prints the fit, rewrites the files

What is set from what (nothing here is tuned to a training throughput; bench/validate_devices.py checks those):
- compute_scale (gemm kinds) = peak / the device's best published large-GEMM rate in that dtype;
- h, one half-dimension for M, N and K, is 0 (no shape penalty). The script fits it to one published curve
  (V100-SXM2 FP16 torch.matmul, N = 1024..10240, G27 #140) and prints that fit and the held-out curves, with and
  without it: the fitted h matches square GEMMs, but with equal half-dimensions it charges a 64-channel
  convolution (N = 64, M = batch x pixels in the hundreds of thousands) (1 + h/64) times its time, which puts
  ResNet-50 far below its published throughput; square sweeps cannot tell the dimensions apart, so no penalty is
  applied: the launch overhead alone accounts for the small-GEMM fall-off, and the error below is what that costs;
- memory_scale (other kinds) = peak bandwidth / the best published copy/stream bandwidth;
- fixed_s = the kernel-launch overhead, ~10 us (I6).
A device without a published figure for a term takes the V100's ratio, and its file says so."""
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH_S = 10e-6
LAUNCH_SRC = "I6 [V] kernel launch ~10 us"

# (dtype, N, TFLOPS) square torch.matmul sweeps (data/validation/published.md 3a), per device and its peak (TFLOPS)
SWEEPS = {
    "V100-SXM2 FP16": (125.0, [(1024, 57.30), (2048, 78.23), (4096, 95.73), (8192, 97.36)]),
    "V100-SXM2 FP32": (15.7, [(1024, 10.56), (2048, 12.71), (4096, 13.85), (8192, 14.38), (10240, 14.51)]),
    "A100-PCIe BF16": (312.0, [(1024, 94.89), (2048, 138.46), (4096, 234.14), (8192, 215.26)]),
    "H100-SXM BF16": (989.4, [(1024, 176.62), (2048, 676.59), (4096, 788.72), (8192, 797.51)]),
    "H100-SXM FP32": (66.9, [(1024, 37.39), (2048, 49.58), (4096, 51.88), (8192, 51.81)]),
}
FIT_ON = "V100-SXM2 FP16"


def penalty(h, m, n=None, k=None):
    n, k = n or m, k or m
    return (1 + h / m) * (1 + h / n) * (1 + h / k)


def model_tflops(peak, scale, h, n):
    """The curve's rate for an N^3 GEMM: 2 N^3 FLOP over fixed_s + compute_scale x penalty x compute (as the cost model)."""
    flops = 2.0 * n ** 3
    return flops / (LAUNCH_S + scale * penalty(h, n) * flops / (peak * 1e12)) / 1e12


def best_scale(peak, points, h):
    """compute_scale from a curve's best point: the rate it reached there, less the shape penalty at its size (the
    launch overhead is negligible at those sizes)."""
    n, t = max(points, key=lambda p: p[1])
    return peak / t / penalty(h, n)


def sweep_error(peak, points, scale, h):
    return sum(abs(model_tflops(peak, scale, h, n) - t) / t for n, t in points) / len(points)


def fit_h():
    peak, points = SWEEPS[FIT_ON]
    best = min((sweep_error(peak, points, best_scale(peak, points, h), h), h) for h in [2 ** (i / 8) for i in range(0, 120)])
    return best[1], best[0]


# Per device: the spec's hardware (capacity B, bandwidth B/s, f32 peak FLOP/s, bf16 peak), its GEMM scales per
# dtype with sources, its memory scale with source.
DEVICES = {
    "gpu-nvidia-v100-sxm2": dict(hw=(6144 * 1024, 900e9, 15.7e12, 0), dtypes={
        "f32": (15.7 / 14.51, "G27 #140 [V] SGEMM 14.51 TFLOPS at 10240^3 of 15.7", (10240,)),
        "f16": (125 / 97.36, "G27 #140 [V] FP16 GEMM 97.36 TFLOPS at 8192^3 of 125", (8192,))},
        memory=(900 / 790, "G25 [V] ~790 GB/s cudaMemcpy of 900")),
    "gpu-nvidia-v100-pcie": dict(hw=(6144 * 1024, 900e9, 14.0e12, 0), dtypes={
        "f32": (15.7 / 14.51, "assumption: the V100-SXM2's SGEMM ratio (G27 #140); no PCIe sweep was found", (10240,)),
        "f16": (125 / 97.36, "assumption: the V100-SXM2's FP16 GEMM ratio (G27 #140)", (8192,))},
        memory=(900 / 790, "G25 [V] ~790 GB/s cudaMemcpy on a V100-PCIe-16GB, of 900")),
    "gpu-nvidia-rtx-2080-ti": dict(hw=(5632 * 1024, 616e9, 13.4e12, 0), dtypes={
        "f32": (13.4 / 13.0, "G27 #115 [V] SGEMM 13.0 TFLOPS of 13.4 (size not given: 8192 assumed)", (8192,)),
        "f16": (53.8 / 58.6, "G27 #115/#181 [V] FP16 GEMM up to 58.6 TFLOPS, above the 53.8 of the reference clock (the board boosts; size not given: 8192 assumed)", (8192,))},
        memory=(900 / 790, "assumption: the V100's copy ratio (G25); no 2080 Ti stream figure was found")),
    "gpu-nvidia-k40": dict(hw=(1536 * 1024, 288e9, 5.04e12, 0), dtypes={
        "f32": (15.7 / 14.51, "assumption: the V100's SGEMM ratio (G27 #140); no K40 GEMM figure was found", (10240,))},
        memory=(288 / 202.7, "G21 [V] device-to-device copy 202.7 GB/s of 288")),
    "gpu-nvidia-a100-sxm4-40gb": dict(hw=(40960 * 1024, 1555e9, 19.5e12, 312e12), dtypes={
        "f32": (19.5 / 18.88, "G26 [V] cuBLAS SGEMM 18.88 TFLOPS (A100-80GB-PCIe) of 19.5 (size not given: 8192 assumed)", (8192,)),
        "bf16": (312 / 271.2, "published.md 3b [V] best BF16 matmul 271.2 TFLOPS on an A100 SXM of 312, at 1024x10240x5120", (1024, 10240, 5120)),
        "f16": (312 / 271.2, "assumption: the BF16 rate (same tensor cores, published.md 3b)", (1024, 10240, 5120))},
        memory=(1555 / 1250, "I1/I2 [V] device-to-device bandwidthTest 1157-1300 GB/s of 1555 (1250 taken)")),
    "gpu-nvidia-h100-sxm5": dict(hw=(51200 * 1024, 3350e9, 61.834e12, 989.4e12), dtypes={
        "f32": (61.834 / 51.88, "G27 #79 [V] SGEMM 51.88 TFLOPS at 4096^3, against the 61.8 TFLOPS peak at 1830 MHz", (4096,)),
        "bf16": (989.4 / 797.51, "G27 #79 [V] BF16 GEMM 797.5 TFLOPS at 8192^3 of 989.4", (8192,)),
        "f16": (989.4 / 760.04, "G27 #79 [V] FP16 GEMM 760.0 TFLOPS at 4096^3 of 989.4", (4096,))},
        memory=(3350 / 2800, "G29 [V] ~2.8 TB/s coalesced loads of 3.35")),
    "gpu-nvidia-h200": dict(hw=(51200 * 1024, 4800e9, 61.834e12, 989.4e12), dtypes={
        "f32": (61.834 / 51.88, "assumption: the H100's rates (same die, G18); G27 #79", (4096,)),
        "bf16": (989.4 / 797.51, "assumption: the H100's rates (same die, G18); G27 #79", (8192,)),
        "f16": (989.4 / 760.04, "assumption: the H100's rates (same die, G18); G27 #79", (4096,))},
        memory=(3350 / 2800, "assumption: the H100's achieved share of peak bandwidth (G29)")),
}


def write(name, d, h, h_error):
    cap, bw, f32, bf16 = d["hw"]
    mscale, msrc = d["memory"]
    kinds, sources = [], []
    for dt, (ratio, csrc, shape) in d["dtypes"].items():
        cscale = ratio / penalty(h, *shape)  # the published rate holds at that shape, penalty included
        suffix = "" if dt == "f32" else "." + dt
        kinds.append(f"  gemm{suffix}: {{fixed_s: {LAUNCH_S:g}, compute_scale: {cscale:.4f}, memory_scale: 0, half_m: {h:.1f}, half_n: {h:.1f}, half_k: {h:.1f}}}")
        sources.append(f"  gemm{suffix}: \"{csrc}; no shape penalty (square sweep {FIT_ON}, G27 #140: mean error {100 * h_error:.1f} %, bench/gpu_efficiency.py); {LAUNCH_SRC}\"")
        kinds.append(f"  gemm.grouped{suffix}: {{fixed_s: {LAUNCH_S:g}, compute_scale: {cscale:.4f}, memory_scale: {mscale:.4f}, half_m: 0, half_n: 0, half_k: 0}}")
        sources.append(f"  gemm.grouped{suffix}: \"grouped/depthwise convolutions: the GEMM rate and the stream rate ({msrc}); {LAUNCH_SRC}\"")
        kinds.append(f"  other{suffix}: {{fixed_s: {LAUNCH_S:g}, compute_scale: 1, memory_scale: {mscale:.4f}}}")
        sources.append(f"  other{suffix}: \"{msrc}; {LAUNCH_SRC}\"")
    with open(os.path.join(ROOT, "data", "efficiency", name + ".yaml"), "w") as f:
        f.write("# joule efficiency curves of a GPU joule does not own, set from published figures by bench/gpu_efficiency.py\n"
                "# (the same form joule calibrate fits on a CPU; see predict/efficiency.hpp). Source keys: data/hw/reference/*.md,\n"
                "# data/validation/published.md.\n")
        f.write("version: 1\nkind: efficiency\n")
        f.write(f"fitted_from: \"published figures (bench/gpu_efficiency.py): large-GEMM and copy rates per device; the shape penalty fitted to one sweep\"\n")
        f.write(f"hardware:\n  capacity_bytes: {cap}\n  bandwidth_bytes_per_s: {bw:g}\n  peak_f32_flops: {f32:g}\n")
        if bf16:
            f.write(f"  peak_bf16_flops: {bf16:g}\n")
        f.write(f"  node_overhead_s: {LAUNCH_S:g}\n")
        f.write("kinds:\n" + "\n".join(kinds) + "\nsources:\n" + "\n".join(sources) + "\n")
        f.write(f"  hardware: \"the device's data/hw spec ({name}.yaml)\"\n")


def main():
    fitted, err = fit_h()
    print(f"shape penalty fitted to {FIT_ON}: h = {fitted:.1f}, mean |error| {100 * err:.1f} % (not used: it would charge a 64-channel "
          f"convolution {1 + fitted / 64:.1f}x; see the docstring)")
    for h, what in ((fitted, "with the fitted h"), (0.0, "with h = 0, as the files are")):
        print(f"sweeps {what} (compute_scale from each sweep's best point):")
        for key, (peak, points) in SWEEPS.items():
            scale = best_scale(peak, points, h)
            tag = "fit" if key == FIT_ON and h > 0 else "held out"
            print(f"  {key:16s} {tag:8s} mean |error| {100 * sweep_error(peak, points, scale, h):5.1f} %  " +
                  "  ".join(f"N={n}: {model_tflops(peak, scale, h, n):.1f} vs {t}" for n, t in points))
    err0 = sweep_error(SWEEPS[FIT_ON][0], SWEEPS[FIT_ON][1], best_scale(*SWEEPS[FIT_ON], 0.0), 0.0)
    for name, d in DEVICES.items():
        write(name, d, 0.0, err0)
    print("wrote data/efficiency/gpu-*.yaml")


if __name__ == "__main__":
    main()

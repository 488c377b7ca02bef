#!/bin/bash
# Refits a CPU's efficiency curves (data/efficiency/<spec>.yaml, named by the spec's `efficiency:` -- the cost
# model behind `joule amp`'s campo / optimal policies, `joule predict` and the modelled meter) from
# measurements on this machine. Run on a quiet machine, nothing else running: other work inflates the measured
# node times the curves are fitted to.
#
#   bash bench/fit_cpu_curves.sh DEVICE [OUT_DIR]   # DEVICE: this CPU's data/hw spec (turin-2vcpu, xeon6-2vcpu);
#                                                   # about 2 minutes on 2 cores; writes OUT_DIR/curves.yaml
#
# Sweeps: LeNet-5, ResNet-18, MobileNetV2 and bert-tiny at their default sizes, the CNNs at 32x32 too, bert-tiny
# at sequence lengths 32 and 256 too; batch 8 and 32; f32, bf16 on GEMMs, and bf16 on every op (so the non-GEMM
# bf16 kernels and the casts get curves of their own). ResNet-50, VGG-16 and bert-base stay out: bench/amp.py
# reports them as held out. The per-node fixed cost is `joule probe`'s, measured at the start.
set -euo pipefail
J=${JOULE:-build/joule}
DEVICE=${1:?usage: bash bench/fit_cpu_curves.sh DEVICE [OUT_DIR] (DEVICE: a data/hw CPU spec, joule devices lists them)}
OUT=${2:-fit}
mkdir -p "$OUT"
common="--threads 2 --iters 5 --warmup 2 --batch 8,32"
overhead_us=$("$J" probe --json --threads 2 | /usr/bin/python3 -c 'import json, sys; print(round(json.load(sys.stdin)["op_overhead_seconds"] * 1e6, 2))')
echo "probe: fixed cost per node ${overhead_us} us"
sweep() {  # db, extra flags
    "$J" profile $common --dtype f32,bf16 --db "$OUT/$1" "${@:2}" >/dev/null
    "$J" profile $common --dtype bf16 --dtype-scope all --db "$OUT/$1" "${@:2}" >/dev/null
}
sweep default.db --net lenet5,resnet18,mobilenet_v2,bert-tiny
sweep px32.db --net resnet18,mobilenet_v2 --image-size 32
sweep seq32.db --net bert-tiny --seq-len 32
sweep seq256.db --net bert-tiny --seq-len 256
# --overhead: the probe's per-node fixed cost on this machine; --traffic cold: the curves serve the cost
# interface (joule amp, predict, the modelled meter), which costs each node alone from a cold buffer
"$J" calibrate --db "$OUT/default.db" --db "$OUT/px32.db" --db "$OUT/seq32.db" --db "$OUT/seq256.db" \
    --image-size 0,32,0,0 --seq-len 128,128,32,256 --device "$DEVICE" --overhead "${overhead_us}us" --traffic cold --out "$OUT/curves.yaml"

#!/usr/bin/env python3
"""Two joule builds against each other in one run: step time, the time of chosen ops, and tensor memory.

For a change to the runtime (a pass, a kernel), build the old commit elsewhere (e.g. `git worktree add /tmp/old
main && cmake -S /tmp/old -B /tmp/old/build -G Ninja && cmake --build /tmp/old/build`) and compare:

    python3 bench/compare_builds.py --old /tmp/old/build/joule --new build/joule resnet18:8:f32 vgg16:2:bf16 ...

Per net:batch:dtype the two binaries alternate --repeats times (old, new, old, new, ...) so that the shared
machine's drift hits both alike; each run is `joule profile --meter modelled --iters N --warmup 1` into a fresh
database, read back with `joule profile --report --json`. Reported (median over repeats, ms per step):
- step: the step time;
- fused: in the new build, the nodes whose op is fused (`Conv2d+Relu`): their time, against the same-named
  nodes' time in the old build plus the old build's forward activations that the new build no longer runs;
- activation backward: ReluBackward + Relu6Backward;
- tensors: `joule train --json`'s buffer_bytes (the memory plan's size; deterministic);
- with --by-op: per op (`Conv2d+Relu`, `AdamUpdate`, ...) the summed time of its nodes in each build;
- with --nodes TEXT: per node whose name contains TEXT (`conv`), its time in microseconds, the minimum over
  repeats (a node's time is less noisy than the step's: the best run is the one the shared machine left
  alone), and the step's minimum beside it.
--json FILE writes the rows.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ACTIVATIONS = ('Relu', 'Relu6')
ACT_BACKWARD = ('ReluBackward', 'Relu6Backward')


def profile(joule, net, batch, dtype, iters):
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, 'p.db')
        subprocess.run([joule, 'profile', '--db', db, '--net', net, '--batch', batch, '--dtype', dtype,
                        '--iters', str(iters), '--warmup', '1', '--meter', 'modelled'],
                       check=True, capture_output=True)
        out = subprocess.run([joule, 'profile', '--db', db, '--report', '--json'],
                             check=True, capture_output=True, text=True).stdout
    return json.loads(out)['configs'][0]


def tensor_bytes(joule, net, batch, dtype):
    out = subprocess.run([joule, 'train', '--net', net, '--batch', batch, '--dtype', dtype, '--dataset',
                          'synthetic', '--steps', '1', '--json', '--quiet'],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)['buffer_bytes']


def seconds(config, pred):
    return sum(n['seconds'] for n in config['nodes'] if pred(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--old', required=True)
    ap.add_argument('--new', required=True)
    ap.add_argument('--repeats', type=int, default=2)
    ap.add_argument('--iters', type=int, default=5)
    ap.add_argument('--by-op', action='store_true')
    ap.add_argument('--nodes', metavar='TEXT', help='per-node minimum times of nodes whose name contains TEXT')
    ap.add_argument('--json')
    ap.add_argument('configs', nargs='+', metavar='net:batch:dtype')
    args = ap.parse_args()
    rows = []
    for spec in args.configs:
        parts = spec.split(':')
        if len(parts) != 3:
            sys.exit(f'compare_builds: error: {spec!r} is not net:batch:dtype')
        net, batch, dtype = parts
        runs = {'old': [], 'new': []}
        for _ in range(args.repeats):
            for build in ('old', 'new'):
                runs[build].append(profile(getattr(args, build), net, batch, dtype, args.iters))
        fused = {n['node'] for n in runs['new'][0]['nodes'] if '+' in n['op']}

        def forward_act(n):
            return n['op'] in ACTIVATIONS and n['phase'] == 'forward'

        def med(build, pred):
            return 1e3 * statistics.median(seconds(c, pred) for c in runs[build])

        row = {
            'config': spec, 'fused_nodes': len(fused),
            # the old build's activations that the new build no longer runs as nodes of their own
            'fused_old_ms': med('old', lambda n: n['node'] in fused) + med('old', forward_act)
            - med('new', forward_act),
            'fused_new_ms': med('new', lambda n: n['node'] in fused),
            'act_backward_old_ms': med('old', lambda n: n['op'] in ACT_BACKWARD),
            'act_backward_new_ms': med('new', lambda n: n['op'] in ACT_BACKWARD),
            'step_old_ms': 1e3 * statistics.median(c['step_seconds'] for c in runs['old']),
            'step_new_ms': 1e3 * statistics.median(c['step_seconds'] for c in runs['new']),
            'tensors_old_mib': tensor_bytes(args.old, net, batch, dtype) / 2**20,
            'tensors_new_mib': tensor_bytes(args.new, net, batch, dtype) / 2**20,
        }
        ops = sorted({n['op'] for b in runs for c in runs[b] for n in c['nodes']})
        row['by_op_ms'] = {op: [med(b, lambda n, op=op: n['op'] == op) for b in ('old', 'new')] for op in ops}
        rows.append(row)
        print(f"{spec}: {row['fused_nodes']} fused | fused ops {row['fused_old_ms']:.1f} -> {row['fused_new_ms']:.1f} ms"
              f" | activation backward {row['act_backward_old_ms']:.1f} -> {row['act_backward_new_ms']:.1f} ms"
              f" | step {row['step_old_ms']:.2f} -> {row['step_new_ms']:.2f} ms"
              f" | tensors {row['tensors_old_mib']:.1f} -> {row['tensors_new_mib']:.1f} MiB", flush=True)
        if args.by_op:
            for op, (old_ms, new_ms) in sorted(row['by_op_ms'].items(), key=lambda kv: -kv[1][0]):
                print(f"    {op:32s} {old_ms:9.3f} -> {new_ms:9.3f} ms")
        if args.nodes is not None:
            def best(build, name):  # None: no such node in that build
                times = [[n['seconds'] for n in c['nodes'] if n['node'] == name] for c in runs[build]]
                return 1e6 * min(sum(t) for t in times) if times[0] else None

            def us(t):
                return f"{t:9.1f}" if t is not None else f"{'-':>9s}"

            names = [n['node'] for n in runs['old'][0]['nodes'] if args.nodes in n['node']]
            names += [n['node'] for n in runs['new'][0]['nodes'] if args.nodes in n['node'] and n['node'] not in names]
            row['nodes_min_us'] = {name: [best(b, name) for b in ('old', 'new')] for name in names}
            row['step_min_ms'] = [1e3 * min(c['step_seconds'] for c in runs[b]) for b in ('old', 'new')]
            print(f"    {'step (min)':32s} {row['step_min_ms'][0] * 1e3:9.1f} -> {row['step_min_ms'][1] * 1e3:9.1f} us")
            for name, (old_us, new_us) in row['nodes_min_us'].items():
                print(f"    {name:32s} {us(old_us)} -> {us(new_us)} us")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)


if __name__ == '__main__':
    main()

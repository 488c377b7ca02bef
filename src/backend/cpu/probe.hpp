// Micro-benchmarks of this CPU for the cost models: STREAM-like memory bandwidth and GEMM peak through
// oneDNN's matmul. Every figure is measured (steady clock), best of `repeats`.
//
//   cpu::ProbeResult r = cpu::probe({.threads = 2});
//   r.triad_gbps, r.copy_gbps, r.gemm_gflops_f32, r.gemm_gflops_bf16
#pragma once

#include <cstdint>

namespace joule::cpu {

struct ProbeOptions {
    int threads = 0;            // 0: all cores
    double array_mib = 128;     // per STREAM array (well beyond the caches)
    int64_t gemm_size = 1024;   // square GEMM edge
    int repeats = 5;
};

struct ProbeResult {
    int threads = 0;
    double copy_gbps = 0, triad_gbps = 0;          // STREAM copy (16 B/element moved) and triad (24 B/element)
    double gemm_gflops_f32 = 0, gemm_gflops_bf16 = 0;
    double op_overhead_s = 0;  // one tiny oneDNN primitive run and waited for on every thread: the fixed cost of a node
    // The same on the calling thread alone, as the cpu backend runs a small node (CpuBackend::serial): the
    // fixed cost of a small node, without the fork and join of the other threads.
    double small_op_overhead_s = 0;
    // A cache line's round trip between the first two threads (each waits for the other's write, then writes):
    // what handing data from one core to the other costs (0 with one thread, or one core).
    double core_round_trip_s = 0;
    int64_t gemm_size = 0;
    double array_bytes = 0;
};

ProbeResult probe(const ProbeOptions& o = {});

}  // namespace joule::cpu

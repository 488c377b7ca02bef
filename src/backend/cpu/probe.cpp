#include "backend/cpu/probe.hpp"

#include <omp.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <atomic>
#include <vector>

#include "backend/cpu/cores.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "graph/error.hpp"

namespace joule::cpu {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double gemm_gflops(dnnl::engine& eng, dnnl::stream& s, int64_t n, dnnl::memory::data_type type, int repeats) {
    using namespace dnnl;
    const memory::desc a({n, n}, type, memory::format_tag::ab), b({n, n}, type, memory::format_tag::ab), c({n, n}, memory::data_type::f32, memory::format_tag::ab);
    matmul::primitive_desc pd({a, b, c}, eng);
    matmul mm(pd);
    memory ma(a, eng), mb(b, eng), mc(c, eng);
    std::memset(ma.get_data_handle(), 0, a.get_size());
    std::memset(mb.get_data_handle(), 0, b.get_size());
    double best = 1e30;
    for (int r = 0; r < repeats + 1; ++r) {  // the first run compiles the kernel
        const auto t0 = std::chrono::steady_clock::now();
        mm.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
        s.wait();
        if (r > 0) best = std::min(best, seconds_since(t0));
    }
    return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}
// The middle of an odd number of batch times (the probes time 2 x repeats + 1 batches).
double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

// The fixed cost of one node at the current OpenMP thread count: a 16-element relu run and waited for,
// median of batches of 200 runs.
double op_overhead(CpuContext& ctx, int repeats) {
    using namespace dnnl;
    const memory::desc md({16}, memory::data_type::f32, memory::format_tag::a);
    eltwise_forward relu(eltwise_forward::primitive_desc({prop_kind::forward_training, algorithm::eltwise_relu, md, 0.f, 0.f}, ctx.engine));
    memory src(md, ctx.engine), dst(md, ctx.engine);
    std::memset(src.get_data_handle(), 0, md.get_size());
    std::vector<double> per_run;
    for (int b = 0; b < 2 * repeats + 1; ++b) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 200; ++i) {
            relu.execute(ctx.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
            ctx.stream.wait();
        }
        per_run.push_back(seconds_since(t0) / 200);
    }
    return median(std::move(per_run));
}

// ProbeResult::core_round_trip_s: threads 0 and 1 pass a counter back and forth, median of batches of 2000
// round trips.
double core_round_trip(int repeats) {
    constexpr int64_t kTrips = 2000;
    alignas(64) std::atomic<int64_t> turn{0};  // even: thread 0's move, odd: thread 1's
    std::vector<double> per_trip;
#pragma omp parallel num_threads(2)
    if (omp_get_num_threads() == 2) {  // a team of one (nested, or one core allowed) would wait forever
        const int64_t me = omp_get_thread_num();
        for (int b = 0; b < 2 * repeats + 1; ++b) {
#pragma omp barrier
            const auto t0 = std::chrono::steady_clock::now();
            for (int64_t i = 0; i < kTrips; ++i) {
                const int64_t mine = 2 * (int64_t(b) * kTrips + i) + me;
                while (turn.load(std::memory_order_acquire) != mine) {
#if defined(__x86_64__)
                    __builtin_ia32_pause();
#endif
                }
                turn.store(mine + 1, std::memory_order_release);
            }
            if (me == 0) per_trip.push_back(seconds_since(t0) / double(kTrips));
        }
    }
    return per_trip.empty() ? 0 : median(std::move(per_trip));
}
}  // namespace

ProbeResult probe(const ProbeOptions& o) {
    if (o.array_mib <= 0 || o.gemm_size < 16 || o.repeats < 1) throw Error("probe: array size, GEMM size (>= 16) and repeats must be positive");
    CpuBackend backend(o.threads);  // sets the thread count
    ProbeResult r;
    r.threads = backend.threads();
    r.gemm_size = o.gemm_size;
    const int64_t n = int64_t(o.array_mib * 1048576 / sizeof(double));
    r.array_bytes = double(n) * sizeof(double);
    std::unique_ptr<double[]> a(new double[size_t(n)]), b(new double[size_t(n)]), c(new double[size_t(n)]);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = 1.0, b[i] = 2.0, c[i] = 0.0;  // first touch by the threads that use them
    double copy = 1e30, triad = 1e30;
    for (int rep = 0; rep < o.repeats; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) c[i] = a[i];
        copy = std::min(copy, seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
        triad = std::min(triad, seconds_since(t0));
    }
    r.copy_gbps = 2.0 * double(n) * sizeof(double) / copy / 1e9;
    r.triad_gbps = 3.0 * double(n) * sizeof(double) / triad / 1e9;
    CpuContext& ctx = backend.context();
    r.gemm_gflops_f32 = gemm_gflops(ctx.engine, ctx.stream, o.gemm_size, dnnl::memory::data_type::f32, o.repeats);
    r.gemm_gflops_bf16 = gemm_gflops(ctx.engine, ctx.stream, o.gemm_size, dnnl::memory::data_type::bf16, o.repeats);
    r.op_overhead_s = op_overhead(ctx, o.repeats);
    {  // a small node's: the primitive created and run with one thread, as CpuBackend::prepare runs one
        const int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        r.small_op_overhead_s = op_overhead(ctx, o.repeats);
        omp_set_num_threads(saved);
    }
    if (r.threads >= 2 && usable_cores() >= 2) r.core_round_trip_s = core_round_trip(o.repeats);  // one core: no other to hand to
    return r;
}

}  // namespace joule::cpu

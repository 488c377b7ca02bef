// A convolution weight's f32 master (ABcd16b16a) cast into the bf16 formats of oneDNN's bf16 convolutions:
// the cpu backend's own loop (backend/cpu/convert.cpp) against oneDNN's reorder on the same memory,
// alternating in one process (this machine's bandwidth drifts between runs), each call on cold caches (a 256 MiB
// buffer written before it), as in a training step where the master was last touched by the previous update.
//   build/bench_weight_casts [threads] [rounds]
// Per row: the median round's milliseconds and GB/s (f32 read + bf16 written) of each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/kernels.hpp"
#include "runtime/executor.hpp"

namespace {

using namespace joule;
using tag = dnnl::memory::format_tag;
using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

TensorDesc blocked(const Shape& shape, const dnnl::memory::desc& md) {
    return {shape, md.data_type() == dnnl::memory::data_type::bf16 ? DType::BF16 : DType::F32, Layout::Blocked, cpu::blocking_of(md).value()};
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2, rounds = argc > 2 ? std::atoi(argv[2]) : 15;
    struct Case {
        Shape shape;
        tag target;
        const char* name;
    };
    const std::vector<Case> cases = {
        {{512, 512, 3, 3}, tag::AcdB32a2b, "AcdB32a2b"},     {{512, 512, 3, 3}, tag::ABcd8a16b2a, "ABcd8a16b2a"},
        {{2048, 512, 1, 1}, tag::AcdB64a2b, "AcdB64a2b"},    {{2048, 512, 1, 1}, tag::BAcd8a16b2a, "BAcd8a16b2a"},
        {{512, 2048, 1, 1}, tag::AcdB48a2b, "AcdB48a2b"},    {{128, 128, 3, 3}, tag::AcdB32a2b, "AcdB32a2b"},
        {{128, 128, 3, 3}, tag::BAcd8a16b2a, "BAcd8a16b2a"}, {{64, 256, 1, 1}, tag::AcdB64a2b, "AcdB64a2b"},
    };
    std::printf("%-22s %-12s %20s %20s %7s\n", "weight", "bf16 format", "joule ms (GB/s)", "oneDNN ms (GB/s)", "ratio");
    for (const Case& c : cases) {
        const dnnl::memory::dims dims(c.shape.begin(), c.shape.end());
        const TensorDesc master = blocked(c.shape, dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag::ABcd16b16a));
        const TensorDesc target = blocked(c.shape, dnnl::memory::desc(dims, dnnl::memory::data_type::bf16, c.target));
        Graph g;
        const TensorId x = g.parameter("x", {c.shape}, Init::normal(1.0f));
        const TensorId m = g.add1(OpKind::Cast, CastAttrs{DType::F32, true, Layout::Blocked, master.blocking}, {x}, "to_master");
        const TensorId y = g.add1(OpKind::Cast, CastAttrs{DType::BF16, true, Layout::Blocked, target.blocking}, {m}, "to_bf16");
        cpu::CpuBackend cpu(threads);
        Executor ex(g, cpu, {{m, y}, 1});
        ex.run_all();
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream st(eng);
        dnnl::memory from(dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag::ABcd16b16a), eng, ex.data(m));
        dnnl::memory to(dnnl::memory::desc(dims, dnnl::memory::data_type::bf16, c.target), eng, ex.data(y));
        dnnl::reorder r(from, to);
        std::vector<double> ours, theirs;
        std::vector<char> flush(size_t(256) << 20);
        for (int k = 0; k <= rounds; ++k) {
            std::memset(flush.data(), k, flush.size());
            auto t0 = clock_type::now();
            ex.run(1, 2);
            const double a = std::chrono::duration<double>(clock_type::now() - t0).count();
            std::memset(flush.data(), k + 1, flush.size());
            t0 = clock_type::now();
            r.execute(st, from, to);
            st.wait();
            const double b = std::chrono::duration<double>(clock_type::now() - t0).count();
            if (k > 0) ours.push_back(a), theirs.push_back(b);  // the first round warms both
        }
        const double bytes = double(g.tensor(m).desc.bytes() + g.tensor(y).desc.bytes()), o = median(ours), t = median(theirs);
        std::printf("%-22s %-12s %9.3f (%6.1f) %12.3f (%6.1f) %6.2fx\n",
                    (std::to_string(c.shape[0]) + "x" + std::to_string(c.shape[1]) + "x" + std::to_string(c.shape[2]) + "x" + std::to_string(c.shape[3])).c_str(),
                    c.name, o * 1e3, bytes / o / 1e9, t * 1e3, bytes / t / 1e9, t / o);
    }
}

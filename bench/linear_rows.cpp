// A Linear over a few rows (the classifiers of AlexNet and VGG at batch 1-4): the cpu backend's own loops
// (backend/cpu/linear_rows.cpp), run as the nodes of a graph through the executor, against oneDNN's inner
// product primitives (what the backend ran before, plain [out, in] weights) on the same memory, alternating in
// one process (this machine's bandwidth drifts between runs), each call on cold caches (a 256 MiB buffer
// written before it), as in a training step. dtypes as a bf16 plan has them: x, w, dY bf16, y, dx, dW f32.
//   build/bench_linear_rows [threads] [rounds]
// Per row: the median round's milliseconds and GB/s (the node's operands read and written) of each. Where the
// backend keeps oneDNN (a forward over one row, or two in f32) both columns are oneDNN's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu_backend.hpp"
#include "runtime/executor.hpp"

namespace {

using namespace joule;
using tag = dnnl::memory::format_tag;
using ddt = dnnl::memory::data_type;
using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2, rounds = argc > 2 ? std::atoi(argv[2]) : 9;
    struct Case {
        int64_t M, K, N;
        DType type;
        const char* layer;
    };
    const std::vector<Case> cases = {
        {4, 9216, 4096, DType::BF16, "AlexNet fc6"}, {4, 9216, 4096, DType::F32, "AlexNet fc6"}, {2, 9216, 4096, DType::BF16, "AlexNet fc6"},
        {4, 4096, 4096, DType::BF16, "AlexNet fc7"}, {4, 4096, 4096, DType::F32, "AlexNet fc7"},
        {1, 25088, 4096, DType::BF16, "VGG fc6"},    {2, 25088, 4096, DType::F32, "VGG fc6"},
    };
    std::printf("%-12s %-18s %-14s %20s %20s %7s\n", "layer", "M x K -> N", "node", "joule ms (GB/s)", "oneDNN ms (GB/s)", "ratio");
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream st(eng);
    std::vector<char> flush(size_t(256) << 20);
    for (const Case& c : cases) {
        const DType t = c.type;
        Graph g;
        const TensorId x = g.input("x", {{c.M, c.K}, t, Layout::Plain}), w = g.input("w", {{c.N, c.K}, t, Layout::Plain});
        const TensorId b = g.input("b", {{c.N}, DType::F32, Layout::Plain}), dy = g.input("dy", {{c.M, c.N}, t, Layout::Plain});
        const TensorId y = g.add1(OpKind::Linear, LinearAttrs{true}, {x, w, b}, "fc");
        const TensorDesc xd = g.tensor(x).desc, wd = g.tensor(w).desc;
        const TensorId dx = g.add(OpKind::LinearBackwardData, LinearAttrs{true}, {dy, w}, "bwd_data", Phase::Backward, kNone, xd).front();
        const std::vector<TensorId> dwb = g.add(OpKind::LinearBackwardWeights, LinearAttrs{true}, {dy, x}, "bwd_weights", Phase::Backward, kNone, wd);
        for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n) g.node(n).compute = t;
        for (TensorId o : {y, dx, dwb[0], dwb[1]}) g.tensor(o).desc.dtype = DType::F32;  // a bf16 GEMM writes f32 from its accumulator
        cpu::CpuBackend cpu(threads);
        Executor ex(g, cpu, {{x, w, b, dy, y, dx, dwb[0], dwb[1]}, 1});
        for (TensorId in : {x, w, b, dy}) std::memset(ex.data(in), 0x3c, g.tensor(in).desc.bytes());

        // oneDNN's inner products on the same memory, as backend/cpu/linear.cpp builds them
        const ddt T = t == DType::BF16 ? ddt::bf16 : ddt::f32;
        auto md = [](int64_t r, int64_t k, ddt type) { return dnnl::memory::desc({r, k}, type, tag::ab); };
        auto mem = [&](const dnnl::memory::desc& d, TensorId id) { return dnnl::memory(d, eng, ex.data(id)); };
        const dnnl::memory::desc bias({c.N}, ddt::f32, tag::a);
        const dnnl::inner_product_forward::primitive_desc fwd(
            {dnnl::prop_kind::forward_training, md(c.M, c.K, T), md(c.N, c.K, T), bias, md(c.M, c.N, ddt::f32)}, eng);
        const dnnl::inner_product_forward::primitive_desc hint(
            {dnnl::prop_kind::forward_training, md(c.M, c.K, T), md(c.N, c.K, T), bias, md(c.M, c.N, T)}, eng);
        const dnnl::inner_product_backward_data::primitive_desc bd({md(c.M, c.K, ddt::f32), md(c.N, c.K, T), md(c.M, c.N, T)}, eng, hint);
        const dnnl::inner_product_backward_weights::primitive_desc bw(
            {md(c.M, c.K, T), md(c.N, c.K, ddt::f32), bias, md(c.M, c.N, T)}, eng, hint);
        struct Pass {
            const char* name;
            NodeId node;
            dnnl::primitive prim;
            std::unordered_map<int, dnnl::memory> args;
        };
        const std::vector<Pass> passes = {
            {"forward", 0, dnnl::inner_product_forward(fwd),
             {{DNNL_ARG_SRC, mem(fwd.src_desc(), x)}, {DNNL_ARG_WEIGHTS, mem(fwd.weights_desc(), w)}, {DNNL_ARG_BIAS, mem(bias, b)},
              {DNNL_ARG_DST, mem(fwd.dst_desc(), y)}}},
            {"backward-data", 1, dnnl::inner_product_backward_data(bd),
             {{DNNL_ARG_DIFF_DST, mem(bd.diff_dst_desc(), dy)}, {DNNL_ARG_WEIGHTS, mem(bd.weights_desc(), w)}, {DNNL_ARG_DIFF_SRC, mem(bd.diff_src_desc(), dx)}}},
            {"backward-weights", 2, dnnl::inner_product_backward_weights(bw),
             {{DNNL_ARG_DIFF_DST, mem(bw.diff_dst_desc(), dy)}, {DNNL_ARG_SRC, mem(bw.src_desc(), x)},
              {DNNL_ARG_DIFF_WEIGHTS, mem(bw.diff_weights_desc(), dwb[0])}, {DNNL_ARG_DIFF_BIAS, mem(bias, dwb[1])}}},
        };
        for (const Pass& p : passes) {
            std::vector<double> ours, theirs;
            for (int k = 0; k <= rounds; ++k) {
                std::memset(flush.data(), k, flush.size());
                auto t0 = clock_type::now();
                ex.run(p.node, p.node + 1);
                const double a = std::chrono::duration<double>(clock_type::now() - t0).count();
                std::memset(flush.data(), k + 1, flush.size());
                t0 = clock_type::now();
                p.prim.execute(st, p.args);
                st.wait();
                const double o = std::chrono::duration<double>(clock_type::now() - t0).count();
                if (k > 0) ours.push_back(a), theirs.push_back(o);  // the first round warms both
            }
            double bytes = 0;
            for (TensorId id : g.node(p.node).inputs) bytes += double(g.tensor(id).desc.bytes());
            for (TensorId id : g.node(p.node).outputs) bytes += double(g.tensor(id).desc.bytes());
            const double o = median(ours), th = median(theirs);
            const std::string shape = std::to_string(c.M) + "x" + std::to_string(c.K) + "->" + std::to_string(c.N) + (t == DType::BF16 ? " bf16" : " f32");
            std::printf("%-12s %-18s %-14s %9.3f (%6.1f) %12.3f (%6.1f) %6.2fx\n", c.layer, shape.c_str(), p.name, o * 1e3, bytes / o / 1e9,
                        th * 1e3, bytes / th / 1e9, th / o);
        }
    }
}

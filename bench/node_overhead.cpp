// The fixed cost of one node: what a tiny op costs through joule's executor and cpu backend, against the
// floor of a bare oneDNN primitive run in a loop (what `joule probe` reports as the fixed cost of one op).
//   build/bench_overhead [threads] [rounds]
// Per row: a chain of 256 nodes of one kind on tensors of N elements (each reads the previous one's output;
// the updates each update their own parameter), run `rounds` x 20 times; the median round's wall time per
// node, once with every node on all threads and once with small nodes on one (CpuBackend::serial), in
// one run. Tiny N shows the fixed cost; the larger N where a kernel's own work starts to count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu_backend.hpp"
#include "graph/autodiff.hpp"
#include "plan/passes.hpp"
#include "runtime/executor.hpp"
#include "zoo/zoo.hpp"

namespace {

using namespace joule;
using clock_type = std::chrono::steady_clock;
constexpr int kNodes = 256, kRuns = 20;

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

// Median over rounds of the wall seconds per call of f() / per_call units.
double per_unit(const std::function<void()>& f, int rounds, int per_call) {
    f();  // warm-up
    std::vector<double> t;
    for (int r = 0; r < rounds; ++r) {
        const auto t0 = clock_type::now();
        for (int i = 0; i < kRuns; ++i) f();
        t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / kRuns / per_call);
    }
    return median(t);
}

Graph chain(const std::string& kind, int64_t n) {
    Graph g;
    const TensorDesc d{{n}};
    TensorId x = g.input("x", d);
    for (int i = 0; i < kNodes; ++i) {
        const std::string name = "n" + std::to_string(i);
        if (kind == "Relu") {
            x = g.add1(OpKind::Relu, NoAttrs{}, {x}, name);
        } else if (kind == "Add") {
            x = g.add1(OpKind::Add, NoAttrs{}, {x, g.constant(name + ".c", d, Init::ones())}, name);
        } else if (kind == "Linear") {  // [1, n] x [n, n]^T
            if (i == 0) x = g.input("x2", {{1, n}});
            x = g.add1(OpKind::Linear, LinearAttrs{.bias = false}, {x, g.parameter(name + ".w", {{n, n}}, Init::normal(0.01f))}, name);
        } else {  // SgdUpdate with momentum
            g.add(OpKind::SgdUpdate, SgdAttrs{0.01f, 0.9f, 0.0f},
                  {g.parameter(name + ".p", d, Init::ones()), x, g.state(name + ".v", d, Init::zeros())}, name, Phase::Update);
        }
    }
    return g;
}

}  // namespace

int main(int argc, char** argv) try {
    const int threads = argc > 1 ? std::stoi(argv[1]) : 2;
    const int rounds = argc > 2 ? std::stoi(argv[2]) : 15;
    cpu::CpuBackend all(threads, "cpu", false), small_serial(threads, "cpu", true);
    std::printf("threads %d, %d nodes per chain, median of %d rounds of %d runs; us per node:\n", all.threads(), kNodes, rounds, kRuns);
    std::printf("  every node on all threads (before) | small nodes on one thread (CpuBackend::serial, now)\n");
    std::printf("%-28s %8s %12s %12s %8s\n", "what", "elements", "all threads", "small serial", "serial?");
    {  // the floor: one oneDNN eltwise primitive executed in a loop, as `joule probe` measures it
        using namespace dnnl;
        cpu::CpuContext& ctx = all.context();
        const memory::desc md({16}, memory::data_type::f32, memory::format_tag::a);
        eltwise_forward relu(eltwise_forward::primitive_desc({prop_kind::forward_training, algorithm::eltwise_relu, md, 0.f, 0.f}, ctx.engine));
        memory src(md, ctx.engine), dst(md, ctx.engine);
        std::memset(src.get_data_handle(), 0, md.get_size());
        const double s = per_unit(
            [&] {
                for (int i = 0; i < kNodes; ++i) relu.execute(ctx.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
                ctx.stream.wait();
            },
            rounds, kNodes);
        std::printf("%-28s %8d %12.2f %12s %8s\n", "oneDNN Relu primitive alone", 16, s * 1e6, "", "");
    }
    for (const std::string kind : {"Relu", "Add", "SgdUpdate", "Linear"})
        for (int64_t n : kind == "Linear" ? std::vector<int64_t>{16, 64, 128} : std::vector<int64_t>{16, 1024, 4096, 16384, 65536}) {
            const Graph g = chain(kind, n);
            double s[2];
            for (int k = 0; k < 2; ++k) {
                Executor ex(g, k == 0 ? all : small_serial);
                s[k] = per_unit([&] { ex.run_all(); }, rounds, kNodes);
            }
            std::printf("%-28s %8lld %12.2f %12.2f %8s\n", (kind + " node (executor)").c_str(), static_cast<long long>(kind == "Linear" ? n * n : n),
                        s[0] * 1e6, s[1] * 1e6, cpu::CpuBackend::serial(g, NodeId(g.num_nodes() - 1)) ? "yes" : "no");
        }
    // How many nodes of each zoo net's training step (SGD, the lowered graph that runs) are that small, at
    // the smaller of bench/validate_analyze.py's batch sizes.
    std::printf("\nsmall nodes (on one thread) per training step, f32:\n");
    for (const auto& [net, batch] : std::vector<std::pair<std::string, int64_t>>{
             {"lenet5", 16}, {"alexnet", 2}, {"vgg16", 1}, {"resnet18", 2}, {"resnet50", 1}, {"mobilenet_v2", 2}, {"bert-tiny", 8}, {"bert-base", 1}}) {
        zoo::NetConfig cfg;
        cfg.batch = batch;
        zoo::Model m = zoo::build(net, cfg);
        const LoweredGraph lg = lower(build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.01f, 0.9f)), Plan{});
        const Graph& g = lg.train.graph;
        size_t small = 0;
        for (size_t n = 0; n < g.num_nodes(); ++n) small += cpu::CpuBackend::serial(g, NodeId(n));
        std::printf("  %-14s batch %-3lld %4zu of %4zu nodes\n", net.c_str(), static_cast<long long>(batch), small, g.num_nodes());
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_overhead: error: %s\n", e.what());
    return 1;
}

// How fast the cost interface answers: every node of a ResNet-50 train graph (batch 32) costed on every
// device of data/hw, in f32 and in the device's low precision (bf16, else f16), best of 5 rounds.
//   build/bench_cost [net] [batch]
// The planner and the precision optimiser call cost() in their inner loops; the target is < 50 ms
// for 10 devices x 2 dtypes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "graph/autodiff.hpp"
#include "hw/device_spec.hpp"
#include "predict/device_model.hpp"
#include "zoo/zoo.hpp"

int main(int argc, char** argv) try {
    using namespace joule;
    const std::string net = argc > 1 ? argv[1] : "resnet50";
    zoo::NetConfig cfg;
    cfg.batch = argc > 2 ? std::stoll(argv[2]) : 32;
    zoo::Model m = zoo::build(net, cfg);
    const Graph g = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f)).graph;
    std::vector<predict::DeviceModel> devices;
    for (const hw::DeviceSpec& s : hw::load_all_specs()) devices.push_back(predict::load_device_model(s.path));
    double best = 1e30, sink = 0;
    size_t questions = 0;
    for (int round = 0; round < 5; ++round) {
        questions = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (const predict::DeviceModel& d : devices)
            for (DType t : {DType::F32, d.has(DType::BF16) ? DType::BF16 : DType::F16}) {
                if (!d.has(t)) continue;
                for (size_t i = 0; i < g.num_nodes(); ++i, ++questions) sink += predict::cost(g, NodeId(i), d, t).seconds;
            }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s batch %lld train graph: %zu nodes x %zu (device, dtype) pairs = %zu cost questions in %.1f ms (best of 5), %.2f us each%s\n",
                net.c_str(), static_cast<long long>(cfg.batch), g.num_nodes(), questions / g.num_nodes(), questions, best * 1e3, best * 1e6 / double(questions),
                sink > 0 ? "" : " (no cost?)");
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cost: error: %s\n", e.what());
    return 1;
}

// How fast the placement planner decides: each strategy (all but exact) on a net's training graph on a
// system, best of 3 rounds, with the placements it simulated and the plan's modelled time and energy.
//   build/bench_plan [net] [batch] [system]        (default resnet50 32 cpu+v100+s10)
// The planner issue's target: ResNet-50 under 100 ms per strategy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "plan/placement.hpp"
#include "zoo/zoo.hpp"

int main(int argc, char** argv) try {
    using namespace joule;
    const std::string net = argc > 1 ? argv[1] : "resnet50", system = argc > 3 ? argv[3] : "cpu+v100+s10";
    zoo::NetConfig cfg;
    cfg.batch = argc > 2 ? std::stoll(argv[2]) : 32;
    zoo::Model m = zoo::build(net, cfg);
    const TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
    const SystemModel sys = load_system_model(system);
    {
        const auto t0 = std::chrono::steady_clock::now();
        const PlacementProblem pp(tg, sys);
        const PlacementProblem::Placement p(pp.nodes(), sys.host);
        const auto t1 = std::chrono::steady_clock::now();
        const int n = 200;
        for (int i = 0; i < n; ++i) pp.evaluate(p);
        const auto t2 = std::chrono::steady_clock::now();
        std::printf("%s batch %lld on %s: %zu nodes, %zu atoms, %zu layers; problem built in %.1f ms (costs of every node on every device), one placement simulated in %.1f us\n",
                    net.c_str(), static_cast<long long>(cfg.batch), sys.system.name.c_str(), pp.nodes(), pp.atoms().size(), pp.layers().size(),
                    std::chrono::duration<double>(t1 - t0).count() * 1e3, std::chrono::duration<double>(t2 - t1).count() * 1e6 / n);
    }
    for (const char* s : {"cnnlab", "heft", "energy", "energy:0.1", "powercap:250", "powercap:150", "joint"}) {
        double best = 1e30;
        Placed p;
        for (int round = 0; round < 3; ++round) {
            const auto t0 = std::chrono::steady_clock::now();
            p = place(tg, sys, parse_strategy(s));
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::printf("%-14s %8.1f ms  %7ld placements simulated  -> %.2f ms, %.3f J, %.1f W capped (%s)\n", s, best * 1e3, p.evaluations, p.outcome.seconds * 1e3,
                    p.outcome.joules(), p.outcome.capped_watts, p.chosen.c_str());
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plan: error: %s\n", e.what());
    return 1;
}

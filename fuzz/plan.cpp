// Fuzz target: plan files — parsed, and lowered onto LeNet-5's training graph (so entries, storage and
// devices are resolved against a real graph, not only read).
#include "plan/passes.hpp"
#include "target.hpp"
#include "zoo/zoo.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const joule::TrainGraph tg = [] {
        joule::zoo::NetConfig cfg;
        cfg.batch = 2;
        joule::zoo::Model m = joule::zoo::build("lenet5", cfg);
        return joule::build_train_graph(std::move(m.graph), m.loss, joule::OptimizerConfig::sgd(0.1f, 0.9f));
    }();
    const std::string text(reinterpret_cast<const char*>(data), size);
    return joule::fuzz::expect_clean([&] {
        joule::Plan p = joule::parse_plan(text, "fuzz.yaml");
        p.fingerprint.clear();  // any graph: let the entries reach the passes
        joule::lower(tg, p);
    });
}

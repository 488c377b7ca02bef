// Fuzz target: ONNX model files -- imported (shapes resolved, patterns matched, shape arithmetic folded)
// and differentiated into a training graph, so every mapped node meets its shape rule.
#include "graph/autodiff.hpp"
#include "import/onnx.hpp"
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    return joule::fuzz::expect_clean([&] {
        joule::zoo::Model m = joule::import_onnx_bytes(bytes, "fuzz.onnx", {.batch = 2});
        joule::build_train_graph(std::move(m.graph), m.loss, joule::OptimizerConfig::sgd(0.1f, 0.9f));
    });
}

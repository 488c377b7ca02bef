// Sweeps: the software factors of the characterisation study (net, batch size, precision) and the
// hardware factor this machine controls (thread count), each configuration run for K training steps
// with time and energy per node, stored in a Store. Configurations already stored with at least K
// iterations are skipped (incremental), unless `force`.
//
//   profile::SweepOptions o;  o.nets = {"lenet5"};  o.batches = {8, 16, 32};
//   profile::Store db("joule-profile.db");
//   profile::run_sweep(db, o, [](const profile::SweepEvent& e) { ... });
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/autodiff.hpp"
#include "plan/passes.hpp"
#include "graph/tensor_desc.hpp"
#include "profile/store.hpp"
#include "runtime/energy_recorder.hpp"
#include "zoo/zoo.hpp"

namespace joule::profile {

struct SweepOptions {
    std::vector<std::string> nets = {"lenet5"};
    std::vector<int64_t> batches = {8, 16, 32};
    std::vector<DType> dtypes = {DType::F32};
    PrecisionScope scope = PrecisionScope::Gemm;  // which ops a low dtype covers (keyed "bf16" / "bf16-all")
    std::vector<int> threads = {0};  // 0: all cores
    int64_t iters = 5, warmup = 2;
    int64_t image_size = 0, seq_len = 128;
    std::string meter = "auto", device_spec;
    EnergyOptions energy;
    bool force = false;
};

struct SweepEvent {
    ConfigKey key;
    bool skipped = false;        // already in the store
    std::string meter_message;   // the meter line (when run)
    const ConfigRecord* record = nullptr;
    // when run: the graph it executed, its devices, each measured step's node spans and their energy
    const Graph* graph = nullptr;
    std::vector<std::string> devices;
    const std::vector<std::vector<energy::NodeSpan>>* spans = nullptr;
    const EnergyResult* energy = nullptr;
};

// The training graph a sweep runs for one configuration (SGD with momentum, lowered under the built-in
// precision plan for `dtype` on the GEMMs of `device`, casts included), so that whoever reads the
// records (calibration) rebuilds exactly what was measured.
struct ProfiledModel {
    zoo::Model model;  // its graph moved into `lowered`; input, labels, logits, vocab stay
    LoweredGraph lowered;
};
ProfiledModel profiled_model(const std::string& net, int64_t batch, const std::string& precision, int64_t image_size, int64_t seq_len,
                             const Backend& device);

// A configuration's precision as the store keys it: "f32", "bf16" (the built-in plan: conv / linear /
// matmul in bf16) or "bf16-all" (every op the cpu runs in bf16: calibrates the non-GEMM bf16 kinds).
std::string precision_key(DType dtype, PrecisionScope scope);
std::pair<DType, PrecisionScope> parse_precision_key(const std::string& key);

// Runs every configuration; returns how many were run (not skipped).
int run_sweep(Store& store, const SweepOptions& o, const std::function<void(const SweepEvent&)>& on_event = {});

// Parses "8,16,32"; throws Error naming the flag on anything but positive integers.
std::vector<int64_t> parse_int_list(const std::string& s, const std::string& flag, bool allow_zero = false);
std::vector<std::string> parse_list(const std::string& s, const std::string& flag);

}  // namespace joule::profile

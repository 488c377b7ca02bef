// Plan: the one answer to "where and how does each node of a TrainGraph run" — per node a device
// ("backend[:spec]") and a compute dtype, per tensor a storage dtype where it differs from the
// default — and the fingerprint of the graph it was made for, so a plan for another graph is refused.
//
//   Plan p = precision_plan(tg, DType::BF16, PrecisionScope::Gemm, cpu);   // `--dtype bf16`
//   Plan q = read_plan_file("my.plan.yaml");                              // `--plan FILE`
//   LoweredGraph lg = lower(std::move(tg), q, {});                          // passes.hpp
//
// Entries, in the order a plan file lists them:
//   - a layer entry (`layer: GLOB`) covers every node whose source layer's name matches the glob:
//     forward, backward and optimizer-update nodes; the first matching layer entry wins;
//   - a node entry (`node: NAME`) names one node exactly and overrides any layer entry for it.
// A layer entry's dtype is the layer's compute precision; it does not apply to f32-only ops (the loss and
// optimizer updates: f32 master weights and f32 optimizer state stay, see f32_only_op()). A node entry
// asking an f32-only op for another dtype is an error.
//
// Room for what later issues add: per-device settings (power limit, clock) and per-node backend options
// (e.g. an FPGA kernel configuration) are carried through to the executor and the cost model.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "graph/autodiff.hpp"

namespace joule {

struct PlanEntry {
    enum class Match : uint8_t { Layer, Node } match = Match::Layer;
    std::string pattern;                 // glob over layer names (* ?), or an exact node name
    std::optional<std::string> device;   // "backend[:spec]"
    std::optional<DType> dtype;          // compute precision
    std::map<std::string, std::string> options;  // backend options for the nodes it covers
    std::string origin;                  // "file.yaml:12" or "built-in <name>", for messages
};

struct StorageEntry {
    std::string tensor;  // exact tensor name
    DType dtype = DType::F32;
    std::string origin;
};

struct DeviceSettings {
    std::optional<double> power_limit_w, clock_mhz;
    std::optional<std::string> fpga_design;  // an FPGA's bitstream (predict::FpgaDesign's text, checked on reading)
};

struct Plan {
    std::string name;          // "f32", "bf16 (gemm)", or the file path
    std::string fingerprint;   // of the TrainGraph it was made for; empty: built in, fits any graph
    std::string model;         // informative: the net or model file, and the batch
    int64_t batch = 0;
    std::string default_device = "cpu";
    DType default_dtype = DType::F32;
    std::vector<PlanEntry> entries;
    std::vector<StorageEntry> storage;
    std::map<std::string, DeviceSettings> devices;
    std::string origin;        // where the defaults come from (file, line)
};

// Hash of the graph a plan is made for: every node's name and op, every tensor's name, role, shape and
// layout (so the net, the batch and the input size), before any pass. 16 hex digits.
std::string fingerprint(const TrainGraph& tg);

bool glob_match(const std::string& pattern, const std::string& text);  // * and ?

// The layer a node belongs to: the name of the forward node it came from.
const std::string& layer_of(const Graph& g, NodeId n);

// `--dtype D --dtype-scope gemm|all` as a plan for one device: D on the conv / linear / matmul nodes
// (PyTorch autocast's list) and the nodes that only move data between them (moves_data_only, every input
// and reader in D), or on every node the device's backend supports in D; weight gradients of low-precision
// GEMMs stored in f32 (the kernel writes them directly, the update reads f32). f32 gives the plan with no
// entries. The one function behind train, profile, analyze and inspect's --dtype.
enum class PrecisionScope : uint8_t { Gemm, All };
PrecisionScope parse_precision_scope(const std::string& s);
Plan precision_plan(const TrainGraph& tg, DType dtype, PrecisionScope scope, const Backend& device);
// The same for a device that is modelled, not run (`joule predict`): `runs` says whether it computes a
// node in dtype (scope `all`).
using RunsInDtype = std::function<bool(const Graph&, NodeId, DType)>;
Plan precision_plan(const TrainGraph& tg, DType dtype, PrecisionScope scope, const std::string& device, const RunsInDtype& runs);

// Plan files (YAML, `version: 1`): read with errors naming file, line and entry; written so that
// read_plan_file(write) gives the same plan.
Plan read_plan_file(const std::string& path);
Plan parse_plan(const std::string& text, const std::string& origin);
std::string plan_to_yaml(const Plan& p);

}  // namespace joule

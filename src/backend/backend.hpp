// The device interface every backend implements (ggml's backend interface, oneDNN's "validate, then
// execute"): a backend first answers whether it can run a node, then prepares a kernel bound to the
// node's buffers, then runs it any number of times.
//
//   Support s = backend.supports(graph, n);          // {ok, reason}
//   std::unique_ptr<Kernel> k = backend.prepare(graph, n, inputs, outputs);
//   k->run({.training = true});
//
// Backends are created by name through backend/registry.hpp; nothing outside it names a backend class.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace joule {

struct RunContext {
    bool training = true;  // false: BatchNorm uses running statistics, Dropout is the identity
    // This step's optimizer hyperparameters (runtime/step.hpp sets them): the learning rate is the
    // update node's times lr_scale (a schedule), and every update reads its gradient times grad_scale
    // (1 / micro-batches accumulated, times the global-norm clipping factor).
    float lr_scale = 1, grad_scale = 1;
    // Which pass this is, for kernels whose result depends on it; the runtime keeps the counts, so a
    // checkpoint holds them: `run` numbers a training run's forward/backward passes (Dropout's mask),
    // `step` its optimizer steps from 1 (Adam's bias correction).
    uint64_t run = 0;
    int64_t step = 1;
    // A data-parallel job's process computes shard `shard` of each global batch (batch-major tensors): its
    // dropout element i is the global batch's element shard x n + i, so masks do not depend on how many
    // processes share the batch.
    int64_t shard = 0;
    // False for the micro-batches of an accumulated step before the last: the all-reduce nodes do nothing
    // (the runtime keeps the gradients' sum and the last micro-batch all-reduces it: DDP's no_sync).
    bool reduce = true;
};

struct Support {
    bool ok = true;
    std::string reason;  // why not, when !ok
};

// Where a kernel's time comes from: the wall clock of a device that really runs here, or predict/'s
// model of a device that is emulated (its results are real, its time and energy are not measurable).
enum class TimeSource : uint8_t { Measured, Modelled };
const char* time_source_name(TimeSource s);  // "measured" | "modelled"

// A node's prepared kernel, bound to the buffers it was prepared with.
class Kernel {
public:
    virtual ~Kernel() = default;
    virtual void run(const RunContext& ctx) = 0;
    // Emulated devices: the modelled seconds of the last run (the wall time of run() is then CPU time
    // spent emulating, reported apart). Devices that really run: nullopt, the executor measures.
    virtual std::optional<double> modelled_seconds() const { return std::nullopt; }
    // ... and its modelled energy above the device's idle power (joules), when modelled_seconds() is set.
    virtual double modelled_joules() const { return 0; }
};

class Backend {
public:
    virtual ~Backend() = default;
    // The plan device this backend runs ("cpu", "reference", later "fpga_emu:s10").
    virtual const std::string& device() const = 0;
    virtual Support supports(const Graph& g, NodeId n) const = 0;
    // Buffers are in the node's input/output order; each holds the tensor in its TensorDesc's dtype
    // (storage dtype: f32, bf16, i32 for indices and labels, u8 for small arg-max indices) and layout.
    virtual std::unique_ptr<Kernel> prepare(const Graph& g, NodeId n, const std::vector<void*>& inputs,
                                            const std::vector<void*>& outputs) = 0;
    virtual int threads() const = 0;
    virtual TimeSource time_source() const { return TimeSource::Measured; }
};

// The storage layouts a backend's kernels want for a node's operands, per input and per output (nullopt:
// no wish: the layout the tensor has before the pass), and the inputs its kernels read in whatever layout
// they are stored (no reorder before them, no say in a parameter's layout); plan/'s layout pass asks
// (registry.hpp: layout_wishes).
struct LayoutWishes {
    std::vector<std::optional<TensorDesc>> inputs, outputs;
    OperandMask any_inputs = 0;
    static LayoutWishes none(const Node& n) {  // one empty wish per operand
        return {std::vector<std::optional<TensorDesc>>(n.inputs.size()), std::vector<std::optional<TensorDesc>>(n.outputs.size())};
    }
};
// Whether any operand of node n is stored in a blocked layout (backends that read none refuse such nodes).
bool has_blocked_operand(const Graph& g, NodeId n);

// The dtype contract of graph/ops.hpp every backend checks in supports(): each floating-point input
// and output is stored in the node's compute dtype, except the op's f32 operands (OpInfo::f32_inputs /
// f32_outputs), which are f32, and an update's parameter copies (is_low_copy_input), which are bf16; outputs in
// `f32_allowed` may also be stored in f32 (a kernel that writes f32 directly, e.g. weight gradients of a
// bf16 GEMM), those in `bf16_allowed` in bf16 (a kernel that rounds as it stores: stores_output_low).
Support check_dtypes(const Graph& g, NodeId n, OperandMask f32_allowed = 0, OperandMask bf16_allowed = 0);
// The masks of check_dtypes for a host backend computing in f32 and bf16 (cpu, reference): a bf16 GEMM's
// output 0 may be f32 (gemm_may_write_f32), an f32 node's output 0 may be bf16 (stores_output_low).
Support check_host_dtypes(const Graph& g, NodeId n);

// What every host backend that computes in f32 and bf16 (cpu, reference) answers alike: a transfer runs
// on its destination device, a cast converts between any floating-point dtypes, other nodes compute in
// f32 or bf16, loss and updates in f32 (f32_only_op), embeddings on the f32 table; ok means "no objection
// so far": the backend adds its own checks and then check_dtypes().
Support f32_bf16_support(const Graph& g, NodeId n, const std::string& device, const std::string& backend);

// Whether `backend` can run node n of g in `dtype` (asks supports() with Node::compute set to it and
// the node's floating-point operands stored as that compute dtype would store them).
bool supports_in(const Backend& backend, const Graph& g, NodeId n, DType dtype);

}  // namespace joule

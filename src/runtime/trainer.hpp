// Trainer: a whole training run — build the net, its TrainGraph and an Executor, feed batches, report
// progress, evaluate test accuracy, and time every node.
//
//   TrainOptions o;                 // defaults: LeNet-5 on Fashion-MNIST, 1 epoch, Adam lr 2e-3, b64
//   TrainResult r = train(o, [](const TrainProgress& p) { ... });
//   r.test_accuracy, r.layers (per-layer forward / backward / update time per step)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <optional>

#include "graph/autodiff.hpp"
#include "graph/tensor_desc.hpp"
#include "plan/plan.hpp"
#include "runtime/energy_recorder.hpp"
#include "runtime/step.hpp"
#include "zoo/zoo.hpp"

namespace joule {

struct EvalProgress {
    int64_t samples, total;  // test images evaluated so far, to evaluate
    double images_per_s;     // so far (measured)
};

struct TrainOptions {
    std::string net = "lenet5";
    std::string model_file;  // an ONNX model to train instead of the zoo net (import/onnx.hpp); `net` names it
    std::string labels;      // the model's labels input (OnnxImportOptions::labels)
    std::string dataset = "fashion-mnist";  // or "synthetic"
    std::string data_dir;                   // empty: data::kDefaultFashionMnistDir
    int64_t epochs = 1;
    int64_t batch = 64;
    int64_t steps = 0;       // > 0: at most this many steps per epoch
    int64_t warmup = 1;      // first steps left out of the timings (oneDNN compiles kernels on first use)
    int64_t image_size = 0;  // synthetic images: 0 = the net's default
    int64_t seq_len = 128;   // BERT nets
    OptimizerConfig optimizer = OptimizerConfig::adam(2e-3f);
    // The loop around it (runtime/step.hpp): micro-batches of `batch` per optimizer step (steps and
    // epochs count optimizer steps), gradient clipping by global norm, a learning-rate schedule.
    int64_t accumulate = 1;
    double clip_norm = 0;
    LrSchedule schedule;
    // Checkpoints (runtime/checkpoint.hpp): into checkpoint_dir every checkpoint_every optimizer steps and
    // after the last (0: at the end of each epoch); resume_dir: continue the run a checkpoint holds.
    std::string checkpoint_dir, resume_dir;
    std::string save_onnx;  // after training, the trained model (forward graph, weights) as ONNX (import/onnx.hpp)
    int64_t checkpoint_every = 0;
    int threads = 0;  // 0: all cores
    // What runs where and in which precision: a plan file, or the built-in precision plan for the cpu
    // (dtype on conv / linear / matmul — autocast's list — or on every op the cpu runs in it).
    std::string plan_file;
    std::optional<Plan> plan;  // a plan made in memory (joule amp --measure); wins over plan_file
    std::function<Plan(const TrainGraph&)> plan_for;  // a plan made for the run's own graph (joule train --strategy); next
    std::string amp;           // a mixed-precision policy (plan/amp.hpp) instead: off, greedy, autocast, campo, optimal
                               // (campo and optimal cost with device_spec's model of this CPU)
    DType dtype = DType::F32;
    PrecisionScope scope = PrecisionScope::Gemm;
    uint64_t seed = 1;
    // energy (joule train --energy)
    bool energy = false;
    std::string meter = "auto";   // auto | rapl | perf | nvml | modelled
    std::string device_spec;      // data/hw spec name or path for the modelled meter ("" = match this CPU)
    EnergyOptions energy_options;
    std::function<void(const std::string&)> on_meter;  // told the meter line before training starts
    // Test-set evaluation (Fashion-MNIST): at most this many test images, the first ones (< 0: all; 0: none),
    // with progress after each batch.
    int64_t eval_samples = -1;
    std::function<void(const EvalProgress&)> on_eval_progress;
    bool trace = false;  // keep every timed step's node spans (TrainResult::traced_steps)
    // Data-parallel (a job of dist::world()'s processes, started by mpirun): `batch` is the global batch,
    // each process takes its shard of every one; gradients are averaged in buckets of this size.
    size_t bucket_bytes = size_t(25) << 20;
};

struct TrainProgress {
    int64_t epoch, step, steps_per_epoch;
    double loss;            // running mean over the epoch so far
    double images_per_s;    // over the epoch so far
    double lr = 0;          // this step's learning rate
};

struct LayerTime {
    std::string name, kind;  // forward layer and its op kind
    double forward_s = 0, backward_s = 0, update_s = 0;  // per step (measured, or modelled where `modelled`)
    bool modelled = false;                              // some of its nodes ran on an emulated device
    double flops = 0;                                   // per step, all phases
    double forward_j = 0, backward_j = 0, update_j = 0;  // per step, above idle (when energy was recorded)
};

struct EpochResult {
    double loss = 0, seconds = 0, images_per_s = 0;
    int64_t steps = 0;
};

// What a trace says of a node: names, shapes_of() ("f32[64, 1, 28, 28] f32[6, 1, 5, 5] f32[6] -> f32[64,
// 6, 28, 28]") and its FLOPs and bytes read and written.
struct TracedNode {
    std::string name, phase, op, dtype, shapes;
    double flops = 0, bytes = 0;
};
std::vector<TracedNode> traced_nodes(const Graph& g);  // per node id

struct TrainResult {
    std::string net, dataset, dtype;
    int threads = 0;
    int64_t batch = 0, parameters = 0;
    int64_t accumulate = 1;  // micro-batches of `batch` per optimizer step
    double last_lr = 0;      // the last step's learning rate
    int64_t resumed_at_step = 0;  // optimizer steps a resumed checkpoint had done
    int64_t first_epoch = 0;      // epochs[0]'s index: a resumed run's start at its checkpoint's epoch
    int64_t checkpoints = 0;      // written
    std::vector<EpochResult> epochs;
    double test_accuracy = -1;  // < 0: no test set (synthetic data)
    int64_t test_samples = 0;
    std::string plan;           // the plan's name (built-in or file)
    int64_t casts = 0, transfers = 0;  // nodes the plan implied
    // One training step after warm-up, as the schedule of its node times (sequential: the sum), and
    // the part of it that is modelled (nodes on emulated devices); the measured wall time of a step
    // beside it; host time spent emulating (part of the wall time, charged to no device's node).
    double step_seconds = 0, step_modelled_seconds = 0, step_wall_seconds = 0, emulation_seconds = 0;
    double cast_seconds = 0;  // the part of step_seconds the plan's dtype casts took (not its pure reorders)
    struct DeviceTime {
        std::string device;
        double seconds = 0;  // per step
        bool modelled = false;
        int64_t nodes = 0;
    };
    std::vector<DeviceTime> devices;
    int64_t timed_steps = 0;
    std::vector<LayerTime> layers;
    size_t buffer_bytes = 0, unshared_bytes = 0;
    std::optional<EnergyResult> energy;
    // With TrainOptions::trace: what each node of the run's graph (casts and transfers included) is, and
    // each timed step's node spans (steady clock; NodeSpan::device indexes `devices`)
    std::vector<TracedNode> traced_nodes;
    std::vector<std::vector<energy::NodeSpan>> traced_steps;
    std::vector<double> step_losses;  // every optimizer step this run took (the global batch's mean loss)
    // Data-parallel jobs: one row per process (rank order), from what each measured.
    struct Rank {
        std::string host;
        double step_seconds = 0;       // wall time per timed step
        double allreduce_seconds = 0;  // per step in the all-reduce nodes (packing, waiting, averaging)
        double wait_seconds = 0;       // per step waiting for the sums: communication backward did not hide
        double allreduces = 0;         // per step: buckets all-reduced (once per step, also with accumulation)
        double joules = -1;            // per step, total (< 0: no energy recorded)
        bool joules_measured = false;
    };
    std::vector<Rank> ranks;
    int64_t allreduce_buckets = 0;
    double cluster_joules = -1;  // per step, over the job's hosts (a host's meter counted once)
};

TrainResult train(const TrainOptions& opts, const std::function<void(const TrainProgress&)>& on_progress = {});

namespace data {
class SyntheticData;
}
// Fills a model's input (N(0,1) images or uniform tokens) and labels with synthetic data: the global
// batch of `ranks` shards as one process would draw it, of which this executor's batch is shard `rank`.
void fill_synthetic(Executor& ex, const zoo::Model& m, data::SyntheticData& synth, int rank = 0, int ranks = 1);

// Per-layer time table from an executor's node timings (divided by `steps`).
class Executor;
// With `energy`, each layer also gets its energy per step.
std::vector<LayerTime> layer_times(const Executor& ex, int64_t steps, const EnergyResult* energy = nullptr);

}  // namespace joule

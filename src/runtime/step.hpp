// One optimizer step of a training graph as PyTorch's usual loop runs it: gradients accumulated over
// micro-batches, clipped by their global norm, the learning rate from a warm-up and a schedule.
//
//   StepRunner runner(ex, tg, {.accumulate = 4, .clip_norm = 1.0, .schedule = s, .total_steps = 1000});
//   fill_inputs(ex);  // micro-batch 0
//   StepResult r = runner.step([&](int64_t micro) { fill_inputs(ex); }, [](float loss) { /* throw if bad */ });
//
// The learning rate and the gradient's scale reach the update kernels through RunContext (lr_scale,
// grad_scale), so the graph is the same with and without them. The sums over micro-batches and the
// global norm are passes over the f32 gradients on the host (part of the step's wall time; no node of
// the plan): the sums join the last micro-batch's gradients just before they are read -- before each
// all-reduce bucket starts in a data-parallel job, which then all-reduces once per step (RunContext::
// reduce is false for the other micro-batches), else before the first update.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/autodiff.hpp"

namespace joule {

class Executor;

// PyTorch's schedulers: a linear warm-up (LinearLR from warmup_start to 1 over `warmup` steps), then
// (SequentialLR) constant, cosine (CosineAnnealingLR to min_lr over the remaining steps) or step decay
// (StepLR: times gamma every step_size steps).
struct LrSchedule {
    enum class Kind : uint8_t { Constant, Cosine, Step } kind = Kind::Constant;
    int64_t warmup = 0;
    double warmup_start = 0.01;
    double min_lr = 0;
    int64_t step_size = 0;
    double gamma = 0.1;
    // The learning rate of optimizer step t (0-based) of a run of `total` steps, from the base rate.
    double lr(int64_t t, int64_t total, double base) const;
};
// "constant", "cosine" or "step"; anything else is an Error naming it.
LrSchedule::Kind parse_lr_schedule(const std::string& s);

struct StepOptions {
    int64_t accumulate = 1;  // micro-batches per optimizer step; their gradients are averaged
    double clip_norm = 0;    // > 0: gradients scaled to at most this global L2 norm (clip_grad_norm_)
    LrSchedule schedule;
    int64_t total_steps = 0;  // optimizer steps in the run (the cosine's length)
    int64_t shard = 0;        // a data-parallel job's process: its shard of each global batch (RunContext::shard)
};

struct StepResult {
    double loss = 0;       // mean over the micro-batches
    double lr = 0;         // the step's learning rate
    double grad_norm = 0;  // of the averaged gradient before clipping (computed when clip_norm > 0)
    double clip = 1;       // the factor clipping applied
};

class StepRunner {
public:
    // Throws Error for options out of range.
    StepRunner(Executor& ex, const TrainGraph& tg, const OptimizerConfig& opt, StepOptions o);
    // One optimizer step: per micro-batch i, forward and loss run, check(loss) may throw (before the
    // backward and any update), backward runs and its gradients are summed; then the updates run once.
    // Micro-batch 0's inputs are in place when step() is called (filling them stays out of a timed
    // step, as with no accumulation); feed(i) fills micro-batch i >= 1.
    StepResult step(const std::function<void(int64_t micro)>& feed, const std::function<void(float loss)>& check = {});
    int64_t steps_done() const { return t_; }
    uint64_t passes_done() const { return runs_; }  // forward/backward passes (micro-batches)
    // Where a resumed run continues (a checkpoint's counts): the next step's Adam correction and dropout masks.
    void resume_at(int64_t steps_done, uint64_t passes_done) { t_ = steps_done, runs_ = passes_done; }

private:
    Executor& ex_;
    const TrainGraph& tg_;
    double base_lr_;
    StepOptions o_;
    std::vector<float*> grads_;  // what each update node reads as its gradient
    std::vector<int64_t> sizes_;
    struct Accumulated {          // accumulate > 1: a gradient summed over the micro-batches
        float* grad;
        int64_t n;
        NodeId before;            // the node that reads it first (a bucket's all-reduce start, or the first update)
        std::vector<float> sum;   // the micro-batches' so far
    };
    std::vector<Accumulated> acc_;  // in `before` order
    int64_t t_ = 0;
    uint64_t runs_ = 0;
};

}  // namespace joule

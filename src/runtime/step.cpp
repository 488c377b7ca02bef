#include "runtime/step.hpp"

#include <cmath>
#include <numbers>

#include "graph/error.hpp"
#include "runtime/executor.hpp"

namespace joule {

double LrSchedule::lr(int64_t t, int64_t total, double base) const {
    if (t < warmup) return base * (warmup_start + (1 - warmup_start) * double(t) / double(warmup));
    const int64_t s = t - warmup;  // the main schedule's own step
    switch (kind) {
        case Kind::Constant: return base;
        case Kind::Cosine: {
            const double length = double(std::max<int64_t>(total - warmup, 1));
            return min_lr + (base - min_lr) * (1 + std::cos(std::numbers::pi * double(s) / length)) / 2;
        }
        case Kind::Step: return base * std::pow(gamma, double(s / std::max<int64_t>(step_size, 1)));
    }
    return base;
}

LrSchedule::Kind parse_lr_schedule(const std::string& s) {
    if (s == "constant") return LrSchedule::Kind::Constant;
    if (s == "cosine") return LrSchedule::Kind::Cosine;
    if (s == "step") return LrSchedule::Kind::Step;
    throw Error("unknown learning-rate schedule '" + s + "'", "use constant, cosine or step");
}

StepRunner::StepRunner(Executor& ex, const TrainGraph& tg, const OptimizerConfig& opt, StepOptions o) : ex_(ex), tg_(tg), base_lr_(opt.lr), o_(o) {
    const LrSchedule& s = o_.schedule;
    if (o_.accumulate < 1) throw Error("--accumulate must be >= 1, got " + std::to_string(o_.accumulate));
    if (!std::isfinite(o_.clip_norm) || o_.clip_norm < 0) throw Error("--clip-norm must be a non-negative finite number, got " + std::to_string(o_.clip_norm));
    if (s.warmup < 0) throw Error("--lr-warmup must be >= 0, got " + std::to_string(s.warmup));
    if (!(s.warmup_start > 0 && s.warmup_start <= 1)) throw Error("--lr-warmup-start must be in (0, 1], got " + std::to_string(s.warmup_start));
    if (s.kind == LrSchedule::Kind::Cosine) {
        if (!std::isfinite(s.min_lr) || s.min_lr < 0 || s.min_lr > base_lr_)
            throw Error("--lr-min must be in [0, --lr], got " + std::to_string(s.min_lr) + " with --lr " + std::to_string(base_lr_));
        if (o_.total_steps <= s.warmup)
            throw Error("--lr-schedule cosine decays over the steps after the warm-up, but the run has " + std::to_string(o_.total_steps) +
                            " optimizer step(s) and --lr-warmup is " + std::to_string(s.warmup),
                        "train for more steps or shorten the warm-up");
    }
    if (s.kind == LrSchedule::Kind::Step) {
        if (s.step_size < 1) throw Error("--lr-schedule step needs --lr-step-size >= 1, got " + std::to_string(s.step_size));
        if (!(s.gamma > 0 && s.gamma <= 1)) throw Error("--lr-gamma must be in (0, 1], got " + std::to_string(s.gamma));
    }
    const Graph& g = tg.graph;
    for (size_t n = size_t(tg.first_update); n < g.num_nodes(); ++n) {
        const Node& node = g.node(NodeId(n));
        if (node.kind != OpKind::SgdUpdate && node.kind != OpKind::AdamUpdate) continue;
        const TensorId grad = node.inputs[1];
        if (g.tensor(grad).desc.dtype != DType::F32)
            throw InternalError("update '" + node.name + "' reads a " + dtype_name(g.tensor(grad).desc.dtype) + " gradient; updates take f32");
        grads_.push_back(static_cast<float*>(ex.data(grad)));  // element-wise below: any layout, over its storage
        sizes_.push_back(g.tensor(grad).desc.storage_numel());
    }
    if (o_.accumulate == 1) return;
    // what accumulates: each all-reduce bucket's gradients, joined just before its start, so a
    // data-parallel job all-reduces once per step (DDP's no_sync); without buckets, what the updates read,
    // joined after backward
    for (NodeId n = tg.first_backward; n < tg.first_update; ++n)
        if (g.node(n).kind == OpKind::AllReduceStart)
            for (TensorId t : g.node(n).inputs) acc_.push_back({ex.f32(t), g.tensor(t).desc.numel(), n, std::vector<float>(size_t(g.tensor(t).desc.numel()))});
    if (acc_.empty())
        for (size_t p = 0; p < grads_.size(); ++p) acc_.push_back({grads_[p], sizes_[p], tg.first_update, std::vector<float>(size_t(sizes_[p]))});
}

StepResult StepRunner::step(const std::function<void(int64_t)>& feed, const std::function<void(float)>& check) {
    StepResult r;
    const NodeId end = NodeId(tg_.graph.num_nodes());
    const int64_t k = o_.accumulate;
    for (int64_t i = 0; i < k; ++i) {
        if (i > 0) feed(i);
        const bool last = i + 1 == k;
        const RunContext pass{.training = true, .run = runs_++, .step = t_ + 1, .shard = o_.shard, .reduce = last};
        ex_.run(0, tg_.first_backward, pass);
        const float loss = ex_.f32(tg_.loss)[0];
        if (check) check(loss);
        r.loss += double(loss) / double(k);
        if (!last) {
            ex_.run(tg_.first_backward, tg_.first_update, pass);
            // the sum so far, kept aside while the next micro-batch's backward overwrites the gradients
            for (Accumulated& a : acc_) {
                float* s = a.sum.data();
                const float* g = a.grad;
                const int64_t n = a.n;
                if (i == 0) std::copy(g, g + n, s);
                else {
#pragma omp parallel for simd schedule(static)
                    for (int64_t j = 0; j < n; ++j) s[j] += g[j];
                }
            }
            continue;
        }
        // the last micro-batch: the sums join its gradients just before they are read (one pass per
        // micro-batch, as PyTorch's .grad += does), bucket by bucket as backward reaches each start
        NodeId done = tg_.first_backward;
        for (Accumulated& a : acc_) {
            if (a.before > done) ex_.run(done, a.before, pass), done = a.before;
            float* g = a.grad;
            const float* s = a.sum.data();
            const int64_t n = a.n;
#pragma omp parallel for simd schedule(static)
            for (int64_t j = 0; j < n; ++j) g[j] += s[j];
        }
        ex_.run(done, tg_.first_update, pass);
    }
    // the gradient the updates use: the micro-batches' mean, clipped to clip_norm
    double scale = 1.0 / double(k);
    if (o_.clip_norm > 0) {
        double sq = 0;
        for (size_t p = 0; p < grads_.size(); ++p) {
            const float* g = grads_[p];
            const int64_t n = sizes_[p];
#pragma omp parallel for simd schedule(static) reduction(+ : sq)
            for (int64_t j = 0; j < n; ++j) sq += double(g[j]) * double(g[j]);
        }
        r.grad_norm = std::sqrt(sq) * scale;
        r.clip = std::min(1.0, o_.clip_norm / (r.grad_norm + 1e-6));  // torch.nn.utils.clip_grad_norm_
        scale *= r.clip;
    }
    r.lr = o_.schedule.lr(t_, o_.total_steps, base_lr_);
    ex_.run(tg_.first_update, end, {.training = true, .lr_scale = float(r.lr / base_lr_), .grad_scale = float(scale), .step = t_ + 1});
    ++t_;
    return r;
}

}  // namespace joule

// runtime/step: the training loop around the graph -- AdamW, learning-rate warm-up with cosine and step
// schedules, clipping by global norm, gradient accumulation -- against PyTorch 1.13 itself (Debian's
// python3-torch, which scripts/setup.sh installs): LeNet-5 from joule's initial weights, the same
// micro-batches, PyTorch's optimizers, clip_grad_norm_ and schedulers (tests/pytorch_training_loop.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/cpu/cpu_backend.hpp"
#include "graph/error.hpp"
#include "runtime/executor.hpp"
#include "runtime/step.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

struct Case {
    const char* name;
    OptimizerConfig opt;
    StepOptions step;
};

// The share of a's elements further than 1e-4 relative (and 1e-7 absolute) from b's.
double share_apart(const std::vector<float>& a, const std::vector<double>& b) {
    size_t apart = 0;
    for (size_t i = 0; i < a.size(); ++i) apart += std::abs(a[i] - b[i]) > 1e-4 * std::abs(b[i]) + 1e-7;
    return double(apart) / double(a.size());
}

double max_abs_difference(const std::vector<float>& a, const std::vector<double>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TrainingLoop : public ::testing::TestWithParam<Case> {};

TEST_P(TrainingLoop, MatchesPyTorch) {
    const Case& c = GetParam();
    const int64_t batch = 4, steps = 6, k = c.step.accumulate;
    zoo::NetConfig cfg;
    cfg.batch = batch;
    zoo::Model m = zoo::build("lenet5", cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, c.opt);
    cpu::CpuBackend cpu(1);
    Executor ex(tg.graph, cpu, {{m.logits, tg.loss}, 7});
    // the run's inputs and joule's initial weights, for PyTorch
    nlohmann::json in = {{"batch", batch}, {"steps", steps}, {"accumulate", k}, {"clip_norm", c.step.clip_norm}};
    const char* kinds[] = {"sgd", "adam", "adamw"};
    in["optimizer"] = {{"kind", kinds[int(c.opt.kind)]}, {"lr", c.opt.lr}, {"momentum", c.opt.momentum}, {"weight_decay", c.opt.weight_decay}};
    const LrSchedule& s = c.step.schedule;
    const char* schedules[] = {"constant", "cosine", "step"};
    in["schedule"] = {{"kind", schedules[int(s.kind)]}, {"warmup", s.warmup}, {"warmup_start", s.warmup_start}, {"min_lr", s.min_lr},
                      {"step_size", s.step_size}, {"gamma", s.gamma}};
    const std::vector<TensorId> params = tg.graph.tensors_with_role(TensorRole::Parameter);
    for (TensorId p : params) in["params"][tg.graph.tensor(p).name] = ex.read_f32(p);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    std::vector<float> images(size_t(steps * k * batch * 28 * 28));
    std::vector<int32_t> labels(size_t(steps * k * batch));
    for (float& x : images) x = normal(rng);
    for (int32_t& y : labels) y = int32_t(rng() % 10);
    in["images"] = images, in["labels"] = labels;
    const std::string dir = ::testing::TempDir() + "joule_loop_" + std::to_string(getpid()) + "_" + c.name;
    std::ofstream(dir + ".in.json") << in.dump();
    const std::string cmd = "/usr/bin/python3 " JOULE_TESTS_DIR "/pytorch_training_loop.py " + dir + ".in.json " + dir + ".out.json";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (scripts/setup.sh installs python3-torch)";
    std::ifstream out_file(dir + ".out.json");
    const nlohmann::json torch = nlohmann::json::parse(out_file);

    StepOptions o = c.step;
    o.total_steps = steps;
    StepRunner runner(ex, tg, c.opt, o);
    const int64_t per = batch * 28 * 28;
    for (int64_t t = 0; t < steps; ++t) {
        auto feed = [&](int64_t i) {
            const int64_t mb = t * k + i;
            std::copy(images.begin() + mb * per, images.begin() + (mb + 1) * per, ex.f32(m.input));
            std::copy(labels.begin() + mb * batch, labels.begin() + (mb + 1) * batch, ex.i32(m.labels));
        };
        feed(0);
        const StepResult r = runner.step(feed);
        const double lr = torch["lr"][t], loss = torch["loss"][t], norm = torch["grad_norm"][t];
        EXPECT_NEAR(r.lr, lr, 1e-6 * lr) << "step " << t;
        EXPECT_NEAR(r.loss, loss, 1e-5 * loss) << "step " << t;
        if (o.clip_norm > 0) {
            EXPECT_NEAR(r.grad_norm, norm, (t == 0 ? 1e-4 : 1e-3) * norm) << "step " << t;  // after the first step, Adam's few (below)
        }
    }
    EXPECT_EQ(runner.steps_done(), steps);
    // Every weight within 1e-4 of PyTorch's, but Adam's few: its first steps move each weight by about
    // lr whatever the size of its gradient, so a gradient within float rounding of zero, whose sign
    // the order of summation decides, moves its weight by up to 2 lr per step either way.
    const bool adam = c.opt.kind != OptimizerConfig::Kind::Sgd;
    for (TensorId p : params) {
        const std::string& name = tg.graph.tensor(p).name;
        const std::vector<float> got = ex.read_f32(p);
        const std::vector<double> want = torch["params"][name].get<std::vector<double>>();
        EXPECT_LE(share_apart(got, want), adam ? 0.002 : 0.0) << name;
        if (adam) {
            EXPECT_LE(max_abs_difference(got, want), 2 * c.opt.lr * double(steps)) << name;
        }
    }
    if (o.clip_norm > 0) {  // the case clips on some steps and not on others
        double lo = 1e30, hi = 0;
        for (const auto& n : torch["grad_norm"]) lo = std::min(lo, n.get<double>()), hi = std::max(hi, n.get<double>());
        EXPECT_LT(lo, o.clip_norm);
        EXPECT_GT(hi, o.clip_norm);
    }
}

LrSchedule schedule(LrSchedule::Kind kind, int64_t warmup, double start, double min_lr = 0, int64_t step_size = 0, double gamma = 0.1) {
    LrSchedule s;
    s.kind = kind, s.warmup = warmup, s.warmup_start = start, s.min_lr = min_lr, s.step_size = step_size, s.gamma = gamma;
    return s;
}

INSTANTIATE_TEST_SUITE_P(Loops, TrainingLoop,
                         ::testing::Values(Case{"AdamWWarmupCosineClipAccumulate", OptimizerConfig::adam(2e-3f, 0.05f, true),
                                                {3, 0.6, schedule(LrSchedule::Kind::Cosine, 2, 0.1, 1e-4), 0}},
                                           Case{"SgdMomentumStepDecayAccumulate", OptimizerConfig::sgd(0.05f, 0.9f, 1e-3f),
                                                {2, 0, schedule(LrSchedule::Kind::Step, 0, 1, 0, 2, 0.5), 0}},
                                           Case{"AdamL2WarmupConstantClip", OptimizerConfig::adam(1e-3f, 0.01f),
                                                {1, 1.0, schedule(LrSchedule::Kind::Constant, 3, 0.25), 0}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LrSchedule, FollowsPyTorchsFormulas) {
    // LinearLR then CosineAnnealingLR: base 1, warm-up 4 steps from 0.2, cosine to 0.1 over 10 more
    const LrSchedule cos = schedule(LrSchedule::Kind::Cosine, 4, 0.2, 0.1);
    EXPECT_DOUBLE_EQ(cos.lr(0, 14, 1.0), 0.2);
    EXPECT_DOUBLE_EQ(cos.lr(2, 14, 1.0), 0.6);
    EXPECT_DOUBLE_EQ(cos.lr(4, 14, 1.0), 1.0);
    EXPECT_NEAR(cos.lr(9, 14, 1.0), 0.55, 1e-12);  // halfway down
    EXPECT_NEAR(cos.lr(14, 14, 1.0), 0.1, 1e-12);
    const LrSchedule step = schedule(LrSchedule::Kind::Step, 0, 1, 0, 3, 0.5);
    EXPECT_DOUBLE_EQ(step.lr(2, 10, 0.8), 0.8);
    EXPECT_DOUBLE_EQ(step.lr(3, 10, 0.8), 0.4);
    EXPECT_DOUBLE_EQ(step.lr(7, 10, 0.8), 0.2);
    EXPECT_EQ(parse_lr_schedule("cosine"), LrSchedule::Kind::Cosine);
    test::expect_error([] { parse_lr_schedule("exp"); }, "unknown learning-rate schedule 'exp'");
}

TEST(StepRunner, BadOptionsAreErrors) {
    zoo::NetConfig cfg;
    cfg.batch = 2;
    zoo::Model m = zoo::build("lenet5", cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::adam(1e-3f));
    cpu::CpuBackend cpu(1);
    Executor ex(tg.graph, cpu);
    const OptimizerConfig opt = OptimizerConfig::adam(1e-3f);
    auto bad = [&](StepOptions o, const std::string& message) { test::expect_error([&] { StepRunner(ex, tg, opt, o); }, message); };
    bad({.accumulate = 0}, "--accumulate must be >= 1");
    bad({.clip_norm = -1}, "--clip-norm must be a non-negative finite number");
    bad({.clip_norm = std::nan("")}, "--clip-norm must be a non-negative finite number");
    bad({.schedule = schedule(LrSchedule::Kind::Constant, -1, 0.5)}, "--lr-warmup must be >= 0");
    bad({.schedule = schedule(LrSchedule::Kind::Constant, 2, 0)}, "--lr-warmup-start must be in (0, 1]");
    bad({.schedule = schedule(LrSchedule::Kind::Cosine, 5, 0.5), .total_steps = 5}, "the run has 5 optimizer step(s) and --lr-warmup is 5");
    bad({.schedule = schedule(LrSchedule::Kind::Cosine, 0, 0.5, 0.01), .total_steps = 5}, "--lr-min must be in [0, --lr]");
    bad({.schedule = schedule(LrSchedule::Kind::Step, 0, 1, 0, 0)}, "--lr-schedule step needs --lr-step-size >= 1");
    bad({.schedule = schedule(LrSchedule::Kind::Step, 0, 1, 0, 2, 1.5)}, "--lr-gamma must be in (0, 1]");
}

}  // namespace
}  // namespace joule

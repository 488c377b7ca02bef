// runtime/: buffer reuse, optimizer updates against their formulas, the trainer's options, the energy
// recorder (whole-epoch convergence: test_convergence.cpp).
#include <gtest/gtest.h>

#include <mutex>

#include <atomic>
#include <cmath>
#include <filesystem>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/reference/reference_backend.hpp"
#include "hw/device_spec.hpp"
#include "data/dataset.hpp"
#include "graph/error.hpp"
#include "runtime/executor.hpp"
#include "runtime/energy_recorder.hpp"
#include "runtime/trainer.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

TEST(Executor, ReusesBuffersAndStillTrainsCorrectly) {
    zoo::NetConfig cfg;
    cfg.batch = 4;
    cfg.image_size = 64;
    cfg.classes = 10;
    zoo::Model m = zoo::build("resnet18", cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.01f, 0.9f));
    cpu::CpuBackend cpu(2);
    Executor ex(tg.graph, cpu, {{m.logits, tg.loss}, 1});
    // Parameter gradients live until the update phase; every other activation and gradient is transient
    // and must share memory: at least half of their bytes are saved.
    double transient = 0;
    std::vector<bool> param_grad(tg.graph.num_tensors(), false);
    for (auto& [p, gr] : tg.param_grads) param_grad[size_t(gr)] = true;
    for (size_t t = 0; t < tg.graph.num_tensors(); ++t) {
        const Tensor& tt = tg.graph.tensor(TensorId(t));
        if ((tt.role == TensorRole::Activation || tt.role == TensorRole::Gradient) && !param_grad[t]) transient += double(tt.desc.bytes());
    }
    EXPECT_LT(double(ex.bytes_allocated()), double(ex.bytes_if_unshared()) - 0.5 * transient);
    data::SyntheticData synth(3);
    synth.fill_normal(ex.f32(m.input), tg.graph.tensor(m.input).desc.numel());
    for (int i = 0; i < 4; ++i) ex.i32(m.labels)[i] = i;
    float first = 0, last = 0;
    for (int step = 0; step < 8; ++step) {  // the same batch: the loss must fall
        ex.run_all();
        (step == 0 ? first : last) = ex.f32(tg.loss)[0];
        EXPECT_TRUE(std::isfinite(ex.f32(tg.loss)[0]));
    }
    EXPECT_LT(last, 0.5f * first);
    int64_t runs = 0;
    for (int64_t r : ex.node_runs()) runs += r;
    EXPECT_EQ(runs, int64_t(8 * tg.graph.num_nodes()));
    for (double s : ex.node_seconds()) EXPECT_GE(s, 0.0);
}

// p, g fixed; one update node; compare with PyTorch's formulas (torch.optim.SGD, Adam, AdamW) at a
// step's learning-rate scale (a schedule) and gradient scale (accumulation and clipping).
TEST(Updates, SgdMomentumAdamAndAdamWFollowPyTorch) {
    for (const auto& [lr_scale, grad_scale] : {std::pair{1.0f, 1.0f}, {0.3f, 0.25f}})
        for (int kind = 0; kind < 3; ++kind) {
            Graph g;
            const TensorId p = g.parameter("p", {{5}}, Init::normal(1));
            const TensorId grad = g.parameter("g", {{5}}, Init::normal(1));
            const TensorId s1 = g.state("s1", {{5}}, Init::zeros()), s2 = g.state("s2", {{5}}, Init::zeros());
            if (kind == 0) g.add(OpKind::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.01f}, {p, grad, s1}, "sgd");
            else g.add(OpKind::AdamUpdate, AdamAttrs{0.01f, 0.9f, 0.999f, 1e-8f, kind == 2 ? 0.05f : 0.0f, kind == 2}, {p, grad, s1, s2}, "adam");
            cpu::CpuBackend cpu(1);
            Executor ex(g, cpu);
            std::vector<double> w(ex.f32(p), ex.f32(p) + 5), gv(ex.f32(grad), ex.f32(grad) + 5), v(5, 0), mm(5, 0);
            for (int t = 1; t <= 3; ++t) {
                ex.run_all({.training = true, .lr_scale = lr_scale, .grad_scale = grad_scale, .step = t});
                for (int i = 0; i < 5; ++i) {
                    const double gi = grad_scale * gv[i];
                    if (kind == 0) {
                        v[i] = 0.9 * v[i] + gi + 0.01 * w[i];
                        w[i] -= 0.1 * lr_scale * v[i];
                    } else {
                        const double lr = 0.01 * lr_scale;
                        if (kind == 2) w[i] *= 1 - lr * 0.05;  // AdamW: decay first, decoupled from the gradient
                        mm[i] = 0.9 * mm[i] + 0.1 * gi;
                        v[i] = 0.999 * v[i] + 0.001 * gi * gi;
                        const double mh = mm[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
                        w[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
                    }
                    EXPECT_NEAR(ex.f32(p)[i], w[i], 1e-5) << (kind == 0 ? "sgd" : kind == 1 ? "adam" : "adamw") << " step " << t << " lr scale " << lr_scale;
                }
            }
        }
}

TEST(Trainer, BadOptionsAreErrors) {
    TrainOptions o;
    o.epochs = 0;
    EXPECT_THROW(train(o), Error);
    o = {};
    o.dataset = "imagenet";
    EXPECT_THROW(train(o), Error);
    o = {};
    o.net = "bert-tiny";
    EXPECT_THROW(train(o), Error);  // tokens, not images
    o = {};
    o.data_dir = "/nonexistent";
    EXPECT_THROW(train(o), Error);
}

TEST(Trainer, SyntheticBertAndBf16Run) {
    TrainOptions o;
    o.net = "bert-tiny";
    o.dataset = "synthetic";
    o.batch = 2;
    o.seq_len = 16;
    o.steps = 2;
    o.threads = 2;
    const TrainResult r = train(o);
    ASSERT_EQ(r.epochs.size(), 1u);
    EXPECT_EQ(r.epochs[0].steps, 2);
    EXPECT_TRUE(std::isfinite(r.epochs[0].loss));
    EXPECT_LT(r.test_accuracy, 0);
    o.net = "mobilenet_v2";
    o.image_size = 32;
    o.dtype = DType::BF16;
    const TrainResult b = train(o);
    EXPECT_TRUE(std::isfinite(b.epochs[0].loss));
    EXPECT_FALSE(b.layers.empty());
}

}  // namespace
}  // namespace joule

namespace joule {
namespace {

// A measured meter drawing 5 W idle and 25 W while busy; the energy is exact at every switch, so a
// sampler thread delayed on a loaded machine does not move the edges.
class ScriptedMeter : public energy::PowerMeter {
public:
    const energy::MeterInfo& info() const override { return info_; }
    double joules() override {
        std::lock_guard<std::mutex> l(m_);
        advance();
        return j_;
    }
    void set_busy(bool b) {
        std::lock_guard<std::mutex> l(m_);
        advance();
        busy_ = b;
    }

private:
    void advance() {
        const double t = energy::now_seconds();
        j_ += (busy_ ? 25.0 : 5.0) * (t - last_);
        last_ = t;
    }
    energy::MeterInfo info_{"scripted", energy::MeterKind::Measured, "cpu", "test"};
    std::mutex m_;
    bool busy_ = false;
    double j_ = 0, last_ = energy::now_seconds();
};

TEST(EnergyRecorder, MeasuredStepsAddUpAndSeeThePower) {
    zoo::NetConfig cfg;
    cfg.batch = 16;
    zoo::Model m = zoo::build("lenet5", cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.01f, 0.9f));
    cpu::CpuBackend cpu(1);
    Executor ex(tg.graph, cpu);
    auto meter = std::make_unique<ScriptedMeter>();
    ScriptedMeter* raw = meter.get();
    energy::MeterChoice choice;
    choice.meter = std::move(meter);
    choice.info = choice.meter->info();
    EnergyRecorder rec(choice, {0.05, std::chrono::milliseconds(1)});
    rec.begin(ex);
    raw->set_busy(true);
    for (int s = 0; s < 30; ++s) {  // long enough (tens of ms) that the edges of 1 ms sampling are small
        rec.step_begin();
        ex.run_all();
        rec.step_end();
    }
    raw->set_busy(false);
    const EnergyResult r = rec.finish(tg.graph);
    EXPECT_EQ(r.steps, 30);
    EXPECT_NEAR(r.idle_w, 5.0, 0.5);
    double ops = 0;
    for (double j : r.node_joules) ops += j;
    EXPECT_NEAR(ops + r.idle_joules, r.total_joules, 1e-9);
    // 25 W busy: ~20 W above idle over the steps (interpolation smooths the edges)
    EXPECT_NEAR(r.total_joules / r.seconds, 25.0, 3.0);
    EXPECT_NEAR(ops / r.seconds, 20.0, 3.0);
    EXPECT_GT(r.samples, 5u);
}

// An emulated device: the reference backend's results, each kernel reporting a modelled 2 ms.
class ModelledBackend : public ReferenceBackend {
public:
    ModelledBackend() : ReferenceBackend("modelled_test") {}
    TimeSource time_source() const override { return TimeSource::Modelled; }
    std::unique_ptr<Kernel> prepare(const Graph& g, NodeId n, const std::vector<void*>& in, const std::vector<void*>& out) override {
        struct Timed : Kernel {
            std::unique_ptr<Kernel> k;
            void run(const RunContext& c) override { k->run(c); }
            std::optional<double> modelled_seconds() const override { return 2e-3; }
            double modelled_joules() const override { return 5e-4; }
        };
        auto t = std::make_unique<Timed>();
        t->k = ReferenceBackend::prepare(g, n, in, out);
        return t;
    }
};

TEST(Executor, ModelledDevicesReportModelledTimeAndEmulationApart) {
    zoo::NetConfig cfg;
    cfg.batch = 4;
    zoo::Model m = zoo::build("lenet5", cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.01f, 0.9f));
    ModelledBackend dev;
    Executor ex(tg.graph, dev);
    const hw::DeviceSpec spec = hw::load_device_spec(hw::data_file("cpu-amd-epyc-turin-2vcpu", "hw"));
    energy::MeterChoice choice = energy::choose_meter("modelled", &spec, 1);
    EnergyRecorder rec(choice, {0, std::chrono::milliseconds(1)});
    rec.begin(ex);
    for (int s = 0; s < 3; ++s) {
        rec.step_begin();
        ex.run_all();
        rec.step_end();
    }
    const EnergyResult r = rec.finish(tg.graph);
    for (size_t n = 0; n < tg.graph.num_nodes(); ++n) {
        EXPECT_TRUE(ex.node_modelled()[n]);
        EXPECT_DOUBLE_EQ(ex.node_seconds()[n], 3 * 2e-3);  // the model's time, not the wall clock
        EXPECT_GT(ex.node_emulation_seconds()[n], 0);     // the host's time emulating, kept apart
        // the node's energy and time are the emulated device's model; the host's emulation is charged to no node
        EXPECT_DOUBLE_EQ(r.node_joules[n], 3 * 5e-4);
        EXPECT_DOUBLE_EQ(r.node_seconds[n], 3 * 2e-3);
    }
    EXPECT_GT(r.emulation_joules, 0);
    EXPECT_NEAR(r.emulation_joules + r.idle_joules, r.total_joules, 1e-9);  // the host's energy: idle and emulating
    for (const LayerTime& l : layer_times(ex, 3)) EXPECT_TRUE(l.modelled) << l.name;
}

}  // namespace
}  // namespace joule

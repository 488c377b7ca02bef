// Whole Fashion-MNIST epochs of LeNet-5: the acceptance recipe against PyTorch 1.13
// (bench/pytorch_lenet_reference.py) and the precision plans against f32. Each trains with 2 threads, so
// tests/CMakeLists.txt gives this executable both of ctest's slots: a fork/join per small op shares no
// core well (LeNet's epoch takes 3.4 s alone and 17 s beside another such test here).
#include <gtest/gtest.h>

#include <filesystem>

#include "data/dataset.hpp"
#include "runtime/trainer.hpp"

namespace joule {
namespace {

bool have_fashion_mnist() {
    return std::filesystem::exists(std::string(data::kDefaultFashionMnistDir) + "/train-images-idx3-ubyte.gz");
}

// The acceptance recipe: LeNet-5, batch 64, 1 epoch on Fashion-MNIST. PyTorch 1.13 on this machine
// (bench/pytorch_lenet_reference.py, same preprocessing) reaches 85.5 % with Adam lr 2e-3 and 83.1 %
// with SGD momentum 0.9 lr 0.05; joule must be within 1 point or better.
class Convergence : public ::testing::TestWithParam<int> {};
TEST_P(Convergence, LeNet5OneEpochMatchesPyTorch) {
    if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
    TrainOptions o;  // defaults: lenet5, fashion-mnist, 1 epoch, b64, Adam 2e-3
    o.threads = 2;
    double reference = 0.855;
    if (GetParam() == 1) {
        o.optimizer = OptimizerConfig::sgd(0.05f, 0.9f);
        reference = 0.831;
    }
    const TrainResult r = train(o);
    EXPECT_EQ(r.test_samples, 10000);
    EXPECT_GE(r.test_accuracy, reference - 0.01) << "accuracy " << r.test_accuracy;
    if (GetParam() == 0) {
        EXPECT_GE(r.test_accuracy, 0.84) << "the default recipe must reach 84 %";
    }
}
INSTANTIATE_TEST_SUITE_P(Recipes, Convergence, ::testing::Values(0, 1), [](const auto& i) { return i.param ? "SgdMomentum" : "Adam"; });

// Mixed precision keeps accuracy: LeNet-5, 1 epoch, the same seed, under TF-AMP's greedy policy and
// the cast-aware campo policy (bf16 where they choose it) within 1 point of all-f32.
TEST(Convergence, MixedPrecisionPoliciesKeepAccuracy) {
    if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
    TrainOptions o;
    o.threads = 2;
    o.device_spec = "turin-2vcpu";  // campo's cost model (any CPU spec with curves: the choice, not the run)
    const double f32 = train(o).test_accuracy;
    for (const char* policy : {"greedy", "campo"}) {
        o.amp = policy;
        const TrainResult r = train(o);
        EXPECT_EQ(r.dtype, "plan");
        EXPECT_GE(r.test_accuracy, f32 - 0.01) << policy << ": " << r.test_accuracy << " against f32 " << f32;
    }
}

// bf16 on every op the CPU runs in it (casts as nodes, half the tensor bytes) trains as well as f32.
TEST(Convergence, Bf16PlanTrainsLeNetAsWellAsF32) {
    if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
    TrainOptions o;
    o.threads = 2;
    const TrainResult f32 = train(o);
    o.dtype = DType::BF16;
    o.scope = PrecisionScope::All;
    const TrainResult bf16 = train(o);
    EXPECT_GT(f32.test_accuracy, 0.8);
    EXPECT_NEAR(bf16.test_accuracy, f32.test_accuracy, 0.01);
    EXPECT_GT(bf16.casts, 0);
    EXPECT_EQ(bf16.transfers, 0);
    EXPECT_LT(bf16.buffer_bytes, f32.buffer_bytes) << "bf16 tensors take half the bytes";
}

}  // namespace
}  // namespace joule

// zoo/: parameter counts exactly as published, forward multiply-adds within 1 % of the published figure.
#include <gtest/gtest.h>

#include "graph/cost.hpp"
#include "graph/error.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace zoo {
inline void PrintTo(const NetInfo& n, std::ostream* os) { *os << n.name; }
}  // namespace zoo
namespace {

class ZooNet : public ::testing::TestWithParam<zoo::NetInfo> {};

TEST_P(ZooNet, ParamsAndMacsMatchPublishedFigures) {
    const zoo::NetInfo& info = GetParam();
    zoo::NetConfig cfg;
    cfg.batch = 1;
    const zoo::Model m = zoo::build(info.name, cfg);
    int64_t params = m.graph.parameter_count();
    if (info.sequence)  // published BERT counts exclude the task head
        for (const Tensor& t : m.graph.tensors())
            if (t.role == TensorRole::Parameter && t.name.rfind("classifier.", 0) == 0) params -= t.desc.numel();
    EXPECT_EQ(params, int64_t(info.published_params)) << info.name;
    const double gmacs = graph_cost(m.graph).forward.macs / 1e9;
    EXPECT_NEAR(gmacs, info.published_gmacs, 0.01 * info.published_gmacs) << info.name;
    EXPECT_EQ(m.graph.tensor(m.logits).desc.shape[0], 1);
    EXPECT_EQ(m.graph.tensor(m.loss).desc.numel(), 1);
}

INSTANTIATE_TEST_SUITE_P(All, ZooNet, ::testing::ValuesIn(zoo::nets()), [](const auto& i) { return test::param_name(i.param.name); });

TEST(Zoo, KnownFigures) {
    // Independent of the table above: the headline numbers of the issue.
    zoo::NetConfig cfg;
    cfg.batch = 1;
    const zoo::Model r50 = zoo::build("resnet50", cfg);
    EXPECT_NEAR(double(r50.graph.parameter_count()) / 1e6, 25.6, 0.05);
    EXPECT_NEAR(graph_cost(r50.graph).forward.macs / 1e9, 4.1, 0.05);
    EXPECT_EQ(zoo::build("lenet5", cfg).graph.parameter_count(), 61706);
}

TEST(Zoo, ErrorsAreClear) {
    zoo::NetConfig cfg;
    cfg.batch = 2;
    cfg.image_size = 28;
    try {
        zoo::build("vgg16", cfg);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("vgg16 at 28x28"), std::string::npos) << e.what();
    }
    EXPECT_THROW(zoo::build("resnet1000", cfg), Error);
    cfg.seq_len = 1000;
    EXPECT_THROW(zoo::build("bert-tiny", cfg), Error);
    cfg.seq_len = 16;
    cfg.batch = 0;
    EXPECT_THROW(zoo::build("lenet5", cfg), Error);
}

TEST(Zoo, ResNetAdaptsToSmallImagesAndChannels) {
    zoo::NetConfig cfg;
    cfg.batch = 4;
    cfg.image_size = 32;
    cfg.in_channels = 1;
    cfg.classes = 10;
    const zoo::Model m = zoo::build("resnet18", cfg);
    EXPECT_EQ(m.graph.tensor(m.logits).desc.shape, (Shape{4, 10}));
}

}  // namespace
}  // namespace joule

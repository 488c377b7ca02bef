// predict/data_parallel: the all-reduce formulas, the overlap of bucketed all-reduces with backward, the
// cluster's energy, and bad clusters.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/error.hpp"
#include "hw/catalogue.hpp"
#include "predict/data_parallel.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule::predict {
namespace {

TrainGraph resnet18(int64_t batch) {
    zoo::NetConfig cfg;
    cfg.batch = batch;
    cfg.image_size = 64;
    zoo::Model m = zoo::build("resnet18", cfg);
    return build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
}

hw::LinkSpec link(double gbps, double latency_us, double pj) {
    hw::LinkSpec l;
    l.name = "test", l.bandwidth_gbps = gbps, l.latency_us = latency_us, l.energy_pj_per_byte = pj;
    return l;
}

TEST(DataParallel, AllReduceIsTheFasterOfRingAndTree) {
    const hw::LinkSpec nv = link(100, 5, 10), ib = link(20, 2, 400);
    Cluster c{.nodes = 1, .per_node = 8, .intra = &nv};
    const double s = 100e6;
    EXPECT_DOUBLE_EQ(allreduce_seconds(s, c), 2.0 * 7 / 8 * s / 100e9 + 2.0 * 7 * 5e-6);  // big: the ring
    EXPECT_DOUBLE_EQ(allreduce_seconds(1000, c), 2.0 * 1000 / 100e9 + 2.0 * 3 * 5e-6);    // small: the tree's log latency
    // across nodes: the slowest hop is the nodes' network, one ring per NIC, at the larger latency
    c.nodes = 4, c.inter = &ib, c.nics_per_node = 2;
    EXPECT_DOUBLE_EQ(allreduce_seconds(s, c), std::min(2.0 * 31 / 32 * s / 40e9 + 2.0 * 31 * 5e-6, 2.0 * s / 40e9 + 2.0 * 5 * 5e-6));
    c.nodes = 1, c.per_node = 1;
    EXPECT_EQ(allreduce_seconds(s, c), 0.0);
}

TEST(DataParallel, BucketsOverlapBackwardAndTheRestIsExposed) {
    const TrainGraph tg = resnet18(8);
    const DeviceModel d = load_device_model("v100");
    const hw::LinkSpec fast = link(1e6, 0, 10), slow = link(1, 10, 10);
    const DataParallel one = predict_data_parallel(tg, 8, d, {});
    EXPECT_EQ(one.ranks, 1);
    EXPECT_EQ(one.allreduce_s, 0.0);
    EXPECT_DOUBLE_EQ(one.iteration_s, one.single_s);
    EXPECT_DOUBLE_EQ(one.efficiency, 1.0);
    EXPECT_NEAR(one.single_s, one.forward_s + one.backward_s + one.update_s, 1e-12);
    EXPECT_NEAR(one.gradient_bytes, 4.0 * double(zoo::build("resnet18", {.batch = 8, .image_size = 64}).graph.parameter_count()), 1.0);
    // a fast link hides almost everything; a slow one exposes most of it, never more than all of it
    const DataParallel hidden = predict_data_parallel(tg, 8, d, {.nodes = 1, .per_node = 8, .intra = &fast});
    EXPECT_LT(hidden.exposed_s, 1e-3 * hidden.single_s);
    EXPECT_GT(hidden.efficiency, 0.999);
    const DataParallel exposed = predict_data_parallel(tg, 8, d, {.nodes = 1, .per_node = 8, .intra = &slow});
    EXPECT_GT(exposed.exposed_s, 0.5 * exposed.allreduce_s);
    EXPECT_LE(exposed.exposed_s, exposed.allreduce_s + 1e-12);
    EXPECT_NEAR(exposed.iteration_s, exposed.single_s + exposed.exposed_s, 1e-12);
    EXPECT_NEAR(exposed.samples_per_s, 8 * 8 / exposed.iteration_s, 1e-9);
    // one bucket for everything starts when the last gradient is ready: all of it exposed
    const DataParallel whole = predict_data_parallel(tg, 8, d, {.nodes = 1, .per_node = 8, .intra = &slow, .bucket_bytes = 1e12});
    EXPECT_EQ(whole.buckets, 1);
    EXPECT_GT(whole.exposed_s, exposed.exposed_s);
    EXPECT_GT(exposed.buckets, 1);
    // efficiency falls as ranks grow on a fixed network, and rises with the batch (more compute to hide behind)
    double last = 1;
    for (int nodes : {1, 4, 16, 64}) {
        const DataParallel p = predict_data_parallel(tg, 8, d, {.nodes = nodes, .per_node = 8, .intra = &slow, .inter = &slow});
        EXPECT_LE(p.efficiency, last + 1e-12) << nodes;
        last = p.efficiency;
    }
    const TrainGraph big = resnet18(64);
    EXPECT_GT(predict_data_parallel(big, 64, d, {.nodes = 1, .per_node = 8, .intra = &slow}).efficiency, exposed.efficiency);
}

// Accumulated micro-batches: K forward/backward passes, one all-reduce during the last backward, hidden
// behind it as without accumulation; throughput counts every micro-batch, dynamic energy every pass.
TEST(DataParallel, AccumulationAllReducesOncePerIteration) {
    const TrainGraph tg = resnet18(8);
    const DeviceModel d = load_device_model("v100");
    const hw::LinkSpec slow = link(1, 10, 10);
    const Cluster c{.nodes = 1, .per_node = 8, .intra = &slow};
    Cluster c4 = c;
    c4.accumulate = 4;
    const DataParallel one = predict_data_parallel(tg, 8, d, c), four = predict_data_parallel(tg, 8, d, c4);
    const double pass = one.forward_s + one.backward_s;
    EXPECT_NEAR(four.single_s, 4 * pass + one.update_s, 1e-12);
    EXPECT_DOUBLE_EQ(four.allreduce_s, one.allreduce_s) << "one all-reduce per iteration";
    EXPECT_NEAR(four.exposed_s, one.exposed_s, 1e-12) << "hidden behind the last backward only";
    EXPECT_NEAR(four.iteration_s, four.single_s + four.exposed_s, 1e-12);
    EXPECT_NEAR(four.samples_per_s, 8.0 * 4 * 8 / four.iteration_s, 1e-9);
    EXPECT_GT(four.efficiency, one.efficiency) << "the all-reduce amortised over four passes";
    // a rank's dynamic energy: one pass's per micro-batch, and the update's once
    auto dynamic = [&](const DataParallel& p) { return (p.joules - 8 * d.idle_w() * p.iteration_s - p.link_joules) / 8; };
    Cluster c2 = c;
    c2.accumulate = 2;
    const double pass_j = dynamic(predict_data_parallel(tg, 8, d, c2)) - dynamic(one);
    EXPECT_GT(pass_j, 0);
    EXPECT_NEAR(dynamic(four) - dynamic(one), 3 * pass_j, 1e-9 * dynamic(four));
    c4.accumulate = 0;
    test::expect_error([&] { predict_data_parallel(tg, 8, d, c4); }, "--accumulate must be >= 1, got 0");
}

TEST(DataParallel, ClusterEnergyCountsEveryRanksIdleWaitAndTheLinks) {
    const TrainGraph tg = resnet18(8);
    const DeviceModel d = load_device_model("v100");
    const hw::LinkSpec nv = link(10, 5, 10), ib = link(5, 2, 400);
    const DataParallel one = predict_data_parallel(tg, 8, d, {});
    const double dynamic = one.joules - d.idle_w() * one.iteration_s;
    const DataParallel p = predict_data_parallel(tg, 8, d, {.nodes = 2, .per_node = 4, .intra = &nv, .inter = &ib});
    // the ring's 8 hops each carry 2 x 7/8 of the gradients: 2 between the nodes, 6 inside them
    const double hop = 2.0 * 7 / 8 * p.gradient_bytes * 1e-12;
    EXPECT_NEAR(p.link_joules, hop * (2 * 400 + 6 * 10), 1e-9);
    EXPECT_NEAR(p.joules, 8 * (dynamic + d.idle_w() * p.iteration_s) + p.link_joules, 1e-9 * p.joules);
}

TEST(DataParallel, BadClustersAreErrors) {
    const TrainGraph tg = resnet18(2);
    const DeviceModel d = load_device_model("v100");
    const hw::LinkSpec nv = link(100, 5, 10);
    test::expect_error([&] { predict_data_parallel(tg, 2, d, {.nodes = 0}); }, "a cluster needs at least one node");
    test::expect_error([&] { predict_data_parallel(tg, 2, d, {.nodes = 1, .per_node = 4}); }, "4 devices per node need the link between them");
    test::expect_error([&] { predict_data_parallel(tg, 2, d, {.nodes = 2, .per_node = 4, .intra = &nv}); }, "2 nodes need the network between them");
    test::expect_error([&] { predict_data_parallel(tg, 2, d, {.nodes = 1, .bucket_bytes = 0}); }, "bucket must be > 0 bytes");
}

}  // namespace
}  // namespace joule::predict

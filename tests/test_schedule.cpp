// plan/schedule: the simulated iteration of a placed graph on a system -- dependencies and one node at a
// time per device respected, transfers on links (through the host where there is no direct link),
// energy adding up, FPGA switches charged, memory feasibility, and the single-device baselines.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/autodiff.hpp"
#include "plan/schedule.hpp"
#include "predict/fpga_model.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

using test::zoo_train_graph;

// Every schedule: nodes after their inputs, never two at once on a device, the makespan the last end.
void expect_valid(const LoweredGraph& lg, const Schedule& s) {
    const Graph& g = lg.train.graph;
    std::vector<double> produced(g.num_tensors(), 0);
    std::map<int, std::vector<std::pair<double, double>>> on_device;
    double last = 0;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const ScheduledNode& x = s.nodes[i];
        const Node& n = g.node(NodeId(i));
        for (TensorId t : n.inputs) EXPECT_GE(x.start, produced[size_t(t)] - 1e-15) << n.name;
        for (TensorId t : n.outputs) produced[size_t(t)] = x.end;
        EXPECT_GE(x.end, x.start) << n.name;
        if (n.kind != OpKind::Transfer) on_device[x.device].push_back({x.start, x.end});
        last = std::max(last, x.end);
    }
    for (auto& [d, spans] : on_device) {
        std::sort(spans.begin(), spans.end());
        for (size_t k = 1; k < spans.size(); ++k) EXPECT_GE(spans[k].first, spans[k - 1].second - 1e-15) << "device " << d;
    }
    EXPECT_DOUBLE_EQ(s.seconds, last);
}

TEST(Schedule, AllOnTheHostIsTheSumOfItsNodesAndEnergyAddsUp) {
    const SystemModel sys = load_system_model("cpu+v100+s10");
    EXPECT_EQ(sys.plan_devices, (std::vector<std::string>{"cpu", "cuda:v100", "fpga_emu:s10"}));
    EXPECT_EQ(sys.host, 0);
    const TrainGraph tg = zoo_train_graph("lenet5", 16);
    const LoweredGraph lg = lower(TrainGraph(tg), single_device_plan(tg, sys, sys.host));
    const Schedule s = simulate(lg, sys);
    expect_valid(lg, s);
    EXPECT_EQ(lg.transfers, 0u);
    const predict::GraphCost c = predict::graph_cost(lg.train.graph, sys.devices[0]);
    EXPECT_NEAR(s.seconds, c.total.seconds, 1e-12);  // one device, a chain of nodes: their sum
    EXPECT_NEAR(s.dynamic_joules, c.total.joules, 1e-12);
    double idle = 0;
    for (const auto& d : sys.devices) idle += d.idle_w() * s.seconds;  // every device idles over the iteration
    EXPECT_NEAR(s.idle_joules, idle, 1e-12);
    EXPECT_EQ(s.transfer_joules, 0);
    EXPECT_NEAR(s.watts(), (s.dynamic_joules + s.idle_joules) / s.seconds, 1e-9);
    EXPECT_TRUE(s.fits);
}

TEST(Schedule, TheBaselinesMoveTensorsOverLinksAndTheFpgaPaysItsSwitches) {
    const SystemModel sys = load_system_model("cpu+v100+s10");
    const TrainGraph tg = zoo_train_graph("resnet18", 8, 32);
    for (int d = 0; d < 3; ++d) {
        const LoweredGraph lg = lower(TrainGraph(tg), single_device_plan(tg, sys, d));
        const Schedule s = simulate(lg, sys);
        expect_valid(lg, s);
        EXPECT_GT(s.busy_seconds[size_t(d)], 0) << sys.plan_devices[size_t(d)];
        EXPECT_GE(s.seconds, s.busy_seconds[size_t(d)] * (1 - 1e-12));
        // each step's batch comes from the host: the GPU gets the images and labels, the FPGA the images
        // (the host runs the loss); the FPGA also hands its logits to the host and gets the gradient back
        EXPECT_EQ(s.transfer_joules > 0, d > 0) << sys.plan_devices[size_t(d)];
        EXPECT_EQ(s.batch_copies, d == 0 ? 0 : d == 1 ? 2 : 1) << sys.plan_devices[size_t(d)];
        if (d > 0) {  // the first layer starts once the images have crossed the host's link
            const Graph& g = lg.train.graph;
            const TensorId images = g.node(NodeId(0)).inputs[0];
            ASSERT_EQ(g.tensor(images).role, TensorRole::Input);
            double copy = 0;
            for (const auto& [key, link] : route(sys, sys.host, d)) copy += predict::transfer_cost(double(g.tensor(images).desc.bytes()), *link).seconds;
            EXPECT_GT(copy, 0);
            EXPECT_GE(s.nodes[0].start, copy * (1 - 1e-12));
        }
        if (d == 2) {
            EXPECT_GT(s.busy_seconds[0], 0);  // the FPGA has no loss kernel: the host runs it
            EXPECT_GT(s.switches, 0);         // ResNet-18's kernels do not all fit one Stratix 10 bitstream
            EXPECT_GT(s.switch_seconds, 0);
        }
    }
    // an FPGA baseline leaves exactly the ops without an FPGA kernel on the host
    const Plan p = single_device_plan(tg, sys, 2);
    size_t host_only = 0;
    for (size_t i = 0; i < tg.graph.num_nodes(); ++i) host_only += !predict::fpga_runs(tg.graph.node(NodeId(i)).kind);
    EXPECT_EQ(p.entries.size(), host_only);
}

TEST(Schedule, APlanWhoseTensorsDoNotFitIsInfeasibleAndUnknownDevicesAreErrors) {
    const SystemModel sys = load_system_model("cpu+k40");
    const TrainGraph tg = zoo_train_graph("vgg16", 256);
    const Schedule s = simulate(lower(TrainGraph(tg), single_device_plan(tg, sys, 1)), sys);
    EXPECT_FALSE(s.fits);
    EXPECT_NE(s.why_not.find("cuda:k40 needs"), std::string::npos) << s.why_not;
    Plan elsewhere;
    elsewhere.default_device = "cuda:v100";
    const TrainGraph small = zoo_train_graph("lenet5", 2);
    test::expect_error([&] { simulate(lower(TrainGraph(small), elsewhere), sys); }, "which system system-gold6148-k40 does not have");
    test::expect_error([] { load_system_model("cpu+tpu"); }, "cpu+tpu");
}

}  // namespace
}  // namespace joule

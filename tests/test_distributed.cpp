// Data-parallel training: plan/'s allreduce pass (buckets in backward's order, each started right after
// its last gradient, waited on before the updates), and `mpirun -np 2 joule train` against one process
// with the same global batch -- losses, resuming on another number of processes, and a stuck rank,
// disagreeing ranks or bad flags ending the job with a clear error on every rank instead of a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/passes.hpp"
#include "test_util.hpp"

namespace joule {
namespace {

LoweredGraph lenet_lowered(int ranks, size_t bucket_bytes) {
    LowerOptions o;
    o.allreduce = {ranks, bucket_bytes};
    return lower(test::zoo_train_graph("lenet5", 8), Plan{}, o);
}

TEST(AllReducePass, BucketsFollowBackwardAndFeedTheUpdates) {
    for (const size_t bucket : {size_t(64) << 10, size_t(1) << 30}) {
        const LoweredGraph lg = lenet_lowered(2, bucket);
        const Graph& g = lg.train.graph;
        const NodeId first_update = lg.train.first_update;
        ASSERT_EQ(g.node(first_update).phase, Phase::Update);
        std::map<NodeId, int64_t> bucket_elements;  // per start node: its gradients' elements
        size_t starts = 0, waits = 0;
        for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n) {
            const Node& x = g.node(n);
            if (x.kind == OpKind::AllReduceStart) {
                ++starts;
                EXPECT_EQ(x.phase, Phase::Backward);
                EXPECT_EQ(x.source, n) << "a bucket is a row of its own in the layer table";
                NodeId last = 0;
                size_t bytes = 0;
                for (TensorId t : x.inputs) last = std::max(last, g.tensor(t).producer), bytes += g.tensor(t).desc.bytes();
                EXPECT_LT(last, n);
                for (NodeId between = last + 1; between < n; ++between)  // started right after its last gradient
                    EXPECT_EQ(g.node(between).kind, OpKind::AllReduceStart) << x.name << " waits behind " << g.node(between).name;
                EXPECT_TRUE(bytes <= bucket || x.inputs.size() == 1) << x.name << ": " << bytes << " bytes";
                int64_t elements = 0;
                for (TensorId t : x.inputs) elements += g.tensor(t).desc.numel();
                bucket_elements[n] = elements;
                const std::vector<int64_t> at = bucket_offsets(attrs_as<AllReduceAttrs>(x).shapes);
                EXPECT_EQ(g.tensor(x.outputs[0]).desc.numel(), at.back());
                EXPECT_LT(at.back() - elements, 16 * int64_t(x.inputs.size())) << "at most 15 elements of padding per gradient";
                // the memory plan stores each gradient inside its bucket, at its offset, and the means there too
                const MemoryPlan& mp = lg.memory;
                const size_t b = size_t(x.outputs[0]);
                for (size_t i = 0; i < x.inputs.size(); ++i) {
                    const size_t t = size_t(x.inputs[i]);
                    EXPECT_EQ(at[i] % 16, 0) << "64-byte aligned";
                    EXPECT_EQ(mp.buffer_of[t], mp.buffer_of[b]) << g.tensor(TensorId(t)).name;
                    EXPECT_EQ(mp.offset_of[t], mp.offset_of[b] + size_t(at[i]) * 4) << g.tensor(TensorId(t)).name;
                    const Node& wait = g.node(g.consumers(x.outputs[0]).front());
                    EXPECT_EQ(mp.offset_of[size_t(wait.outputs[i])], mp.offset_of[t]) << "averaged in place";
                }
            }
            if (x.kind == OpKind::AllReduceWait) {
                ++waits;
                EXPECT_LT(n, first_update);
                EXPECT_GT(n, lg.train.first_backward);
                EXPECT_EQ(x.source, g.tensor(x.inputs[0]).producer);
                EXPECT_EQ(x.name, g.node(g.tensor(x.inputs[0]).producer).name + ":wait");
            }
        }
        EXPECT_EQ(starts, lg.allreduce_buckets);
        EXPECT_EQ(waits, lg.allreduce_buckets);
        EXPECT_EQ(g.node(first_update - 1).kind, OpKind::AllReduceWait) << "the waits sit just before the updates, so backward overlaps the sums";
        if (bucket > (size_t(1) << 20)) EXPECT_EQ(lg.allreduce_buckets, 1u);
        else EXPECT_GT(lg.allreduce_buckets, 2u);
        int64_t total = 0, updates = 0;
        for (const auto& [n, e] : bucket_elements) total += e;
        EXPECT_EQ(total, g.parameter_count()) << "every gradient in exactly one bucket";
        for (NodeId n = first_update; n < NodeId(g.num_nodes()); ++n) {
            const Node& u = g.node(n);
            if (u.kind != OpKind::SgdUpdate) continue;
            ++updates;
            EXPECT_EQ(g.node(g.tensor(u.inputs[1]).producer).kind, OpKind::AllReduceWait) << u.name << " reads the mean over the processes";
        }
        EXPECT_EQ(updates, 10);
    }
    const LoweredGraph one = lenet_lowered(1, size_t(25) << 20);
    EXPECT_EQ(one.allreduce_buckets, 0u);
    for (const Node& n : one.train.graph.nodes()) EXPECT_NE(op_info(n.kind).category, OpCategory::Communication);
    test::expect_error([] { lenet_lowered(2, 0); }, "an all-reduce bucket must hold at least one byte");
    test::expect_error([] { lenet_lowered(0, 1); }, "at least one process");
}

// A device whose backend does not all-reduce (the emulated FPGA) has its gradients all-reduced on the host,
// with transfers to and fro; every cast or transfer of a gradient an update reads is backward work, ahead
// of the updates (a step's micro-batches run [first_backward, first_update) each, the updates once).
TEST(AllReducePass, GradientsOfADeviceWithoutAnAllReduceGoThroughTheHost) {
    Plan plan;
    plan.entries.push_back({PlanEntry::Match::Layer, "fc*", std::string("fpga_emu:s10"), std::nullopt, {}, "test:1"});
    for (const int ranks : {1, 2}) {
        LowerOptions o;
        o.allreduce = {ranks, size_t(25) << 20};
        const LoweredGraph lg = lower(test::zoo_train_graph("lenet5", 8), plan, o);
        const Graph& g = lg.train.graph;
        size_t fpga_updates = 0;
        for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n) {
            const Node& x = g.node(n);
            if (n >= lg.train.first_update) {
                EXPECT_EQ(x.phase, Phase::Update) << x.name;
                fpga_updates += x.device == "fpga_emu:s10";
            }
            if (op_info(x.kind).category == OpCategory::Communication) {
                EXPECT_EQ(x.device, "cpu") << x.name;
            }
            if ((x.kind == OpKind::Transfer || x.kind == OpKind::Cast) && g.tensor(x.inputs[0]).role == TensorRole::Gradient) {
                EXPECT_LT(n, lg.train.first_update) << x.name << " converts a gradient: backward work";
            }
        }
        EXPECT_EQ(fpga_updates, 6u) << "fc1-3's weights and biases are updated on the FPGA";
        if (ranks == 2) {
            EXPECT_EQ(lg.allreduce_buckets, 1u);
            const Node& wait = g.node(lg.train.first_update - 1);
            ASSERT_EQ(wait.kind, OpKind::Transfer) << "the means go back to the FPGA after the wait";
        }
    }
}

TEST(AllReducePass, InspectShowsAProcesssGraph) {
    const test::CommandResult r = test::run_command(std::string(JOULE_BINARY) + " inspect lenet5 --batch 8 --processes 2 --bucket-mib 0.1 --json 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["processes"], 2);
    EXPECT_EQ(j["allreduce_buckets"], 3) << "fc3 + fc2 (43 KiB), fc1's weight alone (188 KiB), the rest";
    size_t starts = 0;
    for (const auto& n : j["nodes"]) {
        if (n["op"] == "AllReduceStart") ++starts;
        if (n["name"] == "conv1") {
            EXPECT_EQ(n["inputs"][0]["desc"], "f32[4, 1, 28, 28] nhwc") << "each process's shard of the global batch";
        }
    }
    EXPECT_EQ(starts, 3u);
    const test::CommandResult odd = test::run_command(std::string(JOULE_BINARY) + " inspect lenet5 --processes 2 2>&1");
    EXPECT_NE(odd.code, 0);
    EXPECT_NE(odd.out.find("joule: error: --batch 1 is the global batch of the job's 2 processes and must be divisible by it"), std::string::npos) << odd.out;
}

// --- mpirun ---------------------------------------------------------------------------------------

// mpirun as root needs --allow-run-as-root; --oversubscribe lets 2 ranks start whatever the slot count.
// Under the sanitizers (scripts/check-sanitizers.sh), the ranks unwind allocations slowly but fully, so
// LeakSanitizer's suppressions recognise Open MPI's own allocations (its components lack frame pointers).
const std::string kMpirun = "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0\" mpirun --allow-run-as-root --oversubscribe --bind-to none ";
const std::string kJoule = std::string(JOULE_BINARY) + " ";

test::CommandResult mpirun(int np, const std::string& args, const std::string& env = "") {
    return test::run_command(env + " " + kMpirun + "-np " + std::to_string(np) + " " + kJoule + args + " 2>&1");
}
nlohmann::json json_of(const test::CommandResult& r, const std::string& what) {
    EXPECT_EQ(r.code, 0) << what << ":\n" << r.out;
    const size_t begin = r.out.find("{\n");  // (mpirun may print notes before it)
    if (begin == std::string::npos) {
        ADD_FAILURE() << what << ": no JSON in\n" << r.out;
        return nlohmann::json::object();
    }
    return nlohmann::json::parse(r.out.substr(begin));
}
nlohmann::json one_process(const std::string& args) { return json_of(test::run_command(kJoule + args + " 2>/dev/null"), args); }
nlohmann::json two_processes(const std::string& args) {
    return json_of(test::run_command(kMpirun + "-np 2 " + kJoule + args + " 2>/dev/null"), "mpirun -np 2 " + args);
}

// Losses of the same global batch agree within float summation order (the sum over processes adds the
// shards' gradients in another order than one process's reduction over the batch).
void expect_same_losses(const nlohmann::json& a, const nlohmann::json& b, size_t from, const std::string& what) {
    ASSERT_TRUE(a.contains("losses") && b.contains("losses")) << what;
    ASSERT_EQ(a["losses"].size() - from, b["losses"].size()) << what;
    for (size_t i = 0; i < b["losses"].size(); ++i) {
        const double x = a["losses"][from + i].get<double>(), y = b["losses"][i].get<double>();
        EXPECT_NEAR(x, y, 2e-5 * std::fabs(x)) << what << ": step " << from + i + 1;
    }
}

TEST(MpiTraining, TwoProcessesTrainLikeOneWithTheGlobalBatch) {
    for (const std::string flags : {"train --steps 6 --batch 64 --threads 1 --quiet --eval-samples 500 --json",
                                    "train --steps 4 --batch 32 --accumulate 2 --optimizer sgd --clip-norm 0.5 --bucket-mib 0.05 --threads 1 --quiet --eval-samples 0 --json",
                                    "train --dataset synthetic --steps 4 --batch 16 --optimizer adamw --lr-warmup 2 --threads 1 --quiet --json",
                                    // fc layers on the emulated FPGA: their gradients all-reduced on the host
                                    "train --steps 3 --batch 32 --threads 1 --quiet --eval-samples 0 --json --system cpu+s10 --strategy energy",
                                    // dropout: each process masks its shard as one process masks that part of the global batch
                                    "train --net bert-tiny --dataset synthetic --batch 4 --seq-len 8 --steps 4 --optimizer adamw --threads 1 --quiet --json"}) {
        const nlohmann::json one = one_process(flags), two = two_processes(flags);
        expect_same_losses(one, two, 0, flags);
        EXPECT_EQ(one["processes"], 1) << flags;
        EXPECT_EQ(two["processes"], 2) << flags;
        ASSERT_EQ(two["ranks"].size(), 2u) << flags;
        for (const auto& rank : two["ranks"]) {
            EXPECT_GT(rank["step_seconds"].get<double>(), 0) << flags;
            EXPECT_GT(rank["allreduce_seconds"].get<double>(), 0) << flags;
            EXPECT_LE(rank["allreduce_wait_seconds"].get<double>(), rank["allreduce_seconds"].get<double>() + 1e-9) << flags;
            EXPECT_EQ(rank["allreduces_per_step"].get<double>(), two["allreduce_buckets"].get<double>()) << flags << ": each bucket once per step, also with --accumulate";
        }
        EXPECT_GE(two["allreduce_buckets"].get<int>(), 1) << flags;
        if (one.contains("test_accuracy")) {
            EXPECT_NEAR(one["test_accuracy"].get<double>(), two["test_accuracy"].get<double>(), 0.01) << flags;
        }
    }
    // the small buckets: more than one per step
    EXPECT_GT(two_processes("train --steps 2 --batch 32 --bucket-mib 0.05 --threads 1 --quiet --eval-samples 0 --json")["allreduce_buckets"].get<int>(), 2);
}

TEST(MpiTraining, OnlyRankZeroReportsAndEnergyIsPerProcessAndCluster) {
    const test::CommandResult r = mpirun(2, "train --steps 3 --batch 32 --threads 1 --quiet --eval-samples 0 --energy --meter modelled --device-spec cpu-amd-epyc-turin-2vcpu");
    ASSERT_EQ(r.code, 0) << r.out;
    size_t headers = 0;
    for (size_t at = r.out.find("training lenet5"); at != std::string::npos; at = r.out.find("training lenet5", at + 1)) ++headers;
    EXPECT_EQ(headers, 1u) << r.out;
    EXPECT_NE(r.out.find("batch 32 over 2 processes (mpi; 16 each)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("data-parallel over 2 processes (mpi)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(modelled)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("J per step (each host's meter counted once)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("allreduce:0"), std::string::npos) << "the buckets are rows of the layer table:\n" << r.out;
    const nlohmann::json j = two_processes("train --steps 3 --batch 32 --threads 1 --quiet --eval-samples 0 --json --energy --meter modelled --device-spec cpu-amd-epyc-turin-2vcpu");
    ASSERT_EQ(j["ranks"].size(), 2u);
    double sum = 0;
    for (const auto& rank : j["ranks"]) {
        EXPECT_EQ(rank["energy"], "modelled");
        sum += rank["joules"].get<double>();
    }
    EXPECT_NEAR(j["cluster_joules_per_step"].get<double>(), sum, 1e-9) << "modelled meters: each process's own share, summed";
}

TEST(MpiTraining, ResumesOnAnotherNumberOfProcesses) {
    const std::string dir = "/tmp/joule_dp_" + std::to_string(getpid());
    const std::string base = "train --batch 32 --steps 3 --threads 1 --quiet --eval-samples 0 --json --optimizer sgd";
    const nlohmann::json whole = one_process(base + " --epochs 2");
    ASSERT_EQ(whole["losses"].size(), 6u);
    for (const auto& [first, then] : {std::pair{2, 1}, std::pair{1, 2}}) {
        std::system(("rm -rf " + dir).c_str());
        const std::string write = base + " --epochs 1 --checkpoint " + dir, resume = base + " --epochs 2 --resume " + dir;
        const nlohmann::json a = first == 2 ? two_processes(write) : one_process(write);
        const nlohmann::json b = then == 2 ? two_processes(resume) : one_process(resume);
        EXPECT_EQ(b["resumed_at_step"], 3);
        expect_same_losses(whole, b, 3, "written by " + std::to_string(first) + " process(es), resumed on " + std::to_string(then));
    }
    std::system(("rm -rf " + dir).c_str());
}

TEST(MpiTraining, AStuckOrFailingRankEndsTheJobWithAClearError) {
    // rank 1 stops after its first step: rank 0 gives up at the deadline and ends the job
    const test::CommandResult stuck = mpirun(2, "train --steps 4 --threads 1 --quiet --eval-samples 0 --comm-timeout 2", "JOULE_FAULT_STALL_RANK=1");
    EXPECT_NE(stuck.code, 0);
    EXPECT_NE(stuck.out.find("joule: error: rank 0 of 2: the all-reduce of a gradient bucket did not complete within 2 s"), std::string::npos) << stuck.out;
    // a rank that fails on its own input ends the job too
    const test::CommandResult bad = test::run_command(kMpirun + "-np 1 " + kJoule + "train --steps 2 --threads 1 --quiet --eval-samples 0 : -np 1 " + kJoule +
                                                      "train --steps 2 --threads 1 --quiet --eval-samples 0 --image-size 64 2>&1");
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("joule: error: rank 1 of 2: --image-size 64: Fashion-MNIST images are 28x28"), std::string::npos) << bad.out;
    // ranks started with other flags: every rank says so
    const test::CommandResult differ = test::run_command(kMpirun + "-np 1 " + kJoule + "train --steps 2 --threads 1 --quiet --eval-samples 0 : -np 1 " + kJoule +
                                                         "train --steps 2 --threads 1 --quiet --eval-samples 0 --lr 0.01 2>&1");
    EXPECT_NE(differ.code, 0);
    for (const char* rank : {"rank 0 of 2", "rank 1 of 2"})
        EXPECT_NE(differ.out.find(std::string("joule: error: ") + rank + ": the job's processes disagree: rank(s) 1 run another graph or other training flags"),
                  std::string::npos)
            << differ.out;
}

TEST(MpiTraining, BadFlagsAndCommandsAreClearErrors) {
    const test::CommandResult odd = mpirun(2, "train --batch 63 --steps 1 --threads 1 --quiet");
    EXPECT_NE(odd.code, 0);
    EXPECT_NE(odd.out.find("--batch 63 is the global batch of the job's 2 processes and must be divisible by it"), std::string::npos) << odd.out;
    const test::CommandResult other = mpirun(2, "inspect lenet5");
    EXPECT_NE(other.code, 0);
    EXPECT_NE(other.out.find("joule inspect runs in one process; of a job's 2 processes (mpirun -np 2) only `joule train` runs"), std::string::npos) << other.out;
    for (const char* flag : {"--bucket-mib 0", "--bucket-mib -1", "--comm-timeout 0", "--bucket-mib x"}) {
        const test::CommandResult r = test::run_command(kJoule + "train --steps 1 " + flag + " 2>&1");
        EXPECT_EQ(r.code, 2) << flag;
        EXPECT_NE(r.out.find("joule: error:"), std::string::npos) << flag << ": " << r.out;
    }
}

}  // namespace
}  // namespace joule

// cli/: end-to-end runs of the joule binary: every command, --json output, and bad flags / inputs
// giving a clear message and a non-zero exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Result {
    int code;
    std::string out;  // stdout and stderr together
};

Result run(const std::string& args) {
    const std::string cmd = std::string(JOULE_BINARY) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf{};
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

nlohmann::json run_json(const std::string& args) {
    const std::string cmd = std::string(JOULE_BINARY) + " " + args + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf{};
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
    EXPECT_EQ(pclose(p), 0) << args;
    return nlohmann::json::parse(out);
}

void expect_failure(const std::string& args, const std::string& message) {
    const Result r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << " printed:\n" << r.out;
}

TEST(Cli, NetsListsTheZoo) {
    const Result r = run("nets");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("resnet50"), std::string::npos);
    const auto j = run_json("nets --json");
    ASSERT_EQ(j.size(), 9u);
    EXPECT_EQ(j[0]["name"], "lenet5");
    EXPECT_EQ(j[0]["parameters"], 61706);
}

TEST(Cli, InspectPrintsTheTrainGraph) {
    const Result r = run("inspect lenet5");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("ConvBackwardWeights"), std::string::npos);
    EXPECT_NE(r.out.find("AdamUpdate"), std::string::npos);
    const auto j = run_json("inspect resnet18 --batch 2 --image-size 32 --optimizer sgd --dtype bf16 --json");
    bool backward = false, update = false, bf16 = false;
    for (const auto& n : j["nodes"]) {
        backward = backward || n["phase"] == "backward";
        update = update || n["op"] == "SgdUpdate";
        bf16 = bf16 || n["compute"] == "bf16";
        EXPECT_GE(n["flops"].get<double>(), 0.0);
    }
    EXPECT_TRUE(backward && update && bf16);
    EXPECT_EQ(j["parameters"], 11689512);
}

TEST(Cli, TrainRunsAndReports) {
    const auto j = run_json("train --steps 20 --threads 2 --json");
    EXPECT_EQ(j["net"], "lenet5");
    EXPECT_EQ(j["timing"], "measured");
    EXPECT_EQ(j["test_samples"], 10000);
    EXPECT_GT(j["test_accuracy"].get<double>(), 0.3);  // 20 steps already beat chance (10 %)
    EXPECT_FALSE(j["layers"].empty());
    const Result r = run("train --net resnet18 --dataset synthetic --image-size 32 --batch 4 --steps 2 --optimizer sgd --dtype bf16 --top 200");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("per-layer time per step (measured"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("layer1.0.conv1"), std::string::npos) << r.out;
    const auto all = run_json("train --net bert-tiny --dataset synthetic --batch 2 --seq-len 8 --steps 2 --dtype bf16 --dtype-scope all --json");
    EXPECT_EQ(all["dtype"], "bf16");
}

TEST(Cli, BadInputsFailClearly) {
    expect_failure("", "A subcommand is required");
    expect_failure("train --batch 0", "--batch");
    expect_failure("train --epochs -1", "--epochs");
    expect_failure("train --net resnet1000", "unknown network 'resnet1000'");
    expect_failure("train --dtype f64", "--dtype");
    expect_failure("train --optimizer rmsprop", "--optimizer");
    expect_failure("train --data-dir /nonexistent", "/nonexistent/train-images-idx3-ubyte.gz: cannot open IDX file");
    expect_failure("train --net bert-tiny", "use --dataset synthetic");
    expect_failure("train --net vgg16 --steps 1", "vgg16 at 28x28");
    expect_failure("train --momentum 0.5", "--momentum applies to --optimizer sgd only");
    expect_failure("train --threads x", "--threads");
    expect_failure("train --dtype-scope some", "--dtype-scope");
    expect_failure("train --net vgg16 --dataset synthetic --batch 4096 --steps 1", "MiB of tensor memory but this machine has");
    expect_failure("inspect", "net is required");
    expect_failure("inspect nope", "unknown network 'nope'");
    expect_failure("nets --frobnicate", "frobnicate");
}

}  // namespace

// cli/: end-to-end runs of the joule binary: every command, --json output, and bad flags / inputs
// giving a clear message and a non-zero exit code.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "test_util.hpp"

namespace {

// The modelled meter's CPU spec, named so the tests run on any CPU (auto-matching needs this machine's spec).
constexpr const char* kSpec = " --device-spec cpu-amd-epyc-turin-2vcpu";

using Result = joule::test::CommandResult;

Result run(const std::string& args) { return joule::test::run_command(std::string(JOULE_BINARY) + " " + args + " 2>&1"); }  // stdout and stderr together

nlohmann::json run_json(const std::string& args) {
    const Result r = joule::test::run_command(std::string(JOULE_BINARY) + " " + args + " 2>/dev/null");
    EXPECT_EQ(r.code, 0) << args;
    return nlohmann::json::parse(r.out);
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
    const auto out = run_json("nets --json");
    EXPECT_EQ(out["schema"], "joule.nets/1");
    const auto& j = out["nets"];
    ASSERT_EQ(j.size(), 10u);
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

// The loop around the graph: AdamW, gradient accumulation, clipping and a warm-up + cosine schedule
// (their arithmetic against PyTorch: test_training_loop.cpp), and their bad values.
TEST(Cli, TrainAccumulatesClipsAndSchedules) {
    const std::string flags = "train --dataset synthetic --steps 4 --threads 1 --quiet --optimizer adamw --lr 1e-3 --accumulate 3 --clip-norm 1 --lr-warmup 1 "
                              "--lr-schedule cosine --lr-min 1e-5";
    const auto j = run_json(flags + " --json");
    EXPECT_EQ(j["accumulate"], 3);
    EXPECT_EQ(j["global_batch"], 192);
    EXPECT_EQ(j["epochs"][0]["steps"], 4);
    const double last = 1e-5 + (1e-3 - 1e-5) * (1 + std::cos(std::acos(-1.0) * 2 / 3)) / 2;  // step 3: the cosine's second of 3 steps
    EXPECT_NEAR(j["last_lr"].get<double>(), last, 1e-6 * last);
    // a step's work is its micro-batches': conv1's forward and backward FLOPs three times, its update once
    const auto plain = run_json("train --dataset synthetic --steps 2 --threads 1 --quiet --json");
    EXPECT_NEAR(j["layers"][0]["flops"].get<double>() / plain["layers"][0]["flops"].get<double>(), 3.0, 0.01);
    const Result r = run(flags);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("adamw lr 0.001, accumulate 3 (global batch 192), clip norm 1, warm-up 1 steps from 0.01 x lr then cosine to 1e-05"), std::string::npos)
        << r.out;
    expect_failure("train --lr-schedule step", "--lr-schedule step needs --lr-step-size >= 1, got 0");
    expect_failure("train --lr-min 1e-5", "--lr-min requires --lr-schedule");
    expect_failure("train --lr-schedule exp", "--lr-schedule: exp not in {constant,cosine,step}");
    expect_failure("train --accumulate 0", "--accumulate");
    expect_failure("train --clip-norm -1", "--clip-norm");
    expect_failure("train --lr-warmup-start 0", "--lr-warmup-start");
    expect_failure("train --lr-schedule step --lr-step-size 2 --lr-gamma 2", "--lr-gamma");
    expect_failure("train --dataset synthetic --steps 5 --lr-schedule cosine --lr-warmup 10", "the run has 5 optimizer step(s) and --lr-warmup is 10");
    expect_failure("train --dataset synthetic --steps 2 --lr 1e-3 --lr-schedule cosine --lr-min 0.1", "--lr-min must be in [0, --lr]");
    expect_failure("train --accumulate 1000", "--accumulate 1000 micro-batches per step is more than an epoch's 937 batches of 64");
    expect_failure("train --optimizer adamw --momentum 0.9", "--momentum applies to --optimizer sgd only");
}

std::string temp_path(const std::string& name) {
    const std::string d = "/tmp/joule_cli_" + std::to_string(getpid());
    std::system(("mkdir -p " + d).c_str());
    std::remove((d + "/" + name).c_str());
    return d + "/" + name;
}

// Checkpoints: a run killed after step k and resumed from its last checkpoint ends exactly where an
// uninterrupted run ends (losses and test accuracy bit for bit), also when it was killed while writing a
// checkpoint (the previous one survives); Adam's step, dropout's masks, gradient accumulation and the
// synthetic data's generator resume too, and a bf16 run's weight copies (rebuilt from the weights). Bad
// checkpoints are clear errors.
// Gradient accumulation under a plan that puts layers on another device: micro-batches of 16 give the
// losses of batch 32 (no BatchNorm in LeNet-5), their gradients' transfers run with each micro-batch.
TEST(Cli, TrainAccumulatesAcrossDevices) {
    const std::string flags = "train --steps 3 --threads 1 --quiet --eval-samples 0 --json --system cpu+s10 --strategy energy";
    const auto whole = run_json(flags + " --batch 32"), micro = run_json(flags + " --batch 16 --accumulate 2");
    ASSERT_EQ(whole["losses"].size(), 3u);
    ASSERT_EQ(micro["losses"].size(), 3u);
    EXPECT_GT(whole["transfers"].get<int>(), 0);
    for (size_t i = 0; i < 3; ++i)
        EXPECT_NEAR(micro["losses"][i].get<double>(), whole["losses"][i].get<double>(), 2e-5 * whole["losses"][i].get<double>()) << "step " << i + 1;
}

TEST(Cli, TrainCheckpointsAndResumesExactly) {
    auto dir = [](const std::string& name) {
        const std::string d = temp_path(name);
        std::system(("rm -rf " + d).c_str());
        return d;
    };
    auto killed = [](const std::string& env, const std::string& args) {
        return std::system((env + " " + JOULE_BINARY + " " + args + " > /dev/null 2>&1").c_str());
    };
    struct Run {
        std::string flags;
        int kill_after, kill_writing;  // optimizer steps
    };
    for (const Run& run_case : {Run{"train --steps 5 --epochs 2 --threads 1 --quiet --eval-samples 300 --json", 7, 4},
                                Run{"train --net bert-tiny --dataset synthetic --batch 2 --seq-len 8 --steps 3 --epochs 2 --accumulate 2 --optimizer adamw "
                                    "--threads 1 --quiet --json",
                                    4, 4},
                                // bf16: the updates keep the weights' bf16 copies, which a checkpoint leaves out and a resume rebuilds
                                Run{"train --net bert-tiny --dataset synthetic --batch 2 --seq-len 8 --steps 3 --epochs 2 --dtype bf16 --optimizer sgd "
                                    "--threads 1 --quiet --json",
                                    4, 4}}) {
        const std::string& flags = run_case.flags;
        const std::string a = dir("ckA"), b = dir("ckB"), c = dir("ckC");
        const auto whole = run_json(flags + " --checkpoint " + a + " --checkpoint-every 2");
        ASSERT_EQ(whole["epochs"].size(), 2u) << flags;
        EXPECT_GE(whole["checkpoints"].get<int>(), 3) << flags;
        // killed after a step (its last checkpoint two steps back at most), then resumed
        EXPECT_NE(killed("JOULE_FAULT_KILL_AFTER_STEP=" + std::to_string(run_case.kill_after), flags + " --checkpoint " + b + " --checkpoint-every 2"), 0);
        const auto resumed = run_json(flags + " --resume " + b);
        ASSERT_FALSE(resumed["epochs"].empty()) << flags;
        EXPECT_EQ(resumed["resumed_at_step"], run_case.kill_after / 2 * 2) << flags;
        EXPECT_EQ(resumed["epochs"].back()["loss"].get<double>(), whole["epochs"][1]["loss"].get<double>()) << flags << ": bit for bit";
        if (whole.contains("test_accuracy")) {
            EXPECT_EQ(resumed["test_accuracy"], whole["test_accuracy"]) << flags;
        }
        // killed half-way through writing a checkpoint: the one before it is whole
        EXPECT_NE(killed("JOULE_FAULT_KILL_WRITING_CHECKPOINT=" + std::to_string(run_case.kill_writing), flags + " --checkpoint " + c + " --checkpoint-every 2"), 0);
        EXPECT_EQ(access((c + "/checkpoint.bin.tmp").c_str(), F_OK), 0) << "the half-written file";
        const auto again = run_json(flags + " --resume " + c);
        EXPECT_EQ(again["resumed_at_step"], run_case.kill_writing - 2) << flags;
        ASSERT_EQ(again["epochs"].size(), 2u) << flags;
        for (size_t e = 0; e < 2; ++e) EXPECT_EQ(again["epochs"][e]["loss"].get<double>(), whole["epochs"][e]["loss"].get<double>()) << flags << " epoch " << e;
    }
    // bad checkpoints
    const std::string base = "train --threads 1 --quiet --eval-samples 0", flags = base + " --steps 5 --epochs 2", good = dir("ckGood");
    ASSERT_EQ(run(base + " --steps 2 --epochs 1 --checkpoint " + good).code, 0);
    expect_failure(flags + " --resume " + good + " --net bert-tiny --dataset synthetic --seq-len 8", "is of a run with net \"lenet5\", this run has \"bert-tiny\"");
    expect_failure(flags + " --resume " + good + " --dataset synthetic", "is of a run with dataset \"fashion-mnist\", this run has \"synthetic\"");
    expect_failure(flags + " --resume " + good + " --batch 32", "is of a run with batch 64, this run has 32");
    expect_failure(base + " --steps 1 --resume " + good, "the checkpoint is at step 2 of an epoch, this run's epochs have 1");
    expect_failure(base + " --steps 2 --epochs 1 --resume " + good, "nothing left to train");
    // a checkpoint at an epoch's end (as without --checkpoint-every) goes on with the next epoch
    const auto next = run_json(base + " --steps 2 --epochs 2 --json --resume " + good), both = run_json(base + " --steps 2 --epochs 2 --json");
    EXPECT_EQ(next["first_epoch"], 2);
    ASSERT_EQ(next["epochs"].size(), 1u);
    EXPECT_EQ(next["epochs"][0]["loss"].get<double>(), both["epochs"][1]["loss"].get<double>());
    expect_failure(flags + " --resume " + dir("ckMissing"), "no checkpoint there");
    expect_failure(flags + " --checkpoint-every 2", "--checkpoint-every requires --checkpoint");
    expect_failure(flags + " --checkpoint /proc/joule-ck", "--checkpoint /proc/joule-ck: cannot create the directory");
    std::ifstream in(good + "/checkpoint.bin", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    auto mangled = [&](const std::string& name, const std::string& content) {
        const std::string d = dir(name);
        std::system(("mkdir -p " + d).c_str());
        std::ofstream(d + "/checkpoint.bin", std::ios::binary) << content;
        return d;
    };
    std::string flipped = bytes;
    flipped[flipped.size() / 2] ^= 0x40;
    expect_failure(flags + " --resume " + mangled("ckFlip", flipped), "is corrupt or truncated (checksum mismatch)");
    expect_failure(flags + " --resume " + mangled("ckCut", bytes.substr(0, bytes.size() / 2)), "is corrupt or truncated");
    expect_failure(flags + " --resume " + mangled("ckHead", bytes.substr(0, 100)), "is truncated");
    expect_failure(flags + " --resume " + mangled("ckText", "not a checkpoint"), "is not a joule checkpoint");
    std::string other_version = bytes;
    const size_t v = other_version.find("\"joule\":\"") + 9;
    other_version[v] = other_version[v] == '9' ? '8' : '9';
    expect_failure(flags + " --resume " + mangled("ckVersion", other_version), "was written by joule 9");
}

TEST(Cli, TrainEnergyReportsPerLayerEnergy) {
    const Result r = run("train --energy --steps 10 --threads 2 --idle-seconds 0.1" + std::string(kSpec));
    EXPECT_EQ(r.code, 0) << r.out;
    const bool rapl = access("/sys/class/powercap", F_OK) == 0;
    if (!rapl) {
        EXPECT_NE(r.out.find("meter: modelled"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("MODELLED"), std::string::npos);
        EXPECT_NE(r.out.find("per-layer energy per step (modelled"), std::string::npos) << r.out;
    }
    EXPECT_NE(r.out.find("idle/static (cpu)"), std::string::npos) << r.out;
    const auto j = run_json("train --energy --steps 10 --threads 2 --idle-seconds 0.1 --json" + std::string(kSpec));
    const auto& e = j["energy"];
    const double ops = e["per_step"]["ops_joules"], idle = e["per_step"]["idle_joules"], total = e["per_step"]["total_joules"];
    EXPECT_NEAR(ops + idle, total, 1e-9);
    double layers = 0;
    for (const auto& l : j["layers"]) layers += l["joules"]["forward"].get<double>() + l["joules"]["backward"].get<double>() + l["joules"]["update"].get<double>();
    EXPECT_NEAR(layers, ops, 1e-6 * total);
    if (!rapl) {
        EXPECT_EQ(e["kind"], "modelled");
    }
}

TEST(Cli, TrainWritesAChromeTraceOfEveryTimedStep) {
    const std::string trace = temp_path("train.trace.json");
    const auto j = run_json("train --net lenet5 --dataset synthetic --steps 4 --warmup 1 --threads 1 --energy --meter modelled --idle-seconds 0 --json --trace " +
                            trace + kSpec);
    EXPECT_EQ(j["trace"], trace);
    int64_t nodes = 0;
    for (const auto& d : j["devices"]) nodes += d["nodes"].get<int64_t>();
    std::ifstream f(trace);
    const auto t = nlohmann::json::parse(f);
    // the 3 timed steps: an event per node of the run's graph, and one for the step
    EXPECT_EQ(joule::test::expect_trace_event_format(t), size_t(3 * (nodes + 1)));
    std::set<std::string> phases;
    size_t counters = 0;
    for (const auto& e : t["traceEvents"]) {
        if (e["ph"] == "X") phases.insert(e["cat"].get<std::string>());
        if (e["ph"] == "X" && e["cat"] != "step") {
            for (const char* a : {"op", "dtype", "shapes", "flops", "bytes", "timing", "joules above idle"}) EXPECT_TRUE(e["args"].contains(a)) << a << " in " << e;
        }
        if (e["ph"] == "C") {
            ++counters;
            EXPECT_EQ(e["name"], "power W (modelled, cpu)");
        }
    }
    EXPECT_EQ(phases, (std::set<std::string>{"forward", "loss", "backward", "update", "step"}));
    EXPECT_GE(counters, size_t(3 * 2));
    EXPECT_NE(t["otherData"]["power"].get<std::string>().find("modelled from"), std::string::npos) << t["otherData"];
    // without --energy: the spans alone
    const Result r = run("train --net lenet5 --dataset synthetic --steps 3 --threads 1 --quiet --trace " + trace);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("wrote 2 timed steps' node spans to " + trace), std::string::npos) << r.out;
    std::ifstream g(trace);
    const auto u = nlohmann::json::parse(g);
    joule::test::expect_trace_event_format(u);
    EXPECT_NE(u["otherData"]["power"].get<std::string>().find("not recorded"), std::string::npos);
    expect_failure("train --net lenet5 --dataset synthetic --steps 2 --trace /nonexistent/dir/t.json", "--trace /nonexistent/dir/t.json: cannot write the trace file");
}

TEST(Cli, ProfileTracesTheConfigurationsItRuns) {
    const std::string db = temp_path("t.db"), trace = temp_path("profile.trace.json");
    Result r = run("profile --db " + db + " --batch 4,8 --threads 1 --iters 2 --warmup 1 --meter modelled --trace " + trace + kSpec);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("wrote 2 configuration(s)' node spans and power to " + trace), std::string::npos) << r.out;
    size_t nodes = 0;  // both configurations: an event per node per measured step, and one per step
    const auto report = run_json("profile --db " + db + " --report --json");
    for (const auto& c : report["configs"]) nodes += c["nodes"].size();
    std::ifstream f(trace);
    const auto t = nlohmann::json::parse(f);
    EXPECT_EQ(joule::test::expect_trace_event_format(t), 2 * nodes + 2 * 2);
    std::set<std::string> tracks, counters;
    for (const auto& e : t["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
        if (e["ph"] == "C") counters.insert(e["name"].get<std::string>());
    }
    EXPECT_EQ(tracks, (std::set<std::string>{"lenet5 batch 4 f32 1 threads: cpu", "lenet5 batch 4 f32 1 threads: steps", "lenet5 batch 8 f32 1 threads: cpu",
                                             "lenet5 batch 8 f32 1 threads: steps"}));
    EXPECT_EQ(counters, (std::set<std::string>{"lenet5 batch 4 f32 1 threads: power W (modelled, cpu)", "lenet5 batch 8 f32 1 threads: power W (modelled, cpu)"}));
    // configurations already in the database are not run again, so not traced: the trace says so
    r = run("profile --db " + db + " --batch 4,8 --threads 1 --iters 2 --warmup 1 --meter modelled --trace " + trace + kSpec);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("wrote 0 configuration(s)"), std::string::npos) << r.out;
    std::ifstream g(trace);
    EXPECT_NE(nlohmann::json::parse(g)["otherData"]["configurations"].get<std::string>().find("2 already in the database"), std::string::npos);
    expect_failure("profile --db " + db + " --report --trace " + trace, "--report excludes --trace");
    const std::string fresh = temp_path("never.db");
    expect_failure("profile --db " + fresh + " --trace /nonexistent/dir/t.json", "--trace /nonexistent/dir/t.json: cannot write the trace file");
    EXPECT_NE(access(fresh.c_str(), F_OK), 0) << "a bad --trace creates no database";
}

TEST(Cli, ReportDrawsAProfileDatabaseAndATrainRun) {
    const std::string db = temp_path("r.db"), page = temp_path("r.html"), run_json_file = temp_path("run.json");
    ASSERT_EQ(run("profile --db " + db + " --batch 4,8 --threads 1 --iters 2 --warmup 1 --meter modelled" + std::string(kSpec)).code, 0);
    Result r = run("report --db " + db + " --out " + page);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("1 section(s), 8 figure(s)"), std::string::npos) << r.out;
    auto read = [](const std::string& path) {
        std::ifstream in(path);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    std::string html = read(page);
    EXPECT_NE(html.find("<!DOCTYPE html>"), std::string::npos);
    EXPECT_NE(html.find("throughput (measured)"), std::string::npos);
    EXPECT_NE(html.find("energy per image (modelled)"), std::string::npos);
    std::ofstream(run_json_file) << run_json("train --net lenet5 --dataset synthetic --steps 3 --threads 1 --quiet --energy --meter modelled --idle-seconds 0 --json" +
                                             std::string(kSpec));
    r = run("report --train " + run_json_file + " --out " + page);
    ASSERT_EQ(r.code, 0) << r.out;
    html = read(page);
    EXPECT_NE(html.find("time per layer (measured)"), std::string::npos);
    EXPECT_NE(html.find("energy per layer (modelled)"), std::string::npos);
    // bad inputs
    const std::string sweep = temp_path("sweep.json");
    std::ofstream(sweep) << run_json("analyze --net lenet5 --batch 8 --device v100 --sweep capacity=64KiB..4MiB --json");
    r = run("report --analyze " + sweep + " --out " + page);
    ASSERT_EQ(r.code, 0) << r.out;
    html = read(page);
    EXPECT_NE(html.find("traffic per iteration (modelled)"), std::string::npos);
    EXPECT_NE(html.find("knee"), std::string::npos);
    expect_failure("report --out " + page, "joule report takes --db FILE, --train FILE or --analyze FILE");
    expect_failure("report --analyze " + run_json_file, "not the output of joule analyze --json");
    expect_failure("report --db " + db + " --train " + run_json_file, "excludes");
    expect_failure("report --db " + temp_path("missing.db"), "no such profile database");
    expect_failure("report --db " + run_json_file, run_json_file);
    expect_failure("report --train " + db, "not JSON");
    expect_failure("report --train " + temp_path("missing.json"), "cannot read the file");
    const std::string other = temp_path("other.json");
    std::ofstream(other) << "{\"schema\": \"joule.profile/1\"}";
    expect_failure("report --train " + other, "not the output of joule train --json");
    expect_failure("report --db " + db + " --out /nonexistent/dir/r.html", "--out /nonexistent/dir/r.html: cannot write the report");
}

// report --db --predict: each stored configuration's step beside the cost interface's prediction on a
// device -- the numbers profile --device prints for it -- and bad predictions and foreign databases refused.
TEST(Cli, ReportPredictsTheProfiledStepsOnADevice) {
    const std::string db = temp_path("pred.db"), page = temp_path("pred.html");
    ASSERT_EQ(run("profile --db " + db + " --batch 4,8 --threads 1 --iters 2 --warmup 1 --meter modelled" + std::string(kSpec)).code, 0);
    const nlohmann::json profiled = run_json("profile --db " + db + " --report --device v100 --json");
    ASSERT_EQ(profiled["on_device"].size(), 2u) << profiled.dump();
    Result r = run("report --db " + db + " --predict v100 --out " + page);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("2 section(s), 10 figure(s)"), std::string::npos) << r.out;
    std::ifstream in(page);
    std::string html(std::istreambuf_iterator<char>(in), {});
    EXPECT_NE(html.find("lenet5: predicted against measured"), std::string::npos);
    EXPECT_NE(html.find("step time, measured and predicted on gpu-nvidia-v100-sxm2 (measured and modelled)"), std::string::npos);
    EXPECT_NE(html.find("mean |difference|"), std::string::npos);
    // a point's title is "line: batch, ms"
    auto point = [&](const std::string& line, int64_t batch) {
        const std::string key = "<title>" + line + ": " + std::to_string(batch) + ", ";
        const size_t at = html.find(key);
        return at == std::string::npos ? -1.0 : std::stod(html.substr(at + key.size()));
    };
    for (const nlohmann::json& c : profiled["configs"]) {
        const int64_t batch = c["batch"];
        EXPECT_NEAR(point("f32, 1 threads, measured", batch), c["step_seconds"].get<double>() * 1e3, 1e-3 * c["step_seconds"].get<double>() * 1e3) << batch;
    }
    for (const nlohmann::json& c : profiled["on_device"]) {
        const int64_t batch = c["batch"];
        EXPECT_NEAR(point("f32, 1 threads, predicted", batch), c["step_s"].get<double>() * 1e3, 1e-3 * c["step_s"].get<double>() * 1e3) << batch;
    }
    // the CPU the records were measured on: the model's error, each configuration on its threads' share
    // of the CPU in both commands
    r = run("report --db " + db + " --predict cpu-amd-epyc-turin-2vcpu --out " + page);
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream again(page);
    html.assign(std::istreambuf_iterator<char>(again), {});
    EXPECT_NE(html.find("that is the model's error"), std::string::npos);
    const nlohmann::json on_cpu = run_json("profile --db " + db + " --report --device cpu-amd-epyc-turin-2vcpu --json");
    const nlohmann::json whole_cpu = run_json("predict --device cpu-amd-epyc-turin-2vcpu --net lenet5 --batch 8 --optimizer adam --json");
    for (const nlohmann::json& c : on_cpu["on_device"]) {
        const int64_t batch = c["batch"];
        EXPECT_NEAR(point("f32, 1 threads, predicted", batch), c["step_s"].get<double>() * 1e3, 1e-3 * c["step_s"].get<double>() * 1e3) << batch;
        if (batch == 8) {
            // one thread: half the CPU's cores -- compute and traffic take twice as long, the nodes' fixed costs
            // (most of LeNet-5 b8's step on this CPU's curves) do not
            EXPECT_GT(c["step_s"].get<double>(), 1.2 * whole_cpu["iteration"]["seconds"].get<double>()) << "one thread: half the CPU's cores";
        }
    }
    expect_failure("report --db " + db + " --predict no-such-device --out " + page, "no-such-device");
    expect_failure("report --db " + db + " --predict s10 --out " + page, "--predict s10: fpga-intel-stratix10-gx2800-520n is an FPGA");
    expect_failure("report --train run.json --predict v100", "--predict requires --db");
    expect_failure("report --db " + db + " --image-size 64", "--image-size requires --predict");
    expect_failure("report --db " + db + " --predict v100 --image-size 64 --out " + page, "pass the --image-size / --seq-len the sweep used");
    // a database of another schema version: the user_version in the SQLite header (offset 60, big-endian)
    for (const auto& [version, message] : {std::pair<char, std::string>{2, "older than this joule's"}, {9, "newer than this joule's"}}) {
        const std::string other = temp_path("v" + std::to_string(int(version)) + ".db");
        std::system(("cp " + db + " " + other).c_str());
        {
            std::fstream f(other, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(60);
            const char be[4] = {0, 0, 0, version};
            f.write(be, 4);
        }
        expect_failure("report --db " + other + " --out " + page, "profile schema version " + std::to_string(int(version)) + ", " + message);
    }
}

// joule report's pages in a real browser: headless Chromium (scripts/setup.sh installs Debian's) loads
// each without a console message, its DOM holds every figure and mark the page has, and a screenshot
// of each is kept in report-screenshots/ of the test's directory (the README's come from here).
TEST(Cli, ReportPagesRenderInHeadlessChromium) {
    ASSERT_EQ(access("/usr/bin/chromium", X_OK), 0) << "no /usr/bin/chromium: scripts/setup.sh installs it";
    // the inputs beside the pages, named as a user would (each page says what it was made from)
    const std::string dir = temp_path("browser"), db = dir + "/joule-profile.db", run_file = dir + "/run.json", sweep = dir + "/sweep.json";
    std::system(("mkdir -p " + dir).c_str());
    ASSERT_EQ(run("profile --db " + db + " --batch 4,8,16 --threads 1 --iters 2 --warmup 1 --meter modelled" + std::string(kSpec)).code, 0);
    std::ofstream(run_file) << run_json("train --net lenet5 --dataset synthetic --steps 3 --threads 1 --quiet --system cpu+s10 --strategy energy --energy "
                                       "--meter modelled --idle-seconds 0 --json" + std::string(kSpec));
    std::system("mkdir -p report-screenshots");
    std::ofstream(sweep) << run_json("analyze --net resnet18 --batch 8 --device v100 --sweep capacity=256KiB..256MiB --json");
    for (const auto& [name, source] : {std::pair<std::string, std::string>{"profile", "--db joule-profile.db --predict cpu-amd-epyc-turin-2vcpu"},
                                       {"train", "--train run.json"},
                                       {"analyze", "--analyze sweep.json"}}) {
        const std::string page = dir + "/" + name + ".html", console = temp_path(name + ".console"), profile_dir = temp_path(name + ".chromium");
        ASSERT_EQ(std::system(("cd " + dir + " && " + JOULE_BINARY + " report " + source + " --out " + name + ".html > /dev/null").c_str()), 0) << source;
        std::ifstream in(page);
        const std::string html(std::istreambuf_iterator<char>(in), {});
        const std::string chromium = "/usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --user-data-dir=" + profile_dir +
                                     " --enable-logging=stderr --v=0 ";
        // the DOM as the browser built it
        FILE* p = popen((chromium + "--dump-dom file://" + page + " 2>" + console).c_str(), "r");
        ASSERT_NE(p, nullptr);
        std::string dom;
        std::array<char, 4096> buf{};
        while (size_t n = fread(buf.data(), 1, buf.size(), p)) dom.append(buf.data(), n);
        ASSERT_EQ(pclose(p), 0) << name;
        auto count = [](const std::string& s, const std::string& what) {
            size_t n = 0;
            for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
            return n;
        };
        for (const char* mark : {"<svg", "<circle class=\"point\"", "<rect class=\"bar\"", "<rect class=\"bar modelled\"", "<polyline"})
            EXPECT_EQ(count(dom, mark), count(html, mark)) << name << ": " << mark;
        EXPECT_GE(count(dom, "<svg"), name == "profile" ? 10u : 3u) << name;
        EXPECT_GT(count(dom, "class=\"point\"") + count(dom, "<rect class=\"bar"), 10u) << name;
        std::ifstream log(console);
        const std::string messages(std::istreambuf_iterator<char>(log), {});
        EXPECT_EQ(messages.find("CONSOLE"), std::string::npos) << name << ": the console said\n" << messages;
        // what it looks like
        const std::string shot = "report-screenshots/" + name + ".png";
        std::remove(shot.c_str());
        const std::string height = name == "profile" ? "4300" : name == "train" ? "1700" : "1300";
        ASSERT_EQ(std::system((chromium + "--window-size=1150," + height + " --screenshot=" + shot + " file://" + page + " 2>/dev/null").c_str()), 0);
        std::ifstream png(shot, std::ios::binary | std::ios::ate);
        EXPECT_GT(png.tellg(), 20000) << shot;
    }
}

TEST(Cli, ProfileSweepsStoresAndReports) {
    const std::string db = temp_path("p.db"), csv = temp_path("p.csv");
    Result r = run("profile --db " + db + " --batch 4,8 --threads 1 --iters 2 --warmup 1 --meter modelled" + std::string(kSpec));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("lenet5 batch 8 f32 1 threads"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("GFLOPS/W"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(mod)"), std::string::npos) << r.out;
    r = run("profile --db " + db + " --batch 4,8 --threads 1 --iters 2 --meter modelled" + std::string(kSpec));
    EXPECT_NE(r.out.find("already in"), std::string::npos) << r.out;
    const auto out = run_json("profile --db " + db + " --report --json");
    EXPECT_EQ(out["schema"], "joule.profile/1");
    const auto& j = out["configs"];
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[0]["energy"], "modelled");
    EXPECT_EQ(j[0]["timing"], "measured");
    EXPECT_FALSE(j[0]["nodes"].empty());
    // reports read: the database is opened read-only (unchanged), a missing one is an error and not created
    std::ifstream before_file(db, std::ios::binary);
    const std::string before((std::istreambuf_iterator<char>(before_file)), {});
    r = run("profile --db " + db + " --report --csv " + csv);
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream after_file(db, std::ios::binary);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after_file)), {}), before);
    const std::string missing = temp_path("missing.db");
    expect_failure("profile --report --db " + missing, missing + ": no such profile database");
    EXPECT_NE(access(missing.c_str(), F_OK), 0);
    std::ifstream f(csv);
    std::string header, row;
    std::getline(f, header);
    std::getline(f, row);
    EXPECT_EQ(header.rfind("net,device,dtype,batch,threads,meter_kind", 0), 0u) << header;
    EXPECT_EQ(row.rfind("lenet5,cpu,f32,4,1,modelled", 0), 0u) << row;
}

TEST(Cli, AnalyzeModelsAndSweeps) {
    Result r = run("analyze --device gpu-nvidia-v100-sxm2 --net resnet18 --batch 8");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("all figures modelled"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("per layer type (modelled"), std::string::npos) << r.out;
    const auto j = run_json("analyze --net lenet5 --batch 16 --capacity 64KiB --bandwidth 100GB/s --peak 1TFLOPS --layers --json");
    ASSERT_EQ(j["results"].size(), 1u);
    const auto& res = j["results"][0];
    EXPECT_EQ(res["kind"], "modelled");
    EXPECT_GT(res["read_bytes"].get<double>(), 0);
    EXPECT_FALSE(res["nodes"].empty());
    r = run("analyze --net lenet5 --batch 16 --capacity 64KiB --bandwidth 100GB/s --peak 1TFLOPS --sweep capacity=16KiB..1MiB --csv -");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 8) << r.out;  // header + 7 capacities
    {
        // exact values: 16KiB is 16384 (not 1.6384e+04), and every row has as many fields as the header
        std::istringstream lines(r.out);
        std::string header, row;
        std::getline(lines, header);
        std::getline(lines, row);
        EXPECT_EQ(row.rfind("16384,100000000000,", 0), 0u) << row;
        EXPECT_EQ(std::count(row.begin(), row.end(), ','), std::count(header.begin(), header.end(), ',')) << header << "\n" << row;
        EXPECT_EQ(r.out.find("e+"), std::string::npos) << r.out;  // byte counts print in full
    }
    r = run("analyze --net resnet18 --batch 2 --device gpu-nvidia-v100-sxm2 --csv -");
    EXPECT_EQ(r.out.find("\n6291456,900000000000,"), r.out.find('\n')) << r.out;  // the V100's 6 MiB L2 and 900 GB/s, in full
    r = run("analyze --net bert-tiny --batch 2 --seq-len 32 --device gpu-nvidia-a100-sxm4-40gb --dtype bf16 --sweep bandwidth=500GB/s..2TB/s");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("sweep (modelled"), std::string::npos) << r.out;
}

TEST(Cli, DevicesListsDevicesLinksAndSystems) {
    const Result r = run("devices");
    EXPECT_EQ(r.code, 0) << r.out;
    for (const char* s : {"gpu-nvidia-v100-sxm2 (v100, v100-sxm2)", "link-pcie3-x16", "system-gold6148-v100", "150-300 W", "135-1530 MHz"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    const auto j = run_json("devices --json");
    EXPECT_EQ(j["schema"], "joule.devices/1");
    EXPECT_GE(j["devices"].size(), 10u);
    EXPECT_GE(j["links"].size(), 10u);
    EXPECT_GE(j["systems"].size(), 1u);
}

// predict --nodes: data-parallel on a cluster of data/hw devices and links, per node count.
TEST(Cli, PredictModelsDataParallelTrainingOnACluster) {
    const std::string flags = "predict --device v100 --net resnet18 --image-size 64 --batch 16 --nodes 1,4,16 --per-node 8 --intra-link nvlink2 --inter-link ib-hdr";
    const auto j = run_json(flags + " --json");
    const auto& dp = j["data_parallel"];
    EXPECT_EQ(dp["kind"], "modelled");
    EXPECT_EQ(dp["intra_link"], "link-nvlink2");
    ASSERT_EQ(dp["rows"].size(), 3u);
    EXPECT_EQ(dp["rows"][2]["ranks"], 128);
    double last = 1;
    for (const auto& r : dp["rows"]) {
        EXPECT_LE(r["efficiency"].get<double>(), last + 1e-12);
        EXPECT_GE(r["iteration_seconds"].get<double>(), j["iteration"]["seconds"].get<double>() - 1e-12);
        last = r["efficiency"].get<double>();
    }
    const Result r = run(flags);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("data-parallel, MODELLED: batch 16 per device (weak scaling), 8 device(s) per node on link-nvlink2, nodes on 1 x link-ib-hdr"), std::string::npos)
        << r.out;
    // accumulated micro-batches: four times the samples per iteration, the all-reduce once
    const auto acc = run_json(flags + " --accumulate 4 --json");
    EXPECT_EQ(acc["data_parallel"]["accumulate"], 4);
    EXPECT_NEAR(acc["data_parallel"]["rows"][2]["allreduce_seconds"].get<double>(), dp["rows"][2]["allreduce_seconds"].get<double>(), 1e-12);
    EXPECT_GT(acc["data_parallel"]["rows"][2]["efficiency"].get<double>(), dp["rows"][2]["efficiency"].get<double>());
    EXPECT_NE(run(flags + " --accumulate 4").out.find("batch 16 per device (weak scaling) x 4 micro-batches accumulated per iteration"), std::string::npos);
    expect_failure("predict --device v100 --accumulate 2", "--accumulate requires --nodes");
    expect_failure("predict --device v100 --threads 1", "--threads applies to a CPU device; gpu-nvidia-v100-sxm2 is a gpu");
    expect_failure("predict --device cpu-amd-epyc-turin-2vcpu --threads 3", "--threads 3: cpu-amd-epyc-turin-2vcpu has 2 cores");
    expect_failure("predict --device cpu-amd-epyc-turin-2vcpu --threads -1", "--threads");
    expect_failure(flags + " --accumulate 0", "--accumulate");
    expect_failure("predict --device v100 --per-node 8", "--per-node requires --nodes");
    expect_failure("predict --device v100 --nodes 2", "2 nodes need the network between them");
    expect_failure("predict --device v100 --nodes 1 --per-node 4", "4 devices per node need the link between them");
    expect_failure("predict --device v100 --nodes 0", "--nodes");
    expect_failure("predict --device v100 --nodes 1,x", "--nodes");
    expect_failure("predict --device v100 --nodes 2 --inter-link warp-drive", "warp-drive");
    expect_failure("predict --device v100 --nodes 1 --bucket-mib 0", "--bucket-mib");
}

TEST(Cli, PredictModelsAnyDeviceUnderALimitOrClock) {
    Result r = run("predict --net resnet18 --batch 8 --image-size 64 --device v100 --dtype f16");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("all figures MODELLED"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("per iteration (modelled)"), std::string::npos) << r.out;
    const auto base = run_json("predict --net resnet18 --batch 8 --image-size 64 --device v100 --json");
    const auto capped = run_json("predict --net resnet18 --batch 8 --image-size 64 --device v100 --power-limit 150 --json");
    const auto slow = run_json("predict --net resnet18 --batch 8 --image-size 64 --device v100 --clock 700 --json");
    EXPECT_EQ(base["schema"], "joule.predict/1");
    EXPECT_EQ(base["kind"], "modelled");
    EXPECT_GE(capped["iteration"]["seconds"].get<double>(), base["iteration"]["seconds"].get<double>());
    EXPECT_LE(capped["iteration"]["average_watts"].get<double>(), base["iteration"]["average_watts"].get<double>());
    EXPECT_GT(slow["iteration"]["seconds"].get<double>(), base["iteration"]["seconds"].get<double>());
    EXPECT_EQ(slow["clock_mhz"], 700);
    EXPECT_FALSE(base["layers"].empty());
    r = run("analyze --device v100 --net resnet18 --batch 2");  // aliases name devices everywhere
    EXPECT_EQ(r.code, 0) << r.out;
    expect_failure("predict --net resnet18 --device v100 --dtype bf16", "has no bf16 compute path");
    expect_failure("predict --net resnet18 --device v100 --power-limit 50", "power limit 50 W is outside gpu-nvidia-v100-sxm2's range [150, 300] W");
    expect_failure("predict --net resnet18 --device v100 --clock 5000", "clock 5000 MHz is outside");
    expect_failure("predict --net resnet18 --device v100 --clock 900 --power-limit 200", "excludes");
    expect_failure("predict --net resnet18 --device turin-2vcpu --clock 900", "has no clock range");
    expect_failure("predict --net resnet18 --device tpu-v9", "no device named 'tpu-v9'");
    expect_failure("predict --net resnet18 --device v100 --power-limit nan", "not a finite number");
    expect_failure("predict --net resnet50 --batch 4096 --device k40", "of tensor memory (its memory plan), but gpu-nvidia-k40 has");
    expect_failure("predict --net resnet18", "--device is required");
}

TEST(Cli, ProfileReportModelsTheConfigurationsOnAnotherDevice) {
    const std::string db = temp_path("there.db");
    std::remove(db.c_str());
    Result r = run("profile --db " + db + " --net lenet5 --batch 2 --dtype f32,bf16 --threads 1 --iters 1 --warmup 1 --meter modelled --device v100" +
                   std::string(kSpec));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("on gpu-nvidia-v100-sxm2 (every node there"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("gpu-nvidia-v100-sxm2 has no bf16 path"), std::string::npos) << r.out;
    const auto j = run_json("profile --db " + db + " --report --device a100 --json");
    ASSERT_EQ(j["on_device"].size(), 2u);
    for (const auto& c : j["on_device"]) {
        EXPECT_TRUE(c["ok"].get<bool>()) << c;
        EXPECT_EQ(c["kind"], "modelled");
        EXPECT_GT(c["step_s"].get<double>(), 0);
    }
    const std::string fresh = temp_path("never.db");
    std::remove(fresh.c_str());
    expect_failure("profile --db " + fresh + " --net lenet5 --batch 2 --device tpu-v9", "no device named 'tpu-v9'");
    EXPECT_NE(access(fresh.c_str(), F_OK), 0);  // checked before the sweep: no database was made
    expect_failure("profile --db " + db + " --report --device a100 --image-size 64", "pass the --image-size / --seq-len the sweep used");
}

TEST(Cli, AmpComparesPoliciesAndWritesAPlanTrainRuns) {
    Result r = run("amp --net resnet18 --batch 4 --image-size 32 --device a100");
    EXPECT_EQ(r.code, 0) << r.out;
    for (const char* s : {"off", "greedy", "autocast", "campo", "optimal", "predicted times are MODELLED"}) EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    const auto j = run_json("amp --net lenet5 --batch 8 --device turin-2vcpu --measure 1 --threads 1 --json");
    EXPECT_EQ(j["schema"], "joule.amp/1");
    ASSERT_EQ(j["policies"].size(), 5u);
    const double off = j["policies"][0]["predicted_seconds"].get<double>();
    for (const auto& p : j["policies"]) {
        EXPECT_GT(p["measured_seconds"].get<double>(), 0) << p;
        // the casts' share of the step, predicted and measured: none without casts
        EXPECT_EQ(p["casts"].get<int>() == 0, p["predicted_cast_seconds"].get<double>() == 0) << p;
        EXPECT_EQ(p["casts"].get<int>() == 0, p["measured_cast_seconds"].get<double>() == 0) << p;
        EXPECT_LT(p["measured_cast_seconds"].get<double>(), p["measured_seconds"].get<double>()) << p;
        if (p["policy"] == "optimal") {
            EXPECT_LE(p["predicted_seconds"].get<double>(), off * (1 + 1e-12));
        }
    }
    const std::string plan = temp_path("amp.plan.yaml");
    r = run("amp --net lenet5 --batch 8 --device turin-2vcpu --policy greedy --out " + plan);
    ASSERT_EQ(r.code, 0) << r.out;
    r = run("train --net lenet5 --batch 8 --dataset synthetic --steps 2 --optimizer sgd --plan " + plan);
    EXPECT_EQ(r.code, 0) << r.out;
    expect_failure("amp --net lenet5 --out " + plan, "--out writes one policy's plan");
    expect_failure("amp --net lenet5 --device a100 --measure 2", "is not a CPU");
    expect_failure("amp --net lenet5 --device k40", "has no low precision");
    expect_failure("amp --net lenet5 --device turin-2vcpu --policy campo2", "--policy");
}

TEST(Cli, FpgaTunePicksAConfigurationPerNodeAndRefusesBadSettings) {
    Result r = run("fpga-tune --device s10 --net resnet18 --batch 4 --image-size 32");
    EXPECT_EQ(r.code, 0) << r.out;
    for (const char* s : {"MODELLED", "layer1.0.conv1", "gemm ", "stream x", "GFLOPS/W", "distinct configurations", "reconfiguration"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    const auto j = run_json("fpga-tune --device u280 --net lenet5 --batch 8 --dtype bf16 --json");
    EXPECT_EQ(j["schema"], "joule.fpga-tune/1");
    EXPECT_EQ(j["timing"], "modelled");
    EXPECT_EQ(j["host_nodes"], 2);  // the loss and its backward
    double seconds = 0;
    for (const auto& n : j["nodes"]) {
        EXPECT_LE(n["dsp"].get<double>(), 9024) << n;
        EXPECT_EQ(n["gflops_per_watt"].get<double>() > 0, n["gflops"].get<double>() > 0) << n;  // a reshape does no arithmetic
        EXPECT_GT(n["watts"].get<double>(), 39.2) << n;                                          // static power and then some
        if (n["kernel"] == "gemm") {
            EXPECT_EQ(n["dtype"], "bf16") << n;
        }
        seconds += n["seconds"].get<double>();
    }
    EXPECT_NEAR(j["seconds"].get<double>(), seconds, 1e-12);
    const auto capped = run_json("fpga-tune --device u280 --net lenet5 --batch 8 --power-limit 45 --json");
    for (const auto& n : capped["nodes"]) EXPECT_LE(n["watts"].get<double>(), 45) << n;
    expect_failure("fpga-tune --net lenet5", "--device is required");
    expect_failure("fpga-tune --device v100 --net lenet5", "is a gpu, not an FPGA");
    expect_failure("fpga-tune --device s10 --net lenet5 --clock 500", "clock 500 MHz is outside");
    expect_failure("fpga-tune --device s10 --net lenet5 --clock 300 --power-limit 60", "--clock and --power-limit: give one");
    expect_failure("fpga-tune --device s10 --net lenet5 --power-limit 30", "static power alone is 39.2 W");
    expect_failure("fpga-tune --device s10 --net lenet5 --dtype f16", "--dtype");
    expect_failure("fpga-tune --device s10 --net lenet5 --power-limit nan", "--power-limit");
    expect_failure("fpga-tune --device s10 --gemm 64x0x64", "--gemm '64x0x64': '0' is not a dimension");
    expect_failure("fpga-tune --device s10 --gemm 64x64", "--gemm '64x64': expected three dimensions");
    expect_failure("fpga-tune --device s10 --gemm 64x64x64 --net resnet50", "--net excludes --gemm");
    const auto g = run_json("fpga-tune --device s10 --gemm 4096x4096x4096 --clock 273 --json");
    ASSERT_EQ(g["nodes"].size(), 1u);
    EXPECT_GT(g["gflops"].get<double>(), 500);
    const auto fwd = run_json("fpga-tune --device a10 --net lenet5 --batch 4 --forward --json");
    EXPECT_EQ(fwd["forward_only"], true);
    for (const auto& n : fwd["nodes"]) EXPECT_EQ(n["node"].get<std::string>().find(".bwd"), std::string::npos) << n;
    // commands that model a whole net on one device send FPGAs to fpga-tune
    for (const char* c : {"predict --net lenet5 --device s10", "amp --net lenet5 --device s10"}) expect_failure(c, "is an FPGA, which runs part of a net");
}

TEST(Cli, TrainRunsAPlanWithLayersOnTheEmulatedFpga) {
    const auto inspect = run_json("inspect lenet5 --batch 8 --optimizer sgd --json");
    const std::string plan = temp_path("fpga.plan.yaml");
    std::ofstream(plan) << "version: 1\ngraph: {model: lenet5, batch: 8, fingerprint: \"" << inspect["fingerprint"].get<std::string>()
                        << "\"}\nentries:\n  - {layer: \"conv*\", device: \"fpga_emu:s10\"}\n  - {layer: fc3, device: \"fpga_emu:u280\"}\n";
    const auto j = run_json("train --net lenet5 --batch 8 --dataset synthetic --steps 2 --optimizer sgd --threads 1 --plan " + plan + " --json");
    ASSERT_EQ(j["devices"].size(), 3u) << j["devices"];
    for (const auto& d : j["devices"]) {
        EXPECT_EQ(d["timing"], d["device"] == "cpu" ? "measured" : "modelled") << d;
        EXPECT_GT(d["seconds"].get<double>(), 0) << d;
    }
    EXPECT_EQ(j["timing"], "measured and modelled");
    EXPECT_GT(j["transfers"].get<int>(), 0);
    // the loss stays on the host: an FPGA has no kernel for it
    std::ofstream(plan) << "version: 1\ngraph: {model: lenet5, batch: 8, fingerprint: \"" << inspect["fingerprint"].get<std::string>()
                        << "\"}\nentries:\n  - {layer: loss, device: \"fpga_emu:s10\"}\n";
    expect_failure("train --net lenet5 --batch 8 --dataset synthetic --steps 2 --optimizer sgd --plan " + plan, "no FPGA kernel for SoftmaxCrossEntropy");
}

TEST(Cli, PlanComparesStrategiesAndWritesPlansAndTraces) {
    Result r = run("plan --net lenet5 --batch 8 --system cpu+v100+s10");
    EXPECT_EQ(r.code, 0) << r.out;
    for (const char* s : {"MODELLED", "single:cpu", "single:cuda:v100", "single:fpga_emu:s10", "cnnlab", "heft", "energy", "energy + amp optimal", "joint", "FPGA switches"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    const auto j = run_json("plan --net lenet5 --batch 8 --system cpu+k40+de5 --json");
    EXPECT_EQ(j["schema"], "joule.plan/1");
    ASSERT_EQ(j["plans"].size(), 8u);
    for (const auto& p : j["plans"]) {
        EXPECT_NEAR(p["joules"].get<double>(), p["dynamic_joules"].get<double>() + p["idle_joules"].get<double>() + p["transfer_joules"].get<double>(), 1e-9) << p;
        EXPECT_GT(p["seconds"].get<double>(), 0) << p;
        EXPECT_TRUE(p["fits"].get<bool>()) << p;
    }
    // energy: no slower than the fastest baseline, and no more energy than any baseline that fast
    double fastest = 1e30;
    for (size_t i = 0; i < 3; ++i) fastest = std::min(fastest, j["plans"][i]["seconds"].get<double>());
    const auto& energy = j["plans"][5];
    EXPECT_EQ(energy["strategy"], "energy");
    EXPECT_LE(energy["seconds"].get<double>(), fastest * (1 + 1e-9));
    for (size_t i = 0; i < 3; ++i)
        if (j["plans"][i]["seconds"].get<double>() <= fastest * (1 + 1e-9)) { EXPECT_LE(energy["joules"].get<double>(), j["plans"][i]["joules"].get<double>() * (1 + 1e-9)); }
    // one strategy: its layer table, the savings against each baseline, its plan and its trace
    const std::string plan = temp_path("energy.plan.yaml"), trace = temp_path("energy.trace.json");
    r = run("plan --net lenet5 --batch 8 --system cpu+v100+s10 --strategy energy:0.5 --out " + plan + " --trace " + trace);
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* s : {"forward", "backward", "update", "against each baseline", "time bound", "wrote energy:0.5"}) EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    std::ifstream tf(trace);
    const auto tj = nlohmann::json::parse(tf);
    EXPECT_EQ(tj["otherData"]["timing"], "modelled");
    EXPECT_GT(joule::test::expect_trace_event_format(tj), 30u) << "an event per node";
    EXPECT_EQ(run("inspect lenet5 --batch 8 --optimizer sgd --plan " + plan).code, 0) << "the plan lowers";
    r = run("plan --net lenet5 --batch 8 --system cpu+v100+s10 --strategy powercap:150");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("GPU power limiting: single:cuda:v100"), std::string::npos) << r.out;
    // precision: placement then a policy (--amp), and joint choosing both; their plans lower and say each node's dtype
    r = run("plan --net resnet18 --batch 16 --system cpu+v100+s10 --strategy joint --out " + plan);
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* s : {"cuda:v100 f16", "single:cuda:v100 + amp optimal", "time bound"}) EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    EXPECT_EQ(run("inspect resnet18 --batch 16 --optimizer sgd --plan " + plan).code, 0) << "the joint plan lowers";
    const auto amp = run_json("plan --net lenet5 --batch 8 --system cpu+v100+s10 --strategy energy --amp greedy --json");
    EXPECT_EQ(amp["plans"][0]["strategy"], "energy + amp greedy");
    EXPECT_GT(amp["plans"][0]["casts"].get<int>(), 0);
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --amp greedy", "--amp puts a precision policy over one strategy's placement");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy joint --amp optimal", "--strategy joint chooses each node's precision itself");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy energy --amp fastest", "--amp");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy joint:x", "the slack 'x' is not a number");
    r = run("plan --net lenet5 --batch 8 --system k40+de5 --pareto");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("time-energy frontier"), std::string::npos) << r.out;
    // the FPGA baseline's plan trains: its GEMMs and streams emulated on the one-bitstream design the
    // planner chose (reconfiguring per node would cost more), the loss on the host; the emulated FPGA's
    // modelled time per step is the plan's FPGA busy time plus the transfers into it
    const auto fp = run_json("plan --net lenet5 --batch 8 --system cpu+v100+s10 --strategy single:fpga_emu:s10 --json --out " + plan);
    std::ifstream pf(plan);
    const std::string text((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("fpga_design"), std::string::npos) << text;
    const auto t = run_json("train --net lenet5 --batch 8 --dataset synthetic --steps 2 --optimizer sgd --threads 1 --plan " + plan + " --json");
    EXPECT_EQ(t["timing"], "measured and modelled");
    for (const auto& d : t["devices"]) {
        if (d["device"] == "fpga_emu:s10") {
            EXPECT_NEAR(d["seconds"].get<double>(), fp["plans"][0]["busy_seconds"][2].get<double>(), 0.05 * d["seconds"].get<double>());
        }
    }
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy fastest", "unknown --strategy 'fastest'");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy energy:-1", "the slack '-1' is not a number of 0 or more");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy powercap:abc", "the cap 'abc' is not a number above 0");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy exact --pareto", "--pareto compares the strategies itself");
    expect_failure("plan --net resnet50 --system cpu+v100+s10 --strategy exact", "exact solves small nets");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy single:cuda:a100", "which system system-gold6148-v100-s10 does not have");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --out " + plan, "--out and --trace take one strategy's plan");
    expect_failure("plan --net lenet5 --system cpu+v100+s10 --strategy heft --trace /nonexistent/dir/t.json", "--trace /nonexistent/dir/t.json: cannot write");
    expect_failure("plan --net lenet5 --system cpu+tpu", "cpu+tpu");
    expect_failure("plan --net lenet5", "--system is required");
}

// joule train --system --strategy: plans for the run's own graph, trains under the plan (CPU nodes real,
// FPGA nodes emulated) and sets the plan's prediction beside what the run got.
TEST(Cli, TrainPlansForASystemAndTrainsUnderThePlan) {
    const std::string common = " --net lenet5 --batch 8 --dataset synthetic --steps 3 --optimizer sgd --threads 1 --json";
    const auto cpu = run_json("train" + common);
    const auto j = run_json("train --system cpu+s10 --strategy single:fpga_emu:s10" + common);
    EXPECT_EQ(j["timing"], "measured and modelled");
    EXPECT_GT(j["transfers"].get<int>(), 0);
    ASSERT_TRUE(j.contains("placement")) << j;
    EXPECT_EQ(j["placement"]["strategy"], "single:fpga_emu:s10");
    EXPECT_EQ(j["placement"]["timing"], "modelled");
    EXPECT_GT(j["placement"]["predicted_iteration_seconds"].get<double>(), 0);
    // the same numbers as all-CPU training, to float tolerance: the emulated FPGA's GEMMs sum in another order
    ASSERT_EQ(j["epochs"].size(), 1u);
    const double a = cpu["epochs"][0]["loss"].get<double>(), b = j["epochs"][0]["loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-4 * std::abs(a)) << "all-CPU loss " << a << ", under the plan " << b;
    const char* const wait = std::getenv("OMP_WAIT_POLICY");
    const std::string saved = wait ? wait : "";
    const std::string planned = "train --system cpu+s10 --strategy energy --net lenet5 --batch 8 --dataset synthetic --steps 2 --optimizer sgd --threads 1 --quiet";
    unsetenv("OMP_WAIT_POLICY");
    const Result r = run(planned);
    setenv("OMP_WAIT_POLICY", "active", 1);
    const Result active = run(planned);
    if (wait) setenv("OMP_WAIT_POLICY", saved.c_str(), 1);
    else unsetenv("OMP_WAIT_POLICY");
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* s : {"strategy energy on system-host-s10", "predicted iteration", "predicted busy ms", "step, one node at a time: predicted"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    // measured CPU nodes after emulated ones pay the threads' wake-up unless they spin: the run says so
    EXPECT_NE(r.out.find("OMP_WAIT_POLICY=active keeps them awake"), std::string::npos) << r.out;
    ASSERT_EQ(active.code, 0) << active.out;
    EXPECT_EQ(active.out.find("OMP_WAIT_POLICY=active keeps them awake"), std::string::npos) << active.out;
    expect_failure("train --system cpu+s10 --dataset synthetic", "--system requires --strategy");
    expect_failure("train --strategy energy --dataset synthetic", "--strategy requires --system");
    expect_failure("train --system cpu+s10 --strategy fastest --dataset synthetic", "unknown --strategy 'fastest'");
    // placement then precision, and joint: bf16 on this CPU and the FPGA, casts between, the losses of all-CPU f32 within bf16's rounding
    for (const std::string s : {"energy --amp greedy", "joint"}) {
        const auto m = run_json("train --system cpu+s10 --strategy " + s + common);
        EXPECT_EQ(m["placement"]["strategy"], s == "joint" ? "joint" : "energy + amp greedy") << m;
        EXPECT_GT(m["casts"].get<int>(), 0) << s;
        EXPECT_NEAR(m["epochs"][0]["loss"].get<double>(), a, 0.02 * std::abs(a)) << s;
    }
    expect_failure("train --system cpu+s10 --strategy joint --amp greedy --dataset synthetic", "--strategy joint chooses each node's precision itself");
    expect_failure("train --system cpu+s10 --strategy energy --amp fast --dataset synthetic", "--amp");
    expect_failure("train --system cpu+s10 --strategy energy --plan x.yaml --dataset synthetic", "excludes");
    expect_failure("train --system cpu+v100+s10 --strategy single:cuda:v100 --dataset synthetic --steps 1", "this build has no CUDA backend");
}

TEST(Cli, CalibrateFitsSeveralDatabasesOfOtherInputSizes) {
    const std::string a = temp_path("cal_a.db"), b = temp_path("cal_b.db"), eff = temp_path("cal_ab.yaml");
    std::remove(a.c_str()), std::remove(b.c_str());
    const std::string sweep = " --net lenet5 --batch 2 --threads 1 --iters 1 --warmup 1 --meter modelled" + std::string(kSpec);
    ASSERT_EQ(run("profile --db " + a + sweep).code, 0);
    ASSERT_EQ(run("profile --db " + b + sweep + " --image-size 32").code, 0);
    const std::string hw = " --capacity 1MiB --bandwidth 20GB/s --peak 100GFLOPS";
    const auto j = run_json("calibrate --db " + a + " --db " + b + " --image-size 0,32 --out " + eff + hw + " --json");
    ASSERT_EQ(j["configs"].size(), 2u);
    EXPECT_EQ(j["configs"][0]["image_size"], 0);
    EXPECT_EQ(j["configs"][1]["image_size"], 32);
    expect_failure("calibrate --db " + a + " --db " + b + " --image-size 0,32,64 --out " + eff + hw, "--image-size: 3 values for 2 databases");
    expect_failure("calibrate --db " + a + " --db " + b + " --out " + eff + hw, "pass the --image-size / --seq-len the sweep used");  // b is 32x32

    // sequence lengths likewise: one per database
    const std::string c = temp_path("cal_c.db");
    std::remove(c.c_str());
    ASSERT_EQ(run("profile --db " + c + " --net bert-tiny --batch 1 --threads 1 --iters 1 --warmup 0 --meter modelled --seq-len 16" + std::string(kSpec)).code, 0);
    const auto k = run_json("calibrate --db " + a + " --db " + c + " --seq-len 128,16 --traffic cold --out " + eff + hw + " --json");
    std::ifstream written(eff);
    EXPECT_NE(std::string(std::istreambuf_iterator<char>(written), {}).find("traffic: cold"), std::string::npos);
    expect_failure("calibrate --db " + a + " --traffic warm" + hw, "--traffic");
    ASSERT_EQ(k["configs"].size(), 2u);
    EXPECT_EQ(k["configs"][1]["net"], "bert-tiny");
    EXPECT_EQ(k["configs"][1]["seq_len"], 16);
    expect_failure("calibrate --db " + a + " --db " + c + " --out " + eff + hw, "pass the --image-size / --seq-len the sweep used");
    expect_failure("calibrate --db " + a + " --db " + c + " --seq-len 16,16,16 --out " + eff + hw, "--seq-len: 3 values for 2 databases");
}

TEST(Cli, CalibrateFitsAndAnalyzeUsesTheCurves) {
    const std::string db = temp_path("cal.db"), eff = temp_path("eff.yaml");
    const std::string hw = " --capacity 1MiB --bandwidth 20GB/s --peak 100GFLOPS --overhead 4us";
    Result r = run("profile --db " + db + " --batch 2,4 --threads 1 --iters 1 --warmup 1 --meter modelled" + std::string(kSpec));
    ASSERT_EQ(r.code, 0) << r.out;
    r = run("calibrate --db " + db + " --out " + eff + hw);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("wrote " + eff), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ConvBackwardWeights"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("in-sample check"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("mean absolute error"), r.out.rfind("mean absolute error")) << r.out;  // said once
    // two configurations of LeNet-5 are few points for six-parameter curves: a warning on stderr
    EXPECT_NE(r.out.find("joule: warning: fitted from fewer points than twice their parameters"), std::string::npos) << r.out;
    r = run("calibrate --db " + db + " --out " + eff + " --exclude lenet5:4" + hw);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("mean absolute error"), std::string::npos) << r.out;  // one configuration: its row says it
    const auto c = run_json("calibrate --db " + db + " --out " + eff + " --exclude lenet5:4 --json" + hw);
    EXPECT_FALSE(c["warnings"].empty());
    ASSERT_EQ(c["configs"].size(), 1u);
    EXPECT_EQ(c["configs"][0]["batch"], 2);
    EXPECT_GE(c["calibrated_mean_abs_error"].get<double>(), 0);
    EXPECT_TRUE(c["kinds"].contains("Conv2d"));
    // the file's hardware is analyze's default; every lenet5 node kind is calibrated
    const auto a = run_json("analyze --net lenet5 --batch 4 --efficiency " + eff + " --layers --json");
    const auto& res = a["results"][0];
    EXPECT_EQ(res["time_model"], "calibrated");
    EXPECT_EQ(res["efficiency_file"], eff);
    EXPECT_EQ(res["calibrated_nodes"], res["nodes"].size());
    EXPECT_DOUBLE_EQ(res["bandwidth_bytes_per_second"].get<double>(), 20e9);
    EXPECT_TRUE(res["nodes"][0]["calibrated"].get<bool>());
    EXPECT_GE(res["stall_seconds"].get<double>(), 0);
    EXPECT_LE(res["stall_seconds"].get<double>(), res["seconds"].get<double>());
    const auto roof = run_json("analyze --net lenet5 --batch 4 --json" + hw);
    EXPECT_EQ(roof["results"][0]["time_model"], "roofline");
    EXPECT_DOUBLE_EQ(roof["results"][0]["read_bytes"].get<double>(), res["read_bytes"].get<double>());
    r = run("analyze --net lenet5 --batch 4 --efficiency " + eff + " --bandwidth 40GB/s");  // a what-if over the calibrated machine
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("node times: efficiency curves from " + eff), std::string::npos) << r.out;
    expect_failure("calibrate --db " + temp_path("none.db") + hw, "no such database");
    expect_failure("calibrate --db " + db + " --out " + eff, "joule calibrate needs the hardware");
    expect_failure("calibrate --db " + db + " --exclude lenet5" + hw, "no profiled configuration left");
    expect_failure("calibrate --db " + db + " --image-size 32" + hw, "was profiled as");
    expect_failure("calibrate --db " + db + " --out /nonexistent/dir/e.yaml" + hw, "cannot write the efficiency file");
    expect_failure("analyze --net lenet5 --efficiency /nonexistent/e.yaml", "cannot open the efficiency file");
    expect_failure("analyze --net lenet5 --efficiency no-such-cpu", "efficiency/no-such-cpu.yaml: cannot open the efficiency file");
    // the shipped curves of the development CPU load by name, with their hardware
    const auto shipped = run_json("analyze --net resnet18 --batch 2 --efficiency cpu-amd-epyc-turin-2vcpu --json");
    EXPECT_EQ(shipped["results"][0]["time_model"], "calibrated");
    EXPECT_GT(shipped["results"][0]["calibrated_nodes"].get<int>(), 0);
}

int usable_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof(set), &set);
    return CPU_COUNT(&set);
}

TEST(Cli, ProbeMeasuresBandwidthAndPeak) {
    const auto j = run_json("probe --array-mib 8 --gemm-size 128 --repeats 1 --threads 1 --json");
    EXPECT_EQ(j["kind"], "measured");
    EXPECT_GT(j["triad_gbps"].get<double>(), 0);
    EXPECT_GT(j["gemm_gflops_f32"].get<double>(), 0);
    EXPECT_GT(j["gemm_gflops_bf16"].get<double>(), 0);
    EXPECT_GT(j["op_overhead_seconds"].get<double>(), 0);
    EXPECT_GT(j["small_op_overhead_seconds"].get<double>(), 0);
    EXPECT_EQ(j["core_round_trip_seconds"].get<double>(), 0);  // one thread: no other core
    if (usable_cores() >= 2) {  // two threads on one core would pass the line only as the scheduler switches
        const auto two = run_json("probe --array-mib 8 --gemm-size 128 --repeats 1 --threads 2 --json");
        EXPECT_GT(two["core_round_trip_seconds"].get<double>(), 0);
        EXPECT_LT(two["core_round_trip_seconds"].get<double>(), 1e-3);
    }
    expect_failure("probe --gemm-size 4", "--gemm-size");
    expect_failure("probe --array-mib -1", "--array-mib");
}

TEST(Cli, ThreadsAboveTheCoresAreRefusedUnlessInsisted) {
    const std::string more = std::to_string(usable_cores() + 1), cores = std::to_string(usable_cores());
    for (const std::string& args : {"train --dataset synthetic --steps 1 --threads " + more, "probe --threads " + more,
                                    "profile --db /tmp/joule_cli_threads.db --threads 1," + more})
        expect_failure(args, "--threads " + more + ": this process may run on " + cores + " core");
    const auto j = run_json("train --dataset synthetic --steps 1 --batch 2 --threads " + more + " --oversubscribe --json");
    EXPECT_EQ(j["threads"], usable_cores() + 1);
    const auto all = run_json("train --dataset synthetic --steps 1 --batch 2 --threads 0 --json");
    EXPECT_EQ(all["threads"], usable_cores());  // 0: the affinity mask's cores
}

TEST(Cli, NonFiniteNumbersAreRefused) {
    // every floating-point flag of every command, and the quantities with units
    for (const std::string flag : {"train --lr", "train --momentum", "train --weight-decay", "train --idle-seconds", "train --sample-ms",
                                    "profile --idle-seconds", "profile --sample-ms", "probe --array-mib"})
        for (const std::string v : {"nan", "inf", "-inf", "1e999"})
            expect_failure(flag + " " + v, "'" + v + "' is not a finite number");
    expect_failure("analyze --net lenet5 --capacity nan --bandwidth 1GB/s --peak 1TFLOPS", "--capacity: 'nan' is not a finite number");
    expect_failure("analyze --net lenet5 --capacity 1MiB --bandwidth infGB/s --peak 1TFLOPS", "--bandwidth: 'infGB/s' is not a finite number");
    expect_failure("calibrate --peak nanTFLOPS --capacity 1MiB --bandwidth 1GB/s", "--peak: 'nanTFLOPS' is not a finite number");
    // a float overflow after conversion is caught by the trainer
    expect_failure("train --dataset synthetic --steps 1 --optimizer sgd --lr 1e39", "--lr must be a positive finite number");
    // ranges are printed readably (never DBL_MAX in full)
    expect_failure("train --lr 0", "--lr: '0' is out of range: must be > 0");
    expect_failure("train --batch 0", "--batch: '0' is out of range: must be in [1, 1048576]");
    expect_failure("train --idle-seconds -1", "--idle-seconds: '-1' is out of range: must be >= 0");
}

TEST(Cli, TrainStopsOnANonFiniteLoss) {
    // a huge learning rate diverges at the second step: the error names the step and the first non-finite forward output
    Result r = run("train --dataset synthetic --optimizer sgd --lr 1e30 --steps 20 --threads 1");
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("joule: error: step 2 of epoch 1: the loss is "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the first forward node with a non-finite output is 'conv2' (Conv2d)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("lower --lr"), std::string::npos) << r.out;
    // one past float range makes the parameters themselves non-finite: named first
    r = run("train --net resnet18 --image-size 32 --batch 2 --dataset synthetic --optimizer sgd --lr 3e38 --steps 20 --threads 1");
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("parameter '"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("' holds "), std::string::npos) << r.out;
}

TEST(Cli, TrainEvaluationCanBeCappedAndShowsProgress) {
    const auto j = run_json("train --steps 2 --threads 1 --eval-samples 100 --batch 32 --json");
    EXPECT_EQ(j["test_samples"], 100);  // the first 100 test images (the last batch padded)
    EXPECT_TRUE(j.contains("test_accuracy"));
    const auto none = run_json("train --steps 2 --threads 1 --eval-samples 0 --json");
    EXPECT_FALSE(none.contains("test_accuracy"));
    const Result r = run("train --steps 2 --threads 1 --eval-samples 100 --batch 32");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("test  [##############################]   100/100"), std::string::npos) << r.out;  // progress on stderr
    EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
    expect_failure("train --dataset synthetic --eval-samples 10", "--eval-samples applies to --dataset fashion-mnist only");
    expect_failure("train --eval-samples -1", "--eval-samples: '-1' is out of range: must be >= 0");
}

TEST(Cli, ErrorsReadTheSameEverywhere) {
    // CLI11's parse errors carry the joule prefix and exit non-zero; --help and --version still exit 0
    Result r = run("train --frobnicate");
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.out.rfind("joule: error: ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("--frobnicate"), std::string::npos) << r.out;
    for (const std::string args : {"--help", "--version", "train --help", "analyze --help"}) {
        r = run(args);
        EXPECT_EQ(r.code, 0) << args << ": " << r.out;
        EXPECT_EQ(r.out.find("error"), std::string::npos) << args << ": " << r.out;
    }
    expect_failure("frobnicate", "joule: error: unknown command 'frobnicate'; the commands are train, nets, inspect, profile, analyze, probe, calibrate");
    expect_failure("train --lr nan", "joule: error: --lr: 'nan' is not a finite number");
    // files and quantities
    expect_failure("analyze --net lenet5 --device /tmp", "/tmp: cannot open device spec: it is a directory");
    EXPECT_EQ(run("analyze --net lenet5 --device gpu-nvidia-v100-sxm2 --overhead 0us").code, 0);
    {  // small nodes charged their own overhead: LeNet-5's step is shorter with a smaller one
        const std::string cpu = "analyze --net lenet5 --batch 16 --capacity 2MiB --bandwidth 60GB/s --peak 300GFLOPS --overhead 4us --json";
        const double all = run_json(cpu)["results"][0]["seconds"].get<double>(),
                     split = run_json(cpu + " --overhead-small 0.3us")["results"][0]["seconds"].get<double>();
        EXPECT_LT(split, all);
        EXPECT_GT(split, all - 40 * 3.7e-6);  // at most LeNet-5's 36 nodes (b16: 20 of them small) gain 3.7 us each
    }
    expect_failure("analyze --net lenet5 --device gpu-nvidia-v100-sxm2 --overhead-small -1us", "--overhead-small: '-1us' must be zero or positive");
    expect_failure("calibrate --overhead-small 1us", "--overhead-small");
    expect_failure("analyze --net lenet5 --capacity 1MiB --bandwidth 0 --peak 1TFLOPS", "--bandwidth: '0' must be positive");
    expect_failure("analyze --net lenet5 --capacity 1MiB --bandwidth 1GB/s --peak -1", "--peak: '-1' must be positive");
    expect_failure("analyze --net lenet5 --capacity 0.5B --bandwidth 1GB/s --peak 1TFLOPS", "--capacity: '0.5B' is less than one byte");
    expect_failure("analyze --device gpu-nvidia-v100-sxm2 --sweep capacity=1MiB,2MiB --sweep capacity=4MiB", "--sweep capacity is given twice");
    // a batch that cannot fit the device's memory is not modelled
    expect_failure("analyze --net vgg16 --batch 1048576 --device gpu-nvidia-v100-sxm2",
                   "vgg16 batch 1048576 needs 37.9 TiB of tensor memory (its memory plan), but gpu-nvidia-v100-sxm2 has 32.0 GiB");
    // values a command does not accept, and flags it would ignore
    r = run("profile --db " + temp_path("dtype.db") + " --dtype f64");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("--dtype f64: the cpu backend computes in f32 or bf16"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("or f16"), std::string::npos) << r.out;  // only accepted values suggested
    expect_failure("calibrate --net foo --device gpu-nvidia-v100-sxm2", "unknown network 'foo'");
    expect_failure("calibrate --exclude foo:4 --device gpu-nvidia-v100-sxm2", "unknown network 'foo'");
    expect_failure("train --device-spec cpu-amd-epyc-turin-2vcpu --steps 1", "--device-spec requires --energy");
    expect_failure("train --sample-ms 5 --steps 1", "--sample-ms requires --energy");
    expect_failure("train --image-size 32 --steps 1", "--image-size 32: Fashion-MNIST images are 28x28");
}

TEST(Cli, EveryJsonOutputNamesItsSchema) {
    const std::string db = temp_path("schema.db"), eff = temp_path("schema.yaml");
    const std::string hw = " --capacity 1MiB --bandwidth 20GB/s --peak 100GFLOPS";
    ASSERT_EQ(run("profile --db " + db + " --batch 2 --threads 1 --iters 1 --warmup 0 --meter modelled" + std::string(kSpec)).code, 0);
    const std::pair<std::string, std::string> cases[] = {
        {"train --dataset synthetic --steps 1 --batch 2 --threads 1 --json", "joule.train/1"},
        {"nets --json", "joule.nets/1"},
        {"inspect lenet5 --json", "joule.inspect/1"},
        {"analyze --net lenet5 --batch 2 --json" + hw, "joule.analyze/1"},
        {"profile --db " + db + " --report --json", "joule.profile/1"},
        {"probe --array-mib 1 --gemm-size 64 --repeats 1 --threads 1 --json", "joule.probe/1"},
        {"calibrate --db " + db + " --out " + eff + " --json" + hw, "joule.calibrate/1"},
        {"fpga-tune --device de5 --net lenet5 --batch 2 --json", "joule.fpga-tune/1"},
    };
    for (const auto& [args, schema] : cases) {
        const auto j = run_json(args);
        ASSERT_TRUE(j.is_object()) << args;
        EXPECT_EQ(j["schema"], schema) << args;
    }
}

TEST(Cli, BadInputsFailClearly) {
    expect_failure("", "joule: error: a command is required: train, nets, inspect, profile, analyze, probe, calibrate");
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
    expect_failure("train --amp greedy --plan p.yaml", "--plan excludes --amp");
    expect_failure("train --amp greedy --dtype bf16", "excludes --amp");
    expect_failure("train --amp fastest", "--amp: fastest not in {off,greedy,autocast,campo,optimal}");
    expect_failure("profile --dtype-scope most --report", "--dtype-scope: most not in {gemm,all}");
    expect_failure("train --net vgg16 --dataset synthetic --batch 4096 --steps 1", "MiB of tensor memory but this machine has");
    expect_failure("inspect", "net is required");
    expect_failure("inspect nope", "unknown network 'nope'");
    expect_failure("nets --frobnicate", "frobnicate");
    expect_failure("analyze --net lenet5", "joule analyze needs the hardware");
    expect_failure("analyze --device gpu-nvidia-v100-sxm2 --overhead 5", "--overhead: unknown unit");
    expect_failure("analyze --net lenet5 --capacity 32XB --bandwidth 1GB/s --peak 1TFLOPS", "--capacity: unknown unit 'XB'");
    expect_failure("analyze --device gpu-nvidia-v100-sxm2 --sweep size=1..2", "expected capacity=RANGE or bandwidth=RANGE");
    expect_failure("analyze --device no-such-gpu", "no device named 'no-such-gpu'");
    expect_failure("analyze --device /no/such/gpu.yaml", "/no/such/gpu.yaml: cannot open device spec");
    expect_failure("analyze --device gpu-nvidia-v100-sxm2 --sweep capacity=8MiB..1MiB", "ends below its start");
    expect_failure("profile --db /tmp/joule_cli_bad.db --batch 8,x", "--batch: 'x' is not a positive integer");
    expect_failure("profile --db /tmp/joule_cli_bad.db --dtype f16", "--dtype f16");
    expect_failure("profile --db /nonexistent/dir/p.db", "cannot open the profile database");
    expect_failure("profile --db /tmp/joule_cli_bad.db --meter watt", "--meter");
    expect_failure("train --energy --device-spec /nonexistent/spec.yaml --meter modelled --steps 1", "/nonexistent/spec.yaml: cannot open device spec");
    if (access("/sys/class/powercap", F_OK) != 0) {
        expect_failure("train --energy --meter rapl --steps 1", "--meter rapl: /sys/class/powercap does not exist");
    }
    {
        const std::string bad = temp_path("corrupt.db");
        std::FILE* fp = std::fopen(bad.c_str(), "wb");
        for (int i = 0; i < 2048; ++i) std::fputc(i * 31 % 251, fp);
        std::fclose(fp);
        expect_failure("profile --report --db " + bad, "is not a joule profile database");
    }
}

TEST(Cli, TrainAndInspectUnderAPlanFile) {
    // the fingerprint of LeNet-5 at batch 8 (inspect prints it), then a plan putting two layers on the reference backend
    const auto graph = run_json("inspect lenet5 --batch 8 --json");
    const std::string plan = temp_path("alt.plan.yaml");
    std::ofstream(plan) << "version: 1\ngraph: {model: lenet5, batch: 8, fingerprint: \"" << graph["fingerprint"].get<std::string>()
                        << "\"}\nentries:\n  - {layer: \"conv2\", device: reference}\n  - {layer: \"fc*\", device: reference, dtype: bf16}\n";
    const auto j = run_json("train --dataset synthetic --batch 8 --steps 3 --plan " + plan + " --json");
    EXPECT_EQ(j["plan"], plan);
    EXPECT_GT(j["transfers"].get<int>(), 0);
    EXPECT_GT(j["casts"].get<int>(), 0);
    ASSERT_EQ(j["devices"].size(), 2u);
    EXPECT_EQ(j["devices"][1]["device"], "reference");
    EXPECT_EQ(j["devices"][1]["timing"], "measured");
    const auto planned = run_json("inspect lenet5 --batch 8 --plan " + plan + " --json");
    bool transfer = false, on_reference = false;
    for (const auto& n : planned["nodes"]) {
        transfer = transfer || n["op"] == "Transfer";
        on_reference = on_reference || (n["name"] == "conv2" && n["device"] == "reference" && n["plan_entry"] == plan + ":4");
    }
    EXPECT_TRUE(transfer && on_reference);
    const Result dump = run("inspect lenet5 --batch 8 --plan " + plan + " --dump-after transfers");
    EXPECT_EQ(dump.code, 0);
    EXPECT_NE(dump.out.find("transfer:conv2:cpu"), std::string::npos) << dump.out.substr(0, 2000);
    // the built-in plan: LeNet-5's four ReLUs fused into their convolutions and linears
    const Result fused = run("inspect lenet5 --batch 8 --dump-after fuse");
    EXPECT_EQ(fused.code, 0);
    EXPECT_NE(fused.out.find("conv1: Conv2d+Relu @cpu"), std::string::npos) << fused.out.substr(0, 2000);
    EXPECT_NE(fused.out.find("fc2: Linear+Relu @cpu"), std::string::npos) << fused.out.substr(0, 2000);
    EXPECT_EQ(run_json("inspect lenet5 --batch 8 --json")["fused_activations"], 4);
    // MobileNetV2: every batch norm + ReLU6 fused, forward and backward (35 each)
    const Result mobile = run("inspect mobilenet_v2 --batch 2 --image-size 32 --dump-after fuse");
    EXPECT_EQ(mobile.code, 0);
    EXPECT_NE(mobile.out.find("features.0.1: BatchNorm2d+Relu6 @cpu"), std::string::npos) << mobile.out.substr(0, 2000);
    EXPECT_NE(mobile.out.find("features.0.1.bwd: Relu6Backward+BatchNormBackward @cpu"), std::string::npos) << mobile.out.substr(0, 2000);
    const auto mobile_json = run_json("inspect mobilenet_v2 --batch 2 --image-size 32 --json");
    EXPECT_EQ(mobile_json["fused_activations"], 35);
    EXPECT_EQ(mobile_json["fused_backwards"], 35);
    // bert-tiny: its attention's head split and merge, 8 transposes a layer, folded into the matmuls
    const Result bert = run("inspect bert-tiny --batch 2 --seq-len 16");
    EXPECT_EQ(bert.code, 0);
    EXPECT_NE(bert.out.find("16 transposes folded into matmuls"), std::string::npos) << bert.out.substr(bert.out.size() - std::min<size_t>(bert.out.size(), 2000));
    EXPECT_EQ(bert.out.find(" Transpose "), std::string::npos);
    const auto bert_json = run_json("inspect bert-tiny --batch 2 --seq-len 16 --json");
    EXPECT_EQ(bert_json["folded_transposes"], 16);
    // and its gradient sums (Q, K, V and the residual; the FFN's input and its residual) into the backward-data products
    EXPECT_NE(bert.out.find("8 gradient sums folded into backward-data products"), std::string::npos);
    EXPECT_EQ(bert_json["folded_grad_sums"], 8);
    // the layout pass: conv weights stored in their primitives' formats, each remaining reorder a node
    const Result laid = run("inspect resnet18 --batch 2 --image-size 32 --dump-after layout");
    EXPECT_EQ(laid.code, 0);
    size_t reorder_nodes = 0;
    for (size_t at = laid.out.find(": Reorder @cpu"); at != std::string::npos; at = laid.out.find(": Reorder @cpu", at + 1)) ++reorder_nodes;
    EXPECT_GT(reorder_nodes, 0u) << laid.out.substr(0, 2000);
    EXPECT_NE(laid.out.find("reorder:layer1.0.conv1.weight:"), std::string::npos) << laid.out.substr(0, 2000);
    EXPECT_EQ(run_json("inspect resnet18 --batch 2 --image-size 32 --json")["reorders"], reorder_nodes);
    // the plan is for batch 8: another batch is refused, as are --dtype with --plan and bad plans
    expect_failure("train --dataset synthetic --batch 4 --steps 1 --plan " + plan, "made for another graph");
    expect_failure("train --plan " + plan + " --dtype bf16", "excludes");
    expect_failure("train --plan /nonexistent.yaml", "no such plan file");
    expect_failure("inspect lenet5 --dump-after fusion", "unknown pass 'fusion'");
    std::ofstream(plan) << "version: 1\ngraph: {fingerprint: \"" << graph["fingerprint"].get<std::string>() << "\"}\nentries:\n  - {layer: \"fc1\", device: \"cuda:v100\"}\n";
    expect_failure("train --dataset synthetic --batch 8 --steps 1 --plan " + plan, "cannot run here");
}

}  // namespace

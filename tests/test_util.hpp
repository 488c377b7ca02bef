// Small helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "graph/autodiff.hpp"
#include "graph/error.hpp"
#include "zoo/zoo.hpp"

namespace joule::test {

struct CommandResult {
    int code;         // exit status (-1: killed by a signal)
    std::string out;  // what it printed (stdout, and stderr where the command sends it there)
};
// Runs a shell command line and collects its stdout.
inline CommandResult run_command(const std::string& cmd) {
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Expects f() to throw joule::Error whose message contains `must_contain`.
inline void expect_error(const std::function<void()>& f, const std::string& must_contain) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning '" << must_contain << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(must_contain), std::string::npos) << e.what();
    }
}

// A zoo net's training graph (SGD with momentum) at a batch and input size (0: the net's default).
inline TrainGraph zoo_train_graph(const std::string& net, int64_t batch, int64_t image = 0) {
    zoo::NetConfig cfg;
    cfg.batch = batch, cfg.image_size = image;
    zoo::Model m = zoo::build(net, cfg);
    return build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
}

// Checks a document against the Trace Event Format (what Perfetto and chrome://tracing read): an object
// whose traceEvents are each a phase and a process; complete events ("X") a name, a category, a thread
// and ts and dur in microseconds, non-negative; counters ("C") a name, ts and numeric args; every thread
// an event lands on named by a thread_name metadata event ("M"). Returns the number of complete events.
inline size_t expect_trace_event_format(const nlohmann::json& doc) {
    EXPECT_TRUE(doc.is_object());
    EXPECT_TRUE(doc.contains("traceEvents") && doc["traceEvents"].is_array());
    if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) return 0;
    std::set<int> named, used;
    size_t complete = 0;
    for (const nlohmann::json& e : doc["traceEvents"]) {
        EXPECT_TRUE(e.contains("ph") && e["ph"].is_string()) << e;
        EXPECT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
        const std::string ph = e.value("ph", "");
        if (ph == "M") {
            if (e.value("name", "") == "thread_name") {
                named.insert(e["tid"].get<int>());
                EXPECT_TRUE(e["args"]["name"].is_string()) << e;
            }
        } else if (ph == "X") {
            ++complete;
            EXPECT_TRUE(e["name"].is_string() && e["cat"].is_string() && e["tid"].is_number_integer()) << e;
            EXPECT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e;
            if (e["ts"].is_number() && e["dur"].is_number()) {
                EXPECT_TRUE(e["ts"].get<double>() >= 0 && e["dur"].get<double>() >= 0) << e;
            }
            if (e["tid"].is_number_integer()) used.insert(e["tid"].get<int>());
        } else if (ph == "C") {
            EXPECT_TRUE(e["name"].is_string() && e["ts"].is_number() && e["args"].is_object() && !e["args"].empty()) << e;
            for (const auto& [k, v] : e["args"].items()) EXPECT_TRUE(v.is_number()) << k << " in " << e;
        } else {
            ADD_FAILURE() << "a phase joule does not write: " << e;
        }
    }
    for (int t : used) EXPECT_TRUE(named.count(t)) << "thread " << t << " has no thread_name";
    return complete;
}

// A gtest parameter name from free text.
inline std::string param_name(std::string n) {
    for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return n;
}

}  // namespace joule::test

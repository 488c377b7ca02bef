// Small helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <string>

#include "graph/autodiff.hpp"
#include "graph/error.hpp"
#include "zoo/zoo.hpp"

namespace joule::test {

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

// A gtest parameter name from free text.
inline std::string param_name(std::string n) {
    for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return n;
}

}  // namespace joule::test

// Small helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <string>

#include "graph/error.hpp"

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

// A gtest parameter name from free text.
inline std::string param_name(std::string n) {
    for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return n;
}

}  // namespace joule::test

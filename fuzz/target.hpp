// Helpers for joule's fuzz targets: each target feeds the bytes to one parser; joule::Error (a clear
// message about bad input) is the expected outcome for garbage, anything else escapes and fails.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "graph/error.hpp"

namespace joule::fuzz {

// The bytes as a file (for parsers that take a path), one per process, rewritten on each call.
inline std::string as_file(const uint8_t* data, size_t size, const std::string& suffix) {
    const std::string path = "/tmp/joule-fuzz-" + std::to_string(getpid()) + suffix;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
    return path;
}

// Runs f; a joule::Error is the parser saying no, which is fine.
template <class F>
int expect_clean(F f) {
    try {
        f();
    } catch (const Error&) {
    }
    return 0;
}

}  // namespace joule::fuzz

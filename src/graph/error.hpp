// joule::Error and JOULE_ASSERT: the two ways library code reports failure.
//
//   throw Error("conv1: input has 3 channels but weight expects 1", "check the net's in_channels");
//
// A user/config error (bad file, flag, shape, spec) throws joule::Error with what was wrong, where and
// the fix; the CLI prints it and exits non-zero. An internal invariant uses JOULE_ASSERT, which throws
// InternalError with file and line. Library code never calls exit().
#pragma once

#include <stdexcept>
#include <string>

namespace joule {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
    Error(const std::string& what, const std::string& fix)
        : std::runtime_error(fix.empty() ? what : what + " (" + fix + ")") {}
};

class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace joule

#define JOULE_ASSERT(cond, msg)                                                   \
    do {                                                                          \
        if (!(cond)) ::joule::assert_failed(#cond, __FILE__, __LINE__, (msg));    \
    } while (0)

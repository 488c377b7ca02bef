// Quantities with units, as users type them: sizes (32MiB, 6MB, 512KiB, 1048576), bandwidths
// (900GB/s, 1.5TB/s), compute rates (15.7TFLOPS, 500GFLOPS), and ranges "1MiB..256MiB" (x2 steps)
// or lists "a,b,c". Throw Error naming `what` (the flag) on anything else.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace joule::predict {

// The whole of s as a finite number ("1.5", "2e3"); nullopt for anything else ("", "1.5x", "nan").
std::optional<double> parse_number(const std::string& s);
double parse_bytes(const std::string& s, const std::string& what);
double parse_bandwidth(const std::string& s, const std::string& what);  // bytes per second
double parse_flops(const std::string& s, const std::string& what);      // FLOP per second
double parse_seconds(const std::string& s, const std::string& what);    // 10us, 2ms, 0.5s
// "lo..hi" doubles from lo until hi (inclusive); "a,b,c" as listed; a single value.
std::vector<double> parse_sweep(const std::string& s, double (*parse)(const std::string&, const std::string&), const std::string& what);

}  // namespace joule::predict

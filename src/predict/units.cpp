#include "predict/units.hpp"

#include <cctype>
#include <cmath>
#include <sstream>

#include "graph/error.hpp"

namespace joule::predict {

namespace {
struct Unit {
    const char* name;
    double factor;
};

// `allow_zero`: zero is valid (a time); otherwise a value <= 0 fails as "must be positive", whatever its unit.
double parse_with(const std::string& s, const std::string& what, const std::vector<Unit>& units, const char* example, bool allow_zero = false) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(s, &used);
    } catch (const std::exception&) {
        throw Error(what + ": '" + s + "' is not a quantity", std::string("write it like ") + example);
    }
    if (!std::isfinite(v)) throw Error(what + ": '" + s + "' is not a finite number", std::string("write it like ") + example);
    // the sign first: "0" or "-1" without a unit is wrong for its value, not its unit
    if (v < 0 || (v == 0 && !allow_zero)) throw Error(what + ": '" + s + "' must be " + (allow_zero ? "zero or positive" : "positive"), std::string("e.g. ") + example);
    std::string unit = s.substr(used);
    while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
    if (v == 0 && unit.empty()) return 0;  // zero needs no unit
    for (const Unit& u : units)
        if (unit == u.name) {
            const double r = v * u.factor;
            if (!std::isfinite(r)) throw Error(what + ": '" + s + "' is too large");
            return r;
        }
    std::string names;
    for (const Unit& u : units) names += (names.empty() ? "" : ", ") + std::string(*u.name ? u.name : "(none)");
    throw Error(what + ": unknown unit '" + unit + "' in '" + s + "'", "use one of " + names + ", e.g. " + example);
}
}  // namespace

std::optional<double> parse_number(const std::string& s) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(s, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (used != s.size() || !std::isfinite(v)) return std::nullopt;
    return v;
}

double parse_bytes(const std::string& s, const std::string& what) {
    const double b = parse_with(
        s, what, {{"", 1}, {"B", 1}, {"KiB", 1024}, {"MiB", 1048576}, {"GiB", 1073741824.0}, {"KB", 1e3}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}}, "32MiB");
    if (b < 1) throw Error(what + ": '" + s + "' is less than one byte", "e.g. 32MiB");
    return b;
}

double parse_bandwidth(const std::string& s, const std::string& what) {
    return parse_with(s, what, {{"GB/s", 1e9}, {"TB/s", 1e12}, {"MB/s", 1e6}, {"GiB/s", 1073741824.0}, {"B/s", 1}}, "900GB/s");
}

double parse_flops(const std::string& s, const std::string& what) {
    return parse_with(s, what, {{"TFLOPS", 1e12}, {"GFLOPS", 1e9}, {"PFLOPS", 1e15}, {"FLOPS", 1}, {"TFLOP/s", 1e12}, {"GFLOP/s", 1e9}}, "15.7TFLOPS");
}

double parse_seconds(const std::string& s, const std::string& what) {
    return parse_with(s, what, {{"us", 1e-6}, {"ns", 1e-9}, {"ms", 1e-3}, {"s", 1}}, "10us", true);
}

std::vector<double> parse_sweep(const std::string& s, double (*parse)(const std::string&, const std::string&), const std::string& what) {
    std::vector<double> out;
    const auto dots = s.find("..");
    if (dots != std::string::npos) {
        const double lo = parse(s.substr(0, dots), what), hi = parse(s.substr(dots + 2), what);
        if (hi < lo) throw Error(what + ": range '" + s + "' ends below its start");
        for (double v = lo; v <= hi * (1 + 1e-9); v *= 2) out.push_back(v);
        if (out.size() > 64) throw Error(what + ": range '" + s + "' has more than 64 steps");
        return out;
    }
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(parse(item, what));
    if (out.empty()) throw Error(what + ": empty sweep '" + s + "'");
    return out;
}

}  // namespace joule::predict

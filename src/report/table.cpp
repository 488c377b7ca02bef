#include "report/table.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace joule {

void Table::print(std::ostream& os) const {
    std::vector<size_t> w(headers_.size(), 0);
    auto widen = [&](const std::vector<std::string>& r) {
        for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    };
    widen(headers_);
    for (const auto& r : rows_) widen(r);
    auto line = [&](const std::vector<std::string>& r) {
        for (size_t i = 0; i < w.size(); ++i) {
            const std::string c = i < r.size() ? r[i] : "";
            const std::string pad(w[i] - c.size(), ' ');
            os << (i ? "  " : "") << (i == 0 ? c + pad : pad + c);
        }
        os << '\n';
    };
    line(headers_);
    size_t total = 0;
    for (size_t x : w) total += x;
    os << std::string(total + 2 * (w.size() - 1), '-') << '\n';
    for (const auto& r : rows_) line(r);
}

std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string si(double v, const std::string& unit, int decimals) {
    const char* prefix[] = {"", "k", "M", "G", "T", "P"};
    int i = 0;
    while (std::fabs(v) >= 1000 && i < 5) {
        v /= 1000;
        ++i;
    }
    return fixed(v, decimals) + " " + prefix[i] + unit;
}

std::string bytes_str(double b) {
    const char* prefix[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        ++i;
    }
    return fixed(b, i ? 1 : 0) + " " + prefix[i];
}

std::string exact(double v) {
    char buf[512];
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e21) {  // an integer, in full (never 9e+11)
        const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
        return std::string(buf, r.ptr);
    }
    const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip representation
    return std::string(buf, r.ptr);
}
}  // namespace joule

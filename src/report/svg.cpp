#include "report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "graph/error.hpp"

namespace joule {

namespace {

const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
const char* colour(size_t i) { return kColours[i % (sizeof kColours / sizeof *kColours)]; }

std::string g(double v) {
    char b[32];
    std::snprintf(b, sizeof b, std::abs(v) >= 1e4 && std::abs(v) < 1e9 ? "%.0f" : "%.4g", v);
    return b;
}

std::string px(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return b;
}

// About n round steps (1, 2, 5 x 10^k) covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int n = 5) {
    const double span = hi > lo ? hi - lo : std::max(std::abs(hi), 1.0);
    const double raw = span / n, mag = std::pow(10, std::floor(std::log10(raw))), r = raw / mag;
    const double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
    std::vector<double> out;
    for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) out.push_back(std::abs(v) < 1e-12 * step ? 0 : v);
    return out;
}

void check_finite(double v, const std::string& what) {
    if (!std::isfinite(v)) throw Error("internal: figure '" + what + "' has a non-finite value");
}

void heading(std::ostringstream& os, double width, const std::string& title, const std::string& tag) {
    os << "<text class=\"title\" x=\"" << px(width / 2) << "\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">" << escape_xml(title) << " ("
       << escape_xml(tag) << ")</text>\n";
}

}  // namespace

std::string escape_xml(const std::string& s) {
    std::string out;
    for (char c : s) switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    return out;
}

std::string svg(const LinePlot& p) {
    const double W = 820, H = 380, left = 70, right = 290, top = 36, bottom = 52;
    const double pw = W - left - right, ph = H - top - bottom;
    double x0 = INFINITY, x1 = -INFINITY, y1 = 0, y0 = 0;
    std::set<double> xs;
    for (const Series& s : p.series) {
        if (s.x.size() != s.y.size()) throw Error("internal: figure '" + p.title + "': a series' x and y differ in length");
        for (size_t i = 0; i < s.x.size(); ++i) {
            check_finite(s.x[i], p.title), check_finite(s.y[i], p.title);
            if (p.log_x && s.x[i] <= 0) throw Error("internal: figure '" + p.title + "': a logarithmic x axis takes positive values");
            x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]), y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
            xs.insert(s.x[i]);
        }
    }
    std::ostringstream os;
    os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"figure\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
       << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    heading(os, W, p.title, p.tag);
    if (xs.empty()) {
        os << "<text class=\"empty\" x=\"" << px(W / 2) << "\" y=\"" << px(H / 2) << "\" text-anchor=\"middle\">no data</text>\n</svg>\n";
        return os.str();
    }
    if (p.mark_x > 0) x0 = std::min(x0, p.mark_x), x1 = std::max(x1, p.mark_x);
    auto fx = [&](double x) {
        const double a = p.log_x ? std::log(x0) : x0, b = p.log_x ? std::log(x1) : x1, v = p.log_x ? std::log(x) : x;
        return left + (b > a ? (v - a) / (b - a) : 0.5) * pw;
    };
    const std::vector<double> yt = ticks(y0, y1 > y0 ? y1 * 1.05 : y0 + 1);
    const double ylo = std::min(y0, yt.front()), yhi = std::max(yt.back(), y1);
    auto fy = [&](double y) { return top + ph - (yhi > ylo ? (y - ylo) / (yhi - ylo) : 0.5) * ph; };
    // axes, ticks, labels
    os << "<g class=\"axes\" stroke=\"#333\">\n<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\"" << left + pw << "\" y2=\"" << top + ph << "\"/>\n<line x1=\""
       << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + ph << "\"/>\n</g>\n";
    std::vector<double> xt = p.log_x || xs.size() <= 8 ? std::vector<double>(xs.begin(), xs.end()) : ticks(x0, x1);
    if (xt.size() > 12) xt = ticks(x0, x1);
    for (double x : xt)
        os << "<text class=\"tick\" x=\"" << px(fx(x)) << "\" y=\"" << px(top + ph + 16) << "\" text-anchor=\"middle\">" << g(x) << "</text>\n";
    for (double y : yt)
        os << "<line stroke=\"#ddd\" x1=\"" << left << "\" y1=\"" << px(fy(y)) << "\" x2=\"" << left + pw << "\" y2=\"" << px(fy(y)) << "\"/><text class=\"tick\" x=\""
           << left - 6 << "\" y=\"" << px(fy(y) + 4) << "\" text-anchor=\"end\">" << g(y) << "</text>\n";
    os << "<text class=\"xlabel\" x=\"" << px(left + pw / 2) << "\" y=\"" << H - 14 << "\" text-anchor=\"middle\">" << escape_xml(p.x_label)
       << (p.log_x ? " (log scale)" : "") << "</text>\n";
    os << "<text class=\"ylabel\" transform=\"translate(16," << px(top + ph / 2) << ") rotate(-90)\" text-anchor=\"middle\">" << escape_xml(p.y_label) << "</text>\n";
    if (p.mark_x > 0)
        os << "<line class=\"mark\" stroke=\"#555\" stroke-dasharray=\"6,4\" x1=\"" << px(fx(p.mark_x)) << "\" y1=\"" << top << "\" x2=\"" << px(fx(p.mark_x)) << "\" y2=\""
           << top + ph << "\"/><text x=\"" << px(fx(p.mark_x) + (fx(p.mark_x) > left + pw / 2 ? -4 : 4)) << "\" y=\"" << px(top + ph - 8) << "\" text-anchor=\""
           << (fx(p.mark_x) > left + pw / 2 ? "end" : "start") << "\">" << escape_xml(p.mark_label) << "</text>\n";
    // series: a line through the points in x order, a circle per point
    for (size_t k = 0; k < p.series.size(); ++k) {
        const Series& s = p.series[k];
        std::vector<size_t> order(s.x.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.x[a] < s.x[b]; });
        os << "<g class=\"series\"><polyline fill=\"none\" stroke=\"" << colour(k) << "\" stroke-width=\"2\"" << (s.modelled ? " stroke-dasharray=\"6,3\"" : "")
           << " points=\"";
        for (size_t i : order) os << px(fx(s.x[i])) << "," << px(fy(s.y[i])) << " ";
        os << "\"/>\n";
        for (size_t i : order)
            os << "<circle class=\"point\" cx=\"" << px(fx(s.x[i])) << "\" cy=\"" << px(fy(s.y[i])) << "\" r=\"3.5\" fill=\"" << (s.modelled ? "white" : colour(k))
               << "\" stroke=\"" << colour(k) << "\"><title>" << escape_xml(s.name) << ": " << g(s.x[i]) << ", " << g(s.y[i]) << "</title></circle>\n";
        os << "</g>\n";
        const double ly = top + 8 + 18 * double(k);
        os << "<g class=\"legend\"><line x1=\"" << left + pw + 14 << "\" y1=\"" << px(ly) << "\" x2=\"" << left + pw + 38 << "\" y2=\"" << px(ly) << "\" stroke=\""
           << colour(k) << "\" stroke-width=\"2\"" << (s.modelled ? " stroke-dasharray=\"6,3\"" : "") << "/><text x=\"" << left + pw + 44 << "\" y=\"" << px(ly + 4)
           << "\">" << escape_xml(s.name) << (s.modelled ? " (modelled)" : "") << "</text></g>\n";
    }
    os << "</svg>\n";
    return os.str();
}

std::string svg(const BarChart& c) {
    if (c.values.size() != c.rows.size() || (!c.modelled.empty() && c.modelled.size() != c.rows.size()))
        throw Error("internal: figure '" + c.title + "': rows and values differ in number");
    double hi = 0;
    for (const auto& row : c.values) {
        if (row.size() != c.stacks.size()) throw Error("internal: figure '" + c.title + "': a row's values are not one per stack");
        double sum = 0;
        for (double v : row) {
            check_finite(v, c.title);
            if (v < 0) throw Error("internal: figure '" + c.title + "': a negative bar");
            sum += v;
        }
        hi = std::max(hi, sum);
    }
    const double row_h = 20, left = 230, right = 190, top = 36, bottom = 50, W = 820;
    // tall enough for the rows and for the legend (a line per stack, and one for modelled)
    const double pw = W - left - right, ph = std::max(1.0, double(c.rows.size())) * row_h;
    const double H = top + std::max(ph, 18 * double(c.stacks.size() + 1)) + bottom;
    std::ostringstream os;
    os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"figure\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
       << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    heading(os, W, c.title, c.tag);
    if (c.rows.empty()) {
        os << "<text class=\"empty\" x=\"" << px(W / 2) << "\" y=\"" << px(top + 20) << "\" text-anchor=\"middle\">no data</text>\n</svg>\n";
        return os.str();
    }
    const std::vector<double> vt = ticks(0, hi > 0 ? hi : 1);
    const double vmax = std::max(vt.back(), hi > 0 ? hi : 1);
    auto fv = [&](double v) { return left + v / vmax * pw; };
    for (double v : vt)
        os << "<line stroke=\"#ddd\" x1=\"" << px(fv(v)) << "\" y1=\"" << top << "\" x2=\"" << px(fv(v)) << "\" y2=\"" << top + ph << "\"/><text class=\"tick\" x=\""
           << px(fv(v)) << "\" y=\"" << px(top + ph + 16) << "\" text-anchor=\"middle\">" << g(v) << "</text>\n";
    os << "<line stroke=\"#333\" x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + ph << "\"/>\n";
    os << "<text class=\"xlabel\" x=\"" << px(left + pw / 2) << "\" y=\"" << px(top + ph + 36) << "\" text-anchor=\"middle\">" << escape_xml(c.value_label) << "</text>\n";
    bool any_modelled = false;
    for (size_t r = 0; r < c.rows.size(); ++r) {
        const bool modelled = !c.modelled.empty() && c.modelled[r];
        any_modelled = any_modelled || modelled;
        const double y = top + double(r) * row_h;
        os << "<text class=\"row\" x=\"" << left - 6 << "\" y=\"" << px(y + row_h * 0.7) << "\" text-anchor=\"end\">" << escape_xml(c.rows[r]) << "</text>\n";
        double at = 0;
        for (size_t k = 0; k < c.stacks.size(); ++k) {
            const double v = c.values[r][k];
            if (v <= 0) continue;
            os << "<rect class=\"bar" << (modelled ? " modelled" : "") << "\" x=\"" << px(fv(at)) << "\" y=\"" << px(y + 3) << "\" width=\"" << px(fv(at + v) - fv(at))
               << "\" height=\"" << px(row_h - 6) << "\" fill=\"" << colour(k) << "\"" << (modelled ? " fill-opacity=\"0.4\" stroke=\"#333\" stroke-dasharray=\"3,2\"" : "")
               << "><title>" << escape_xml(c.rows[r]) << ", " << escape_xml(c.stacks[k]) << ": " << g(v) << (modelled ? " (modelled)" : "") << "</title></rect>\n";
            at += v;
        }
    }
    for (size_t k = 0; k <= c.stacks.size(); ++k) {
        if (k == c.stacks.size() && !any_modelled) break;
        const double ly = top + 4 + 18 * double(k);
        const bool m = k == c.stacks.size();
        os << "<g class=\"legend\"><rect x=\"" << left + pw + 14 << "\" y=\"" << px(ly) << "\" width=\"14\" height=\"12\" fill=\"" << (m ? "#999" : colour(k)) << "\""
           << (m ? " fill-opacity=\"0.4\" stroke=\"#333\" stroke-dasharray=\"3,2\"" : "") << "/><text x=\"" << left + pw + 34 << "\" y=\"" << px(ly + 10) << "\">"
           << (m ? "pale, dashed: modelled" : escape_xml(c.stacks[k])) << "</text></g>\n";
    }
    os << "</svg>\n";
    return os.str();
}

}  // namespace joule

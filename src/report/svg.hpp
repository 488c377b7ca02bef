// Inline SVG figures for joule's HTML reports, drawn here (no script, nothing fetched): line plots of
// series against a numeric x, and horizontal stacked bars. Every figure has a title, axis labels with
// units, a legend, and its measured/modelled tag; modelled series and bars are drawn dashed / hatched.
// Marks carry classes a test can count: circle.point, rect.bar.
//
//   LinePlot p{"throughput", "batch size", "images/s", "measured"};
//   p.series.push_back({"f32, 2 threads", {8, 16, 32}, {410, 530, 600}});
//   os << svg(p);
#pragma once

#include <string>
#include <vector>

namespace joule {

struct Series {
    std::string name;
    std::vector<double> x, y;
    bool modelled = false;
};

struct LinePlot {
    std::string title, x_label, y_label;  // labels with their units
    std::string tag;                      // "measured", "modelled", "measured and modelled"
    std::vector<Series> series;
    bool log_x = false;
    double mark_x = 0;  // > 0: a vertical marker here (e.g. the memory model's knee), labelled
    std::string mark_label;
};

struct BarChart {
    std::string title, value_label;  // the value axis' label with its unit
    std::string tag;
    std::vector<std::string> rows;    // one bar per row, top to bottom
    std::vector<std::string> stacks;  // the parts of each bar, in the legend's order
    std::vector<std::vector<double>> values;  // [row][stack], >= 0
    std::vector<bool> modelled;               // per row (empty: none)
};

// Throws Error for inconsistent sizes, non-finite or negative bar values.
std::string svg(const LinePlot& p);
std::string svg(const BarChart& c);

// Text for SVG and HTML: & < > " escaped.
std::string escape_xml(const std::string& s);

}  // namespace joule

// Text tables and number formatting for the CLI's human-readable output.
//
//   Table t({"layer", "fwd ms", "bwd ms"});
//   t.add({"conv1", fixed(0.41, 2), fixed(0.93, 2)});
//   t.print(std::cout);
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace joule {

class Table {
public:
    explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    void print(std::ostream& os) const;  // first column left-aligned, the others right-aligned
    size_t size() const { return rows_.size(); }

private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double v, int decimals);
std::string si(double v, const std::string& unit, int decimals = 2);  // 1.23 G<unit>
std::string bytes_str(double b);                                       // 12.3 MiB
// The shortest text that reads back as exactly `v` (CSV, files): 41943040, 0.1, 1.5e-07; integers as integers.
std::string exact(double v);

}  // namespace joule

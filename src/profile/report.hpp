// Derived metrics of stored profiles: throughput, GFLOP/s, average power, GFLOPS/W, energy per image,
// and the per-layer-type breakdown (conv / fc / bn / activation / pooling / cast / transfer / other) of time and energy.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "profile/store.hpp"

namespace joule::profile {

struct ConfigMetrics {
    ConfigRecord config;
    double images_per_s = 0, gflops_per_s = 0, avg_power_w = 0, gflops_per_w = 0, joules_per_image = 0;
    struct Bucket {
        double seconds = 0, joules = 0;  // per step; joules above idle
    };
    std::map<std::string, Bucket> by_type;  // conv, fc, bn, activation, pooling, other
};

ConfigMetrics derive(const ConfigRecord& c, const std::vector<NodeRecord>& nodes);
std::vector<ConfigMetrics> derive_all(const Store& store, const std::string& net = "");

extern const char* const kLayerTypes[8];

}  // namespace joule::profile

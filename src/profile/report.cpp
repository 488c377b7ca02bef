#include "profile/report.hpp"

namespace joule::profile {

const char* const kLayerTypes[8] = {"conv", "fc", "bn", "activation", "pooling", "cast", "transfer", "other"};

ConfigMetrics derive(const ConfigRecord& c, const std::vector<NodeRecord>& nodes) {
    ConfigMetrics m;
    m.config = c;
    if (c.step_s > 0) {
        m.images_per_s = double(c.key.batch) / c.step_s;
        m.gflops_per_s = c.flops / c.step_s / 1e9;
        m.avg_power_w = c.total_j / c.step_s;
    }
    if (c.total_j > 0) m.gflops_per_w = c.flops / c.total_j / 1e9;
    m.joules_per_image = c.total_j / double(std::max<int64_t>(c.key.batch, 1));
    for (const char* t : kLayerTypes) m.by_type[t] = {};
    for (const NodeRecord& n : nodes) {
        ConfigMetrics::Bucket& b = m.by_type[n.category];
        b.seconds += n.time_s;
        b.joules += n.energy_j;
    }
    return m;
}

std::vector<ConfigMetrics> derive_all(const Store& store, const std::string& net) {
    std::vector<ConfigMetrics> out;
    for (const ConfigRecord& c : store.configs(net)) out.push_back(derive(c, store.nodes(c.key)));
    return out;
}

}  // namespace joule::profile

// Calibration: profile records (measured time per node) paired with the memory model's roofline terms
// for the same nodes, as samples for predict::fit_efficiency. The training graph of every stored
// configuration is rebuilt the way the sweep built it and checked against the records node by node.
//
//   profile::Store db("joule-profile.db");
//   profile::CalibrationSet set = profile::calibration_samples(db, hw, {.exclude = {"resnet50"}});
//   predict::EfficiencyModel e = predict::fit_efficiency(set.samples);
#pragma once

#include <map>
#include <string>
#include <vector>

#include "predict/device_model.hpp"
#include "predict/efficiency.hpp"
#include "predict/memory_model.hpp"
#include "profile/store.hpp"

namespace joule::profile {

struct CalibrationOptions {
    std::vector<std::string> nets;     // empty: every net in the store
    std::vector<std::string> exclude;  // "net" or "net:batch", left out (held out for validation)
    int threads = 0;                   // 0: the one thread count the store holds (several: an error)
    int64_t image_size = 0, seq_len = 128;  // as the sweep was run
    bool cold_traffic = false;  // fit against each node's cold-buffer traffic (the cost interface's), not the iteration's
};

struct CalibrationSet {
    std::vector<predict::EfficiencySample> samples;
    std::vector<ConfigRecord> configs;  // the configurations used
    std::vector<size_t> first_sample;   // configs[i]'s samples start here (and end at first_sample[i + 1])
    std::vector<double> roofline_s;     // configs[i]'s step as the plain roofline predicts it
};

// The node records of configuration c, checked against its rebuilt graph g node by node (names and
// operand shapes); an Error names the first mismatch and the fix.
std::vector<NodeRecord> check_rebuilt(const Store& db, const ConfigRecord& c, const Graph& g);

// What a stored configuration's training step would take on another device (the cost interface, every
// node on that device in the dtype the sweep ran it in; modelled): the step rebuilt and checked as above.
struct DeviceEstimate {
    bool ok = false;
    std::string why_not;  // when !ok: the device lacks a dtype the step uses
    double step_s = 0, dynamic_j = 0, idle_j = 0;
    std::map<std::string, double> by_type_s;  // step_s per layer type (the records' categories; profile::kLayerTypes)
};
// On a CPU device, the configuration's threads get their share of its cores (predict::on_threads).
DeviceEstimate estimate_on(const Store& db, const ConfigRecord& c, const predict::DeviceModel& d, int64_t image_size, int64_t seq_len);

// `hw` gives the roofline the samples are relative to; its efficiency must be null.
CalibrationSet calibration_samples(const Store& db, const predict::MemoryConfig& hw, const CalibrationOptions& o);

}  // namespace joule::profile

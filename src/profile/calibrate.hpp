// Calibration: profile records (measured time per node) paired with the memory model's roofline terms
// for the same nodes, as samples for predict::fit_efficiency. The training graph of every stored
// configuration is rebuilt the way the sweep built it and checked against the records node by node.
//
//   profile::Store db("joule-profile.db");
//   profile::CalibrationSet set = profile::calibration_samples(db, hw, {.exclude = {"resnet50"}});
//   predict::EfficiencyModel e = predict::fit_efficiency(set.samples);
#pragma once

#include <string>
#include <vector>

#include "predict/efficiency.hpp"
#include "predict/memory_model.hpp"
#include "profile/store.hpp"

namespace joule::profile {

struct CalibrationOptions {
    std::vector<std::string> nets;     // empty: every net in the store
    std::vector<std::string> exclude;  // "net" or "net:batch", left out (held out for validation)
    int threads = 0;                   // 0: the one thread count the store holds (several: an error)
    int64_t image_size = 0, seq_len = 128;  // as the sweep was run
};

struct CalibrationSet {
    std::vector<predict::EfficiencySample> samples;
    std::vector<ConfigRecord> configs;  // the configurations used
    std::vector<size_t> first_sample;   // configs[i]'s samples start here (and end at first_sample[i + 1])
    std::vector<double> roofline_s;     // configs[i]'s step as the plain roofline predicts it
};

// `hw` gives the roofline the samples are relative to; its efficiency must be null.
CalibrationSet calibration_samples(const Store& db, const predict::MemoryConfig& hw, const CalibrationOptions& o);

}  // namespace joule::profile

// `joule report`: one self-contained HTML file of figures (inline SVG from report/svg, inline CSS, no
// script; nothing fetched when it is built or viewed), from a profile database, a `joule analyze --json`
// or a `joule train --json` run. Every figure is tagged measured or modelled; modelled marks are drawn pale and dashed.
//
//   const profile::Store db("joule-profile.db", profile::Store::Mode::ReadOnly);
//   write_html(file, profile_report(db));
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "profile/store.hpp"

namespace joule {

struct HtmlSection {
    std::string heading, text;         // text: a paragraph (escaped when written)
    std::vector<std::string> figures;  // SVG
};

struct HtmlReport {
    std::string title, source;  // source: what it was made from
    std::vector<HtmlSection> sections;
};

// Throws Error when the stream fails.
void write_html(std::ostream& os, const HtmlReport& r);

// What profile_report predicts each stored CPU configuration's step on, to draw beside the measured one
// (the cost interface, every node on that device in the dtype it ran in; modelled). A CPU device gets
// the configuration's threads as its share of the cores. image_size and seq_len: as the sweep ran.
struct ProfilePrediction {
    std::string device;  // a data/hw name, alias or path; "" for none
    int64_t image_size = 0, seq_len = 128;
};

// Per net: throughput, GFLOP/s, GFLOPS/W and mJ per image against batch size, a line per precision and
// thread count; time and energy per layer type per configuration; time and energy per layer of its
// largest configuration; with a prediction, the step time predicted against measured per configuration
// and per layer type. An empty database gives a report that says so.
HtmlReport profile_report(const profile::Store& db, const ProfilePrediction& predicted = {});

// A `joule analyze --json` run (modelled): traffic per iteration and iteration time against the swept
// capacity (the knee marked: the smallest capacity that removes 90 % of the traffic capacity can remove)
// or bandwidth, and the traffic per layer type at each point. Throws Error for JSON that is not
// joule.analyze/1.
HtmlReport analyze_report(const nlohmann::json& run, const std::string& source);

// A run's per-layer time and (with --energy) energy, and where it ran under a placement, the plan's
// predicted time per device beside what the run got. Throws Error for JSON that is not joule.train/1.
HtmlReport train_report(const nlohmann::json& run, const std::string& source);

}  // namespace joule

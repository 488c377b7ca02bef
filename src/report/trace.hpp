// Chrome trace-event timelines (the JSON that Perfetto and chrome://tracing open): one track per device
// or stream, one complete event ("ph": "X") per node, counter tracks (power). Serves `joule plan
// --trace` (a simulated iteration: modelled) and `joule train --trace` (a measured run) alike; the
// metadata says which.
//
//   Trace t{"resnet18 on cpu+v100+s10 (modelled)", {"cpu", "cuda:v100", "fpga_emu:s10", "links"}};
//   t.events.push_back({"conv1", "forward", 1, 0.0012, 0.0003, {{"joules", "0.04"}}});
//   write_chrome_trace(file, t);
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace joule {

struct TraceEvent {
    std::string name, category;
    int track = 0;  // index into Trace::tracks
    double start_seconds = 0, seconds = 0;
    std::map<std::string, std::string> args;
};

// A counter track's value from `at_seconds` on (a step function: "ph": "C"), e.g. power in W.
struct TraceCounter {
    std::string name;  // the track, with its unit and whether measured or modelled
    double at_seconds = 0, value = 0;
};

struct Trace {
    std::string process;              // the timeline's title
    std::vector<std::string> tracks;  // one row each, in this order
    std::vector<TraceEvent> events;
    std::vector<TraceCounter> counters;
    std::map<std::string, std::string> metadata;  // "otherData": e.g. timing: modelled
};

// Times in microseconds, as the format wants. Throws Error when the stream fails.
void write_chrome_trace(std::ostream& os, const Trace& t);

}  // namespace joule

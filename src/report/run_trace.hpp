// Measured runs as Chrome trace-event timelines (`joule train --trace`, `joule profile --trace`): a
// track per device with each node's span in every timed step (phase as category; op, shapes, dtype,
// FLOPs, bytes and, where energy was recorded, joules as args), a track of the steps, and a power
// counter: the meter's readings (measured), or idle power plus each node's modelled power while it
// runs (modelled). Nodes on emulated devices show the host's emulation span, their device's modelled
// time in the args.
//
//   TrainOptions o; o.trace = true;
//   const TrainResult r = train(o);
//   write_chrome_trace(file, train_trace(r));
#pragma once

#include <string>
#include <vector>

#include "report/trace.hpp"
#include "runtime/trainer.hpp"

namespace joule {

// One run's timed steps.
struct RunSpans {
    std::string label;                     // names its tracks ("label: cpu"); empty: the devices alone
    std::vector<std::string> devices;      // NodeSpan::device indexes these
    const std::vector<TracedNode>* nodes = nullptr;  // per node id of the graph the run executed
    const std::vector<std::vector<energy::NodeSpan>>* steps = nullptr;
    const EnergyResult* energy = nullptr;  // when recorded (its steps are these steps)
};

// Appends the run on tracks of its own, times from `origin` (steady-clock seconds). Throws Error for a
// span of a node or device the run does not have.
void add_run(Trace& t, const RunSpans& run, double origin);
// The earliest start of the steps' spans (INFINITY when none).
double first_span(const std::vector<std::vector<energy::NodeSpan>>& steps);

// A `joule train --trace` run; throws Error when it recorded no spans (TrainOptions::trace unset).
Trace train_trace(const TrainResult& r);

}  // namespace joule

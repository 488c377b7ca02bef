#include "report/run_trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "graph/error.hpp"

namespace joule {

namespace {

std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

}  // namespace

double first_span(const std::vector<std::vector<energy::NodeSpan>>& steps) {
    double first = INFINITY;
    for (const auto& spans : steps)
        for (const energy::NodeSpan& x : spans) first = std::min(first, x.start);
    return first;
}

void add_run(Trace& t, const RunSpans& run, double origin) {
    const EnergyResult* e = run.energy;
    const bool measured_power = e && e->kind == energy::MeterKind::Measured;
    const bool joules = e && e->step_node_joules.size() == run.steps->size();  // per recorded step, as attributed
    const std::string prefix = run.label.empty() ? "" : run.label + ": ";
    // a track per device (emulated where its spans are), then the steps'
    const int first = int(t.tracks.size());
    std::vector<bool> emulated(run.devices.size(), false);
    for (const auto& spans : *run.steps)
        for (const energy::NodeSpan& x : spans) {
            if (size_t(x.node) >= run.nodes->size() || x.device < 0 || size_t(x.device) >= run.devices.size())
                throw Error("internal: a span of node " + std::to_string(x.node) + " on device " + std::to_string(x.device) + " the run does not have");
            if (x.emulated) emulated[size_t(x.device)] = true;
        }
    for (size_t d = 0; d < run.devices.size(); ++d) t.tracks.push_back(prefix + run.devices[d] + (emulated[d] ? " (emulated: host time; modelled time in args)" : ""));
    const int steps_track = int(t.tracks.size());
    t.tracks.push_back(prefix + "steps");
    const std::string power = e ? prefix + "power W (" + energy::kind_name(e->kind) + ", " + e->meter.device + ")" : "";
    double last = -INFINITY;
    for (size_t s = 0; s < run.steps->size(); ++s) {
        const std::vector<energy::NodeSpan>& spans = (*run.steps)[s];
        if (spans.empty()) continue;
        double begin = INFINITY, end = -INFINITY;
        for (const energy::NodeSpan& x : spans) begin = std::min(begin, x.start), end = std::max(end, x.end);
        last = std::max(last, end);
        t.events.push_back({"step " + std::to_string(s + 1), "step", steps_track, begin - origin, end - begin, {{"nodes", std::to_string(spans.size())}}});
        for (const energy::NodeSpan& x : spans) {
            const TracedNode& n = (*run.nodes)[size_t(x.node)];
            TraceEvent ev{n.name, n.phase, first + x.device, x.start - origin, x.end - x.start, {}};
            ev.args = {{"op", n.op}, {"dtype", n.dtype}, {"shapes", n.shapes}, {"flops", num(n.flops)}, {"bytes", num(n.bytes)},
                       {"timing", x.emulated ? "emulated: this span is host time" : "measured"}};
            if (x.emulated) ev.args["modelled seconds"] = num(x.modelled_seconds);
            if (joules) {
                const double j = e->step_node_joules[s][size_t(x.node)];
                ev.args["joules above idle"] = num(j) + (x.emulated ? " (modelled: the device's)" : std::string(" (") + energy::kind_name(e->kind) + ")");
                // a modelled meter's power: idle, and each host node's own model while it runs
                const double seconds = e->step_node_seconds[s][size_t(x.node)];
                if (!measured_power && !x.emulated && seconds > 0) {
                    t.counters.push_back({power, x.start - origin, e->idle_w + j / seconds});
                    t.counters.push_back({power, x.end - origin, e->idle_w});
                }
            }
            t.events.push_back(std::move(ev));
        }
    }
    if (measured_power) {  // the meter's readings over the steps: average power between consecutive samples
        const double from = first_span(*run.steps);
        for (size_t i = 1; i < e->power.t.size(); ++i) {
            const double a = e->power.t[i - 1], b = e->power.t[i];
            if (b <= a || b <= from || a >= last) continue;
            t.counters.push_back({power, std::max(a, from) - origin, (e->power.joules[i] - e->power.joules[i - 1]) / (b - a)});
        }
    }
}

Trace train_trace(const TrainResult& r) {
    if (r.traced_steps.empty() || r.traced_nodes.empty()) throw Error("internal: the run recorded no node spans", "set TrainOptions::trace");
    const EnergyResult* e = r.energy ? &*r.energy : nullptr;
    Trace t;
    t.process = r.net + " batch " + std::to_string(r.batch) + ", plan " + r.plan + " (measured run)";
    RunSpans run{"", {}, &r.traced_nodes, &r.traced_steps, e};
    for (const TrainResult::DeviceTime& d : r.devices) run.devices.push_back(d.device);
    add_run(t, run, first_span(r.traced_steps));
    t.metadata = {{"timing", "measured (wall clock); emulated devices' nodes: host time, their modelled time in the args"},
                  {"power", !e                                       ? "not recorded (train --energy)"
                            : e->kind == energy::MeterKind::Measured ? "measured by " + e->meter.name + " (" + e->meter.source + ")"
                                                                     : "modelled from " + e->meter.source},
                  {"steps", std::to_string(r.traced_steps.size()) + " timed steps (after warm-up)"},
                  {"net", r.net},
                  {"batch", std::to_string(r.batch)},
                  {"plan", r.plan}};
    return t;
}

}  // namespace joule

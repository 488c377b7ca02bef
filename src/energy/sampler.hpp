// Sampler: a thread reading a PowerMeter every `period` (default 10 ms) into an EnergyTrace, and the
// attribution of a trace to the nodes that ran while it was recorded.
//
//   energy::Sampler s(*meter, std::chrono::milliseconds(10));
//   s.start(); ... run nodes, recording NodeSpans ... s.stop();
//   energy::Attribution a = energy::attribute_measured(spans, s.trace(), idle_w);
//   // a.node_joules sum + a.idle_joules == a.total_joules
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "energy/meter.hpp"
#include "graph/graph.hpp"

namespace joule::energy {

// Seconds on the steady clock (the executor's and the sampler's common time base).
double now_seconds();

// Cumulative joules at sample times; energy_at() interpolates linearly and clamps at the ends.
struct EnergyTrace {
    std::vector<double> t, joules;
    double energy_at(double time) const;
    double average_power(double from, double to) const;
};

class Sampler {
public:
    Sampler(PowerMeter& meter, std::chrono::microseconds period = std::chrono::milliseconds(10));
    ~Sampler();
    void start();
    void stop();  // takes a last sample
    EnergyTrace trace() const;
    std::chrono::microseconds period() const { return period_; }

private:
    void sample();
    PowerMeter& meter_;
    std::chrono::microseconds period_;
    std::atomic<bool> running_{false};
    std::thread thread_;
    mutable std::mutex mu_;
    EnergyTrace trace_;
    std::string error_;
};

// Measures the idle power: samples the meter for `seconds` while this thread sleeps.
double measure_idle_power(PowerMeter& meter, double seconds, std::chrono::microseconds period = std::chrono::milliseconds(10));

// One executed node: [start, end] on the steady clock.
// One node run: its wall-clock interval, the device that ran it (an index into the executor's device
// list), and whether that device is emulated (its wall time is host CPU time spent emulating).
struct NodeSpan {
    NodeId node;
    double start, end;
    int16_t device = 0;
    bool emulated = false;
    double modelled_seconds = 0, modelled_joules = 0;  // emulated: the device's modelled time and energy above idle
};

struct Attribution {
    std::vector<double> node_joules;   // per span: energy above idle (the node's own)
    std::vector<double> node_seconds;  // per span: its kernel time (end - start)
    double idle_joules = 0;            // idle/static power over the whole interval
    double total_joules = 0;           // == sum(node_joules) + idle_joules
    double seconds = 0;                // first start to last end
    double idle_w = 0;
    MeterKind kind = MeterKind::Measured;
};

// Each span owns the interval from its start to the next span's start (the gap after a node is the
// node's: its host-side overhead), so the intervals tile the run and the sums add up exactly.
Attribution attribute_measured(const std::vector<NodeSpan>& spans, const EnergyTrace& trace, double idle_w);
// Modelled: each node draws idle + dynamic(utilisation) during its kernel time, idle in the gaps.
Attribution attribute_modelled(const Graph& g, const std::vector<NodeSpan>& spans, const PowerModel& model);

}  // namespace joule::energy

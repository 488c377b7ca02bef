// EnergyRecorder: energy per node over a number of executor runs (steps), from the chosen meter.
//
//   energy::MeterChoice m = energy::choose_meter("auto", &spec, threads);
//   EnergyRecorder rec(m, {.idle_seconds = 0.5});
//   rec.begin(ex);                 // measures idle power (measured meters), starts the sampler
//   for (...) { rec.step_begin(); ex.run_all(); rec.step_end(); }
//   EnergyResult r = rec.finish(ex.graph());
//   // sum(r.node_joules) + r.emulation_joules + r.idle_joules == r.total_joules, over the recorded steps
//
// Steps are attributed one by one (energy between steps — data loading — is not part of any step).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "energy/meter.hpp"
#include "energy/sampler.hpp"
#include "runtime/executor.hpp"

namespace joule {

struct EnergyOptions {
    double idle_seconds = 0.5;  // idle-power measurement before the run (measured meters)
    std::chrono::microseconds period = std::chrono::milliseconds(10);
};

struct EnergyResult {
    energy::MeterInfo meter;
    std::string message;
    energy::MeterKind kind = energy::MeterKind::Modelled;
    int64_t steps = 0;
    double idle_w = 0;
    // per node id, summed over steps: above idle, measured (or the host's model) -- but for nodes on an
    // emulated device, that device's modelled energy and time (kernel model), which are in no host total
    std::vector<double> node_joules;
    std::vector<double> node_seconds;
    double idle_joules = 0, total_joules = 0, seconds = 0;  // over the steps: the host's
    double emulation_joules = 0;  // host energy above idle while emulating modelled devices (in total, in no node)
    std::vector<std::vector<double>> step_node_joules, step_node_seconds;  // [step][node id]
    std::vector<double> step_total_joules, step_idle_joules, step_seconds;  // [step]
    size_t samples = 0;
    energy::EnergyTrace power;  // a measured meter's samples over the run (empty when modelled)
};

class EnergyRecorder {
public:
    EnergyRecorder(energy::MeterChoice& choice, EnergyOptions opts = {});
    void begin(Executor& ex);
    void step_begin();
    void step_end();
    EnergyResult finish(const Graph& g);
    const std::vector<std::vector<energy::NodeSpan>>& spans() const { return steps_; }  // per recorded step

private:
    energy::MeterChoice& choice_;
    EnergyOptions opts_;
    Executor* ex_ = nullptr;
    std::unique_ptr<energy::Sampler> sampler_;
    double idle_w_ = 0;
    std::vector<std::vector<energy::NodeSpan>> steps_;
};

}  // namespace joule

#include "runtime/energy_recorder.hpp"

#include "graph/error.hpp"

namespace joule {

EnergyRecorder::EnergyRecorder(energy::MeterChoice& choice, EnergyOptions opts) : choice_(choice), opts_(opts) {}

void EnergyRecorder::begin(Executor& ex) {
    ex_ = &ex;
    if (choice_.meter) {
        idle_w_ = opts_.idle_seconds > 0 ? energy::measure_idle_power(*choice_.meter, opts_.idle_seconds, opts_.period) : 0.0;
        sampler_ = std::make_unique<energy::Sampler>(*choice_.meter, opts_.period);
        sampler_->start();
    } else {
        idle_w_ = choice_.model->idle_w();
    }
}

void EnergyRecorder::step_begin() {
    JOULE_ASSERT(ex_, "EnergyRecorder::begin first");
    steps_.emplace_back();
    ex_->record_spans(&steps_.back());
}

void EnergyRecorder::step_end() { ex_->record_spans(nullptr); }

EnergyResult EnergyRecorder::finish(const Graph& g) {
    EnergyResult r;
    r.meter = choice_.info;
    r.message = choice_.message;
    r.kind = choice_.info.kind;
    r.idle_w = idle_w_;
    r.node_joules.assign(g.num_nodes(), 0.0);
    r.node_seconds.assign(g.num_nodes(), 0.0);
    energy::EnergyTrace trace;
    if (sampler_) {
        sampler_->stop();
        trace = sampler_->trace();
        r.samples = trace.t.size();
    }
    for (const auto& spans : steps_) {
        if (spans.empty()) continue;
        const energy::Attribution a = choice_.meter ? energy::attribute_measured(spans, trace, idle_w_)
                                                    : energy::attribute_modelled(g, spans, *choice_.model);
        std::vector<double> j(g.num_nodes(), 0.0), s(g.num_nodes(), 0.0);
        for (size_t i = 0; i < spans.size(); ++i) {
            if (spans[i].emulated) {  // host energy spent emulating another device; the node's own is the device model's
                r.emulation_joules += a.node_joules[i];
                j[size_t(spans[i].node)] += spans[i].modelled_joules;
                s[size_t(spans[i].node)] += spans[i].modelled_seconds;
                continue;
            }
            j[size_t(spans[i].node)] += a.node_joules[i];
            s[size_t(spans[i].node)] += a.node_seconds[i];
        }
        for (size_t n = 0; n < g.num_nodes(); ++n) r.node_joules[n] += j[n], r.node_seconds[n] += s[n];
        r.step_node_joules.push_back(std::move(j));
        r.step_node_seconds.push_back(std::move(s));
        r.step_total_joules.push_back(a.total_joules);
        r.step_idle_joules.push_back(a.idle_joules);
        r.step_seconds.push_back(a.seconds);
        r.idle_joules += a.idle_joules;
        r.total_joules += a.total_joules;
        r.seconds += a.seconds;
        ++r.steps;
    }
    r.power = std::move(trace);
    return r;
}

}  // namespace joule

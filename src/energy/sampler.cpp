#include "energy/sampler.hpp"

#include <algorithm>

#include "graph/error.hpp"

namespace joule::energy {

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double EnergyTrace::energy_at(double time) const {
    if (t.empty()) return 0;
    if (time <= t.front()) return joules.front();
    if (time >= t.back()) return joules.back();
    const size_t i = size_t(std::upper_bound(t.begin(), t.end(), time) - t.begin());
    const double f = (time - t[i - 1]) / (t[i] - t[i - 1]);
    return joules[i - 1] + f * (joules[i] - joules[i - 1]);
}

double EnergyTrace::average_power(double from, double to) const {
    return to > from ? (energy_at(to) - energy_at(from)) / (to - from) : 0.0;
}

Sampler::Sampler(PowerMeter& meter, std::chrono::microseconds period) : meter_(meter), period_(period) {
    if (period.count() <= 0) throw Error("the sampling period must be positive");
}

Sampler::~Sampler() {
    if (running_) {
        running_ = false;
        thread_.join();
    }
}

void Sampler::sample() {
    double j = 0;
    try {
        j = meter_.joules();
    } catch (const std::exception& e) {
        std::lock_guard<std::mutex> l(mu_);
        if (error_.empty()) error_ = e.what();
        return;
    }
    const double t = now_seconds();
    std::lock_guard<std::mutex> l(mu_);
    trace_.t.push_back(t);
    trace_.joules.push_back(j);
}

void Sampler::start() {
    JOULE_ASSERT(!running_, "sampler already running");
    sample();
    running_ = true;
    thread_ = std::thread([this] {
        auto next = std::chrono::steady_clock::now() + period_;
        while (running_) {
            std::this_thread::sleep_until(next);
            next += period_;
            sample();
        }
    });
}

void Sampler::stop() {
    if (running_) {
        running_ = false;
        thread_.join();
    }
    sample();
    std::lock_guard<std::mutex> l(mu_);
    if (!error_.empty()) throw Error("the power meter failed while sampling: " + error_);
}

EnergyTrace Sampler::trace() const {
    std::lock_guard<std::mutex> l(mu_);
    return trace_;
}

double measure_idle_power(PowerMeter& meter, double seconds, std::chrono::microseconds period) {
    Sampler s(meter, period);
    const double t0 = now_seconds();
    s.start();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    s.stop();
    return s.trace().average_power(t0, now_seconds());
}

namespace {
double interval_end(const std::vector<NodeSpan>& spans, size_t i) { return i + 1 < spans.size() ? spans[i + 1].start : spans[i].end; }
}  // namespace

Attribution attribute_measured(const std::vector<NodeSpan>& spans, const EnergyTrace& trace, double idle_w) {
    Attribution a;
    a.idle_w = idle_w;
    a.kind = MeterKind::Measured;
    if (spans.empty()) return a;
    a.seconds = spans.back().end - spans.front().start;
    a.total_joules = trace.energy_at(spans.back().end) - trace.energy_at(spans.front().start);
    a.idle_joules = idle_w * a.seconds;
    for (size_t i = 0; i < spans.size(); ++i) {
        const double from = spans[i].start, to = interval_end(spans, i);
        a.node_joules.push_back(trace.energy_at(to) - trace.energy_at(from) - idle_w * (to - from));
        a.node_seconds.push_back(spans[i].end - spans[i].start);
    }
    return a;
}

Attribution attribute_modelled(const Graph& g, const std::vector<NodeSpan>& spans, const PowerModel& model) {
    Attribution a;
    a.idle_w = model.idle_w();
    a.kind = MeterKind::Modelled;
    if (spans.empty()) return a;
    a.seconds = spans.back().end - spans.front().start;
    a.idle_joules = a.idle_w * a.seconds;
    a.total_joules = a.idle_joules;
    for (const NodeSpan& s : spans) {
        const double dt = s.end - s.start;
        const double e = model.node_dynamic_w(g, s.node, dt) * dt;
        a.node_joules.push_back(e);
        a.node_seconds.push_back(dt);
        a.total_joules += e;
    }
    return a;
}

}  // namespace joule::energy

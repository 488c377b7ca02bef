#include "report/trace.hpp"

#include <nlohmann/json.hpp>

#include "graph/error.hpp"

namespace joule {

void write_chrome_trace(std::ostream& os, const Trace& t) {
    nlohmann::json events = nlohmann::json::array();
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", t.process}}}});
    for (size_t k = 0; k < t.tracks.size(); ++k) {
        events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", k}, {"args", {{"name", t.tracks[k]}}}});
        events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 1}, {"tid", k}, {"args", {{"sort_index", k}}}});
    }
    for (const TraceEvent& e : t.events) {
        if (e.track < 0 || size_t(e.track) >= t.tracks.size()) throw Error("internal: trace event '" + e.name + "' on no track");
        events.push_back({{"ph", "X"}, {"name", e.name}, {"cat", e.category}, {"pid", 1}, {"tid", e.track}, {"ts", e.start_seconds * 1e6}, {"dur", e.seconds * 1e6},
                          {"args", e.args}});
    }
    for (const TraceCounter& c : t.counters) events.push_back({{"ph", "C"}, {"name", c.name}, {"pid", 1}, {"ts", c.at_seconds * 1e6}, {"args", {{"value", c.value}}}});
    const nlohmann::json doc{{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", t.metadata}};
    if (!(os << doc.dump() << '\n')) throw Error("cannot write the trace");
}

}  // namespace joule

#include "predict/buffer_sim.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

namespace joule::predict {

namespace {

struct Access {
    int64_t block;
    bool write;
    int32_t node;
};

}  // namespace

SimulationResult simulate_belady(const Graph& g, const MemoryConfig& cfg, double block_bytes) {
    SimulationResult r;
    const double bb = block_bytes > 0 ? block_bytes : std::clamp(cfg.capacity_bytes / 1024, 1024.0, 262144.0);
    r.block_bytes = bb;
    const size_t nt = g.num_tensors();
    std::vector<int64_t> base(nt + 1, 0), blocks(nt, 0);
    for (size_t t = 0; t < nt; ++t) {
        blocks[t] = std::max<int64_t>(1, int64_t(std::ceil(stored_bytes(g, TensorId(t)) / bb)));
        base[t + 1] = base[t] + blocks[t];
    }
    std::vector<bool> block_persistent(static_cast<size_t>(base[nt]), false);
    std::vector<double> size(static_cast<size_t>(base[nt]), bb);  // the last block of a tensor holds the rest
    for (size_t t = 0; t < nt; ++t) {
        if (persists(g.tensor(TensorId(t)).role)) std::fill(block_persistent.begin() + base[t], block_persistent.begin() + base[t + 1], true);
        size[size_t(base[t + 1] - 1)] = stored_bytes(g, TensorId(t)) - bb * double(blocks[t] - 1);
    }

    // The trace: the model's schedule and tilings.
    const IterationPrediction model = predict_iteration(g, cfg);
    std::vector<Access> trace;
    int32_t node = 0;
    auto span = [&](TensorId t, double from, double to, bool write) {  // fraction [from, to) of t's blocks
        const int64_t n = blocks[size_t(t)];
        const int64_t a = int64_t(std::floor(from * double(n))), b = std::max(a + 1, int64_t(std::ceil(to * double(n))));
        for (int64_t i = a; i < std::min(b, n); ++i) trace.push_back({base[size_t(t)] + i, write, node});
    };
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        node = int32_t(i);
        const Node& n = g.node(NodeId(i));
        GemmShape s;
        if (gemm_shape(g, NodeId(i), &s)) {
            const std::string& tiling = model.nodes[i].tiling;
            const double tm = std::stod(tiling), tn = std::stod(tiling.substr(tiling.find('x') + 1));
            const int64_t mt = int64_t(std::ceil(s.m / tm)), ntl = int64_t(std::ceil(s.n / tn));
            for (int64_t mi = 0; mi < mt; ++mi)
                for (int64_t ni = 0; ni < ntl; ++ni) {
                    span(s.a, double(mi) / double(mt), double(mi + 1) / double(mt), false);
                    span(s.b, double(ni) / double(ntl), double(ni + 1) / double(ntl), false);
                    const double c0 = double(mi * ntl + ni) / double(mt * ntl), c1 = double(mi * ntl + ni + 1) / double(mt * ntl);
                    span(s.c, c0, c1, true);
                }
            for (TensorId t : n.inputs)
                if (t != s.a && t != s.b) span(t, 0, 1, false);  // bias
            for (TensorId t : n.outputs)
                if (t != s.c) span(t, 0, 1, true);  // bias gradient
            continue;
        }
        const bool bn = n.kind == OpKind::BatchNorm2d || n.kind == OpKind::BatchNormBackward;
        for (size_t k = 0; k < n.inputs.size(); ++k) span(n.inputs[k], 0, 1, false);
        if (bn) span(n.inputs[n.kind == OpKind::BatchNorm2d ? 0 : 1], 0, 1, false);  // the normalisation pass
        for (TensorId t : n.outputs) span(t, 0, 1, true);
        for (size_t k = 0; k < n.inputs.size(); ++k)
            if (has_bit(op_info(n.kind).inplace, k)) span(n.inputs[k], 0, 1, true);
    }
    r.accesses = int64_t(trace.size());

    // next access of each position (INF = never)
    constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> next(trace.size(), kInf);
    {
        std::unordered_map<int64_t, int64_t> seen;
        seen.reserve(trace.size());
        for (int64_t i = int64_t(trace.size()) - 1; i >= 0; --i) {
            auto it = seen.find(trace[size_t(i)].block);
            next[size_t(i)] = it == seen.end() ? kInf : it->second;
            seen[trace[size_t(i)].block] = i;
        }
    }
    const double capacity = cfg.capacity_bytes;
    double used = 0;
    struct Line {
        int64_t next;
        bool dirty;
    };
    std::unordered_map<int64_t, Line> lines;
    std::set<std::pair<int64_t, int64_t>> by_next;  // (next access, block)
    r.node_read_bytes.assign(g.num_nodes(), 0.0);
    r.node_write_bytes.assign(g.num_nodes(), 0.0);
    int32_t current = 0;
    auto write_back = [&](int64_t block, const Line& l) {
        if (l.dirty && (l.next != kInf || block_persistent[size_t(block)])) {
            r.write_bytes += size[size_t(block)];
            r.node_write_bytes[size_t(current)] += size[size_t(block)];
        }
    };
    for (size_t i = 0; i < trace.size(); ++i) {
        const Access& a = trace[i];
        current = a.node;
        auto it = lines.find(a.block);
        if (it != lines.end()) {
            by_next.erase({it->second.next, a.block});
            it->second.next = next[i];
            it->second.dirty = it->second.dirty || a.write;
        } else {
            const double bytes = size[size_t(a.block)];
            if (!a.write) {
                r.read_bytes += bytes;
                r.node_read_bytes[size_t(a.node)] += bytes;
            }
            // Belady: evict blocks used furthest in the future, or bypass the new one when it is
            bool bypass = bytes > capacity;
            while (!bypass && used + bytes > capacity) {
                auto victim = std::prev(by_next.end());
                if (victim->first <= next[i]) {
                    bypass = true;
                    break;
                }
                write_back(victim->second, lines.at(victim->second));
                used -= size[size_t(victim->second)];
                lines.erase(victim->second);
                by_next.erase(victim);
            }
            if (bypass) {
                write_back(a.block, Line{next[i], a.write});
                continue;
            }
            it = lines.emplace(a.block, Line{next[i], a.write}).first;
            used += bytes;
        }
        if (it->second.next == kInf && !block_persistent[size_t(a.block)]) {  // dead: free the space
            used -= size[size_t(a.block)];
            lines.erase(it);
            continue;
        }
        by_next.insert({it->second.next, a.block});
    }
    for (const auto& [block, l] : lines)
        if (l.dirty && block_persistent[size_t(block)]) {
            r.write_bytes += size[size_t(block)];
            if (g.num_nodes()) r.node_write_bytes.back() += size[size_t(block)];
        }
    return r;
}

}  // namespace joule::predict

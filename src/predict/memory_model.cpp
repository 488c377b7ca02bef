#include "predict/memory_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "graph/error.hpp"
#include "predict/efficiency.hpp"

namespace joule::predict {

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();


// Candidate tile sizes along a dimension: powers of two below d, and d itself.
std::vector<double> candidates(double d) {
    std::vector<double> c;
    for (double v = 1; v < d; v *= 2) c.push_back(v);
    c.push_back(d);
    return c;
}

}  // namespace

double stored_bytes(const Graph& g, TensorId t) { return double(g.tensor(t).desc.bytes()); }

double MemoryConfig::peak(DType t) const {
    const double low = t == DType::BF16 ? peak_bf16_flops : t == DType::F16 ? peak_f16_flops : 0;
    return low > 0 ? low : peak_f32_flops;
}

double MemoryConfig::overhead(const Graph& g, NodeId n) const {
    return small_node_overhead_s && small_node(node_cost(g, n)) ? *small_node_overhead_s : node_overhead_s;
}

bool gemm_shape(const Graph& g, NodeId id, GemmShape* out) {
    const Node& n = g.node(id);
    GemmShape s;
    auto dims = [&](TensorId t) -> const Shape& { return g.tensor(t).desc.shape; };
    switch (n.kind) {
        case OpKind::Conv2d: case OpKind::ConvBackwardData: case OpKind::ConvBackwardWeights: {
            const auto& a = attrs_as<ConvAttrs>(n);
            // X [N, C, H, W], W [OC, C/g, KH, KW], Y [N, OC, OH, OW]
            const TensorId x = n.kind == OpKind::Conv2d ? n.inputs[0] : n.kind == OpKind::ConvBackwardData ? n.outputs[0] : n.inputs[1];
            const TensorId w = n.kind == OpKind::ConvBackwardWeights ? n.outputs[0] : n.inputs[1];
            const TensorId y = n.kind == OpKind::Conv2d ? n.outputs[0] : n.inputs[0];
            const Shape &xs = dims(x), &ws = dims(w), &ys = dims(y);
            const double groups = double(a.groups), rows_y = double(ys[0] * ys[2] * ys[3]), rows_x = double(xs[0] * xs[2] * xs[3]);
            const double oc = double(ws[0]) / groups, kk = double(ws[1] * ws[2] * ws[3]);
            if (n.kind == OpKind::Conv2d) s = {rows_y, oc, kk, groups, x, w, y};
            else if (n.kind == OpKind::ConvBackwardData) s = {rows_x, double(ws[1]), oc * double(ws[2] * ws[3]), groups, y, w, x};
            else s = {oc, kk, rows_y, groups, y, x, w};
            break;
        }
        case OpKind::Linear: case OpKind::LinearBackwardData: case OpKind::LinearBackwardWeights: {
            const TensorId x = n.kind == OpKind::Linear ? n.inputs[0] : n.kind == OpKind::LinearBackwardData ? n.outputs[0] : n.inputs[1];
            const TensorId w = n.kind == OpKind::LinearBackwardWeights ? n.outputs[0] : n.inputs[1];
            const TensorId y = n.kind == OpKind::Linear ? n.outputs[0] : n.inputs[0];
            const double rows = double(g.tensor(x).desc.numel() / dims(x).back()), in = double(dims(w)[1]), outf = double(dims(w)[0]);
            if (n.kind == OpKind::Linear) s = {rows, outf, in, 1, x, w, y};
            else if (n.kind == OpKind::LinearBackwardData) s = {rows, in, outf, 1, y, w, x};
            else s = {outf, in, rows, 1, y, x, w};
            break;
        }
        case OpKind::MatMul: {
            const auto& a = attrs_as<MatMulAttrs>(n);  // the product's dims: through the folded transposes
            const Shape as = matmul_view(dims(n.inputs[0]), a.perm_a, a.trans_a).dims;
            const Shape cs = matmul_view(dims(n.outputs[0]), a.perm_c, false).dims;
            const size_t r = as.size();
            const double k = double(as[r - 1]);
            const double m = double(cs[r - 2]), nn = double(cs[r - 1]);
            s = {m, nn, k, double(g.tensor(n.outputs[0]).desc.numel()) / (m * nn), n.inputs[0], n.inputs[1], n.outputs[0]};
            break;
        }
        default: return false;
    }
    s.a_bytes = stored_bytes(g, s.a);
    s.b_bytes = stored_bytes(g, s.b);
    s.c_bytes = stored_bytes(g, s.c);
    s.element_bytes = double(std::max({dtype_size(g.tensor(s.a).desc.dtype), dtype_size(g.tensor(s.b).desc.dtype), dtype_size(g.tensor(s.c).desc.dtype)}));
    *out = s;
    return true;
}

Tiling best_tiling(const GemmShape& s, double space, bool a_resident, bool b_resident, bool c_kept) {
    const double e = s.element_bytes;
    const double kmin = std::min(s.k, 16.0);
    const double A = a_resident ? 0 : s.a_bytes, B = b_resident ? 0 : s.b_bytes, C = c_kept ? 0 : s.c_bytes;
    Tiling best;
    double best_traffic = std::numeric_limits<double>::infinity();
    const double limit = std::max(space, 0.0) / e;  // elements
    auto consider = [&](double tm, double tn, double footprint, double pa, double pb) {
        if (footprint > limit) return;
        const double traffic = A * pa + B * pb + C;
        if (traffic < best_traffic - 1e-9 || (std::fabs(traffic - best_traffic) <= 1e-9 && tm * tn > best.tm * best.tn)) {
            best_traffic = traffic;
            best = {tm, tn, kmin, pa, pb, traffic - C, C};
        }
    };
    const std::vector<double> ms = candidates(s.m), ns = candidates(s.n);
    for (double tm : ms)
        for (double tn : ns) {
            const double passes_a = std::ceil(s.n / tn), passes_b = std::ceil(s.m / tm);
            const double fa = a_resident ? 0 : tm * kmin, fb = b_resident ? 0 : kmin * tn, fc = tm * tn;
            // output-stationary: C tile on chip over the whole k loop
            consider(tm, tn, fa + fb + fc, passes_a, passes_b);
            // A-stationary: an A strip (tm x k) stays while all of B streams past it
            consider(tm, tn, (a_resident ? 0 : tm * s.k) + fb + fc, 1, passes_b);
            // B-stationary
            consider(tm, tn, fa + (b_resident ? 0 : s.k * tn) + fc, passes_a, 1);
        }
    if (!std::isfinite(best_traffic)) {  // nothing fits: the smallest tiles, every operand re-read per tile
        best = {1, 1, 1, s.n, s.m, A * s.n + B * s.m, C};
    }
    return best;
}

NodeTraffic cold_traffic(const Graph& g, NodeId id, DType compute, double C) {
    const Node& n = g.node(id);
    // bytes of an operand as the node computing in `compute` stores it
    auto bytes_of = [&](TensorId t, bool output, size_t i) { return double(g.tensor(t).desc.numel()) * double(dtype_size(operand_dtype(g, id, t, output, i, compute))); };
    auto in_bytes = [&](TensorId t) {
        for (size_t i = 0; i < n.inputs.size(); ++i)
            if (n.inputs[i] == t) return bytes_of(t, false, i);
        for (size_t i = 0; i < n.outputs.size(); ++i)
            if (n.outputs[i] == t) return bytes_of(t, true, i);
        return 0.0;
    };
    NodeTraffic r;
    std::vector<TensorId> written;  // each written tensor once
    for (size_t k = 0; k < n.inputs.size(); ++k)
        if (has_bit(op_info(n.kind).inplace, k) && std::find(written.begin(), written.end(), n.inputs[k]) == written.end()) {
            written.push_back(n.inputs[k]);
            r.write_bytes += bytes_of(n.inputs[k], false, k);
        }
    GemmShape gs;
    if (gemm_shape(g, id, &gs)) {
        gs.a_bytes = in_bytes(gs.a), gs.b_bytes = in_bytes(gs.b), gs.c_bytes = in_bytes(gs.c);
        gs.element_bytes = std::max({gs.a_bytes / double(g.tensor(gs.a).desc.numel()), gs.b_bytes / double(g.tensor(gs.b).desc.numel()),
                                     gs.c_bytes / double(g.tensor(gs.c).desc.numel())});
        // as predict_iteration plans a GEMM whose output is needed later: streamed out, or kept on chip
        // (then written back at the end) when that tiling moves less
        Tiling t = best_tiling(gs, C, false, false, false);
        bool kept = false;
        if (gs.c_bytes <= C) {
            const Tiling k = best_tiling(gs, C - gs.c_bytes, false, false, true);
            if (k.read_bytes + k.write_bytes <= t.read_bytes + t.write_bytes) t = k, kept = true;
        }
        r.read_bytes += t.read_bytes;
        r.write_bytes += t.write_bytes + (kept ? gs.c_bytes : 0);
        for (size_t k = 0; k < n.inputs.size(); ++k)
            if (n.inputs[k] != gs.a && n.inputs[k] != gs.b) r.read_bytes += bytes_of(n.inputs[k], false, k);
        for (size_t k = 0; k < n.outputs.size(); ++k)
            if (n.outputs[k] != gs.c) r.write_bytes += bytes_of(n.outputs[k], true, k);
        return r;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
        const double b = bytes_of(n.inputs[k], false, k);
        r.read_bytes += b;
        const bool bn_input = (n.kind == OpKind::BatchNorm2d && k == 0) || (n.kind == OpKind::BatchNormBackward && k == 1);
        if (bn_input) r.read_bytes += std::max(0.0, b - C);
    }
    for (size_t k = 0; k < n.outputs.size(); ++k)
        if (std::find(written.begin(), written.end(), n.outputs[k]) == written.end()) {
            written.push_back(n.outputs[k]);
            r.write_bytes += bytes_of(n.outputs[k], true, k);
        }
    return r;
}

IterationPrediction predict_iteration(const Graph& g, const MemoryConfig& cfg) {
    if (cfg.capacity_bytes < 0) throw Error("on-chip capacity must not be negative");
    if (cfg.bandwidth_bytes_per_s <= 0) throw Error("off-chip bandwidth must be positive");
    if (cfg.peak_f32_flops <= 0) throw Error("peak compute must be positive");
    if (cfg.node_overhead_s < 0 || cfg.small_node_overhead_s.value_or(0) < 0) throw Error("the per-node overhead must not be negative");
    const size_t nn = g.num_nodes(), nt = g.num_tensors();
    const double C = cfg.capacity_bytes;
    // uses[t]: nodes reading t, in order
    std::vector<std::vector<int64_t>> uses(nt);
    for (size_t i = 0; i < nn; ++i)
        for (TensorId t : g.node(NodeId(i)).inputs)
            if (uses[size_t(t)].empty() || uses[size_t(t)].back() != int64_t(i)) uses[size_t(t)].push_back(int64_t(i));
    auto next_use = [&](TensorId t, int64_t after) {
        const auto& u = uses[size_t(t)];
        auto it = std::upper_bound(u.begin(), u.end(), after);
        return it == u.end() ? kNever : *it;
    };
    struct Entry {
        double bytes;  // resident part (up to the whole tensor)
        double dirty;  // of which not yet in DRAM (a part re-read after a write-back is clean)
    };
    std::unordered_map<TensorId, Entry> resident;
    double used = 0;
    IterationPrediction p;
    p.nodes.resize(nn);
    auto on_chip = [&](TensorId t) {
        auto it = resident.find(t);
        return it == resident.end() ? 0.0 : it->second.bytes;
    };
    auto needed_later = [&](TensorId t, int64_t now) { return next_use(t, now) != kNever || persists(g.tensor(t).role); };
    // Drops `amount` bytes of t from the buffer, writing back its share of the dirty bytes when still
    // needed (which bytes of a tensor leave is not tracked: the dirty share leaves in proportion).
    auto evict = [&](TensorId t, double amount, int64_t now, NodePrediction& np) {
        Entry& e = resident.at(t);
        amount = std::min(amount, e.bytes);
        const double dirty = e.bytes > 0 ? e.dirty * amount / e.bytes : 0;
        if (needed_later(t, now)) np.write_bytes += dirty;
        e.dirty -= dirty;
        e.bytes -= amount;
        used -= amount;
        if (e.bytes <= 0) resident.erase(t);
    };
    // Belady: frees `need` bytes, taking the bytes used furthest in the future first; `protect` stays.
    auto make_room = [&](double need, int64_t now, const std::vector<TensorId>& protect, NodePrediction& np) {
        while (C - used < need - 1e-9) {
            TensorId victim = kNone;
            int64_t far = -1;
            for (const auto& [t, e] : resident) {
                if (std::find(protect.begin(), protect.end(), t) != protect.end()) continue;
                const int64_t u = next_use(t, now);
                if (u > far || (u == far && t > victim)) far = u, victim = t;
            }
            if (victim == kNone) return;
            evict(victim, need - (C - used), now, np);
        }
    };

    for (size_t i = 0; i < nn; ++i) {
        const NodeId id = NodeId(i);
        const int64_t now = int64_t(i);
        const Node& n = g.node(id);
        NodePrediction& np = p.nodes[i];
        np.node = id;
        np.flops = node_cost(g, id).flops;
        std::vector<std::pair<TensorId, bool>> touched;  // (tensor, dirty) seen whole by this node
        GemmShape gs;
        if (gemm_shape(g, id, &gs)) {
            const bool c_future = needed_later(gs.c, now);
            auto plan = [&](double space) {
                const double res_a = on_chip(gs.a), res_b = on_chip(gs.b);
                const bool a_full = res_a >= gs.a_bytes, b_full = res_b >= gs.b_bytes;
                // a dead output is never written; a live one is streamed out, or kept when that is cheaper
                Tiling t = best_tiling(gs, space, a_full, b_full, !c_future);
                if (c_future && gs.c_bytes <= space) {
                    const Tiling kept = best_tiling(gs, space - gs.c_bytes, a_full, b_full, true);
                    if (kept.read_bytes + kept.write_bytes <= t.read_bytes + t.write_bytes) t = kept;
                }
                // the first pass over a partly resident operand finds that part on chip
                if (!a_full) t.read_bytes -= res_a;
                if (!b_full) t.read_bytes -= res_b;
                return t;
            };
            Tiling t = plan(C - used);
            auto cost_of = [](const Tiling& x) { return x.read_bytes + x.write_bytes; };  // the plan's own traffic
            // Evicting for tile space costs the write-back of what leaves dirty and the re-read of all that
            // leaves. Tried: freeing 1/256 .. 1/4 of the buffer, or room to keep C, either sparing the node's
            // whole operands or not (furthest next use first); the cheapest plan wins.
            std::vector<TensorId> operands = n.inputs, whole_operands;
            operands.insert(operands.end(), n.outputs.begin(), n.outputs.end());
            for (const auto& [x, e] : resident)
                if (std::find(operands.begin(), operands.end(), x) != operands.end() && e.bytes >= stored_bytes(g, x)) whole_operands.push_back(x);
            double best_cost = cost_of(t), best_need = 0;
            bool best_spare = false;
            for (bool spare : {true, false})
                for (double need : {C / 256, C / 64, C / 16, C / 4, gs.c_bytes + C / 256}) {
                    if (need > C) continue;
                    if (need <= C - used) continue;
                    const auto saved = resident;
                    const double saved_used = used, saved_write = np.write_bytes;
                    make_room(need, now, spare ? whole_operands : std::vector<TensorId>{}, np);
                    const double freed = saved_used - used;
                    const Tiling roomy = plan(C - used);
                    const double cost = cost_of(roomy) + (np.write_bytes - saved_write) + freed;
                    resident = saved, used = saved_used, np.write_bytes = saved_write;
                    if (freed > 0 && cost < best_cost) best_cost = cost, best_need = need, best_spare = spare;
                }
            if (best_need > 0) {
                make_room(best_need, now, best_spare ? whole_operands : std::vector<TensorId>{}, np);
                t = plan(C - used);
            }
            np.read_bytes += t.read_bytes;
            np.write_bytes += t.write_bytes;
            np.tiling = std::to_string(int64_t(t.tm)) + "x" + std::to_string(int64_t(t.tn)) + "x" + std::to_string(int64_t(t.tk));
            touched.push_back({gs.a, false});
            touched.push_back({gs.b, false});
            for (TensorId x : n.inputs)
                if (x != gs.a && x != gs.b) {  // the bias streams once
                    np.read_bytes += stored_bytes(g, x) - on_chip(x);
                    touched.push_back({x, false});
                }
            for (TensorId o : n.outputs) touched.push_back({o, o == gs.c ? t.write_bytes == 0 : true});  // a streamed-out C is clean
        } else {
            const double space = C - used;
            for (size_t k = 0; k < n.inputs.size(); ++k) {
                const TensorId x = n.inputs[k];
                const double missing = stored_bytes(g, x) - on_chip(x);
                np.read_bytes += missing;
                // BatchNorm reads its input twice (statistics, then normalisation): the second pass finds
                // on chip what fitted
                const bool bn_input = (n.kind == OpKind::BatchNorm2d && k == 0) || (n.kind == OpKind::BatchNormBackward && k == 1);
                if (bn_input) np.read_bytes += std::max(0.0, missing - space);
                touched.push_back({x, false});
            }
            for (TensorId o : n.outputs) touched.push_back({o, true});
        }
        for (size_t k = 0; k < n.inputs.size(); ++k)  // written in place: parameter, optimizer state, statistics
            if (has_bit(op_info(n.kind).inplace, k))
                for (auto& [x, d] : touched)
                        if (x == n.inputs[k]) d = true;
        // Everything the node touched is on chip for a moment; then Belady trims back to capacity.
        for (const auto& [x, d] : touched) {
            const double full = stored_bytes(g, x);
            Entry& e = resident[x];
            used += full - e.bytes;
            e.bytes = full;
            e.dirty = d ? full : e.dirty;  // written whole, or what was dirty stays so; re-read bytes are clean
        }
        for (auto it = resident.begin(); it != resident.end();) {  // no further use: leave (persistent dirty ones written back)
            if (next_use(it->first, now) == kNever) {
                if (persists(g.tensor(it->first).role)) np.write_bytes += it->second.dirty;
                used -= it->second.bytes;
                it = resident.erase(it);
            } else {
                ++it;
            }
        }
        make_room(0, now, {}, np);
        np.occupancy_bytes = used;
    }
    // end of the iteration: dirty parameters and state go back to DRAM
    if (nn > 0)
        for (const auto& [t, e] : resident)
            if (persists(g.tensor(t).role)) p.nodes.back().write_bytes += e.dirty;

    double max_bw = 0;
    for (NodePrediction& np : p.nodes) {
        const Node& n = g.node(np.node);
        const Roofline r = roofline(np.flops, np.read_bytes + np.write_bytes, cfg.peak(n.compute), cfg.bandwidth_bytes_per_s);
        np.compute_s = r.compute_s, np.memory_s = r.memory_s;
        const double overhead = cfg.overhead(g, np.node);
        np.time_s = r.seconds() + overhead;
        double unlimited = np.compute_s + overhead;  // the time with unlimited bandwidth
        if (cfg.efficiency)
            if (const KindEfficiency* k = cfg.efficiency->lookup(g, np.node, n.compute)) {
                GemmShape s;  // M = N = K = 0 when not a GEMM
                gemm_shape(g, np.node, &s);
                np.time_s = k->seconds(np.compute_s, np.memory_s, s.m, s.n, s.k);
                unlimited = k->seconds(np.compute_s, 0, s.m, s.n, s.k);
                np.calibrated = true;
                ++p.calibrated_nodes;
            }
        np.stall_s = std::max(0.0, np.time_s - unlimited);
        np.utilisation = np.time_s > 0 ? np.compute_s / np.time_s : 0;
        p.read_bytes += np.read_bytes;
        p.write_bytes += np.write_bytes;
        p.flops += np.flops;
        p.time_s += np.time_s;
        p.compute_s += np.compute_s;
        p.stall_s += np.stall_s;
        p.peak_occupancy_bytes = std::max(p.peak_occupancy_bytes, np.occupancy_bytes);
        if (np.time_s > 0) max_bw = std::max(max_bw, (np.read_bytes + np.write_bytes) / np.time_s);
    }
    p.peak_bandwidth_bytes_per_s = max_bw;
    p.avg_bandwidth_bytes_per_s = p.time_s > 0 ? (p.read_bytes + p.write_bytes) / p.time_s : 0;
    p.utilisation = p.time_s > 0 ? p.compute_s / p.time_s : 0;
    return p;
}

}  // namespace joule::predict

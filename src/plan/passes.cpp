#include "plan/passes.hpp"

#include <algorithm>
#include <ostream>

#include "backend/registry.hpp"
#include "graph/error.hpp"

namespace joule {

const std::vector<std::string> kPassNames = {"decide", "casts", "allreduce", "transfers", "layout", "fuse", "memory"};

void check_pass_name(const std::string& name) {
    if (std::find(kPassNames.begin(), kPassNames.end(), name) != kPassNames.end()) return;
    std::string list;
    for (const auto& p : kPassNames) list += (list.empty() ? "" : ", ") + p;
    throw Error("unknown pass '" + name + "'", "passes, in order: " + list);
}

namespace {
// The host device: where a tensor nothing reads lives, and where the gradients of a device without an
// all-reduce are all-reduced.
const std::string kHost = "cpu";
}  // namespace

const std::string& tensor_device(const Graph& g, TensorId t) {
    const Tensor& x = g.tensor(t);
    if (x.producer != kNone) return g.node(x.producer).device;
    const auto& readers = g.consumers(t);
    for (NodeId n : readers) {
        const Node& node = g.node(n);
        for (size_t i = 0; i < node.inputs.size(); ++i)
            if (node.inputs[i] == t && has_bit(op_info(node.kind).inplace, i)) return node.device;
    }
    return readers.empty() ? kHost : g.node(readers.front()).device;
}

namespace {

// Rebuilds tg.graph node by node, in order; `rewrite(node, g2)` may add nodes to g2 and rewire node's
// inputs and outputs before the node itself is appended, or (returning false) drop the node, which must
// then be no node's source. Keeps sources pointing at the same nodes (added nodes take their consumer's
// source: its layer) and recomputes the phase marks.
template <class Rewrite>
TrainGraph rebuild(TrainGraph tg, Rewrite rewrite) {
    const Graph& g = tg.graph;
    Graph g2 = g.tensors_only();
    std::vector<NodeId> new_id(g.num_nodes(), kNone);
    std::vector<NodeId> old_source;  // per node of g2: its source as an id of g (a source may come later: a cast's consumer)
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        Node n = g.node(NodeId(k));
        if constexpr (std::is_same_v<decltype(rewrite(n, g2)), bool>) {
            if (!rewrite(n, g2)) continue;
        } else {
            rewrite(n, g2);
        }
        const NodeId src = n.source == kNone ? NodeId(k) : n.source;
        new_id[k] = g2.append(std::move(n));
        old_source.resize(g2.num_nodes(), src);  // the node and those added for it
    }
    for (size_t j = 0; j < g2.num_nodes(); ++j) g2.node(NodeId(j)).source = new_id.at(size_t(old_source[j]));
    // Backward work added for an update (the cast or transfer of its gradient) goes ahead of every update:
    // a step's micro-batches run [first_backward, first_update) each, the updates once.
    std::vector<NodeId> order, updates;
    for (size_t j = 0; j < g2.num_nodes(); ++j) (g2.node(NodeId(j)).phase == Phase::Update ? updates : order).push_back(NodeId(j));
    if (!updates.empty() && !order.empty() && order.back() > updates.front()) {
        order.insert(order.end(), updates.begin(), updates.end());
        Graph g3 = g2.tensors_only();
        std::vector<NodeId> moved(g2.num_nodes());
        for (NodeId j : order) moved[size_t(j)] = g3.append(g2.node(j));
        for (size_t j = 0; j < g3.num_nodes(); ++j) g3.node(NodeId(j)).source = moved[size_t(g3.node(NodeId(j)).source)];
        g2 = std::move(g3);
    }
    tg.graph = std::move(g2);
    tg.first_backward = tg.first_update = NodeId(tg.graph.num_nodes());
    for (size_t k = tg.graph.num_nodes(); k-- > 0;) {
        const Phase p = tg.graph.node(NodeId(k)).phase;
        if (p == Phase::Backward || p == Phase::Update) tg.first_backward = NodeId(k);
        if (p == Phase::Update) tg.first_update = NodeId(k);
    }
    return tg;
}

// Adds a plan-implied node (cast or transfer) for `consumer`, taking its phase (a gradient's for an
// update: backward; rebuild() then moves it ahead of the updates), source and device.
TensorId add_implied(Graph& g2, const Node& consumer, OpKind kind, Attrs attrs, TensorId t, const std::string& name, DType compute) {
    const TensorRole role = g2.tensor(t).role == TensorRole::Gradient ? TensorRole::Gradient : TensorRole::Activation;
    const Phase phase = consumer.phase == Phase::Update && role == TensorRole::Gradient ? Phase::Backward : consumer.phase;
    const TensorId out = g2.add(kind, std::move(attrs), {t}, name, phase, kNone, std::nullopt, role).front();
    Node& n = g2.node(g2.tensor(out).producer);  // its source is set by rebuild() once the consumer is in
    n.device = consumer.device;
    n.compute = compute;
    return out;
}

}  // namespace

TrainGraph decide(TrainGraph tg, const Plan& plan, std::vector<std::string>* origin,
                  std::map<std::string, std::map<std::string, std::string>>* options) {
    Graph& g = tg.graph;
    auto check_device = [](const std::string& device, const std::string& where) {
        DeviceStatus s;
        try {
            s = device_status(device);
        } catch (const Error& e) {
            throw Error(where + ": " + e.what());
        }
        if (!s.known) throw Error(where + ": " + s.reason);
    };
    check_device(plan.default_device, plan.origin);
    std::vector<bool> used(plan.entries.size(), false), matched(plan.entries.size(), false);
    for (const PlanEntry& e : plan.entries)
        if (e.device) check_device(*e.device, e.origin);
    if (origin) origin->assign(g.num_nodes(), plan.origin);
    // node entries by name (the last of equal names wins, like a later line in a file)
    std::map<std::string, size_t> by_node;
    for (size_t i = 0; i < plan.entries.size(); ++i)
        if (plan.entries[i].match == PlanEntry::Match::Node) by_node[plan.entries[i].pattern] = i;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        Node& n = g.node(NodeId(k));
        n.device = plan.default_device;
        n.compute = f32_only_op(n.kind) ? DType::F32 : plan.default_dtype;
        auto apply = [&](size_t i, bool exact) {
            const PlanEntry& e = plan.entries[i];
            used[i] = true;
            if (e.device) n.device = *e.device;
            if (e.dtype) {
                if (!f32_only_op(n.kind)) n.compute = *e.dtype;
                else if (exact && *e.dtype != DType::F32)
                    throw Error(e.origin + ": node '" + n.name + "' (" + op_name(n.kind) + ") computes in f32 only (loss and optimizer updates keep f32 master weights)");
            }
            if (options && !e.options.empty()) (*options)[n.name].insert(e.options.begin(), e.options.end());
            if (origin) (*origin)[k] = e.origin;
        };
        const std::string& layer = layer_of(g, NodeId(k));
        bool applied = false;
        for (size_t i = 0; i < plan.entries.size(); ++i)
            if (plan.entries[i].match == PlanEntry::Match::Layer && glob_match(plan.entries[i].pattern, layer)) {
                matched[i] = true;
                if (!applied) apply(i, false);
                applied = true;
            }
        if (auto it = by_node.find(n.name); it != by_node.end()) apply(it->second, true);
    }
    for (size_t i = 0; i < plan.entries.size(); ++i) {
        const PlanEntry& e = plan.entries[i];
        if (used[i] || (e.match == PlanEntry::Match::Node && by_node.at(e.pattern) != i)) continue;
        if (e.match == PlanEntry::Match::Node)
            throw Error(e.origin + ": no node is named '" + e.pattern + "'", "joule inspect --plan FILE lists the node names");
        if (matched[i])
            throw Error(e.origin + ": every layer that '" + e.pattern + "' matches is taken by an earlier entry (the first matching entry wins)",
                        "move the entry up or remove it");
        throw Error(e.origin + ": layer pattern '" + e.pattern + "' matches no layer", "joule inspect lists the layers");
    }
    return tg;
}

TrainGraph insert_casts(TrainGraph tg, const Plan& plan) {
    Graph& g = tg.graph;
    // storage dtypes: producer's compute dtype, f32 operands f32, the plan's overrides
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& n = g.node(NodeId(k));
        for (size_t i = 0; i < n.outputs.size(); ++i) {
            TensorDesc& d = g.tensor(n.outputs[i]).desc;
            if (is_float(d.dtype)) d.dtype = has_bit(op_info(n.kind).f32_outputs, i) ? DType::F32 : n.compute;
        }
    }
    for (const StorageEntry& s : plan.storage) {
        const auto t = g.find_tensor(s.tensor);
        if (!t) throw Error(s.origin + ": no tensor is named '" + s.tensor + "'", "joule inspect --plan FILE lists the tensors");
        Tensor& x = g.tensor(*t);
        if (!is_float(x.desc.dtype)) throw Error(s.origin + ": tensor '" + s.tensor + "' holds indices, its storage is not a floating-point dtype");
        if (persists(x.role)) throw Error(s.origin + ": tensor '" + s.tensor + "' is a " + role_name(x.role) + ", stored in f32 (master copy)");
        x.desc.dtype = s.dtype;
    }
    std::map<std::pair<TensorId, DType>, TensorId> casts;
    return rebuild(std::move(tg), [&](Node& n, Graph& g2) {
        const OpInfo& info = op_info(n.kind);
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            const TensorId t = n.inputs[i];
            const DType have = g2.tensor(t).desc.dtype, want = has_bit(info.f32_inputs, i) ? DType::F32 : n.compute;
            if (!is_float(have) || have == want) continue;
            if (has_bit(info.inplace, i))
                throw Error("node '" + n.name + "' writes '" + g2.tensor(t).name + "' in place, so it must compute in its storage dtype " + dtype_name(have));
            auto [it, fresh] = casts.try_emplace({t, want}, kNone);
            if (fresh) {
                const std::string name = "cast:" + g2.tensor(t).name + ":" + dtype_name(want);
                it->second = add_implied(g2, n, OpKind::Cast, CastAttrs{want}, t, name, want);
            }
            n.inputs[i] = it->second;
        }
    });
}

TrainGraph insert_transfers(TrainGraph tg) {
    const Graph& g = tg.graph;
    std::vector<std::string> home(g.num_tensors());
    for (size_t t = 0; t < g.num_tensors(); ++t) home[t] = tensor_device(g, TensorId(t));
    std::map<std::pair<TensorId, std::string>, TensorId> transfers;
    return rebuild(std::move(tg), [&](Node& n, Graph& g2) {
        const OpInfo& info = op_info(n.kind);
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            const TensorId t = n.inputs[i];
            const std::string& from = size_t(t) < home.size() ? home[size_t(t)] : tensor_device(g2, t);
            if (from == n.device) continue;
            if (has_bit(info.inplace, i))
                throw Error("node '" + n.name + "' on " + n.device + " writes '" + g2.tensor(t).name + "' in place, but it lives on " + from +
                            " (written in place there first)", "place the nodes that update a tensor on one device");
            auto [it, fresh] = transfers.try_emplace({t, n.device}, kNone);
            if (fresh) {
                const std::string name = "transfer:" + g2.tensor(t).name + ":" + n.device;
                it->second = add_implied(g2, n, OpKind::Transfer, TransferAttrs{from, n.device}, t, name, g2.tensor(t).desc.dtype);
            }
            n.inputs[i] = it->second;
        }
    });
}

namespace {
bool same_layout(const TensorDesc& a, const TensorDesc& b) { return a.layout == b.layout && a.blocking == b.blocking; }
TensorDesc with_layout_of(TensorDesc d, const TensorDesc& like) {
    d.layout = like.layout, d.blocking = like.blocking;
    return d;
}
bool is_update(OpKind k) { return k == OpKind::SgdUpdate || k == OpKind::AdamUpdate; }
bool plain_cast(const Node& n) { return n.kind == OpKind::Cast && !attrs_as<CastAttrs>(n).reorder; }
}  // namespace

TrainGraph assign_layouts(TrainGraph tg, const std::vector<TensorId>& keep, size_t* reorders) {
    Graph& g = tg.graph;
    const size_t nn = g.num_nodes(), nt = g.num_tensors();
    std::vector<LayoutWishes> wish(nn);
    bool any = false;
    for (size_t k = 0; k < nn; ++k) {
        wish[k] = layout_wishes(g, NodeId(k));
        for (const auto& w : wish[k].inputs) any = any || w.has_value();
        for (const auto& w : wish[k].outputs) any = any || w.has_value();
    }
    if (reorders) *reorders = 0;
    if (!any) return tg;
    std::vector<bool> kept(nt, false);
    for (TensorId t : keep) kept[size_t(t)] = true;
    std::vector<TensorDesc> natural(nt);  // every tensor's layout before this pass: what a reader without a wish reads
    for (size_t t = 0; t < nt; ++t) natural[t] = g.tensor(TensorId(t)).desc;
    // The layout reader r wants for its input i (tensor t): its wish, else the layout the tensor had.
    auto wanted = [&](NodeId r, size_t i, TensorId t) { return wish[size_t(r)].inputs[i] ? *wish[size_t(r)].inputs[i] : natural[size_t(t)]; };

    // 1. A parameter (with its optimizer state) is stored in the layout most of its uses want: its readers',
    //    its casts' readers' (bf16 compute copies) and its gradient producer's (ties: the first, the forward's).
    //    A use through a cast counts half: the cast is a pass over the tensor anyway, and a reorder there is
    //    folded into it, where any other use in another layout costs a pass of its own (a mixed-precision
    //    plan's f32 master weights thus take the f32 gradient's layout, not the bf16 copies'). A reader that
    //    reads any layout (LayoutWishes::any_inputs) has no say.
    //    Only when its gradient feeds the update alone (no all-reduce bucket, no cast) on the update's device.
    for (size_t k = 0; k < nn; ++k) {
        const Node& u = g.node(NodeId(k));
        if (!is_update(u.kind)) continue;
        const TensorId p = u.inputs[0], grad = u.inputs[1];
        const NodeId gp = g.tensor(grad).producer;
        if (kept[size_t(p)] || kept[size_t(grad)] || gp == kNone || g.consumers(grad).size() != 1 || g.node(gp).device != u.device ||
            op_info(g.node(gp).kind).category == OpCategory::Communication)
            continue;
        std::vector<std::pair<TensorDesc, int>> wants;  // (layout, weight: 2 direct, 1 through a cast)
        for (NodeId r : g.consumers(p)) {
            const Node& reader = g.node(r);
            if (r == NodeId(k)) continue;
            for (size_t i = 0; i < reader.inputs.size(); ++i) {
                if (reader.inputs[i] != p || has_bit(wish[size_t(r)].any_inputs, i)) continue;
                if (!plain_cast(reader) || reader.device != u.device) {
                    wants.emplace_back(wanted(r, i, p), 2);
                    continue;
                }
                const TensorId copy = reader.outputs[0];
                for (NodeId r2 : g.consumers(copy))
                    for (size_t j = 0; j < g.node(r2).inputs.size(); ++j)
                        if (g.node(r2).inputs[j] == copy && !has_bit(wish[size_t(r2)].any_inputs, j)) wants.emplace_back(wanted(r2, j, copy), 1);
            }
        }
        const Node& producer = g.node(gp);
        for (size_t j = 0; j < producer.outputs.size(); ++j)
            if (producer.outputs[j] == grad) wants.emplace_back(wish[size_t(gp)].outputs[j] ? *wish[size_t(gp)].outputs[j] : natural[size_t(grad)], 2);
        size_t best = 0;
        int best_count = 0;
        for (size_t a = 0; a < wants.size(); ++a) {
            int c = 0;
            for (const auto& [d, w] : wants) c += same_layout(d, wants[a].first) ? w : 0;
            if (c > best_count) best = a, best_count = c;
        }
        if (wants.empty() || wants[best].first.layout != Layout::Blocked) continue;
        for (size_t i = 0; i < u.inputs.size(); ++i)  // the parameter and its state; the gradient follows in 3.
            if (i != 1) g.tensor(u.inputs[i]).desc = with_layout_of(g.tensor(u.inputs[i]).desc, wants[best].first);
    }
    // 2. An output a kernel wants in a layout is written in it (a transient tensor: not kept, not persistent);
    //    a cast's output is in its input's layout (its shape rule).
    for (size_t k = 0; k < nn; ++k) {
        const Node& n = g.node(NodeId(k));
        if (plain_cast(n)) {
            TensorDesc& out = g.tensor(n.outputs[0]).desc;
            out = with_layout_of(out, g.tensor(n.inputs[0]).desc);
            continue;
        }
        for (size_t j = 0; j < n.outputs.size(); ++j) {
            const TensorId t = n.outputs[j];
            if (wish[k].outputs[j] && !kept[size_t(t)] && !persists(g.tensor(t).role)) g.tensor(t).desc = with_layout_of(g.tensor(t).desc, *wish[k].outputs[j]);
        }
    }
    // 3. Every input in the layout its reader wants: a reorder where they differ, one per (tensor, layout),
    //    shared; a reorder of a cast's output is that cast with the reorder in it ("a cast and a reorder of the
    //    same tensor are one node"). An update reads its gradient in its parameter's layout.
    std::map<std::pair<TensorId, std::string>, TensorId> made;
    size_t k = 0;
    tg = rebuild(std::move(tg), [&](Node& n, Graph& g2) {
        const size_t id = k++;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            const TensorId t = n.inputs[i];
            const TensorDesc& have = g2.tensor(t).desc;
            if (plain_cast(n) || has_bit(wish[id].any_inputs, i)) continue;  // it reads any layout
            const TensorDesc want = is_update(n.kind) ? g2.tensor(n.inputs[0]).desc : wanted(NodeId(id), i, t);
            if (same_layout(have, want)) continue;
            if (has_bit(op_info(n.kind).inplace, i))
                throw InternalError("the layout pass would reorder '" + g2.tensor(t).name + "', which '" + n.name + "' writes in place");
            const std::string layout = layout_str(want) + (want.layout == Layout::Blocked ? shape_str(want.blocking.dims) : "");
            auto [it, fresh] = made.try_emplace({t, layout}, kNone);
            if (fresh) {
                const NodeId cast = g2.tensor(t).producer;
                const bool fold = cast != kNone && plain_cast(g2.node(cast)) && g2.node(cast).device == n.device;
                const TensorId from = fold ? g2.node(cast).inputs[0] : t;
                const std::string name = fold ? "cast:" + g2.tensor(from).name + ":" + dtype_name(have.dtype) + ":" + layout_str(want)
                                              : "reorder:" + g2.tensor(t).name + ":" + layout_str(want);
                it->second = add_implied(g2, n, OpKind::Cast, CastAttrs{have.dtype, true, want.layout, want.blocking}, from, name, have.dtype);
                if (reorders) ++*reorders;
            }
            n.inputs[i] = it->second;
        }
    });
    // a cast whose every reader now reads a reordering cast instead is dead
    std::vector<bool> dead(tg.graph.num_nodes(), false);
    for (size_t j = 0; j < tg.graph.num_nodes(); ++j) {
        const Node& n = tg.graph.node(NodeId(j));
        dead[j] = plain_cast(n) && tg.graph.consumers(n.outputs[0]).empty() && !kept[size_t(n.outputs[0])];
    }
    if (std::find(dead.begin(), dead.end(), true) == dead.end()) return tg;
    k = 0;
    return rebuild(std::move(tg), [&](Node&, Graph&) { return !dead[k++]; });
}

TrainGraph fuse_activations(TrainGraph tg, const std::vector<TensorId>& keep) {
    Graph& g = tg.graph;
    std::vector<bool> kept(g.num_tensors(), false);
    for (TensorId t : keep) kept[size_t(t)] = true;
    std::vector<NodeId> folded(g.num_nodes(), kNone);  // per activation: the producer it folds into
    std::vector<std::pair<OpKind, TensorId>> fused(g.num_nodes(), {OpKind::Count, kNone});  // per producer: activation, its output
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& act = g.node(NodeId(k));
        if (act.phase != Phase::Forward || act.inputs.size() != 1) continue;
        const TensorId x = act.inputs[0];
        const NodeId p = g.tensor(x).producer;
        if (p == kNone) continue;
        const Node& prod = g.node(p);
        if (!fusable(prod.kind, act.kind) || prod.outputs[0] != x || fused[size_t(p)].second != kNone || g.consumers(x).size() != 1 || kept[size_t(x)] ||
            g.tensor(x).role != TensorRole::Activation || !(g.tensor(x).desc == g.tensor(act.outputs[0]).desc) || prod.device != act.device ||
            !fuses_activations(prod.device))
            continue;
        folded[k] = p;
        fused[size_t(p)] = {act.kind, act.outputs[0]};
    }
    for (size_t k = 0; k < g.num_nodes(); ++k) {  // the activation's backward now belongs to the fused node's layer
        Node& n = g.node(NodeId(k));
        if (n.source != kNone && folded[size_t(n.source)] != kNone) n.source = folded[size_t(n.source)];
    }
    // A backward node folds into the node reading its result as input 0 (fusable_backward: an activation's
    // backward into batch norm's, a gradient sum into a ReLU / ReLU6 backward) on the same terms: the
    // result's only reader, both its inputs stored as the result, same device and precision; a node that
    // took one in keeps its own (first come, in node order).
    // An activation's backward folded into the backward of a batch norm whose forward took that activation
    // in (reading the same X, gamma and statistics) recomputes Y from X and beta instead of reading it
    // (NormAttrs::recompute_act), so Y is not read twice more nor kept for the backward.
    std::vector<bool> folded_backward(g.num_nodes(), false);
    struct Pre {
        OpKind kind = OpKind::Count;
        TensorId first = kNone, second = kNone;
        bool recompute = false;
    };
    auto forward_beta = [&](const Node& n, TensorId y) -> TensorId {  // beta, when n (a BN backward) can recompute Y
        const NodeId a = g.tensor(y).producer;
        if (n.kind != OpKind::BatchNormBackward || a == kNone || folded[size_t(a)] == kNone) return kNone;
        const Node& f = g.node(folded[size_t(a)]);
        const bool same = f.kind == OpKind::BatchNorm2d && f.inputs[0] == n.inputs[1] && f.inputs[1] == n.inputs[2] && f.outputs[1] == n.inputs[3] &&
                          f.outputs[2] == n.inputs[4] && f.device == n.device && f.compute == n.compute &&
                          attrs_as<NormAttrs>(f).eps == attrs_as<NormAttrs>(n).eps;
        return same ? f.inputs[2] : kNone;
    };
    std::vector<Pre> pre(g.num_nodes());  // per consumer: the node (first, second) -> input 0 folded into it
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& n = g.node(NodeId(k));
        if (n.inputs.empty() || n.pre_op != OpKind::Count) continue;
        const TensorId dz = n.inputs[0];
        const NodeId a = g.tensor(dz).producer;
        if (a == kNone) continue;
        const Node& b = g.node(a);
        const TensorDesc& d = g.tensor(dz).desc;
        if (!fusable_backward(b.kind, n.kind) || b.phase != Phase::Backward || b.inputs.size() != 2 || b.outputs[0] != dz || pre[size_t(a)].kind != OpKind::Count ||
            b.post_op != OpKind::Count || g.consumers(dz).size() != 1 || kept[size_t(dz)] || !(g.tensor(b.inputs[0]).desc == d) ||
            !(g.tensor(b.inputs[1]).desc == d) || b.device != n.device || b.compute != n.compute || !fuses_activations(n.device))
            continue;
        folded_backward[size_t(a)] = true;
        if (const TensorId beta = forward_beta(n, b.inputs[1]); beta != kNone) pre[k] = {b.kind, b.inputs[0], beta, true};
        else pre[k] = {b.kind, b.inputs[0], b.inputs[1]};
    }
    // An activation's backward whose gradient is a max-pool backward's alone, the pool reading that activation's
    // output, folds into the pool's backward the other way round (commuted): the pool routes each dY to its
    // window's arg-max, where the activation's output is the pool's own output Y_pool, so masking dY by
    // f'(Y_pool) before routing gives the same bits as masking the routed gradient by f'(Y) after it. The node
    // reads (dY, argmax, Y_pool), writes the activation's gradient, and Y is not read in the backward at all.
    struct Commuted {
        OpKind kind = OpKind::Count;
        TensorId y_pool = kNone, out = kNone;
    };
    std::vector<Commuted> commuted(g.num_nodes());  // per pool backward
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& r = g.node(NodeId(k));
        if (!backward_reads_output(r.kind) || r.phase != Phase::Backward || r.inputs.size() != 2 || folded_backward[k] || pre[k].kind != OpKind::Count ||
            r.pre_op != OpKind::Count)
            continue;
        const TensorId dz = r.inputs[0];
        const NodeId p = g.tensor(dz).producer;
        if (p == kNone) continue;
        const Node& b = g.node(p);
        if (b.kind != OpKind::MaxPool2dBackward || b.outputs[0] != dz || b.source == kNone || pre[size_t(p)].kind != OpKind::Count ||
            b.pre_op != OpKind::Count || commuted[size_t(p)].kind != OpKind::Count || g.consumers(dz).size() != 1 || kept[size_t(dz)] ||
            !(g.tensor(r.outputs[0]).desc == g.tensor(dz).desc) || b.device != r.device || b.compute != r.compute || !fuses_activations(b.device))
            continue;
        const Node& f = g.node(b.source);
        if (f.kind != OpKind::MaxPool2d || f.inputs[0] != r.inputs[1] || f.device != b.device || !(g.tensor(f.outputs[0]).desc == g.tensor(b.inputs[0]).desc))
            continue;  // the pool read Y itself (not a transfer of it) where its backward runs, Y_pool stored as dY
        commuted[size_t(p)] = {r.kind, f.outputs[0], r.outputs[0]};
        folded_backward[k] = true;
    }
    size_t k = 0;  // rebuild() rewrites the nodes in order
    return rebuild(std::move(tg), [&](Node& n, Graph&) {
        const size_t id = k++;
        if (folded[id] != kNone || folded_backward[id]) return false;
        if (const Commuted& c = commuted[id]; c.kind != OpKind::Count) {
            n.inputs.push_back(c.y_pool);
            n.outputs[0] = c.out;
            n.pre_op = c.kind;
        }
        if (const auto [act, y] = fused[id]; y != kNone) {
            n.outputs[0] = y;
            n.post_op = act;
        }
        if (const Pre& p = pre[id]; p.kind != OpKind::Count) {
            n.inputs[0] = p.first;
            n.inputs.push_back(p.second);
            n.pre_op = p.kind;
            if (p.recompute) std::get<NormAttrs>(n.attrs).recompute_act = true;
        }
        return true;
    });
}

TrainGraph fold_casts(TrainGraph tg, const std::vector<TensorId>& keep, size_t* folded, size_t* copies) {
    Graph& g = tg.graph;
    std::vector<bool> kept(g.num_tensors(), false);
    for (TensorId t : keep) kept[size_t(t)] = true;
    std::vector<TensorId> into(g.num_nodes(), kNone);  // per producer: the cast output it writes instead
    std::vector<bool> gone(g.num_nodes(), false);      // the folded casts
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& c = g.node(NodeId(k));
        if (c.kind != OpKind::Cast) continue;
        const TensorId x = c.inputs[0], y = c.outputs[0];
        const NodeId p = g.tensor(x).producer;
        if (p == kNone) continue;
        const Node& prod = g.node(p);
        const TensorDesc &dx = g.tensor(x).desc, &dy = g.tensor(y).desc;
        if (prod.outputs[0] != x || !stores_output_low(prod.kind) || prod.compute != DType::F32 || dx.dtype != DType::F32 ||
            dy.dtype != DType::BF16 || dx.layout != dy.layout || dx.blocking != dy.blocking || g.consumers(x).size() != 1 || kept[size_t(x)] ||
            (g.tensor(x).role != TensorRole::Activation && g.tensor(x).role != TensorRole::Gradient) || prod.device != c.device ||
            !fuses_activations(prod.device))
            continue;
        into[size_t(p)] = y;
        gone[k] = true;
    }
    // A parameter's casts into bf16 fold into the parameter's update where the device's backend writes such
    // a copy (writes_low_copy: the same storage order; on the cpu also a convolution weight's bf16 formats)
    // and every reader of the copy runs before the update: the update rounds the updated parameter into each
    // copy as it stores it, the copies become state, written at the end of each step for the next (and by
    // the executor after initialisation or a checkpoint), and no step casts.
    const size_t into_producers = size_t(std::count(gone.begin(), gone.end(), true));
    std::vector<std::vector<TensorId>> copies_of_update(g.num_nodes());  // per update: the copies it keeps
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& c = g.node(NodeId(k));
        if (c.kind != OpKind::Cast || gone[k]) continue;
        const TensorId x = c.inputs[0], y = c.outputs[0];
        if (g.tensor(x).role != TensorRole::Parameter || kept[size_t(y)] || !writes_low_copy(c.device, g.tensor(x).desc, g.tensor(y).desc)) continue;
        const std::vector<NodeId>& readers = g.consumers(y);
        for (NodeId u : g.consumers(x)) {
            const Node& up = g.node(u);
            if ((up.kind == OpKind::SgdUpdate || up.kind == OpKind::AdamUpdate) && up.inputs[0] == x && up.device == c.device && low_copy_count(up) == 0 &&
                up.inputs.size() + copies_of_update[size_t(u)].size() < size_t(op_info(up.kind).max_inputs) &&
                std::all_of(readers.begin(), readers.end(), [&](NodeId r) { return r < u; })) {
                copies_of_update[size_t(u)].push_back(y);
                gone[k] = true;
                break;
            }
        }
    }
    size_t k = 0;  // rebuild() rewrites the nodes in order
    tg = rebuild(std::move(tg), [&](Node& n, Graph& g2) {
        const size_t id = k++;
        if (gone[id]) return false;
        if (into[id] != kNone) n.outputs[0] = into[id];
        for (const TensorId y : copies_of_update[id]) {
            n.inputs.push_back(y);
            g2.tensor(y).role = TensorRole::State;
        }
        if (const int copies = int(copies_of_update[id].size()); copies > 0) {
            if (n.kind == OpKind::SgdUpdate) std::get<SgdAttrs>(n.attrs).low_copies = copies;
            else std::get<AdamAttrs>(n.attrs).low_copies = copies;
        }
        return true;
    });
    if (folded) *folded = into_producers;
    if (copies) *copies = size_t(std::count(gone.begin(), gone.end(), true)) - into_producers;
    return tg;
}

namespace {
// Nodes derived from a node folded into another (into[node] != kNone) answer to that other node.
void move_sources(Graph& g, const std::vector<NodeId>& into) {
    for (size_t j = 0; j < g.num_nodes(); ++j) {
        Node& n = g.node(NodeId(j));
        if (n.source != kNone && into[size_t(n.source)] != kNone) n.source = into[size_t(n.source)];
    }
}
}  // namespace

TrainGraph fold_transposes(TrainGraph tg, const std::vector<TensorId>& keep, size_t* folded) {
    Graph& g = tg.graph;
    std::vector<bool> kept(g.num_tensors(), false);
    for (TensorId t : keep) kept[size_t(t)] = true;
    std::vector<NodeId> into(g.num_nodes(), kNone);  // per folded transpose: the product it folded into
    struct Out {
        TensorId y = kNone;
        std::vector<int64_t> perm;
    };
    std::vector<Out> out(g.num_nodes());                          // per product: the transpose's output it writes instead
    std::vector<std::array<Out, 2>> in(g.num_nodes());           // per product, per operand: the transpose's input it reads
    auto transient = [&](TensorId t) {
        const TensorRole r = g.tensor(t).role;
        return !kept[size_t(t)] && (r == TensorRole::Activation || r == TensorRole::Gradient);
    };
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& t = g.node(NodeId(k));
        if (t.kind != OpKind::Transpose || !fuses_activations(t.device)) continue;
        const std::vector<int64_t>& perm = attrs_as<TransposeAttrs>(t).perm;
        const TensorId x = t.inputs[0], y = t.outputs[0];
        if (perm.back() != int64_t(perm.size()) - 1 || g.tensor(x).desc.layout != Layout::Plain || g.tensor(y).desc.layout != Layout::Plain) continue;
        // into the product writing x, when x is read by the transpose alone: it writes y through the inverse view
        const NodeId p = g.tensor(x).producer;
        if (p != kNone) {
            const Node& m = g.node(p);
            if (m.kind == OpKind::MatMul && m.outputs[0] == x && out[size_t(p)].y == kNone && attrs_as<MatMulAttrs>(m).perm_c.empty() &&
                m.post_op == OpKind::Count && m.device == t.device && g.consumers(x).size() == 1 && transient(x)) {
                out[size_t(p)] = {y, inverse_permutation(perm)};
                into[k] = p;
                continue;
            }
        }
        // into the products reading y, when nothing else does: they read x through the transpose's view
        const std::vector<NodeId>& readers = g.consumers(y);
        if (readers.empty() || !transient(y) || !std::all_of(readers.begin(), readers.end(), [&](NodeId r) {
                const Node& m = g.node(r);
                return m.kind == OpKind::MatMul && m.device == t.device;
            }))
            continue;
        for (const NodeId r : readers)
            for (size_t i = 0; i < 2; ++i)
                if (g.node(r).inputs[i] == y) in[size_t(r)][i] = {x, perm};
        into[k] = readers.front();
    }
    move_sources(g, into);  // the folded transposes' backward work belongs to the products' layers
    size_t k = 0;  // rebuild() rewrites the nodes in order
    tg = rebuild(std::move(tg), [&](Node& n, Graph&) {
        const size_t id = k++;
        if (into[id] != kNone) return false;
        if (n.kind != OpKind::MatMul) return true;
        auto& at = std::get<MatMulAttrs>(n.attrs);
        if (out[id].y != kNone) {
            n.outputs[0] = out[id].y;
            at.perm_c = out[id].perm;
        }
        for (size_t i = 0; i < 2; ++i)
            if (in[id][i].y != kNone) {
                n.inputs[i] = in[id][i].y;
                (i == 0 ? at.perm_a : at.perm_b) = in[id][i].perm;
            }
        return true;
    });
    if (folded) *folded = size_t(std::count_if(into.begin(), into.end(), [](NodeId p) { return p != kNone; }));
    return tg;
}

TrainGraph fold_grad_sums(TrainGraph tg, const std::vector<TensorId>& keep, size_t* folded) {
    Graph& g = tg.graph;
    std::vector<bool> kept(g.num_tensors(), false);
    for (TensorId t : keep) kept[size_t(t)] = true;
    std::vector<NodeId> into(g.num_nodes(), kNone);       // per folded Add: the backward-data product it folded into
    std::vector<TensorId> addend(g.num_nodes(), kNone);   // per product: the gradient it adds to
    std::vector<TensorId> writes(g.num_nodes(), kNone);   // per product: the Add's output, which it writes instead
    std::vector<NodeId> written_at(g.num_tensors());      // per tensor: the node writing it once the folds are done
    for (size_t t = 0; t < g.num_tensors(); ++t) written_at[t] = g.tensor(TensorId(t)).producer;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& n = g.node(NodeId(k));
        if (n.kind != OpKind::Add || n.inputs.size() != 2 || n.post_op != OpKind::Count || n.pre_op != OpKind::Count || !fuses_activations(n.device)) continue;
        const TensorDesc& d = g.tensor(n.outputs[0]).desc;
        if (d.dtype != DType::F32 || !(g.tensor(n.inputs[0]).desc == d) || !(g.tensor(n.inputs[1]).desc == d)) continue;
        for (const size_t i : {1, 0}) {  // autodiff's sums add the newest term second
            const TensorId b = n.inputs[i], a = n.inputs[1 - i];
            const NodeId p = g.tensor(b).producer;
            if (p == kNone || a == b) continue;
            const Node& m = g.node(p);
            // b: the product's alone, transient; a: written before the product runs (nodes keep their order)
            if (m.kind != OpKind::LinearBackwardData || m.inputs.size() != 2 || m.outputs[0] != b || writes[size_t(p)] != kNone || m.device != n.device ||
                g.consumers(b).size() != 1 || kept[size_t(b)] || g.tensor(b).role != TensorRole::Gradient ||
                (written_at[size_t(a)] != kNone && written_at[size_t(a)] >= p))
                continue;
            into[k] = p;
            addend[size_t(p)] = a;
            writes[size_t(p)] = n.outputs[0];
            written_at[size_t(n.outputs[0])] = p;
            break;
        }
    }
    move_sources(g, into);  // work inserted for a folded sum belongs to its product
    size_t k = 0;  // rebuild() rewrites the nodes in order
    tg = rebuild(std::move(tg), [&](Node& n, Graph&) {
        const size_t id = k++;
        if (into[id] != kNone) return false;
        if (writes[id] != kNone) {
            n.inputs.push_back(addend[id]);
            n.outputs[0] = writes[id];
        }
        return true;
    });
    if (folded) *folded = size_t(std::count_if(into.begin(), into.end(), [](NodeId p) { return p != kNone; }));
    return tg;
}

TrainGraph insert_allreduce(TrainGraph tg, const AllReduceOptions& o) {
    if (o.ranks < 1) throw Error("a data-parallel job has at least one process, got " + std::to_string(o.ranks));
    if (o.ranks == 1) return tg;
    if (o.bucket_bytes == 0) throw Error("an all-reduce bucket must hold at least one byte");
    const Graph& g = tg.graph;
    // the gradient each update reads, in the order backward produces them
    struct Grad {
        TensorId t;
        NodeId producer;
        std::string device;
    };
    std::vector<Grad> grads;
    for (size_t k = size_t(tg.first_update); k < g.num_nodes(); ++k) {
        const Node& u = g.node(NodeId(k));
        if (u.kind != OpKind::SgdUpdate && u.kind != OpKind::AdamUpdate) continue;
        const TensorId t = u.inputs[1];
        const NodeId p = g.tensor(t).producer;
        if (p == kNone) throw InternalError("the gradient '" + g.tensor(t).name + "' of update '" + u.name + "' has no producer");
        if (std::any_of(grads.begin(), grads.end(), [&](const Grad& x) { return x.t == t; }))
            throw InternalError("two updates read the gradient '" + g.tensor(t).name + "'");
        grads.push_back({t, p, runs_allreduce(u.device) ? u.device : kHost});  // else the host's, transfers to and fro
    }
    std::stable_sort(grads.begin(), grads.end(), [](const Grad& a, const Grad& b) { return a.producer < b.producer; });
    // buckets, filled in that order, one device each
    struct Bucket {
        std::vector<TensorId> grads;
        size_t bytes = 0;
        NodeId last = 0;  // its last gradient's producer
        std::string device;
        bool started = false;
        TensorId sum = kNone;
    };
    std::vector<Bucket> buckets;
    std::map<std::string, size_t> open;  // per device: the bucket being filled
    for (const Grad& x : grads) {
        const size_t bytes = g.tensor(x.t).desc.bytes();
        auto it = open.find(x.device);
        if (it == open.end() || buckets[it->second].bytes + bytes > o.bucket_bytes) {
            buckets.push_back({});
            buckets.back().device = x.device;
            it = open.insert_or_assign(x.device, buckets.size() - 1).first;
        }
        Bucket& b = buckets[it->second];
        b.grads.push_back(x.t), b.bytes += bytes, b.last = x.producer;
    }
    std::map<TensorId, TensorId> mean_of;  // gradient -> its mean over the processes
    NodeId k = 0;                          // the node of g being appended
    // a start (inputs: the bucket's gradients) or a wait (input: the bucket) of the bucket of `grads`
    auto add = [](Graph& g2, OpKind kind, const std::vector<TensorId>& in, const std::vector<TensorId>& grads, const std::string& name, const std::string& device) {
        std::vector<Shape> shapes;
        for (TensorId t : grads) shapes.push_back(g2.tensor(t).desc.shape);
        const auto out = g2.add(kind, AllReduceAttrs{std::move(shapes)}, in, name, Phase::Backward, kNone, std::nullopt, TensorRole::Gradient);
        Node& n = g2.node(g2.tensor(out.front()).producer);
        n.device = device, n.compute = DType::F32;
        return out;
    };
    tg = rebuild(std::move(tg), [&](Node& n, Graph& g2) {
        for (size_t b = 0; b < buckets.size(); ++b) {  // the buckets whose last gradient the node before produced
            Bucket& bucket = buckets[b];
            if (bucket.started || bucket.last >= k) continue;
            bucket.sum = add(g2, OpKind::AllReduceStart, bucket.grads, bucket.grads, "allreduce:" + std::to_string(b), bucket.device).front();
            bucket.started = true;
        }
        if (n.phase == Phase::Update && mean_of.empty()) {  // the first update: every bucket's wait before it
            for (size_t b = 0; b < buckets.size(); ++b) {
                const Bucket& bucket = buckets[b];
                JOULE_ASSERT(bucket.started, "an all-reduce bucket not started before the updates");
                const auto means = add(g2, OpKind::AllReduceWait, {bucket.sum}, bucket.grads, "allreduce:" + std::to_string(b) + ":wait", bucket.device);
                for (size_t i = 0; i < means.size(); ++i) mean_of[bucket.grads[i]] = means[i];
            }
        }
        if (n.kind == OpKind::SgdUpdate || n.kind == OpKind::AdamUpdate) n.inputs[1] = mean_of.at(n.inputs[1]);
        ++k;
    });
    // a bucket belongs to no layer: its start is a source of its own, and its wait's source is its start
    for (size_t j = 0; j < tg.graph.num_nodes(); ++j) {
        Node& n = tg.graph.node(NodeId(j));
        if (n.kind == OpKind::AllReduceStart) n.source = NodeId(j);
        if (n.kind == OpKind::AllReduceWait) n.source = tg.graph.tensor(n.inputs[0]).producer;
    }
    return tg;
}

MemoryPlan plan_memory(const Graph& g, const std::vector<TensorId>& keep) {
    const size_t nt = g.num_tensors(), nn = g.num_nodes();
    auto aligned = [](size_t b) { return (std::max<size_t>(b, 4) + 63) / 64 * 64; };
    MemoryPlan mp;
    mp.buffer_of.assign(nt, -1);
    mp.offset_of.assign(nt, 0);
    std::vector<bool> owned(nt, false);
    for (size_t t = 0; t < nt; ++t) owned[t] = persists(g.tensor(TensorId(t)).role);
    for (TensorId t : keep) owned[size_t(t)] = true;
    // lifetime of each transient tensor: from its producer to its last reader
    std::vector<int64_t> first(nt, -1), last(nt, -1);
    for (size_t n = 0; n < nn; ++n) {
        for (TensorId t : g.node(NodeId(n)).inputs) last[size_t(t)] = int64_t(n);
        for (TensorId t : g.node(NodeId(n)).outputs) first[size_t(t)] = int64_t(n), last[size_t(t)] = std::max(last[size_t(t)], int64_t(n));
    }
    // Data-parallel buckets (AllReduceAttrs): the gradients a bucket carries, and their means, are stored
    // inside it at their offsets when they are transient tensors of its device; the bucket then lives from
    // its first gradient's producer to its means' last reader.
    std::vector<std::pair<TensorId, size_t>> view(nt, {kNone, 0});  // (the tensor it is stored inside, byte offset)
    for (size_t n = 0; n < nn; ++n) {
        const Node& node = g.node(NodeId(n));
        const bool start = node.kind == OpKind::AllReduceStart;
        if (!start && node.kind != OpKind::AllReduceWait) continue;
        const TensorId bucket = start ? node.outputs[0] : node.inputs[0];
        if (owned[size_t(bucket)]) continue;
        const std::vector<int64_t> at = bucket_offsets(attrs_as<AllReduceAttrs>(node).shapes);
        const std::vector<TensorId>& grads = start ? node.inputs : node.outputs;
        for (size_t i = 0; i < grads.size(); ++i) {
            const size_t t = size_t(grads[i]);
            if (owned[t] || first[t] < 0 || view[t].first != kNone || tensor_device(g, grads[i]) != tensor_device(g, bucket)) continue;
            view[t] = {bucket, size_t(at[i]) * sizeof(float)};
            first[size_t(bucket)] = std::min(first[size_t(bucket)], first[t]);
            last[size_t(bucket)] = std::max(last[size_t(bucket)], last[t]);
        }
    }
    // A Reshape between two row-major tensors of one device moves no byte (TensorDesc::row_major): its
    // output is a view of its input (or of the tensor that input views, for a chain of reshapes), which
    // then lives as long as the output. Not for tensors inside a bucket (the means overwrite the sums
    // there) nor for an owned output (a kept tensor must not share the arena).
    const std::vector<std::pair<TensorId, size_t>> in_bucket = view;
    for (size_t n = 0; n < nn; ++n) {
        const Node& node = g.node(NodeId(n));
        if (node.kind != OpKind::Reshape) continue;
        const TensorId x = node.inputs[0], y = node.outputs[0];
        const TensorDesc &dx = g.tensor(x).desc, &dy = g.tensor(y).desc;
        if (owned[size_t(y)] || in_bucket[size_t(x)].first != kNone || in_bucket[size_t(y)].first != kNone || !dx.row_major() ||
            !dy.row_major() || dx.dtype != dy.dtype || tensor_device(g, x) != tensor_device(g, y))
            continue;
        const TensorId root = view[size_t(x)].first != kNone ? view[size_t(x)].first : x;
        view[size_t(y)] = {root, 0};
        last[size_t(root)] = std::max(last[size_t(root)], last[size_t(y)]);
    }
    std::map<std::string, std::vector<TensorId>> transient;  // per device
    for (size_t t = 0; t < nt; ++t) {
        const TensorId id = TensorId(t);
        if (!owned[t] && first[t] < 0 && g.consumers(id).empty()) continue;  // fused away: nothing writes or reads it, not stored
        mp.bytes_if_unshared += g.tensor(id).desc.bytes();
        if (view[t].first != kNone) continue;  // placed with its bucket
        if (owned[t] || first[t] < 0) {  // persistent, kept, or never produced: a buffer of its own
            mp.buffers.push_back({tensor_device(g, id), aligned(g.tensor(id).desc.bytes())});
            mp.buffer_of[t] = int32_t(mp.buffers.size() - 1);
        } else {
            transient[tensor_device(g, id)].push_back(id);
        }
    }
    for (auto& [device, ids] : transient) {
        std::stable_sort(ids.begin(), ids.end(), [&](TensorId a, TensorId b) { return g.tensor(a).desc.bytes() > g.tensor(b).desc.bytes(); });
        struct Placed {
            int64_t first, last;
            size_t begin, end;
        };
        std::vector<Placed> placed;
        size_t arena = 0;
        for (TensorId t : ids) {
            const size_t need = aligned(g.tensor(t).desc.bytes());
            std::vector<std::pair<size_t, size_t>> busy;  // address ranges of tensors alive at the same time
            for (const Placed& p : placed)
                if (p.first <= last[size_t(t)] && first[size_t(t)] <= p.last) busy.push_back({p.begin, p.end});
            std::sort(busy.begin(), busy.end());
            size_t offset = 0;
            for (const auto& [b, e] : busy) {
                if (b >= offset + need) break;  // the gap before this range fits
                offset = std::max(offset, e);
            }
            placed.push_back({first[size_t(t)], last[size_t(t)], offset, offset + need});
            mp.offset_of[size_t(t)] = offset;
            arena = std::max(arena, offset + need);
        }
        mp.buffers.push_back({device, arena});
        for (TensorId t : ids) mp.buffer_of[size_t(t)] = int32_t(mp.buffers.size() - 1);
    }
    for (size_t t = 0; t < nt; ++t)
        if (const auto [bucket, offset] = view[t]; bucket != kNone) {
            mp.buffer_of[t] = mp.buffer_of[size_t(bucket)];
            mp.offset_of[t] = mp.offset_of[size_t(bucket)] + offset;
        }
    for (const auto& b : mp.buffers) mp.bytes_total += b.bytes;
    return mp;
}

LoweredGraph lower(TrainGraph tg, const Plan& plan, const LowerOptions& o) {
    if (!o.dump_after.empty()) check_pass_name(o.dump_after);
    if (!plan.fingerprint.empty()) {
        const std::string have = fingerprint(tg);
        if (have != plan.fingerprint)
            throw Error(plan.name + ": the plan was made for another graph (fingerprint " + plan.fingerprint + (plan.model.empty() ? "" : ", " + plan.model) +
                            (plan.batch > 0 ? " batch " + std::to_string(plan.batch) : "") + "; this graph's is " + have + ")",
                        "make the plan for this net, batch and input size (joule inspect --plan shows the fingerprint)");
    }
    auto dump = [&](const std::string& pass, const Graph& g) {
        if (o.dump && o.dump_after == pass) {
            *o.dump << "# graph after pass '" << pass << "' (" << g.num_nodes() << " nodes)\n";
            print_graph(*o.dump, g);
        }
    };
    LoweredGraph lg;
    lg.plan = plan;
    const size_t before = tg.graph.num_nodes();
    tg = decide(std::move(tg), plan, &lg.origin, &lg.options);
    dump("decide", tg.graph);
    std::map<std::string, std::string> origin_by_name;
    for (size_t k = 0; k < tg.graph.num_nodes(); ++k) origin_by_name[tg.graph.node(NodeId(k)).name] = lg.origin[k];
    tg = insert_casts(std::move(tg), plan);
    lg.casts = tg.graph.num_nodes() - before;
    dump("casts", tg.graph);
    const size_t cast = tg.graph.num_nodes();
    tg = insert_allreduce(std::move(tg), o.allreduce);
    lg.allreduce_buckets = (tg.graph.num_nodes() - cast) / 2;
    dump("allreduce", tg.graph);
    const size_t reduced = tg.graph.num_nodes();
    tg = insert_transfers(std::move(tg));
    lg.transfers = tg.graph.num_nodes() - reduced;
    dump("transfers", tg.graph);
    if (o.layout) tg = assign_layouts(std::move(tg), o.keep, &lg.reorders);
    dump("layout", tg.graph);
    const size_t unfused = tg.graph.num_nodes();
    if (o.fuse) tg = fuse_activations(std::move(tg), o.keep);
    for (const Node& n : tg.graph.nodes()) lg.fused_backward += n.pre_op != OpKind::Count;
    lg.fused = unfused - tg.graph.num_nodes() - lg.fused_backward;
    if (o.fuse && o.fold_casts) tg = fold_casts(std::move(tg), o.keep, &lg.folded_casts, &lg.update_copies);
    if (o.fuse && o.fold_transposes) tg = fold_transposes(std::move(tg), o.keep, &lg.folded_transposes);
    if (o.fuse && o.fold_grad_sums) tg = fold_grad_sums(std::move(tg), o.keep, &lg.folded_grad_sums);
    dump("fuse", tg.graph);
    lg.memory = plan_memory(tg.graph, o.keep);
    if (o.dump && o.dump_after == "memory") {
        *o.dump << "# memory plan after pass 'memory': " << lg.memory.buffers.size() << " buffers, " << lg.memory.bytes_total << " bytes (" << lg.memory.bytes_if_unshared
                << " unshared)\n";
        for (size_t t = 0; t < tg.graph.num_tensors(); ++t) {
            *o.dump << "  " << tg.graph.tensor(TensorId(t)).name;
            if (lg.memory.buffer_of[t] < 0) *o.dump << " -> not stored (fused away)\n";
            else *o.dump << " -> buffer " << lg.memory.buffer_of[t] << " + " << lg.memory.offset_of[t] << " on " << lg.memory.buffers[size_t(lg.memory.buffer_of[t])].device << "\n";
        }
    }
    // an inserted node answers to the entry of the consumer it was inserted for (the next planned node)
    lg.origin.assign(tg.graph.num_nodes(), plan.origin);
    std::string next = plan.origin;
    for (size_t k = tg.graph.num_nodes(); k-- > 0;) {
        const Node& n = tg.graph.node(NodeId(k));
        auto it = origin_by_name.find(n.name);
        if (it != origin_by_name.end()) next = it->second;
        const char* what = n.kind == OpKind::Cast ? (attrs_as<CastAttrs>(n).reorder ? "reorder" : "cast") : n.kind == OpKind::Transfer ? "transfer" : "all-reduce";
        lg.origin[k] = it != origin_by_name.end() ? it->second : next + " (" + what + " inserted for it)";
    }
    lg.train = std::move(tg);
    return lg;
}

void print_graph(std::ostream& os, const Graph& g) {
    auto descs = [&](const std::vector<TensorId>& ids) {
        std::string s;
        for (TensorId t : ids) s += (s.empty() ? "" : ", ") + g.tensor(t).name + " " + desc_str(g.tensor(t).desc);
        return s;
    };
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& n = g.node(NodeId(k));
        os << "  #" << k << " [" << phase_name(n.phase) << "] " << n.name << ": " << op_label(n) << " @" << n.device << " "
           << dtype_name(n.compute) << " (" << descs(n.inputs) << ") -> (" << descs(n.outputs) << ")\n";
    }
}

}  // namespace joule

#include "plan/amp.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <queue>

#include "graph/error.hpp"

namespace joule {

AmpPolicy parse_amp_policy(const std::string& s) {
    if (s == "off") return AmpPolicy::Off;
    if (s == "greedy") return AmpPolicy::Greedy;
    if (s == "autocast") return AmpPolicy::Autocast;
    if (s == "campo") return AmpPolicy::Campo;
    if (s == "optimal") return AmpPolicy::Optimal;
    throw Error("unknown mixed-precision policy '" + s + "'", "use off, greedy, autocast, campo or optimal");
}

const char* amp_policy_name(AmpPolicy p) {
    static const char* names[] = {"off", "greedy", "autocast", "campo", "optimal"};
    return names[size_t(p)];
}

const char* amp_colour_name(AmpColour c) {
    static const char* names[] = {"allow", "infer", "deny", "clear"};
    return names[size_t(c)];
}

AmpColour tf_amp_list(OpKind k) {
    switch (k) {
        // Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter, MatMul, BatchMatMul
        case OpKind::Conv2d: case OpKind::ConvBackwardData: case OpKind::ConvBackwardWeights:
        case OpKind::Linear: case OpKind::LinearBackwardData: case OpKind::LinearBackwardWeights: case OpKind::MatMul:
            return AmpColour::Allow;
        // FusedBatchNormV3 / Grad (also what Keras' fused LayerNormalization runs), Add, Mul, AvgPool /
        // AvgPoolGrad, Sigmoid / SigmoidGrad, Tanh / TanhGrad, Erf (GELU), Softmax, RealDiv (the gradient of
        // a mean), Mul by a mask (dropout), Sub
        case OpKind::BatchNorm2d: case OpKind::BatchNormBackward: case OpKind::LayerNorm: case OpKind::LayerNormBackward:
        case OpKind::Add: case OpKind::Mul: case OpKind::Sub: case OpKind::Div: case OpKind::AvgPool2d: case OpKind::AvgPool2dBackward:
        case OpKind::Sigmoid: case OpKind::SigmoidBackward: case OpKind::Tanh: case OpKind::TanhBackward:
        case OpKind::Gelu: case OpKind::GeluBackward: case OpKind::Softmax: case OpKind::GlobalAvgPoolBackward: case OpKind::Dropout:
            return AmpColour::Infer;
        // Relu / ReluGrad, Relu6 / Relu6Grad, MaxPool / MaxPoolGrad, ConcatV2, Slice, Pad, Reshape,
        // Transpose, GatherV2, BroadcastTo
        case OpKind::Expand: case OpKind::Clip: case OpKind::ClipBackward:
        case OpKind::Relu: case OpKind::ReluBackward: case OpKind::Relu6: case OpKind::Relu6Backward:
        case OpKind::MaxPool2d: case OpKind::MaxPool2dBackward: case OpKind::Concat: case OpKind::Slice: case OpKind::SliceBackward:
        case OpKind::Reshape: case OpKind::Transpose: case OpKind::Embedding:
            return AmpColour::Clear;
        // Mean (global average pooling; SumTo), SoftmaxCrossEntropyWithLogits, Sum (inside the softmax
        // gradient), Pow, Sqrt and UnsortedSegmentSum (not listed: deny), the optimizer's Apply* ops (not listed)
        default:
            return AmpColour::Deny;
    }
}

namespace {

// Node-level edges through floating-point tensors (the edges TF's type view follows).
std::vector<NodeId> fanin(const Graph& g, NodeId n) {
    std::vector<NodeId> v;
    for (TensorId t : g.node(n).inputs)
        if (is_float(g.tensor(t).desc.dtype) && g.tensor(t).producer != kNone) v.push_back(g.tensor(t).producer);
    return v;
}

std::vector<NodeId> fanout(const Graph& g, NodeId n) {
    std::vector<NodeId> v;
    for (TensorId t : g.node(n).outputs)
        if (is_float(g.tensor(t).desc.dtype))
            for (NodeId c : g.consumers(t)) v.push_back(c);
    return v;
}

enum Direction : uint8_t { kInputs = 1, kOutputs = 2 };

// TF's DfsTypeTraversal: from root, pre-order, entering a neighbour when enter(idx) holds (the root is
// always entered); visit(idx) runs once per entered node.
template <class Enter, class Visit>
void dfs(const Graph& g, NodeId root, unsigned dir, Enter enter, Visit visit) {
    std::vector<bool> seen(g.num_nodes(), false);
    std::vector<NodeId> stack = {root};
    while (!stack.empty()) {
        const NodeId n = stack.back();
        stack.pop_back();
        if (seen[size_t(n)] || (n != root && !enter(n))) continue;
        seen[size_t(n)] = true;
        visit(n);
        std::vector<NodeId> next;
        if (dir & kInputs) next = fanin(g, n);
        if (dir & kOutputs) {
            const std::vector<NodeId> out = fanout(g, n);
            next.insert(next.end(), out.begin(), out.end());
        }
        for (auto it = next.rbegin(); it != next.rend(); ++it) stack.push_back(*it);
    }
}

bool processed(const Graph& g, NodeId n) { return !f32_only_op(g.node(n).kind); }

}  // namespace

std::vector<bool> amp_fixed_f32(const Graph& g, const AmpContext& c) {
    std::vector<bool> fixed(g.num_nodes());
    for (size_t i = 0; i < g.num_nodes(); ++i) fixed[i] = !processed(g, NodeId(i)) || !c.runs(g, NodeId(i), c.low);
    return fixed;
}

AmpPainting tf_amp_lists(const Graph& g, const AmpContext& c) {
    AmpPainting p;
    const std::vector<bool> fixed = amp_fixed_f32(g, c);
    p.allow.assign(g.num_nodes(), false);
    p.deny.assign(g.num_nodes(), false);
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        p.list.push_back(tf_amp_list(g.node(NodeId(i)).kind));
        p.allow[i] = p.list[i] == AmpColour::Allow && !fixed[i];  // AddAllowlistOps, then RemoveAllowsetWithFp32
    }
    return p;
}

void tf_amp_propagate_deny(const Graph& g, AmpPainting& p) {
    const size_t n = g.num_nodes();
    std::vector<bool> upstream(n, false);  // clear nodes leading to deny / infer nodes, and those nodes
    for (size_t r = 0; r < n; ++r) {
        if (p.list[r] != AmpColour::Deny && p.list[r] != AmpColour::Infer) continue;
        dfs(g, NodeId(r), kInputs, [&](NodeId i) { return !upstream[size_t(i)] && p.list[size_t(i)] == AmpColour::Clear; },
            [&](NodeId i) { upstream[size_t(i)] = true; });
    }
    for (size_t r = 0; r < n; ++r) {
        if (p.deny[r] || p.list[r] != AmpColour::Deny) continue;
        dfs(g, NodeId(r), kOutputs, [&](NodeId i) { return !p.deny[size_t(i)] && upstream[size_t(i)]; }, [&](NodeId i) { p.deny[size_t(i)] = true; });
    }
}

void tf_amp_allow_between_allow(const Graph& g, AmpPainting& p) {
    const size_t n = g.num_nodes();
    std::vector<bool> downstream(n, false), upstream(n, false);
    for (size_t r = 0; r < n; ++r) {
        if (!processed(g, NodeId(r)) || p.list[r] != AmpColour::Allow) continue;
        dfs(g, NodeId(r), kOutputs,
            [&](NodeId i) {
                const AmpColour l = p.list[size_t(i)];
                return !downstream[size_t(i)] && l != AmpColour::Allow && !p.deny[size_t(i)] && processed(g, i) && (l == AmpColour::Clear || l == AmpColour::Infer);
            },
            [&](NodeId i) { downstream[size_t(i)] = true; });
    }
    for (size_t r = 0; r < n; ++r) {
        if (!processed(g, NodeId(r)) || upstream[r] || p.list[r] != AmpColour::Allow) continue;
        dfs(g, NodeId(r), kInputs, [&](NodeId i) { return !upstream[size_t(i)] && downstream[size_t(i)]; },
            [&](NodeId i) { upstream[size_t(i)] = true, p.allow[size_t(i)] = true; });
    }
}

void tf_amp_infer_after_allow(const Graph& g, AmpPainting& p) {
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        if (!processed(g, NodeId(i)) || p.deny[i] || p.allow[i] || p.list[i] != AmpColour::Infer) continue;
        bool allow_fanin = false;
        for (NodeId f : fanin(g, NodeId(i))) {
            if (p.deny[size_t(f)]) {
                allow_fanin = false;
                break;
            }
            allow_fanin = allow_fanin || p.allow[size_t(f)];
        }
        if (allow_fanin) p.allow[i] = true;
    }
}

void tf_amp_allow_through_clear(const Graph& g, AmpPainting& p) {
    std::vector<bool> done(g.num_nodes(), false);
    for (size_t r = 0; r < g.num_nodes(); ++r) {
        if (!processed(g, NodeId(r)) || done[r] || !p.allow[r]) continue;
        dfs(g, NodeId(r), kInputs | kOutputs,
            [&](NodeId i) { return !p.allow[size_t(i)] && !p.deny[size_t(i)] && processed(g, i) && p.list[size_t(i)] == AmpColour::Clear; },
            [&](NodeId i) { done[size_t(i)] = true, p.allow[size_t(i)] = true; });
    }
}

std::vector<bool> greedy_assignment(const Graph& g, const AmpContext& c) {
    AmpPainting p = tf_amp_lists(g, c);
    tf_amp_propagate_deny(g, p);
    tf_amp_allow_between_allow(g, p);
    if (c.low == DType::BF16) tf_amp_infer_after_allow(g, p);  // TF runs this pass in its bf16 mode only
    tf_amp_allow_through_clear(g, p);
    const std::vector<bool> fixed = amp_fixed_f32(g, c);
    std::vector<bool> low(g.num_nodes());
    for (size_t i = 0; i < g.num_nodes(); ++i) low[i] = p.allow[i] && !fixed[i];  // never a dtype the device refuses
    return low;
}

std::vector<bool> autocast_assignment(const Graph& g, const AmpContext& c) {
    const std::vector<bool> fixed = amp_fixed_f32(g, c);
    std::vector<bool> low(g.num_nodes(), false);
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const Node& n = g.node(NodeId(i));
        if (fixed[i]) continue;
        if (n.phase != Phase::Forward) {  // autograd runs a backward op in its forward op's dtype
            low[i] = n.source != kNone && n.source != NodeId(i) && low[size_t(n.source)];
            continue;
        }
        switch (n.kind) {
            case OpKind::Conv2d: case OpKind::Linear: case OpKind::MatMul: low[i] = true; continue;        // lower-precision list
            case OpKind::LayerNorm: case OpKind::Softmax: case OpKind::SoftmaxCrossEntropy: continue;   // float32 list
            default: break;
        }
        // everything else runs in the dtype its inputs arrive in; a mix promotes to f32
        const OpInfo& info = op_info(n.kind);
        bool all_low = true, any = false;
        for (size_t k = 0; k < n.inputs.size(); ++k) {
            const Tensor& t = g.tensor(n.inputs[k]);
            if (!is_float(t.desc.dtype) || has_bit(info.f32_inputs, k)) continue;
            any = true;
            all_low = all_low && t.producer != kNone && low[size_t(t.producer)];
        }
        low[i] = any && all_low;
    }
    return low;
}

// ---- the cast model and the optimum ----------------------------------------------------------------

namespace {

// For tensor t: the node whose dtype its storage follows (kNone: stored in f32 whatever the assignment).
NodeId storage_owner(const Graph& g, TensorId t) {
    const NodeId p = g.tensor(t).producer;
    if (p == kNone || weight_gradient(g.node(p).kind)) return kNone;  // persistent; weight gradients in f32
    const Node& n = g.node(p);
    for (size_t i = 0; i < n.outputs.size(); ++i)
        if (n.outputs[i] == t && has_bit(op_info(n.kind).f32_outputs, i)) return kNone;
    return p;
}

// The consumers of t that take it in their own dtype, and whether some consumer takes it in f32 always.
struct Uses {
    std::vector<NodeId> follow;
    bool f32 = false;
};
Uses uses_of(const Graph& g, TensorId t) {
    Uses u;
    for (NodeId c : g.consumers(t)) {
        const Node& n = g.node(c);
        for (size_t i = 0; i < n.inputs.size(); ++i)
            if (n.inputs[i] == t) {
                if (has_bit(op_info(n.kind).f32_inputs, i)) u.f32 = true;
                else if (std::find(u.follow.begin(), u.follow.end(), c) == u.follow.end()) u.follow.push_back(c);
            }
    }
    return u;
}

// Dinic's maximum flow; after run(), on_source_side(v) says which side of the minimum cut v is on.
class MinCut {
public:
    explicit MinCut(size_t n) : adj_(n), level_(n), it_(n) {}
    static constexpr double kInf = std::numeric_limits<double>::infinity();
    void edge(size_t a, size_t b, double cap) {
        if (cap <= 0) return;
        adj_[a].push_back(edges_.size()), edges_.push_back({b, cap});
        adj_[b].push_back(edges_.size()), edges_.push_back({a, 0});
    }
    double run(size_t s, size_t t) {
        double flow = 0;
        while (bfs(s, t)) {
            std::fill(it_.begin(), it_.end(), 0);
            while (const double f = push(s, t, kInf)) flow += f;
        }
        bfs(s, t);  // the residual graph's reach from s is the source side
        return flow;
    }
    bool on_source_side(size_t v) const { return level_[v] >= 0; }

private:
    struct Edge {
        size_t to;
        double cap;
    };
    bool bfs(size_t s, size_t t) {
        std::fill(level_.begin(), level_.end(), -1);
        std::queue<size_t> q;
        level_[s] = 0, q.push(s);
        while (!q.empty()) {
            const size_t v = q.front();
            q.pop();
            for (size_t e : adj_[v])
                if (edges_[e].cap > 1e-18 && level_[edges_[e].to] < 0) level_[edges_[e].to] = level_[v] + 1, q.push(edges_[e].to);
        }
        return level_[t] >= 0;
    }
    double push(size_t v, size_t t, double f) {
        if (v == t) return f;
        for (size_t& i = it_[v]; i < adj_[v].size(); ++i) {
            Edge& e = edges_[adj_[v][i]];
            if (e.cap <= 1e-18 || level_[e.to] != level_[v] + 1) continue;
            if (const double d = push(e.to, t, std::min(f, e.cap))) {
                e.cap -= d;
                edges_[adj_[v][i] ^ 1].cap += d;
                return d;
            }
        }
        return 0;
    }
    std::vector<std::vector<size_t>> adj_;
    std::vector<Edge> edges_;
    std::vector<int> level_;
    std::vector<size_t> it_;
};

}  // namespace

double amp_cost(const Graph& g, const std::vector<bool>& low, const AmpContext& c, const AmpCosts& k) {
    JOULE_ASSERT(low.size() == g.num_nodes(), "amp_cost: one decision per node");
    double total = 0;
    bool mixed = false;
    for (size_t i = 0; i < g.num_nodes(); ++i) total += k.node(NodeId(i), low[i] ? c.low : DType::F32), mixed = mixed || low[i];
    if (mixed) total += k.mixed;
    for (size_t t = 0; t < g.num_tensors(); ++t) {
        const Tensor& x = g.tensor(TensorId(t));
        if (!is_float(x.desc.dtype)) continue;
        const NodeId owner = storage_owner(g, TensorId(t));
        const bool stored_low = owner != kNone && low[size_t(owner)];
        const Uses u = uses_of(g, TensorId(t));
        bool want_low = false, want_f32 = u.f32;
        for (NodeId v : u.follow) (low[size_t(v)] ? want_low : want_f32) = true;
        const double elements = double(x.desc.numel());
        if (!stored_low && want_low) total += k.cast(elements, DType::F32, c.low);
        if (stored_low && want_f32) total += k.cast(elements, c.low, DType::F32);
    }
    return total;
}

std::vector<bool> optimal_assignment(const Graph& g, const AmpContext& c, const AmpCosts& k) {
    // Vertices: s, t, one per node (source side: f32, sink side: low), and per tensor an auxiliary
    // vertex per cast direction. An edge a -> b of capacity w costs w when a is f32 and b is low.
    const size_t n = g.num_nodes(), s = n, t = n + 1;
    const std::vector<bool> fixed = amp_fixed_f32(g, c);
    std::vector<std::array<double, 2>> unary(n);
    for (size_t i = 0; i < n; ++i) unary[i] = {k.node(NodeId(i), DType::F32), fixed[i] ? MinCut::kInf : k.node(NodeId(i), c.low)};
    struct Aux {
        size_t tensor;
        bool to_low;
    };
    std::vector<Aux> aux;
    for (size_t x = 0; x < g.num_tensors(); ++x) {
        const Tensor& ten = g.tensor(TensorId(x));
        if (!is_float(ten.desc.dtype)) continue;
        const Uses u = uses_of(g, TensorId(x));
        if (!u.follow.empty()) aux.push_back({x, true});
        if (storage_owner(g, TensorId(x)) != kNone && (u.f32 || !u.follow.empty())) aux.push_back({x, false});
    }
    MinCut cut(n + 2 + aux.size());
    for (size_t i = 0; i < n; ++i) {
        const double base = std::min(unary[i][0], unary[i][1]);
        cut.edge(s, i, unary[i][1] - base);  // paid when i is low
        cut.edge(i, t, unary[i][0] - base);  // paid when i is f32
    }
    for (size_t a = 0; a < aux.size(); ++a) {
        const size_t z = n + 2 + a;
        const TensorId x = TensorId(aux[a].tensor);
        const Tensor& ten = g.tensor(x);
        const NodeId owner = storage_owner(g, x);
        const Uses u = uses_of(g, x);
        const double elements = double(ten.desc.numel());
        if (aux[a].to_low) {
            // z low when any follower is low; the cast to low is paid when z is low and the storage f32
            for (NodeId v : u.follow) cut.edge(z, size_t(v), MinCut::kInf);
            const double w = k.cast(elements, DType::F32, c.low);
            if (owner == kNone) cut.edge(s, z, w);
            else cut.edge(size_t(owner), z, w);
        } else if (u.f32) {
            cut.edge(s, size_t(owner), k.cast(elements, c.low, DType::F32));  // some consumer wants f32 always
        } else {
            // z f32 when any follower is f32; the cast to f32 is paid when z is f32 and the storage low
            for (NodeId v : u.follow) cut.edge(size_t(v), z, MinCut::kInf);
            cut.edge(z, size_t(owner), k.cast(elements, c.low, DType::F32));
        }
    }
    cut.run(s, t);
    std::vector<bool> low(n);
    for (size_t i = 0; i < n; ++i) low[i] = !cut.on_source_side(i) && !fixed[i];
    // k.mixed is paid by every assignment but all-f32: the cut's optimum plus it, or all-f32
    const std::vector<bool> off(n, false);
    return amp_cost(g, off, c, k) <= amp_cost(g, low, c, k) ? off : low;
}

std::vector<bool> campo_assignment(const Graph& g, const AmpContext& c, const AmpCosts& costs) {
    // The search re-costs the assignment after every flip: each node's two times are asked once.
    std::vector<std::array<double, 2>> node(g.num_nodes(), {-1.0, -1.0});
    const AmpCosts k{[&](NodeId n, DType t) {
                         double& v = node[size_t(n)][t == DType::F32 ? 0 : 1];
                         if (v < 0) v = costs.node(n, t);
                         return v;
                     },
                     costs.cast, costs.mixed};
    const std::vector<bool> fixed = amp_fixed_f32(g, c);
    std::vector<bool> x = greedy_assignment(g, c);
    double best = amp_cost(g, x, c, k);
    for (bool improved = true; improved;) {
        improved = false;
        for (size_t i = 0; i < g.num_nodes(); ++i) {
            if (fixed[i]) continue;
            x[i] = !x[i];
            const double cost = amp_cost(g, x, c, k);
            if (cost < best - 1e-15 * best) best = cost, improved = true;
            else x[i] = !x[i];
        }
    }
    const std::vector<bool> off(g.num_nodes(), false);
    return amp_cost(g, off, c, k) < best ? off : x;
}

std::vector<bool> amp_assignment(AmpPolicy p, const Graph& g, const AmpContext& c, const AmpCosts& k) {
    switch (p) {
        case AmpPolicy::Greedy: return greedy_assignment(g, c);
        case AmpPolicy::Autocast: return autocast_assignment(g, c);
        case AmpPolicy::Campo: return campo_assignment(g, c, k);
        case AmpPolicy::Optimal: return optimal_assignment(g, c, k);
        case AmpPolicy::Off: break;
    }
    return std::vector<bool>(g.num_nodes(), false);
}

double amp_mixed_cost(const TrainGraph& tg, DType low, const predict::DeviceModel& d) {
    if (low != DType::F16) return 0;
    double elements = 0;
    for (const auto& [param, grad] : tg.param_grads) elements += double(tg.graph.tensor(grad).desc.numel());
    return predict::loss_scaling_cost(elements, d).seconds;
}

Plan amp_backend_plan(const TrainGraph& tg, AmpPolicy p, const Backend& backend, const predict::DeviceModel* costs) {
    const Graph& g = tg.graph;
    const AmpContext c{DType::BF16, [&](const Graph& gg, NodeId n, DType t) { return !f32_only_op(gg.node(n).kind) && supports_in(backend, gg, n, t); }};
    if ((p == AmpPolicy::Campo || p == AmpPolicy::Optimal) && !costs)
        throw Error(std::string("the ") + amp_policy_name(p) + " policy weighs predicted times and needs a model of the device", "name its data/hw spec");
    AmpCosts k;
    if (costs) {
        k.node = [&](NodeId n, DType t) { return predict::cost(g, n, *costs, t).seconds; };
        k.cast = [&](double e, DType from, DType to) { return predict::cast_cost(e, from, to, *costs).seconds; };
    }
    return amp_plan(tg, amp_assignment(p, g, c, k), c, std::string("amp ") + amp_policy_name(p), backend.device());
}

Plan amp_plan(const TrainGraph& tg, const std::vector<bool>& low, const AmpContext& c, const std::string& name, const std::string& device) {
    const Graph& g = tg.graph;
    Plan p;
    p.name = name;
    p.origin = "amp " + name;
    p.default_device = device;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        if (!low[i]) continue;
        const Node& n = g.node(NodeId(i));
        p.entries.push_back({PlanEntry::Match::Node, n.name, std::nullopt, c.low, {}, p.origin});
        if (weight_gradient(n.kind)) p.storage.push_back({g.tensor(n.outputs[0]).name, DType::F32, p.origin});
    }
    return p;
}

}  // namespace joule

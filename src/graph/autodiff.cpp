#include "graph/autodiff.hpp"

#include "graph/error.hpp"

namespace joule {

GradBuilder::GradBuilder(Graph& g, NodeId forward, std::vector<TensorId> output_grads, const std::vector<bool>& needs_grad,
                         std::map<TensorId, std::vector<TensorId>>& contributions)
    : g_(g), fwd_(forward), dys_(std::move(output_grads)), needs_(needs_grad), contrib_(contributions) {}

std::vector<TensorId> GradBuilder::emit(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& suffix,
                                        TensorId like) {
    const std::string name = g_.node(fwd_).name + "." + suffix;
    return g_.add(kind, std::move(attrs), std::move(inputs), name, Phase::Backward, fwd_, g_.tensor(like).desc,
                  TensorRole::Gradient);
}

std::vector<TensorId> GradBuilder::emit(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& suffix) {
    const std::string name = g_.node(fwd_).name + "." + suffix;
    return g_.add(kind, std::move(attrs), std::move(inputs), name, Phase::Backward, fwd_, std::nullopt, TensorRole::Gradient);
}

void GradBuilder::accumulate(TensorId t, TensorId grad) {
    if (!needs_grad(t) || grad == kNone) return;
    contrib_[t].push_back(grad);
}

namespace {

// Sums the contributions to t's gradient into one tensor with t's shape and layout.
TensorId finalize_grad(Graph& g, TensorId t, std::vector<TensorId>& parts) {
    JOULE_ASSERT(!parts.empty(), "no gradient contributions");
    const NodeId src = g.tensor(t).producer;
    TensorId sum = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) {
        sum = g.add(OpKind::Add, NoAttrs{}, {sum, parts[i]}, g.tensor(t).name + ".grad_sum" + std::to_string(i),
                    Phase::Backward, src, std::nullopt, TensorRole::Gradient)
                  .front();
    }
    const TensorDesc& want = g.tensor(t).desc;
    if (g.tensor(sum).desc.layout != want.layout) {
        sum = g.add(OpKind::Reshape, ReshapeAttrs{want.shape, want.layout}, {sum}, g.tensor(t).name + ".grad_layout",
                    Phase::Backward, src, std::nullopt, TensorRole::Gradient)
                  .front();
    }
    parts.assign(1, sum);
    return sum;
}

}  // namespace

std::map<TensorId, TensorId> differentiate(Graph& g, TensorId output, TensorId seed) {
    if (g.tensor(seed).desc.shape != g.tensor(output).desc.shape)
        throw Error("gradient seed '" + g.tensor(seed).name + "' has shape " + shape_str(g.tensor(seed).desc.shape) +
                    " but output '" + g.tensor(output).name + "' has " + shape_str(g.tensor(output).desc.shape));
    const NodeId n_forward = NodeId(g.num_nodes());
    // A tensor needs a gradient when it is a parameter or computed from one.
    std::vector<bool> needs(g.num_tensors(), false);
    for (size_t t = 0; t < g.num_tensors(); ++t) needs[t] = g.tensor(TensorId(t)).role == TensorRole::Parameter;
    for (NodeId n = 0; n < n_forward; ++n) {
        bool any = false;
        for (TensorId in : g.node(n).inputs) any = any || needs[size_t(in)];
        for (TensorId out : g.node(n).outputs) needs[size_t(out)] = any;
    }

    std::map<TensorId, std::vector<TensorId>> contrib;
    contrib[output].push_back(seed);
    for (NodeId n = n_forward - 1; n >= 0; --n) {
        const Node node = g.node(n);  // copy: emitting nodes may reallocate
        std::vector<TensorId> dys;
        bool any = false;
        for (TensorId out : node.outputs) {
            auto it = contrib.find(out);
            if (it == contrib.end()) {
                dys.push_back(kNone);
            } else {
                dys.push_back(finalize_grad(g, out, it->second));
                any = true;
            }
        }
        if (!any) continue;
        bool inputs_need = false;
        for (TensorId in : node.inputs) inputs_need = inputs_need || needs[size_t(in)];  // forward tensors only
        if (!inputs_need) continue;
        const OpInfo& info = op_info(node.kind);
        if (!info.grad)
            throw Error("op '" + node.name + "' (" + info.name + ") has no gradient rule but a parameter depends on it");
        GradBuilder b(g, n, dys, needs, contrib);
        info.grad(b, node);
    }
    std::map<TensorId, TensorId> grads;
    for (auto& [t, parts] : contrib) {
        if (t == output) continue;
        if (g.tensor(t).role == TensorRole::Parameter || !parts.empty()) grads[t] = finalize_grad(g, t, parts);
    }
    return grads;
}

OptimizerConfig::Kind parse_optimizer(const std::string& s) {
    if (s == "sgd") return OptimizerConfig::Kind::Sgd;
    if (s == "adam") return OptimizerConfig::Kind::Adam;
    if (s == "adamw") return OptimizerConfig::Kind::AdamW;
    throw Error("unknown optimizer '" + s + "'", "use sgd, adam or adamw");
}

TrainGraph build_train_graph(Graph forward, TensorId loss, const OptimizerConfig& opt) {
    TrainGraph tg;
    tg.graph = std::move(forward);
    Graph& g = tg.graph;
    tg.loss = loss;
    if (g.tensor(loss).desc.numel() != 1)
        throw Error("loss tensor '" + g.tensor(loss).name + "' must be a scalar, has shape " + shape_str(g.tensor(loss).desc.shape));
    const NodeId loss_node = g.tensor(loss).producer;
    if (loss_node == kNone) throw Error("loss tensor '" + g.tensor(loss).name + "' is not computed by any node");
    g.node(loss_node).phase = Phase::Loss;
    const TensorId seed = g.constant("loss.grad_seed", g.tensor(loss).desc, Init::ones());
    tg.first_backward = NodeId(g.num_nodes());
    std::map<TensorId, TensorId> grads = differentiate(g, loss, seed);
    tg.first_update = NodeId(g.num_nodes());
    for (TensorId p : g.tensors_with_role(TensorRole::Parameter)) {
        auto it = grads.find(p);
        if (it == grads.end())
            throw Error("parameter '" + g.tensor(p).name + "' does not affect the loss", "remove it from the network");
        const TensorId grad = it->second;
        tg.param_grads.emplace_back(p, grad);
        const std::string pname = g.tensor(p).name;
        const TensorDesc pd = g.tensor(p).desc;
        if (opt.kind == OptimizerConfig::Kind::Sgd) {
            std::vector<TensorId> ins = {p, grad};
            if (opt.momentum != 0.0f) ins.push_back(g.state(pname + ".momentum", pd, Init::zeros()));
            g.add(OpKind::SgdUpdate, SgdAttrs{opt.lr, opt.momentum, opt.weight_decay}, ins, pname + ".sgd", Phase::Update,
                  g.tensor(p).producer);
        } else {
            const TensorId m = g.state(pname + ".adam_m", pd, Init::zeros());
            const TensorId v = g.state(pname + ".adam_v", pd, Init::zeros());
            g.add(OpKind::AdamUpdate, AdamAttrs{opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.kind == OptimizerConfig::Kind::AdamW}, {p, grad, m, v},
                  pname + ".adam", Phase::Update, g.tensor(p).producer);
        }
    }
    // Update nodes derive from the forward node that reads the parameter first.
    for (NodeId n = tg.first_update; n < NodeId(g.num_nodes()); ++n) {
        const auto cons = g.consumers(g.node(n).inputs[0]);
        if (!cons.empty()) g.node(n).source = g.node(cons.front()).source;
    }
    return tg;
}

bool is_gemm_node(const Graph& g, NodeId n) {
    const OpCategory c = op_info(g.node(n).kind).category;
    return c == OpCategory::Conv || c == OpCategory::FullyConnected;
}

}  // namespace joule

#include "graph/graph.hpp"

#include "graph/error.hpp"

namespace joule {

const char* role_name(TensorRole r) {
    switch (r) {
        case TensorRole::Input: return "input";
        case TensorRole::Label: return "label";
        case TensorRole::Parameter: return "parameter";
        case TensorRole::State: return "state";
        case TensorRole::Constant: return "constant";
        case TensorRole::Activation: return "activation";
        case TensorRole::Gradient: return "gradient";
    }
    return "?";
}

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::Forward: return "forward";
        case Phase::Loss: return "loss";
        case Phase::Backward: return "backward";
        case Phase::Update: return "update";
    }
    return "?";
}

TensorId Graph::add_tensor(const std::string& name, const TensorDesc& desc, TensorRole role, Init init) {
    for (int64_t d : desc.shape)
        if (d <= 0) throw Error("tensor '" + name + "' has a non-positive dimension " + shape_str(desc.shape));
    if (desc.layout == Layout::ChannelsLast && desc.rank() != 4)
        throw Error("tensor '" + name + "': nhwc layout needs rank 4, got " + shape_str(desc.shape));
    tensors_.push_back(Tensor{desc, name, role, kNone, init});
    consumers_.emplace_back();
    return TensorId(tensors_.size() - 1);
}

TensorId Graph::input(const std::string& name, const TensorDesc& desc, TensorRole role) {
    return add_tensor(name, desc, role, Init::zeros());
}
TensorId Graph::parameter(const std::string& name, const TensorDesc& desc, Init init) {
    return add_tensor(name, desc, TensorRole::Parameter, init);
}
TensorId Graph::state(const std::string& name, const TensorDesc& desc, Init init) {
    return add_tensor(name, desc, TensorRole::State, init);
}
TensorId Graph::constant(const std::string& name, const TensorDesc& desc, Init init) {
    return add_tensor(name, desc, TensorRole::Constant, init);
}

std::vector<TensorDesc> Graph::infer(const Node& node, const std::string& where) const {
    const OpInfo& info = op_info(node.kind);
    const int n_in = int(node.inputs.size()) - (node.pre_op != OpKind::Count);  // a folded backward node's second input is one past
    if (n_in < info.min_inputs || (info.max_inputs >= 0 && n_in > info.max_inputs))
        throw Error(where + ": takes " + std::to_string(info.min_inputs) +
                    (info.max_inputs == info.min_inputs ? "" : (info.max_inputs < 0 ? "+" : "-" + std::to_string(info.max_inputs))) +
                    " inputs, got " + std::to_string(n_in));
    std::vector<TensorDesc> in;
    for (TensorId t : node.inputs) {
        if (t < 0 || size_t(t) >= tensors_.size()) throw Error(where + ": input tensor id " + std::to_string(t) + " does not exist");
        in.push_back(tensors_[size_t(t)].desc);
    }
    if (node.pre_op != OpKind::Count) {
        if (!fusable_backward(node.pre_op, node.kind))
            throw Error(where + ": cannot take " + op_name(node.pre_op) + " as a folded backward node");
        if (recomputes_activation(node)) {  // beta, read beside gamma
            if (!(in.back() == in[2]))
                throw Error(where + ": the folded " + op_name(node.pre_op) + " recomputes its Y from beta, given " + desc_str(in.back()) +
                            " beside gamma " + desc_str(in[2]) + " (the two must match)");
        } else if (!(in.back() == in.front())) {
            throw Error(where + ": the folded " + op_name(node.pre_op) + " reads " + desc_str(in.back()) + " beside " + desc_str(in.front()) +
                        " (the two must match)");
        }
        in.pop_back();
    }
    try {
        return info.shape(node, in);
    } catch (const Error& e) {
        throw Error(where + ": " + e.what());
    } catch (const std::bad_variant_access&) {
        throw InternalError(where + ": attributes of the wrong type");
    }
}

NodeId Graph::push_node(Node node) {
    const NodeId id = NodeId(nodes_.size());
    for (TensorId t : node.outputs) tensors_[size_t(t)].producer = id;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
        auto& c = consumers_[size_t(node.inputs[i])];
        if (c.empty() || c.back() != id) c.push_back(id);
    }
    nodes_.push_back(std::move(node));
    return id;
}

std::vector<TensorId> Graph::add(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& name,
                                 Phase phase, NodeId source, std::optional<TensorDesc> grad_of, TensorRole out_role) {
    Node node;
    node.kind = kind;
    node.attrs = std::move(attrs);
    node.inputs = std::move(inputs);
    node.name = name;
    node.phase = phase;
    node.grad_of = std::move(grad_of);
    const std::vector<TensorDesc> out = infer(node, "op '" + name + "' (" + op_name(kind) + ")");
    const NodeId id = NodeId(nodes_.size());
    node.source = source == kNone ? id : source;
    for (size_t i = 0; i < out.size(); ++i) {
        const std::string tname = out.size() == 1 ? name : name + ":" + std::to_string(i);
        node.outputs.push_back(add_tensor(tname, out[i], out_role, Init::zeros()));
    }
    push_node(std::move(node));
    return nodes_.back().outputs;
}

Graph Graph::tensors_only() const {
    Graph g;
    g.tensors_ = tensors_;
    for (Tensor& t : g.tensors_) t.producer = kNone;
    g.consumers_.assign(tensors_.size(), {});
    return g;
}

DType operand_dtype(const Graph& g, NodeId n, TensorId t, bool output, size_t index, DType compute) {
    const DType d = g.tensor(t).desc.dtype;
    const OpKind kind = g.node(n).kind;
    if (!is_float(d) || kind == OpKind::Transfer) return d;  // a transfer moves the dtype it is given
    if (kind == OpKind::Cast) return output ? compute : d;   // a cast reads its source dtype, writes `compute`
    if (!output && is_low_copy_input(g.node(n), index)) return DType::BF16;
    return (output ? has_bit(op_info(kind).f32_outputs, index) : f32_input(g.node(n), index)) ? DType::F32 : compute;
}

Graph node_alone(const Graph& g, NodeId id, DType compute) {
    Graph view;
    Node n = g.node(id);
    n.compute = compute;
    auto operand = [&](TensorId t, bool output, size_t i) {
        TensorDesc d = g.tensor(t).desc;
        d.dtype = operand_dtype(g, id, t, output, i, compute);
        return view.input(g.tensor(t).name, d, g.tensor(t).role);
    };
    for (size_t i = 0; i < n.inputs.size(); ++i) n.inputs[i] = operand(n.inputs[i], false, i);
    for (size_t i = 0; i < n.outputs.size(); ++i) n.outputs[i] = operand(n.outputs[i], true, i);
    n.source = kNone;
    view.append(std::move(n));
    return view;
}

NodeId Graph::append(Node node) {
    const std::string where = "op '" + node.name + "' (" + op_name(node.kind) + ")";
    const std::vector<TensorDesc> out = infer(node, where);
    JOULE_ASSERT(out.size() == node.outputs.size(), where + ": output count changed");
    for (size_t i = 0; i < out.size(); ++i) {
        const Tensor& t = tensor(node.outputs[i]);
        JOULE_ASSERT(t.producer == kNone, where + ": output '" + t.name + "' already has a producer");
        JOULE_ASSERT(t.desc.shape == out[i].shape && (t.desc.layout == out[i].layout || t.desc.layout == Layout::Blocked),
                     where + ": output '" + t.name + "' is " + desc_str(t.desc) + ", the shape rule gives " + desc_str(out[i]));
    }
    return push_node(std::move(node));
}

std::vector<TensorId> Graph::tensors_with_role(TensorRole r) const {
    std::vector<TensorId> ids;
    for (size_t i = 0; i < tensors_.size(); ++i)
        if (tensors_[i].role == r) ids.push_back(TensorId(i));
    return ids;
}

std::optional<TensorId> Graph::find_tensor(const std::string& name) const {
    for (size_t i = 0; i < tensors_.size(); ++i)
        if (tensors_[i].name == name) return TensorId(i);
    return std::nullopt;
}

int64_t Graph::parameter_count() const {
    int64_t n = 0;
    for (const Tensor& t : tensors_)
        if (t.role == TensorRole::Parameter) n += t.desc.numel();
    return n;
}

int low_copy_count(const Node& n) {
    return n.kind == OpKind::SgdUpdate ? attrs_as<SgdAttrs>(n).low_copies : n.kind == OpKind::AdamUpdate ? attrs_as<AdamAttrs>(n).low_copies : 0;
}

bool is_low_copy_input(const Node& n, size_t i) { return i < n.inputs.size() && i + size_t(low_copy_count(n)) >= n.inputs.size(); }

std::vector<std::pair<TensorId, TensorId>> low_copies(const Graph& g) {
    std::vector<std::pair<TensorId, TensorId>> out;
    for (const Node& n : g.nodes())
        for (size_t i = n.inputs.size() - size_t(low_copy_count(n)); i < n.inputs.size(); ++i) out.push_back({n.inputs[0], n.inputs[i]});
    return out;
}

std::string shapes_of(const Graph& g, const Node& n) {
    std::string s;
    for (TensorId t : n.inputs) s += (s.empty() ? "" : " ") + desc_str(g.tensor(t).desc);
    s += " ->";
    for (TensorId t : n.outputs) s += " " + desc_str(g.tensor(t).desc);
    return s;
}

bool is_dtype_cast(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    return n.kind == OpKind::Cast && g.tensor(n.inputs[0]).desc.dtype != g.tensor(n.outputs[0]).desc.dtype;
}

std::string op_label(const Node& n) {
    if (n.kind == OpKind::Cast && attrs_as<CastAttrs>(n).reorder) return "Reorder";  // with a cast or not: the name says
    std::string s = op_name(n.kind);
    if (n.pre_op != OpKind::Count) s = op_name(n.pre_op) + ("+" + s);  // in the order they compute
    if (n.post_op != OpKind::Count) s += std::string("+") + op_name(n.post_op);
    return s;
}

}  // namespace joule

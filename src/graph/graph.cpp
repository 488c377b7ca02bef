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

std::vector<TensorId> Graph::add(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& name,
                                 Phase phase, NodeId source, std::optional<TensorDesc> grad_of, TensorRole out_role) {
    const OpInfo& info = op_info(kind);
    const std::string where = "op '" + name + "' (" + info.name + ")";
    const int n_in = int(inputs.size());
    if (n_in < info.min_inputs || (info.max_inputs >= 0 && n_in > info.max_inputs))
        throw Error(where + ": takes " + std::to_string(info.min_inputs) +
                    (info.max_inputs == info.min_inputs ? "" : (info.max_inputs < 0 ? "+" : "-" + std::to_string(info.max_inputs))) +
                    " inputs, got " + std::to_string(n_in));
    std::vector<TensorDesc> in;
    for (TensorId t : inputs) {
        if (t < 0 || size_t(t) >= tensors_.size()) throw Error(where + ": input tensor id " + std::to_string(t) + " does not exist");
        in.push_back(tensors_[size_t(t)].desc);
    }
    Node node;
    node.kind = kind;
    node.attrs = std::move(attrs);
    node.inputs = std::move(inputs);
    node.name = name;
    node.phase = phase;
    node.grad_of = std::move(grad_of);
    std::vector<TensorDesc> out;
    try {
        out = info.shape(node, in);
    } catch (const Error& e) {
        throw Error(where + ": " + e.what());
    } catch (const std::bad_variant_access&) {
        throw InternalError(where + ": attributes of the wrong type");
    }
    const NodeId id = NodeId(nodes_.size());
    node.source = source == kNone ? id : source;
    for (size_t i = 0; i < out.size(); ++i) {
        const std::string tname = out.size() == 1 ? name : name + ":" + std::to_string(i);
        TensorId t = add_tensor(tname, out[i], out_role, Init::zeros());
        tensors_[size_t(t)].producer = id;
        node.outputs.push_back(t);
    }
    nodes_.push_back(std::move(node));
    return nodes_.back().outputs;
}

std::vector<TensorId> Graph::tensors_with_role(TensorRole r) const {
    std::vector<TensorId> ids;
    for (size_t i = 0; i < tensors_.size(); ++i)
        if (tensors_[i].role == r) ids.push_back(TensorId(i));
    return ids;
}

std::vector<NodeId> Graph::consumers(TensorId t) const {
    std::vector<NodeId> ids;
    for (size_t i = 0; i < nodes_.size(); ++i)
        for (TensorId in : nodes_[i].inputs)
            if (in == t) {
                ids.push_back(NodeId(i));
                break;
            }
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

}  // namespace joule

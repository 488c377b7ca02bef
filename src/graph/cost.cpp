#include "graph/cost.hpp"

namespace joule {

NodeCost node_cost(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    std::vector<TensorDesc> in, out;
    NodeCost c;
    for (TensorId t : n.inputs) {
        const Tensor& tt = g.tensor(t);
        in.push_back(tt.desc);
        if (!is_low_copy_input(n, in.size() - 1)) c.bytes_read += double(tt.desc.bytes());  // an update's parameter copies are only written
        if (tt.role == TensorRole::Parameter) c.param_bytes += double(tt.desc.bytes());
    }
    for (TensorId t : n.outputs) {
        out.push_back(g.tensor(t).desc);
        c.bytes_written += double(g.tensor(t).desc.bytes());
        c.activation_bytes += double(g.tensor(t).desc.bytes());
    }
    const OpCategory cat = op_info(n.kind).category;
    for (size_t i = 0; i < n.inputs.size(); ++i)  // inputs written back in place
        if (has_bit(op_info(n.kind).inplace, i)) c.bytes_written += double(g.tensor(n.inputs[i]).desc.bytes());
    c.flops = op_info(n.kind).flops(n, in, out);
    if (cat == OpCategory::Conv || cat == OpCategory::FullyConnected) {
        double bias = 0;  // bias additions (and a folded gradient sum's) are not multiply-adds
        if (n.kind == OpKind::Conv2d && attrs_as<ConvAttrs>(n).bias) bias = double(out[0].numel());
        if (n.kind == OpKind::Linear && attrs_as<LinearAttrs>(n).bias) bias = double(out[0].numel());
        if (n.kind == OpKind::ConvBackwardWeights && attrs_as<ConvAttrs>(n).bias) bias = double(in[0].numel());
        if (n.kind == OpKind::LinearBackwardWeights && attrs_as<LinearAttrs>(n).bias) bias = double(in[0].numel());
        if (n.kind == OpKind::LinearBackwardData && in.size() == 3) bias = double(out[0].numel());  // the gradient added to
        c.macs = (c.flops - bias) / 2;
    }
    if (n.post_op != OpKind::Count) {  // a fused activation: its arithmetic, none of its memory traffic
        Node act;
        act.kind = n.post_op;
        c.flops += op_info(act.kind).flops(act, {out[0]}, {out[0]});
    }
    if (n.pre_op != OpKind::Count) {  // a folded backward node: its arithmetic; its second input is one of the node's inputs
        Node act;
        act.kind = n.pre_op;
        c.flops += op_info(act.kind).flops(act, {in[0], in[0]}, {in[0]});
        if (recomputes_activation(n)) c.flops += 2 * double(in[0].numel());  // recomputing Y: a multiply-add per element
    }
    return c;
}

GraphCost graph_cost(const Graph& g) {
    GraphCost gc;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const NodeCost c = node_cost(g, NodeId(i));
        auto add = [&](NodeCost& t) {
            t.flops += c.flops;
            t.macs += c.macs;
            t.bytes_read += c.bytes_read;
            t.bytes_written += c.bytes_written;
            t.param_bytes += c.param_bytes;
            t.activation_bytes += c.activation_bytes;
        };
        add(gc.total);
        const Phase p = g.node(NodeId(i)).phase;
        if (p == Phase::Forward || p == Phase::Loss) add(gc.forward);
    }
    return gc;
}

}  // namespace joule

#include "backend/backend.hpp"

#include <algorithm>

namespace joule {

const char* time_source_name(TimeSource s) { return s == TimeSource::Measured ? "measured" : "modelled"; }

namespace {
Support check_operand(const Graph& g, TensorId t, DType want, bool f32_too, bool bf16_too, const char* what, size_t i) {
    const DType have = g.tensor(t).desc.dtype;
    if (!is_float(have) || have == want || (f32_too && have == DType::F32) || (bf16_too && have == DType::BF16)) return {};
    return {false, std::string(what) + " " + std::to_string(i) + " ('" + g.tensor(t).name + "') is stored in " + dtype_name(have) +
                       " but the node computes in " + dtype_name(want) + " (a Cast must convert it)"};
}
}  // namespace

Support check_dtypes(const Graph& g, NodeId id, OperandMask f32_allowed, OperandMask bf16_allowed) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Cast || n.kind == OpKind::Transfer) return {};  // they convert and move; their shape rules fix the dtypes
    const OpInfo& info = op_info(n.kind);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
        const DType want = is_low_copy_input(n, i) ? DType::BF16 : f32_input(n, i) ? DType::F32 : n.compute;
        if (Support s = check_operand(g, n.inputs[i], want, false, false, "input", i); !s.ok) return s;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
        const bool f32 = has_bit(info.f32_outputs, i);
        if (Support s = check_operand(g, n.outputs[i], f32 ? DType::F32 : n.compute, has_bit(f32_allowed, i), has_bit(bf16_allowed, i), "output", i); !s.ok)
            return s;
    }
    return {};
}

Support check_host_dtypes(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    const bool wide = n.compute == DType::BF16 && gemm_may_write_f32(n.kind), narrow = n.compute == DType::F32 && stores_output_low(n.kind);
    return check_dtypes(g, id, wide ? OperandMask(0b1) : OperandMask(0), narrow ? OperandMask(0b1) : OperandMask(0));
}

Support f32_bf16_support(const Graph& g, NodeId id, const std::string& device, const std::string& backend) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Transfer) {
        const auto& t = attrs_as<TransferAttrs>(n);
        if (t.to != device) return {false, "a transfer runs on its destination device, '" + t.to + "'"};
        return {};  // host backends keep their tensors in host memory
    }
    if (n.kind == OpKind::Cast) return {};
    if (n.post_op != OpKind::Count && !fusable(n.kind, n.post_op))
        return {false, std::string("no fused ") + op_name(n.kind) + "+" + op_name(n.post_op) + " kernel"};
    if (n.pre_op != OpKind::Count && !fusable_backward(n.pre_op, n.kind))
        return {false, std::string("no fused ") + op_name(n.pre_op) + "+" + op_name(n.kind) + " kernel"};
    if (n.compute != DType::F32 && n.compute != DType::BF16)
        return {false, backend + " computes in f32 or bf16, not " + dtype_name(n.compute)};
    if (n.compute == DType::F32) return {};
    if (f32_only_op(n.kind))
        switch (op_info(n.kind).category) {
            case OpCategory::Loss: return {false, "the loss is computed in f32 (log-sum-exp needs the range)"};
            case OpCategory::Communication: return {false, "gradients are all-reduced in f32 (the updates' master gradients)"};
            default: return {false, "optimizer updates run on f32 master weights"};
        }
    if (n.kind == OpKind::Embedding || n.kind == OpKind::EmbeddingBackward) return {false, "embedding gathers and scatter-adds run on the f32 table"};
    return {};
}

bool has_blocked_operand(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    auto blocked = [&](TensorId t) { return g.tensor(t).desc.layout == Layout::Blocked; };
    return std::any_of(n.inputs.begin(), n.inputs.end(), blocked) || std::any_of(n.outputs.begin(), n.outputs.end(), blocked);
}

bool supports_in(const Backend& backend, const Graph& g, NodeId id, DType dtype) {
    const Graph view = node_alone(g, id, dtype);
    return backend.supports(view, NodeId(0)).ok;
}

}  // namespace joule

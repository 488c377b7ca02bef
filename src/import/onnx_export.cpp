// joule Graph -> ONNX (opset 17): the forward nodes from the input to the logits, each as the ONNX node(s)
// import_onnx maps back to it, with parameter and running-statistic values as initializers.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "graph/error.hpp"
#include "import/onnx.hpp"

namespace joule {

namespace {
constexpr int kOpset = 17;

class Exporter {
public:
    Exporter(const Graph& g, const std::function<std::vector<float>(TensorId)>& values) : g_(g), values_(values) {}

    onnx::ModelProto run(TensorId input, TensorId logits) {
        onnx::ModelProto m;
        m.set_ir_version(8);
        m.set_producer_name("joule");
        m.set_producer_version(JOULE_VERSION);
        auto* op = m.add_opset_import();
        op->set_domain(""), op->set_version(kOpset);
        graph_ = m.mutable_graph();
        graph_->set_name("joule");
        const Tensor& in = g_.tensor(input);
        value_info(graph_->add_input(), name_of(input), in.desc.shape, in.desc.dtype == DType::I32 ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
        for (size_t i = 0; i < g_.num_nodes(); ++i)
            if (g_.node(NodeId(i)).phase == Phase::Forward) node(NodeId(i));
        if (!known_.count(logits)) throw Error("export: the logits '" + g_.tensor(logits).name + "' are not computed by the forward nodes");
        value_info(graph_->add_output(), name_of(logits), g_.tensor(logits).desc.shape, onnx::TensorProto::FLOAT);
        return m;
    }

private:
    void value_info(onnx::ValueInfoProto* v, const std::string& name, const Shape& s, int32_t type) {
        v->set_name(name);
        auto* t = v->mutable_type()->mutable_tensor_type();
        t->set_elem_type(type);
        for (int64_t d : s) t->mutable_shape()->add_dim()->set_dim_value(d);
    }
    // The ONNX name of a tensor: its joule name, unique; Cast / Transfer outputs are their input.
    std::string name_of(TensorId t) {
        if (const auto a = alias_.find(t); a != alias_.end()) return name_of(a->second);
        if (const auto it = names_.find(t); it != names_.end()) return it->second;
        std::string n = g_.tensor(t).name;
        for (int k = 2; !used_.insert(n).second; ++k) n = g_.tensor(t).name + "_" + std::to_string(k);
        known_.insert(t);
        return names_[t] = n;
    }
    // A tensor the nodes read: a parameter, running statistic or constant becomes an initializer once.
    std::string operand(TensorId t) {
        if (const auto a = alias_.find(t); a != alias_.end()) return operand(a->second);
        const Tensor& x = g_.tensor(t);
        if (!names_.count(t) && (x.role == TensorRole::Parameter || x.role == TensorRole::State || x.role == TensorRole::Constant)) {
            auto* init = graph_->add_initializer();
            init->set_name(name_of(t));
            for (int64_t d : x.desc.shape) init->add_dims(d);
            if (x.desc.dtype == DType::I32) {  // ids: what the initializer says they are
                init->set_data_type(onnx::TensorProto::INT64);
                const int64_t n = x.desc.numel(), last = x.desc.shape.empty() ? 1 : x.desc.shape.back();
                for (int64_t i = 0; i < n; ++i)
                    init->add_int64_data(x.init.kind == Init::Kind::Data ? (*x.init.indices)[size_t(i)] : x.init.kind == Init::Kind::Position ? i % last : 0);
            } else {
                init->set_data_type(onnx::TensorProto::FLOAT);
                const std::vector<float> v = values_(t);
                init->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
            }
        }
        return name_of(t);
    }
    std::string ints_constant(const std::string& name, const std::vector<int64_t>& v) {
        auto* init = graph_->add_initializer();
        init->set_name(unique(name));
        init->set_data_type(onnx::TensorProto::INT64);
        init->add_dims(int64_t(v.size()));
        for (int64_t x : v) init->add_int64_data(x);
        return init->name();
    }
    std::string float_constant(const std::string& name, float v) {
        auto* init = graph_->add_initializer();
        init->set_name(unique(name));
        init->set_data_type(onnx::TensorProto::FLOAT);
        init->add_float_data(v);
        return init->name();
    }
    std::string unique(const std::string& base) {
        std::string n = base;
        for (int k = 2; !used_.insert(n).second; ++k) n = base + "_" + std::to_string(k);
        return n;
    }
    onnx::NodeProto* emit(const std::string& type, const std::string& name, const std::vector<std::string>& in, const std::vector<std::string>& out) {
        auto* n = graph_->add_node();
        n->set_op_type(type);
        n->set_name(unique("/" + name + "/" + type));
        for (const std::string& s : in) n->add_input(s);
        for (const std::string& s : out) n->add_output(s);
        return n;
    }
    static void attr(onnx::NodeProto* n, const char* name, int64_t v) {
        auto* a = n->add_attribute();
        a->set_name(name), a->set_type(onnx::AttributeProto::INT), a->set_i(v);
    }
    static void attr(onnx::NodeProto* n, const char* name, float v) {
        auto* a = n->add_attribute();
        a->set_name(name), a->set_type(onnx::AttributeProto::FLOAT), a->set_f(v);
    }
    static void attr(onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
        auto* a = n->add_attribute();
        a->set_name(name), a->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : v) a->add_ints(x);
    }

    // SumTo as ReduceMean (its scale 1 / the count summed) or ReduceSum (then a Mul by the scale), keeping
    // dims, and a Reshape when the target has fewer axes than the input.
    void sum_to(const Node& n, const std::string& x, const std::string& y) {
        const auto& a = attrs_as<BroadcastAttrs>(n);
        const Shape& in = g_.tensor(n.inputs[0]).desc.shape;
        const Shape kept = padded_to_rank(a.shape, in.size());
        std::vector<int64_t> axes;
        double count = 1;
        for (size_t k = 0; k < in.size(); ++k)
            if (kept[k] == 1 && in[k] != 1) axes.push_back(int64_t(k)), count *= double(in[k]);
        const std::string& nm = n.name;
        if (axes.empty()) {  // nothing summed: a scaled copy
            emit("Mul", nm, {x, float_constant(nm + ".scale", a.scale)}, {y});
            return;
        }
        const bool mean = a.scale == float(1.0 / count);
        const bool reshape = kept != a.shape;
        const std::string r = reshape || (!mean && a.scale != 1.0f) ? unique(nm + ".reduced") : y;
        if (mean) attr(emit("ReduceMean", nm, {x}, {r}), "axes", axes);
        else emit("ReduceSum", nm, {x, ints_constant(nm + ".axes", axes)}, {r});
        std::string z = r;
        if (!mean && a.scale != 1.0f) {
            z = reshape ? unique(nm + ".scaled") : y;
            emit("Mul", nm, {r, float_constant(nm + ".scale", a.scale)}, {z});
        }
        if (reshape) emit("Reshape", nm, {z, ints_constant(nm + ".shape", a.shape)}, {y});
    }

    void node(NodeId id) {
        const Node& n = g_.node(id);
        if (n.kind == OpKind::Cast || n.kind == OpKind::Transfer) {  // a plan's storage decision, not the model's
            alias_[n.outputs[0]] = n.inputs[0];
            return;
        }
        std::vector<std::string> in;
        for (TensorId t : n.inputs) in.push_back(operand(t));
        const std::string y = name_of(n.outputs[0]);
        if (n.post_op == OpKind::Count) return op(n, in, y);
        const std::string pre = unique(n.name + ".pre");  // a fused activation is the model's own node again
        op(n, in, pre);
        activation(n.post_op, n.name + "." + op_name(n.post_op), pre, y);
    }

    void activation(OpKind k, const std::string& nm, const std::string& x, const std::string& y) {
        if (k == OpKind::Relu) emit("Relu", nm, {x}, {y});
        else if (k == OpKind::Relu6) emit("Clip", nm, {x, float_constant(nm + ".min", 0.0f), float_constant(nm + ".max", 6.0f)}, {y});
        else throw InternalError(std::string("export: no fused form for ") + op_name(k));
    }

    // Node n as its ONNX node(s), writing y.
    void op(const Node& n, const std::vector<std::string>& in, const std::string& y) {
        const std::string& nm = n.name;
        switch (n.kind) {
            case OpKind::Conv2d: {
                const auto& a = attrs_as<ConvAttrs>(n);
                const Shape& w = g_.tensor(n.inputs[1]).desc.shape;
                auto* c = emit("Conv", nm, in, {y});
                attr(c, "kernel_shape", std::vector<int64_t>{w[2], w[3]});
                attr(c, "strides", std::vector<int64_t>{a.stride[0], a.stride[1]});
                attr(c, "pads", std::vector<int64_t>{a.pad[0], a.pad[1], a.pad[0], a.pad[1]});
                attr(c, "dilations", std::vector<int64_t>{a.dilation[0], a.dilation[1]});
                attr(c, "group", a.groups);
                return;
            }
            case OpKind::BatchNorm2d: {  // the inference form: tools that load the file run it with the running statistics
                const auto& a = attrs_as<NormAttrs>(n);
                auto* b = emit("BatchNormalization", nm, in, {y});
                attr(b, "epsilon", a.eps), attr(b, "momentum", 1.0f - a.momentum);
                return;
            }
            case OpKind::LayerNorm: {
                auto* l = emit("LayerNormalization", nm, in, {y});
                attr(l, "axis", int64_t(-1)), attr(l, "epsilon", attrs_as<NormAttrs>(n).eps);
                return;
            }
            case OpKind::Linear: {
                const bool bias = attrs_as<LinearAttrs>(n).bias;
                if (g_.tensor(n.inputs[0]).desc.rank() == 2) {
                    attr(emit("Gemm", nm, in, {y}), "transB", int64_t(1));
                    return;
                }
                const std::string wt = unique(nm + ".weight_t");  // PyTorch's spelling of a linear layer on [.., features]
                attr(emit("Transpose", nm, {in[1]}, {wt}), "perm", std::vector<int64_t>{1, 0});
                const std::string xw = bias ? unique(nm + ".matmul") : y;
                emit("MatMul", nm, {in[0], wt}, {xw});
                if (bias) emit("Add", nm, {xw, in[2]}, {y});
                return;
            }
            case OpKind::MatMul: {
                const auto& a = attrs_as<MatMulAttrs>(n);
                std::string lhs = in[0], rhs = in[1];
                auto transpose = [&](const std::string& x, std::vector<int64_t> perm, const std::string& out) {
                    attr(emit("Transpose", nm, {x}, {out}), "perm", perm);
                    return out;
                };
                // folded transposes (a lowered graph's): written out again, then trans as a swap of the last two
                if (!a.perm_a.empty()) lhs = transpose(lhs, a.perm_a, unique(nm + ".perm_a"));
                if (!a.perm_b.empty()) rhs = transpose(rhs, a.perm_b, unique(nm + ".perm_b"));
                auto swap_last = [&](const std::string& x, TensorId t) {
                    std::vector<int64_t> perm;
                    for (int64_t k = 0; k < g_.tensor(t).desc.rank(); ++k) perm.push_back(k);
                    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
                    return transpose(x, perm, unique(x + ".T"));
                };
                if (a.trans_a) lhs = swap_last(lhs, n.inputs[0]);
                if (a.trans_b) rhs = swap_last(rhs, n.inputs[1]);
                const std::string c = a.perm_c.empty() ? y : unique(nm + ".unpermuted");
                const std::string prod = a.alpha != 1.0f ? unique(nm + ".product") : c;
                emit("MatMul", nm, {lhs, rhs}, {prod});
                if (a.alpha != 1.0f) emit("Mul", nm, {prod, float_constant(nm + ".alpha", a.alpha)}, {c});
                if (!a.perm_c.empty()) transpose(c, inverse_permutation(a.perm_c), y);  // C stored through the inverse of its view
                return;
            }
            case OpKind::Relu: case OpKind::Relu6: activation(n.kind, nm, in[0], y); return;
            case OpKind::Sigmoid: emit("Sigmoid", nm, in, {y}); return;
            case OpKind::Tanh: emit("Tanh", nm, in, {y}); return;
            case OpKind::Clip: {
                const auto& a = attrs_as<ClipAttrs>(n);
                emit("Clip", nm, {in[0], float_constant(nm + ".min", a.lo), float_constant(nm + ".max", a.hi)}, {y});
                return;
            }
            case OpKind::Gelu: {  // ONNX has no Gelu before opset 20: x * 0.5 * (1 + erf(x / sqrt 2)), as PyTorch writes it
                const std::string d = unique(nm + ".div"), e = unique(nm + ".erf"), p = unique(nm + ".add"), m = unique(nm + ".mul");
                emit("Div", nm, {in[0], float_constant(nm + ".sqrt2", float(std::sqrt(2.0)))}, {d});
                emit("Erf", nm, {d}, {e});
                emit("Add", nm, {e, float_constant(nm + ".one", 1.0f)}, {p});
                emit("Mul", nm, {in[0], p}, {m});
                emit("Mul", nm, {m, float_constant(nm + ".half", 0.5f)}, {y});
                return;
            }
            case OpKind::MaxPool2d: case OpKind::AvgPool2d: {
                const auto& a = attrs_as<PoolAttrs>(n);
                const bool max = n.kind == OpKind::MaxPool2d;
                auto* p = emit(max ? "MaxPool" : "AveragePool", nm, in, {y});
                attr(p, "kernel_shape", std::vector<int64_t>{a.kernel[0], a.kernel[1]});
                attr(p, "strides", std::vector<int64_t>{a.stride[0], a.stride[1]});
                attr(p, "pads", std::vector<int64_t>{a.pad[0], a.pad[1], a.pad[0], a.pad[1]});
                if (!max) attr(p, "count_include_pad", int64_t(1));
                return;
            }
            case OpKind::GlobalAvgPool: emit("GlobalAveragePool", nm, in, {y}); return;
            case OpKind::Add: emit("Add", nm, in, {y}); return;
            case OpKind::Mul: emit("Mul", nm, in, {y}); return;
            case OpKind::Sub: emit("Sub", nm, in, {y}); return;
            case OpKind::Div: emit("Div", nm, in, {y}); return;
            case OpKind::Sqrt: emit("Sqrt", nm, in, {y}); return;
            case OpKind::Pow: emit("Pow", nm, {in[0], float_constant(nm + ".exponent", attrs_as<PowAttrs>(n).exponent)}, {y}); return;
            case OpKind::SumTo: sum_to(n, in[0], y); return;
            case OpKind::Expand: {
                const auto& a = attrs_as<BroadcastAttrs>(n);
                const std::string e = a.scale != 1.0f ? unique(nm + ".expanded") : y;
                emit("Expand", nm, {in[0], ints_constant(nm + ".shape", a.shape)}, {e});
                if (a.scale != 1.0f) emit("Mul", nm, {e, float_constant(nm + ".scale", a.scale)}, {y});
                return;
            }
            case OpKind::Concat: attr(emit("Concat", nm, in, {y}), "axis", attrs_as<AxisAttrs>(n).axis); return;
            case OpKind::Softmax: attr(emit("Softmax", nm, in, {y}), "axis", int64_t(-1)); return;
            case OpKind::Transpose: attr(emit("Transpose", nm, in, {y}), "perm", attrs_as<TransposeAttrs>(n).perm); return;
            case OpKind::Reshape: emit("Reshape", nm, {in[0], ints_constant(nm + ".shape", g_.tensor(n.outputs[0]).desc.shape)}, {y}); return;
            case OpKind::Slice: {
                const auto& a = attrs_as<SliceAttrs>(n);
                emit("Slice", nm, {in[0], ints_constant(nm + ".starts", {a.start}), ints_constant(nm + ".ends", {a.start + a.length}), ints_constant(nm + ".axes", {a.axis})}, {y});
                return;
            }
            case OpKind::Embedding: emit("Gather", nm, {in[1], in[0]}, {y}); return;
            case OpKind::Dropout: {  // the inference form (identity), as PyTorch's eval export writes it
                emit("Dropout", nm, {in[0], float_constant(nm + ".ratio", attrs_as<DropoutAttrs>(n).p)}, {y});
                return;
            }
            default:
                throw Error("export: node '" + nm + "' (" + op_name(n.kind) + ") has no ONNX form in joule's exporter");
        }
    }

    const Graph& g_;
    const std::function<std::vector<float>(TensorId)>& values_;
    onnx::GraphProto* graph_ = nullptr;
    std::map<TensorId, std::string> names_;
    std::map<TensorId, TensorId> alias_;
    std::set<std::string> used_;
    std::set<TensorId> known_;
};
}  // namespace

void export_onnx(const Graph& g, TensorId input, TensorId logits, const std::function<std::vector<float>(TensorId)>& values, const std::string& path) {
    const onnx::ModelProto m = Exporter(g, values).run(input, logits);
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f || !m.SerializeToOstream(&f) || !f.flush()) throw Error("cannot write the ONNX model " + path);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot write the ONNX model " + path);
}

}  // namespace joule

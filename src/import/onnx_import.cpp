// ONNX -> joule Graph. See onnx.hpp for what is mapped; every node is either a joule op, part of a
// recognised pattern, shape arithmetic evaluated here, or an Error that names it.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "graph/error.hpp"
#include "import/onnx.hpp"
#include "import/onnx_tensor.hpp"

namespace joule {

namespace {
using onnx_io::Const;
using NodeProto = onnx::NodeProto;
constexpr int kMinOpset = 11, kMaxOpset = 17;

bool near(double a, double b) { return std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)); }

// numpy broadcasting of two constants' dims
Shape broadcast_dims(const Shape& a, const Shape& b, const std::string& where) {
    Shape r(std::max(a.size(), b.size()), 1);
    for (size_t i = 0; i < r.size(); ++i) {
        const int64_t x = i < r.size() - a.size() ? 1 : a[i - (r.size() - a.size())];
        const int64_t y = i < r.size() - b.size() ? 1 : b[i - (r.size() - b.size())];
        if (x != y && x != 1 && y != 1) throw Error(where + ": shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
        r[i] = x == 1 ? y : x;
    }
    return r;
}
int64_t numel_of(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>()); }

class Importer {
public:
    Importer(const onnx::ModelProto& m, std::string where, std::string dir, const OnnxImportOptions& o)
        : m_(m), g_(m.graph()), where_(std::move(where)), dir_(std::move(dir)), o_(o) {}

    zoo::Model run() {
        check_opset();
        for (const auto& t : g_.initializer()) {
            if (t.name().empty()) throw Error(where_ + ": an initializer has no name");
            if (!inits_.emplace(t.name(), &t).second) throw Error(where_ + ": initializer '" + t.name() + "' is defined twice");
        }
        for (int i = 0; i < g_.node_size(); ++i) check_arity(i);
        for (int i = 0; i < g_.node_size(); ++i) {
            for (const std::string& in : g_.node(i).input())
                if (!in.empty()) consumers_[in].push_back(i);
            for (const std::string& out : g_.node(i).output())
                if (!out.empty()) producer_[out] = i;
        }
        for (const auto& out : g_.output()) consumers_[out.name()].push_back(-1);
        find_patterns();
        declare_inputs();
        for (int i = 0; i < g_.node_size(); ++i) {
            if (absorbed_.count(i)) continue;
            try {
                convert(i);
            } catch (const std::out_of_range&) {  // .at() on a list attribute or constant shorter than the op needs
                fail(i, "an attribute or constant input has fewer values than the op needs");
            }
        }
        return finish();
    }

private:
    struct Value {
        TensorId t = kNone;
        std::shared_ptr<const Const> c;
    };
    struct Linear {  // a MatMul / Gemm that is a linear layer: the weight's layout and an absorbed bias Add
        std::string weight;
        bool weight_transposed = false;  // the initializer is [in, out] (MatMul, Gemm transB = 0)
        std::string bias;
        std::string out;  // the tensor the layer's output is known as (the absorbed Add's)
    };
    struct MatMulFold {  // a MatMul of two activations with a transposed B or a scale folded in
        std::string b;
        bool trans_b = false;
        double alpha = 1.0;
        std::string out;
    };

    // ---------------------------------------------------------------- names, attributes, errors
    std::string what(int i) const {
        const NodeProto& n = g_.node(i);
        return where_ + ": node '" + (n.name().empty() ? "#" + std::to_string(i) : n.name()) + "' (" + n.op_type() + ", opset " +
               std::to_string(opset_) + ")";
    }
    [[noreturn]] void fail(int i, const std::string& msg, const std::string& fix = "") const { throw Error(what(i) + ": " + msg, fix); }
    const onnx::AttributeProto* attr(const NodeProto& n, const char* name) const {
        for (const auto& a : n.attribute())
            if (a.name() == name) return &a;
        return nullptr;
    }
    int64_t attr_i(int i, const char* name, int64_t def) const {
        const auto* a = attr(g_.node(i), name);
        return a ? a->i() : def;
    }
    float attr_f(int i, const char* name, float def) const {
        const auto* a = attr(g_.node(i), name);
        return a ? a->f() : def;
    }
    std::string attr_s(int i, const char* name, const std::string& def) const {
        const auto* a = attr(g_.node(i), name);
        return a ? a->s() : def;
    }
    std::vector<int64_t> attr_ints(int i, const char* name) const {
        const auto* a = attr(g_.node(i), name);
        return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
    }
    // The joule name of node i (its ONNX name, '/' as '.', made unique), the same each time it is asked.
    const std::string& joule_name(int i) {
        if (const auto it = node_names_.find(i); it != node_names_.end()) return it->second;
        const NodeProto& n = g_.node(i);
        std::string s = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
        if (const auto w = weight_of_.find(i); w != weight_of_.end() && w->second.size() > 7 && w->second.ends_with(".weight"))
            s = w->second.substr(0, w->second.size() - 7);  // a layer is called as its weights are (PyTorch's module path)
        while (!s.empty() && s.front() == '/') s.erase(s.begin());
        std::replace(s.begin(), s.end(), '/', '.');
        if (s.empty()) s = n.op_type() + "_" + std::to_string(i);
        std::string unique = s;
        for (int k = 2; !names_.insert(unique).second; ++k) unique = s + "_" + std::to_string(k);
        return node_names_[i] = unique;
    }

    // Every node has an output and the inputs its op cannot do without, so converting it may read them.
    void check_arity(int i) const {
        static const std::map<std::string, int> least = {
            {"Constant", 0}, {"Conv", 2}, {"BatchNormalization", 5}, {"Gemm", 2}, {"MatMul", 2}, {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2},
            {"Pow", 2}, {"Equal", 2}, {"Max", 2}, {"Min", 2}, {"Reshape", 2}, {"Gather", 2}, {"LayerNormalization", 2}, {"Expand", 2},
            {"Where", 3}, {"Range", 3}, {"Slice", 3}, {"SoftmaxCrossEntropyLoss", 2}, {"NegativeLogLikelihoodLoss", 2}, {"Pad", 2},
            {"ConstantOfShape", 1}};
        const NodeProto& n = g_.node(i);
        const auto it = least.find(n.op_type());
        const int want = it == least.end() ? 1 : it->second;
        if (n.output_size() < 1 || n.output(0).empty()) fail(i, "the node has no output");
        if (n.input_size() < want) fail(i, "takes at least " + std::to_string(want) + " inputs, has " + std::to_string(n.input_size()));
        for (int k = 0; k < want; ++k)
            if (n.input(k).empty() && !(n.op_type() == "Pad" && k == 1)) fail(i, "input " + std::to_string(k) + " is missing");
    }

    void check_opset() {
        for (const auto& o : m_.opset_import()) {
            if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
        }
        if (m_.graph().node_size() == 0 && m_.ir_version() == 0) throw Error(where_ + " is not an ONNX model (no graph, no IR version)");
        if (opset_ < kMinOpset || opset_ > kMaxOpset)
            throw Error(where_ + ": opset " + std::to_string(opset_) + " of the default domain; joule reads opsets " + std::to_string(kMinOpset) + "-" +
                            std::to_string(kMaxOpset),
                        "export with torch.onnx.export(..., opset_version=17)");
    }

    // ---------------------------------------------------------------- values
    int uses(const std::string& name) const {
        const auto it = consumers_.find(name);
        return it == consumers_.end() ? 0 : int(it->second.size());
    }
    // The single node reading `name` (not a graph output), or -1.
    int only_consumer(const std::string& name) const {
        const auto it = consumers_.find(name);
        return it != consumers_.end() && it->second.size() == 1 ? it->second.front() : -1;
    }
    int producer(const std::string& name) const {
        const auto it = producer_.find(name);
        return it == producer_.end() ? -1 : it->second;
    }
    // A constant known before conversion: an initializer or a Constant node's value (for the patterns).
    std::optional<Const> static_const(const std::string& name) const {
        if (const auto it = inits_.find(name); it != inits_.end()) {
            if (it->second->dims_size() > 1 || onnx_io::element_count(it->second->dims(), name) > 64) return std::nullopt;
            return onnx_io::const_of(*it->second, where_ + ": initializer '" + name + "'", dir_);
        }
        const int p = producer(name);
        if (p < 0 || g_.node(p).op_type() != "Constant") return std::nullopt;
        return constant_node(p);
    }
    std::optional<double> static_scalar(const std::string& name) const {
        const std::optional<Const> c = static_const(name);
        if (!c || c->numel() != 1) return std::nullopt;
        return c->v[0];
    }
    bool is_initializer(const std::string& name) const { return inits_.count(name) > 0; }
    const onnx::TensorProto& initializer(int i, const std::string& name) const {
        const auto it = inits_.find(name);
        if (it == inits_.end()) fail(i, "input '" + name + "' must be an initializer (a trained weight), but it is computed", "export with export_params=True");
        return *it->second;
    }

    // The joule tensor of an activation input.
    TensorId tensor(int i, const std::string& name) {
        const auto it = values_.find(name);
        if (it == values_.end()) {
            if (is_initializer(name)) fail(i, "input '" + name + "' is an initializer where joule needs a computed tensor");
            fail(i, "input '" + name + "' is not produced by any earlier node nor a graph input (nodes out of order?)");
        }
        if (it->second.t == kNone) fail(i, "input '" + name + "' is a constant where joule needs a computed tensor");
        return it->second.t;
    }
    bool is_const(const std::string& name) const {
        if (is_initializer(name)) return values_.find(name) == values_.end() || values_.at(name).c != nullptr;
        const auto it = values_.find(name);
        return it != values_.end() && it->second.c != nullptr;
    }
    // A constant input (initializer, Constant node or folded shape arithmetic).
    const Const& constant(int i, const std::string& name) {
        auto it = values_.find(name);
        if (it == values_.end() && is_initializer(name)) {
            const onnx::TensorProto& t = *inits_.at(name);
            if (onnx_io::element_count(t.dims(), name) > (1 << 20)) fail(i, "input '" + name + "' is a large initializer where joule needs a small constant");
            it = values_.emplace(name, Value{kNone, std::make_shared<Const>(onnx_io::const_of(t, where_ + ": initializer '" + name + "'", dir_))}).first;
        }
        if (it == values_.end() || !it->second.c) fail(i, "input '" + name + "' must be a constant known at import (joule fixes every shape)");
        return *it->second.c;
    }
    // A constant's value as an integer (a size, an axis, an index): Error when it is not one.
    int64_t as_int(int i, double v) const {
        if (!std::isfinite(v) || std::abs(v) > 9007199254740992.0 || v != std::trunc(v)) fail(i, "value " + std::to_string(v) + " where an integer is needed");
        return int64_t(v);
    }
    std::vector<int64_t> ints(int i, const std::string& name) {
        const Const& c = constant(i, name);
        std::vector<int64_t> r;
        for (double v : c.v) r.push_back(as_int(i, v));
        return r;
    }
    // A parameter (or running statistic) from an initializer, created once per initializer.
    TensorId weight(int i, const std::string& name, TensorRole role, bool transpose = false) {
        const std::string key = name + (transpose ? "#T" : "");
        if (const auto it = weights_.find(key); it != weights_.end()) return it->second;
        const onnx::TensorProto& t = initializer(i, name);
        if (!onnx_io::is_float_type(t.data_type())) fail(i, "weight '" + name + "' is not floating-point");
        std::vector<float> v = onnx_io::values_of<float>(t, where_ + ": initializer '" + name + "'", dir_);
        Shape s(t.dims().begin(), t.dims().end());
        if (transpose) {  // [in, out] -> [out, in]: the linear layer's weight as PyTorch stores it
            if (s.size() != 2) fail(i, "weight '" + name + "' must be 2-D, got " + shape_str(s));
            std::vector<float> w(v.size());
            for (int64_t r = 0; r < s[0]; ++r)
                for (int64_t c = 0; c < s[1]; ++c) w[size_t(c * s[0] + r)] = v[size_t(r * s[1] + c)];
            v.swap(w);
            std::swap(s[0], s[1]);
        }
        if (s.empty()) fail(i, "weight '" + name + "' is a scalar");
        // an initializer read both ways (tied weights in two layouts) is two parameters, the second renamed
        const std::string tensor_name = weights_.count(name + (transpose ? "" : "#T")) ? name + (transpose ? ".transposed" : ".untransposed") : name;
        const TensorId id = role == TensorRole::State ? graph_.state(tensor_name, {s}, Init::data(std::move(v)))
                                                      : graph_.parameter(tensor_name, {s}, Init::data(std::move(v)));
        weights_[key] = id;
        return id;
    }
    void set(const std::string& name, TensorId t) { values_[name] = Value{t, nullptr}; }
    void set(const std::string& name, Const c) { values_[name] = Value{kNone, std::make_shared<const Const>(std::move(c))}; }
    void alias(const std::string& to, const std::string& from) {
        if (!to.empty() && values_.count(from)) values_[to] = values_.at(from);
    }
    TensorId plain(TensorId t, const std::string& name) {  // the one layout change: nhwc images to plain
        const TensorDesc& d = graph_.tensor(t).desc;
        if (d.layout == Layout::Plain) return t;
        if (const auto it = plain_.find(t); it != plain_.end()) return it->second;
        return plain_[t] = graph_.add1(OpKind::Reshape, ReshapeAttrs{d.shape, Layout::Plain}, {t}, name + ".plain");
    }
    const Shape& shape_of(int i, const std::string& name) {
        const auto it = values_.find(name);
        if (it != values_.end() && it->second.t != kNone) return graph_.tensor(it->second.t).desc.shape;
        return constant(i, name).dims;
    }
    TensorId add(int i, OpKind k, Attrs a, std::vector<TensorId> in) {
        try {
            return graph_.add1(k, std::move(a), std::move(in), joule_name(i));
        } catch (const Error& e) {
            fail(i, e.what());
        }
    }

    // ---------------------------------------------------------------- inputs and outputs
    Shape input_shape(const onnx::ValueInfoProto& v, bool is_labels) {
        const auto& tt = v.type().tensor_type();
        Shape s;
        for (int d = 0; d < tt.shape().dim_size(); ++d) {
            const auto& dim = tt.shape().dim(d);
            const std::string label = "input '" + v.name() + "' dimension " + std::to_string(d);
            if (dim.has_dim_value() && dim.dim_value() > 0) {
                if (d == 0 && o_.batch > 0 && dim.dim_value() != o_.batch)
                    throw Error(where_ + ": " + label + " fixes the batch at " + std::to_string(dim.dim_value()) + ", not " + std::to_string(o_.batch),
                                "use --batch " + std::to_string(dim.dim_value()) + ", or export with dynamic_axes={'" + v.name() + "': {0: 'batch'}}");
                s.push_back(dim.dim_value());
            } else if (d == 0) {
                if (o_.batch < 1)
                    throw Error(where_ + ": " + label + " (the batch, '" + dim.dim_param() + "') has no fixed size", "give it with --batch N");
                s.push_back(o_.batch);
            } else {
                throw Error(where_ + ": " + label + (dim.dim_param().empty() ? "" : " ('" + dim.dim_param() + "')") +
                                " has no fixed size; joule plans every tensor's size before training",
                            "export with a fixed size there (no dynamic_axes but the batch)");
            }
        }
        int64_t n = 1;
        for (int64_t d : s)
            if (d > (int64_t(1) << 40) / n || (n *= d) > (int64_t(1) << 40)) throw Error(where_ + ": input '" + v.name() + "' " + shape_str(s) + " has more than 2^40 elements");
        if (is_labels && s.size() != 1) throw Error(where_ + ": labels input '" + v.name() + "' must be [batch], got " + shape_str(s));
        return s;
    }

    void declare_inputs() {
        std::string labels = o_.labels;
        for (const auto& [name, node] : loss_nodes_)
            if (labels.empty()) labels = g_.node(node).input(1);
        std::vector<const onnx::ValueInfoProto*> data;
        bool found_labels = labels.empty();
        for (const auto& v : g_.input()) {
            if (is_initializer(v.name())) continue;  // older exports list initializers as inputs too
            if (!v.type().has_tensor_type()) throw Error(where_ + ": input '" + v.name() + "' is not a tensor");
            const int32_t type = v.type().tensor_type().elem_type();
            const bool integer = type == onnx::TensorProto::INT64 || type == onnx::TensorProto::INT32;
            if (!integer && type != onnx::TensorProto::FLOAT)
                throw Error(where_ + ": input '" + v.name() + "' has element type " + std::to_string(type) + "; joule takes float32 data or int32/int64 ids");
            if (v.name() == labels) {
                if (!integer) throw Error(where_ + ": labels input '" + v.name() + "' must hold integer class ids");
                model_.labels = graph_.input(v.name(), {input_shape(v, true), DType::I32}, TensorRole::Label);
                set(v.name(), model_.labels);
                found_labels = true;
                continue;
            }
            data.push_back(&v);
        }
        if (!found_labels) throw Error(where_ + ": no graph input is named '" + labels + "' (the labels)");
        if (data.size() != 1) {
            std::string names;
            for (const auto* v : data) names += (names.empty() ? "" : ", ") + v->name();
            throw Error(where_ + ": joule trains a model with one data input, this one has " + std::to_string(data.size()) + (names.empty() ? "" : " (" + names + ")"),
                        data.size() > 1 ? "name the labels input with --labels" : "");
        }
        const auto& v = *data.front();
        const bool integer = v.type().tensor_type().elem_type() != onnx::TensorProto::FLOAT;
        const Shape s = input_shape(v, false);
        if (s.empty()) throw Error(where_ + ": input '" + v.name() + "' is a scalar; joule needs a batch dimension");
        model_.input = graph_.input(v.name(), {s, integer ? DType::I32 : DType::F32, !integer && s.size() == 4 ? Layout::ChannelsLast : Layout::Plain});
        set(v.name(), model_.input);
    }

    zoo::Model finish() {
        if (g_.output_size() < 1) throw Error(where_ + ": the graph has no output");
        for (const auto& [name, node] : loss_nodes_) {
            (void)node;
            model_.loss = values_.count(name) ? values_.at(name).t : kNone;
        }
        if (model_.loss == kNone) {
            const std::string& out = g_.output(0).name();
            if (!values_.count(out) || values_.at(out).t == kNone) throw Error(where_ + ": output '" + out + "' is not computed from the input");
            TensorId logits = values_.at(out).t;
            const TensorDesc& d = graph_.tensor(logits).desc;
            if (d.rank() != 2 || !is_float(d.dtype))
                throw Error(where_ + ": output '" + out + "' is " + desc_str(d) + "; joule adds a cross-entropy loss to [batch, classes] logits",
                            "export the model with its loss (nn.CrossEntropyLoss) or with logits as its first output");
            model_.logits = plain(logits, "logits");
            if (model_.labels == kNone) model_.labels = graph_.input("labels", {{d.shape[0]}, DType::I32}, TensorRole::Label);
            try {
                model_.loss = graph_.add1(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {model_.logits, model_.labels}, "loss");
            } catch (const Error& e) {
                throw Error(where_ + ": the loss on output '" + out + "': " + e.what());
            }
        }
        for (const Node& n : graph_.nodes())  // ids of a token model index the first embedding table that reads them
            if (n.kind == OpKind::Embedding && n.inputs[0] == model_.input && model_.vocab == 0) model_.vocab = graph_.tensor(n.inputs[1]).desc.shape[0];
        if (graph_.tensor(model_.input).desc.dtype == DType::I32 && model_.vocab == 0)
            throw Error(where_ + ": integer input '" + graph_.tensor(model_.input).name + "' is not read by an embedding (Gather on a weight)");
        model_.graph = std::move(graph_);
        return std::move(model_);
    }

    // ---------------------------------------------------------------- patterns found before converting
    bool op_is(int i, const char* type) const { return i >= 0 && g_.node(i).op_type() == type; }
    // Input / output k of node i, "" when it has none there (the patterns look at nodes of any shape).
    const std::string& in_name(int i, int k) const {
        static const std::string none;
        return i >= 0 && k < g_.node(i).input_size() ? g_.node(i).input(k) : none;
    }
    const std::string& out_name(int i, int k) const {
        static const std::string none;
        return i >= 0 && k < g_.node(i).output_size() ? g_.node(i).output(k) : none;
    }
    // The other input of a two-input node than `name`.
    const std::string& other(int i, const std::string& name) const {
        return in_name(i, 0) == name ? in_name(i, 1) : in_name(i, 0);
    }
    bool binary_with_scalar(int i, const char* type, const std::string& x, double value) const {
        if (!op_is(i, type) || g_.node(i).input_size() != 2) return false;
        if (type == std::string("Div") || type == std::string("Sub")) {
            if (in_name(i, 0) != x) return false;
        }
        const std::optional<double> c = static_scalar(other(i, x));
        return c && near(*c, value);
    }

    void find_patterns() {
        for (int i = 0; i < g_.node_size(); ++i) {
            const NodeProto& n = g_.node(i);
            const std::string& t = n.op_type();
            if ((t == "Conv" || t == "BatchNormalization" || t == "LayerNormalization" || t == "Gemm") && n.input_size() > 1) weight_of_[i] = in_name(i, 1);
            if (t == "Gather" && is_initializer(in_name(i, 0))) weight_of_[i] = in_name(i, 0);
            if (t == "SoftmaxCrossEntropyLoss" && n.input_size() >= 2) loss_nodes_.emplace_back(out_name(i, 0), i);
            if (t == "NegativeLogLikelihoodLoss" && n.input_size() >= 2) {
                const int ls = producer(in_name(i, 0));
                if (op_is(ls, "LogSoftmax") && only_consumer(in_name(i, 0)) == i) {
                    absorbed_.insert(ls);
                    loss_nodes_.emplace_back(out_name(i, 0), i);
                }
            }
            if (t == "MatMul" && n.input_size() == 2) find_matmul(i);
            if (t == "Gemm" && n.input_size() >= 2) linears_[i] = Linear{in_name(i, 1), attr_i(i, "transB", 0) == 0, n.input_size() > 2 ? in_name(i, 2) : "", out_name(i, 0)};
            if (t == "Pad") find_pad(i);
            if (t == "Erf") find_gelu(i);
            if (t == "ReduceMean") find_layer_norm(i);
        }
    }

    void find_matmul(int i) {
        Linear l{in_name(i, 1), true, "", out_name(i, 0)};
        if (const int tw = producer(in_name(i, 1)); op_is(tw, "Transpose") && only_consumer(in_name(i, 1)) == i) {  // x W^T, PyTorch's nn.Linear
            const std::vector<int64_t> perm = attr_ints(tw, "perm");
            if (is_initializer(in_name(tw, 0)) && (perm.empty() || perm == std::vector<int64_t>{1, 0})) {
                l.weight = in_name(tw, 0), l.weight_transposed = false;
                absorbed_.insert(tw);
            }
        }
        if (is_initializer(l.weight) && inits_.at(l.weight)->dims_size() == 2) {  // x W: a linear layer
            const int64_t out = inits_.at(l.weight)->dims(l.weight_transposed ? 1 : 0);
            const int add = only_consumer(out_name(i, 0));
            if (op_is(add, "Add") && g_.node(add).input_size() == 2) {
                const std::string& b = other(add, out_name(i, 0));
                if (is_initializer(b) && inits_.at(b)->dims_size() == 1 && inits_.at(b)->dims(0) == out) {
                    l.bias = b, l.out = out_name(add, 0);
                    absorbed_.insert(add);
                }
            }
            linears_[i] = l;
            weight_of_[i] = l.weight;
            return;
        }
        MatMulFold f{in_name(i, 1), false, 1.0, out_name(i, 0)};
        const int tr = producer(in_name(i, 1));
        if (op_is(tr, "Transpose") && only_consumer(in_name(i, 1)) == i) {
            std::vector<int64_t> perm = attr_ints(tr, "perm");
            const size_t r = perm.size();
            bool swaps_last = r >= 2;
            for (size_t k = 0; k + 2 < r; ++k) swaps_last = swaps_last && perm[k] == int64_t(k);
            if (swaps_last && perm[r - 2] == int64_t(r - 1) && perm[r - 1] == int64_t(r - 2)) {
                f.b = in_name(tr, 0), f.trans_b = true;
                absorbed_.insert(tr);
            }
        }
        const int sc = only_consumer(out_name(i, 0));
        if ((op_is(sc, "Div") || op_is(sc, "Mul")) && g_.node(sc).input_size() == 2 && (op_is(sc, "Mul") || in_name(sc, 0) == out_name(i, 0))) {
            if (const std::optional<double> c = static_scalar(other(sc, out_name(i, 0))); c && *c != 0) {
                f.alpha = op_is(sc, "Div") ? 1.0 / *c : *c;
                f.out = out_name(sc, 0);
                absorbed_.insert(sc);
            }
        }
        matmuls_[i] = f;
    }

    // Zero padding of H and W (same both sides) that a convolution or an average pooling counting the
    // padding reads alone: their own padding (PyTorch pads that way for AvgPool2d below opset 19).
    void find_pad(int p) {
        if (attr_s(p, "mode", "constant") != "constant" || opset_ < 11) return;
        if (!in_name(p, 2).empty()) {
            const std::optional<double> v = static_scalar(in_name(p, 2));
            if (!v || *v != 0) return;
        }
        const std::optional<Const> pads = static_const(in_name(p, 1));
        if (!pads || pads->numel() != 8) return;
        const std::vector<double>& v = pads->v;
        if (v[0] || v[1] || v[4] || v[5] || v[2] != v[6] || v[3] != v[7] || v[2] < 0 || v[3] < 0 || v[2] > 1e6 || v[3] > 1e6) return;
        const int c = only_consumer(out_name(p, 0));
        if (!(op_is(c, "Conv") || (op_is(c, "AveragePool") && (attr_i(c, "count_include_pad", 0) == 1 || (!v[2] && !v[3])))) || in_name(c, 0) != out_name(p, 0)) return;
        absorbed_.insert(p);
        pads_[c] = {int64_t(v[2]), int64_t(v[3]), in_name(p, 0)};
    }
    struct Padding {
        int64_t h, w;
        std::string input;  // what the absorbed Pad padded
    };

    // x * 0.5 * (1 + erf(x / sqrt 2)), in either of PyTorch's two orders.
    void find_gelu(int e) {
        const int d = producer(in_name(e, 0));
        if (d < 0 || only_consumer(in_name(e, 0)) != e) return;
        const std::string x = in_name(d, 0);
        if (!binary_with_scalar(d, "Div", x, std::sqrt(2.0)) && !binary_with_scalar(d, "Mul", x, std::sqrt(0.5))) return;
        const int a = only_consumer(out_name(e, 0));
        if (!binary_with_scalar(a, "Add", out_name(e, 0), 1.0)) return;
        const int m1 = only_consumer(out_name(a, 0));
        if (!op_is(m1, "Mul") || g_.node(m1).input_size() != 2) return;
        const std::string& y = other(m1, out_name(a, 0));
        if (y == x) {
            const int m2 = only_consumer(out_name(m1, 0));
            if (!binary_with_scalar(m2, "Mul", out_name(m1, 0), 0.5)) return;
            absorbed_.insert({d, e, a, m1});
            gelus_[m2] = x;
            return;
        }
        const int h = producer(y);
        if (binary_with_scalar(h, "Mul", x, 0.5) && only_consumer(y) == m1) {
            absorbed_.insert({d, e, a, h});
            gelus_[m1] = x;
        }
    }

    // PyTorch's LayerNorm below opset 17: m = mean(x), d = x - m, v = mean(d^2), y = d / sqrt(v + eps) * gamma + beta
    void find_layer_norm(int m) {
        const std::vector<int64_t> axes = attr_ints(m, "axes");
        if (axes != std::vector<int64_t>{-1} || attr_i(m, "keepdims", 1) != 1) return;
        const std::string x = in_name(m, 0);
        const int sub = only_consumer(out_name(m, 0));
        if (!op_is(sub, "Sub") || in_name(sub, 0) != x || in_name(sub, 1) != out_name(m, 0)) return;
        const std::string dd = out_name(sub, 0);
        const auto it = consumers_.find(dd);
        if (it == consumers_.end() || it->second.size() != 2) return;
        int pw = -1, div = -1;
        for (int c : it->second) (op_is(c, "Pow") ? pw : div) = c;
        if (!binary_with_scalar(pw, "Pow", dd, 2.0) || !op_is(div, "Div") || in_name(div, 0) != dd) return;
        const int vm = only_consumer(out_name(pw, 0));
        if (!op_is(vm, "ReduceMean") || attr_ints(vm, "axes") != axes) return;
        const int ad = only_consumer(out_name(vm, 0));
        if (!op_is(ad, "Add") || g_.node(ad).input_size() != 2) return;
        const std::optional<double> eps = static_scalar(other(ad, out_name(vm, 0)));
        const int sq = only_consumer(out_name(ad, 0));
        if (!eps || !op_is(sq, "Sqrt") || only_consumer(out_name(sq, 0)) != div || in_name(div, 1) != out_name(sq, 0)) return;
        const int mul = only_consumer(out_name(div, 0));
        if (!op_is(mul, "Mul")) return;
        const std::string& gamma = other(mul, out_name(div, 0));
        const int add = only_consumer(out_name(mul, 0));
        if (!op_is(add, "Add") || !is_initializer(gamma)) return;
        const std::string& beta = other(add, out_name(mul, 0));
        if (!is_initializer(beta)) return;
        absorbed_.insert({m, sub, pw, vm, ad, sq, div, mul});
        layer_norms_[add] = {x, gamma, beta, float(*eps)};
        weight_of_[add] = gamma;
    }
    struct LayerNormParts {
        std::string x, gamma, beta;
        float eps;
    };

    // ---------------------------------------------------------------- constants evaluated at import
    Const constant_node(int i) const {
        const NodeProto& n = g_.node(i);
        if (n.attribute_size() != 1) fail(i, "a Constant needs exactly one value attribute");
        const auto& a = n.attribute(0);
        Const c;
        if (a.name() == "value") return onnx_io::const_of(a.t(), what(i), dir_);
        if (a.name() == "value_float") c.floating = true, c.v = {a.f()};
        else if (a.name() == "value_int") c.v = {double(a.i())};
        else if (a.name() == "value_floats") c.floating = true, c.v.assign(a.floats().begin(), a.floats().end()), c.dims = {a.floats_size()};
        else if (a.name() == "value_ints") c.v.assign(a.ints().begin(), a.ints().end()), c.dims = {a.ints_size()};
        else fail(i, "constant attribute '" + a.name() + "' is not one joule reads");
        return c;
    }
    // Shape arithmetic on constants; false when an input is not constant (the node is then a joule op).
    bool fold(int i) {
        const NodeProto& n = g_.node(i);
        const std::string& t = n.op_type();
        if (t == "Constant") return set(n.output(0), constant_node(i)), true;
        if (t == "Shape") {
            const Shape& s = shape_of(i, n.input(0));
            const int64_t r = int64_t(s.size());
            int64_t b = attr_i(i, "start", 0), e = attr_i(i, "end", r);
            b = std::clamp(b < 0 ? b + r : b, int64_t(0), r), e = std::clamp(e < 0 ? e + r : e, int64_t(0), r);
            Const c;
            for (int64_t k = b; k < e; ++k) c.v.push_back(double(s[size_t(k)]));
            c.dims = {c.numel()};
            return set(n.output(0), c), true;
        }
        for (const std::string& in : n.input()) {
            if (!in.empty() && !is_const(in)) return false;
            if (is_initializer(in) && onnx_io::is_float_type(inits_.at(in)->data_type()) && onnx_io::element_count(inits_.at(in)->dims(), in) > 1)
                return false;  // a weight: trained, never folded into a constant
        }
        std::vector<const Const*> in;
        for (const std::string& name : n.input()) in.push_back(name.empty() ? nullptr : &constant(i, name));
        auto need = [&](size_t k) -> const Const& {
            if (k >= in.size() || !in[k]) fail(i, "input " + std::to_string(k) + " is missing");
            return *in[k];
        };
        Const r;
        if (t == "Identity" || t == "Cast" || t == "Reshape" || t == "Unsqueeze" || t == "Squeeze" || t == "Flatten") {
            r = need(0);
            if (t == "Cast") {
                r.floating = onnx_io::is_float_type(int32_t(attr_i(i, "to", 1)));
                if (!r.floating)
                    for (double& v : r.v) v = std::trunc(v);
            }
            if (t == "Reshape") {
                const std::vector<int64_t> want = ints(i, n.input(1));
                Shape s;
                int64_t known = 1, infer = -1;
                for (size_t k = 0; k < want.size(); ++k) {
                    int64_t d = want[k] == 0 && k < r.dims.size() ? r.dims[k] : want[k];
                    if (d == -1) infer = int64_t(k), d = 1;
                    known *= d;
                    s.push_back(d);
                }
                if (infer >= 0 && known > 0) s[size_t(infer)] = r.numel() / known;
                if (numel_of(s) != r.numel()) fail(i, "cannot reshape a constant of " + shape_str(r.dims) + " to " + shape_str(s));
                r.dims = s;
            } else if (t == "Unsqueeze" || t == "Squeeze") {
                std::vector<int64_t> axes = opset_ >= 13 ? (in.size() > 1 && in[1] ? ints(i, n.input(1)) : std::vector<int64_t>{}) : attr_ints(i, "axes");
                if (t == "Squeeze") {
                    Shape s;
                    const int64_t rank = int64_t(r.dims.size());
                    for (int64_t k = 0; k < rank; ++k) {
                        const bool listed = std::find(axes.begin(), axes.end(), k) != axes.end() || std::find(axes.begin(), axes.end(), k - rank) != axes.end();
                        if (!(axes.empty() ? r.dims[size_t(k)] == 1 : listed)) s.push_back(r.dims[size_t(k)]);
                    }
                    r.dims = s;
                } else {
                    const int64_t rank = int64_t(r.dims.size() + axes.size());
                    for (int64_t& a : axes) a = a < 0 ? a + rank : a;
                    std::sort(axes.begin(), axes.end());
                    for (int64_t a : axes) r.dims.insert(r.dims.begin() + std::clamp<int64_t>(a, 0, int64_t(r.dims.size())), 1);
                }
            } else if (t == "Flatten") {
                const int64_t axis = attr_i(i, "axis", 1);
                const int64_t a = axis < 0 ? axis + int64_t(r.dims.size()) : axis;
                const int64_t lead = numel_of(Shape(r.dims.begin(), r.dims.begin() + std::clamp<int64_t>(a, 0, int64_t(r.dims.size()))));
                r.dims = {lead, lead ? r.numel() / lead : 0};
            }
        } else if (t == "Gather") {
            const Const& data = need(0);
            const Const& idx = need(1);
            if (data.dims.empty()) fail(i, "gathers from a scalar");
            const int64_t axis = attr_i(i, "axis", 0) < 0 ? attr_i(i, "axis", 0) + int64_t(data.dims.size()) : attr_i(i, "axis", 0);
            if (axis < 0 || axis >= int64_t(data.dims.size())) fail(i, "axis out of range");
            const int64_t outer = numel_of(Shape(data.dims.begin(), data.dims.begin() + axis)), dim = data.dims[size_t(axis)];
            const int64_t inner = numel_of(Shape(data.dims.begin() + axis + 1, data.dims.end()));
            r.floating = data.floating;
            r.dims = Shape(data.dims.begin(), data.dims.begin() + axis);
            r.dims.insert(r.dims.end(), idx.dims.begin(), idx.dims.end());
            r.dims.insert(r.dims.end(), data.dims.begin() + axis + 1, data.dims.end());
            for (int64_t o = 0; o < outer; ++o)
                for (double q : idx.v) {
                    const int64_t k = as_int(i, q) < 0 ? as_int(i, q) + dim : as_int(i, q);
                    if (k < 0 || k >= dim) fail(i, "index " + std::to_string(as_int(i, q)) + " is out of range for a dimension of " + std::to_string(dim));
                    for (int64_t j = 0; j < inner; ++j) r.v.push_back(data.v[size_t((o * dim + k) * inner + j)]);
                }
        } else if (t == "Concat") {
            const int64_t rank = int64_t(need(0).dims.size());
            int64_t axis = attr_i(i, "axis", 0);
            axis = axis < 0 ? axis + rank : axis;
            if (rank != 1 || axis != 0) fail(i, "joule folds concatenations of 1-D constants only");
            r.floating = need(0).floating;
            for (const Const* c : in) {
                if (!c || c->dims.size() != 1) fail(i, "joule folds concatenations of 1-D constants only");
                r.v.insert(r.v.end(), c->v.begin(), c->v.end());
            }
            r.dims = {r.numel()};
        } else if (t == "Slice" && opset_ >= 10) {
            const Const& data = need(0);
            if (data.dims.size() != 1) fail(i, "joule folds slices of 1-D constants only");
            const int64_t dim = data.dims[0];
            const int64_t s0 = ints(i, n.input(1)).at(0), e0 = ints(i, n.input(2)).at(0);
            const int64_t step = n.input_size() > 4 && !n.input(4).empty() ? ints(i, n.input(4)).at(0) : 1;
            if (step != 1) fail(i, "joule folds slices with step 1 only");
            const int64_t b = std::clamp(s0 < 0 ? s0 + dim : s0, int64_t(0), dim), e = std::clamp(e0 < 0 ? e0 + dim : e0, int64_t(0), dim);
            r.floating = data.floating;
            for (int64_t k = b; k < e; ++k) r.v.push_back(data.v[size_t(k)]);
            r.dims = {r.numel()};
        } else if (t == "ConstantOfShape") {
            Const fill;
            fill.floating = true, fill.v = {0.0};
            if (const auto* a = attr(n, "value")) fill = onnx_io::const_of(a->t(), what(i), dir_);
            const std::vector<int64_t> dims = ints(i, n.input(0));
            r.floating = fill.floating;
            r.dims = Shape(dims.begin(), dims.end());
            if (numel_of(r.dims) < 0 || numel_of(r.dims) > (1 << 20)) fail(i, "constant of " + shape_str(r.dims) + " is too large to fold");
            r.v.assign(size_t(numel_of(r.dims)), fill.v.empty() ? 0.0 : fill.v[0]);
        } else if (t == "Range") {
            const double s = need(0).v.at(0), l = need(1).v.at(0), d = need(2).v.at(0);
            if (d == 0) fail(i, "range with a zero step");
            r.floating = need(0).floating;
            for (double v = s; (d > 0 ? v < l : v > l) && r.v.size() < (1u << 20); v += d) r.v.push_back(v);
            r.dims = {r.numel()};
        } else if (t == "Add" || t == "Sub" || t == "Mul" || t == "Div" || t == "Equal" || t == "Pow" || t == "Where" || t == "Expand" || t == "Max" || t == "Min") {
            const Const& a = need(t == "Where" ? 1 : 0);
            const Const& b = t == "Expand" ? a : need(t == "Where" ? 2 : 1);
            Shape dims = broadcast_dims(a.dims, b.dims, what(i));
            if (t == "Where") dims = broadcast_dims(dims, need(0).dims, what(i));
            if (t == "Expand") {
                const std::vector<int64_t> want = ints(i, n.input(1));
                dims = broadcast_dims(a.dims, Shape(want.begin(), want.end()), what(i));
            }
            if (numel_of(dims) > (1 << 20)) fail(i, "constant of " + shape_str(dims) + " is too large to fold");
            r.dims = dims;
            r.floating = t == "Equal" ? false : a.floating || b.floating;
            for (int64_t k = 0; k < numel_of(dims); ++k) {
                const double x = a.v[size_t(broadcast_source_index(a.dims, dims, k))], y = b.v[size_t(broadcast_source_index(b.dims, dims, k))];
                double v = 0;
                if (t == "Add") v = x + y;
                else if (t == "Sub") v = x - y;
                else if (t == "Mul") v = x * y;
                else if (t == "Div") {
                    if (y == 0 && !r.floating) fail(i, "integer division by zero");
                    v = r.floating ? x / y : std::trunc(x / y);
                } else if (t == "Equal") v = x == y;
                else if (t == "Pow") v = std::pow(x, y);
                else if (t == "Max") v = std::max(x, y);
                else if (t == "Min") v = std::min(x, y);
                else if (t == "Expand") v = x;
                else v = need(0).v[size_t(broadcast_source_index(need(0).dims, dims, k))] != 0 ? x : y;  // Where
                r.v.push_back(v);
            }
        } else if (t == "Neg" || t == "Sqrt") {
            r = need(0);
            for (double& v : r.v) v = t == "Neg" ? -v : std::sqrt(v);
        } else {
            return false;
        }
        set(n.output(0), std::move(r));
        return true;
    }

    // ---------------------------------------------------------------- joule ops
    void convert(int i) {
        if (fold(i)) return;
        const NodeProto& n = g_.node(i);
        const std::string& t = n.op_type();
        auto in = [&](int k) -> const std::string& {
            if (k >= n.input_size() || n.input(k).empty()) fail(i, "input " + std::to_string(k) + " is missing");
            return n.input(k);
        };
        auto out = [&](TensorId id) { set(n.output(0), id); };
        auto check_extra_outputs = [&](int from) { only_first_output_read(i, from); };
        if (!n.domain().empty() && n.domain() != "ai.onnx") fail(i, "op of domain '" + n.domain() + "'; joule reads the default ONNX domain only");

        if (const auto g = gelus_.find(i); g != gelus_.end()) return out(add(i, OpKind::Gelu, NoAttrs{}, {tensor(i, g->second)}));
        if (const auto ln = layer_norms_.find(i); ln != layer_norms_.end()) return out(layer_norm(i, ln->second));
        if (t == "Identity") return alias(n.output(0), in(0));
        if (t == "Conv") return out(conv(i));
        if (t == "BatchNormalization") {
            check_extra_outputs(1);
            const TensorId x = tensor(i, in(0));
            if (graph_.tensor(x).desc.rank() != 4) fail(i, "joule's BatchNorm normalises [N, C, H, W] tensors; the input is " + desc_str(graph_.tensor(x).desc));
            const float momentum = 1.0f - attr_f(i, "momentum", 0.9f);  // ONNX: running = running m + batch (1 - m); PyTorch's momentum = 1 - m
            return out(add(i, OpKind::BatchNorm2d, NormAttrs{attr_f(i, "epsilon", 1e-5f), momentum},
                           {x, weight(i, in(1), TensorRole::Parameter), weight(i, in(2), TensorRole::Parameter), weight(i, in(3), TensorRole::State),
                            weight(i, in(4), TensorRole::State)}));
        }
        if (t == "LayerNormalization") {
            check_extra_outputs(1);
            const int64_t axis = attr_i(i, "axis", -1);
            const TensorId x = tensor(i, in(0));
            if (axis != -1 && axis != graph_.tensor(x).desc.rank() - 1) fail(i, "joule normalises over the last axis only, got axis " + std::to_string(axis));
            if (n.input_size() < 3 || n.input(2).empty()) fail(i, "a LayerNorm without a bias (joule's has one)");
            return out(layer_norm(i, {in(0), in(1), in(2), attr_f(i, "epsilon", 1e-5f)}));
        }
        if (t == "Relu" || t == "Sigmoid" || t == "Tanh") {
            const OpKind k = t == "Relu" ? OpKind::Relu : t == "Sigmoid" ? OpKind::Sigmoid : OpKind::Tanh;
            return out(add(i, k, NoAttrs{}, {tensor(i, in(0))}));
        }
        if (t == "Clip") {
            std::optional<double> lo, hi;
            if (opset_ >= 11) {
                if (n.input_size() > 1 && !n.input(1).empty()) lo = constant(i, n.input(1)).v.at(0);
                if (n.input_size() > 2 && !n.input(2).empty()) hi = constant(i, n.input(2)).v.at(0);
            }
            if (opset_ < 11) lo = attr_f(i, "min", -3.4028234e38f), hi = attr_f(i, "max", 3.4028234e38f);
            if (lo && *lo == 0 && hi && *hi == 6) return out(add(i, OpKind::Relu6, NoAttrs{}, {tensor(i, in(0))}));
            if (lo && *lo == 0 && (!hi || *hi >= 3.4e38)) return out(add(i, OpKind::Relu, NoAttrs{}, {tensor(i, in(0))}));
            if (lo && hi && *lo > *hi) fail(i, "clips to an empty range [" + std::to_string(*lo) + ", " + std::to_string(*hi) + "]");
            return out(add(i, OpKind::Clip, ClipAttrs{lo ? float(*lo) : -3.4028234e38f, hi ? float(*hi) : 3.4028234e38f}, {tensor(i, in(0))}));
        }
        if (t == "MaxPool" || t == "AveragePool") return out(pool(i));
        if (t == "GlobalAveragePool") return out(add(i, OpKind::GlobalAvgPool, NoAttrs{}, {tensor(i, in(0))}));
        if (t == "Flatten" || t == "Reshape" || t == "Squeeze" || t == "Unsqueeze") return out(reshape(i));
        if (t == "Transpose") {
            const TensorId x = plain(tensor(i, in(0)), joule_name(i));
            std::vector<int64_t> perm = attr_ints(i, "perm");
            if (perm.empty())
                for (int64_t k = graph_.tensor(x).desc.rank(); k-- > 0;) perm.push_back(k);
            return out(add(i, OpKind::Transpose, TransposeAttrs{perm}, {x}));
        }
        if (t == "Add" || t == "Mul" || t == "Sub" || t == "Div") return out(binary(i));
        if (t == "Sqrt") return out(add(i, OpKind::Sqrt, NoAttrs{}, {tensor(i, in(0))}));
        if (t == "Neg") return out(add(i, OpKind::SumTo, BroadcastAttrs{shape_of(i, in(0)), -1.0f, graph_.tensor(tensor(i, in(0))).desc.layout}, {tensor(i, in(0))}));
        if (t == "Pow") {
            if (!is_const(in(1)) || constant(i, in(1)).numel() != 1) fail(i, "joule raises to a constant scalar exponent only");
            return out(add(i, OpKind::Pow, PowAttrs{float(constant(i, in(1)).v[0])}, {tensor(i, in(0))}));
        }
        if (t == "ReduceMean" || t == "ReduceSum") return out(reduce(i));
        if (t == "Expand") {
            const TensorId x = tensor(i, in(0));
            const std::vector<int64_t> want = ints(i, in(1));
            const Shape& s = graph_.tensor(x).desc.shape;
            const Shape y = broadcast_dims(s, Shape(want.begin(), want.end()), what(i));
            if (y == s) return alias(n.output(0), in(0));
            return out(add(i, OpKind::Expand, BroadcastAttrs{y, 1.0f, Layout::Plain}, {plain(x, joule_name(i))}));
        }
        if (t == "Gemm" || t == "MatMul") {
            if (const auto l = linears_.find(i); l != linears_.end()) return linear(i, l->second);
            const MatMulFold& f = matmuls_.at(i);
            const TensorId a = plain(tensor(i, in(0)), joule_name(i)), b = plain(tensor(i, f.b), joule_name(i));
            set(f.out, add(i, OpKind::MatMul, MatMulAttrs{false, f.trans_b, float(f.alpha)}, {a, b}));
            return;
        }
        if (t == "Softmax") {
            const TensorId x = plain(tensor(i, in(0)), joule_name(i));
            const int64_t axis = attr_i(i, "axis", opset_ >= 13 ? -1 : 1), r = graph_.tensor(x).desc.rank();
            if (axis != -1 && axis != r - 1) fail(i, "joule's softmax is over the last axis, this one's axis is " + std::to_string(axis));
            return out(add(i, OpKind::Softmax, AxisAttrs{-1}, {x}));
        }
        if (t == "Concat") {
            std::vector<TensorId> xs;
            for (const std::string& name : n.input()) xs.push_back(tensor(i, name));
            return out(add(i, OpKind::Concat, AxisAttrs{attr_i(i, "axis", 0)}, xs));
        }
        if (t == "Slice") return out(slice(i));
        if (t == "Gather" && !is_initializer(in(0))) {  // one index of a computed tensor (BERT's [CLS] state): a slice
            const TensorId x = plain(tensor(i, in(0)), joule_name(i));
            const Shape& s = graph_.tensor(x).desc.shape;
            const int64_t r = int64_t(s.size()), axis = attr_i(i, "axis", 0) < 0 ? attr_i(i, "axis", 0) + r : attr_i(i, "axis", 0);
            if (!is_const(in(1)) || constant(i, in(1)).numel() != 1 || axis < 0 || axis >= r)
                fail(i, "joule gathers a computed tensor at one constant index only (and rows of a weight: an embedding)");
            const Const& c = constant(i, in(1));
            const int64_t k = as_int(i, c.v[0]) < 0 ? as_int(i, c.v[0]) + s[size_t(axis)] : as_int(i, c.v[0]);
            TensorId y = add(i, OpKind::Slice, SliceAttrs{axis, k, 1}, {x});
            if (c.dims.empty()) {  // a scalar index drops the axis
                Shape out = s;
                out.erase(out.begin() + axis);
                y = graph_.add1(OpKind::Reshape, ReshapeAttrs{out, Layout::Plain}, {y}, joule_name(i) + ".squeeze");
            }
            return out(y);
        }
        if (t == "Gather") {
            if (attr_i(i, "axis", 0) != 0) fail(i, "joule gathers rows of a weight (an embedding) only");
            TensorId ids;
            if (is_const(in(1))) {
                const Const& c = constant(i, in(1));
                std::vector<int32_t> v;
                for (double q : c.v) {
                    if (as_int(i, q) < 0 || as_int(i, q) >= graph_.tensor(weight(i, in(0), TensorRole::Parameter)).desc.shape.at(0)) fail(i, "index " + std::to_string(q) + " is outside the table");
                    v.push_back(int32_t(q));
                }
                if (c.dims.empty()) fail(i, "a scalar index");
                ids = graph_.constant(joule_name(i) + ".ids", {c.dims, DType::I32}, Init::data(std::move(v)));
            } else {
                ids = tensor(i, in(1));
            }
            if (graph_.tensor(ids).desc.dtype != DType::I32) fail(i, "indices must be integers");
            return out(add(i, OpKind::Embedding, NoAttrs{}, {ids, weight(i, in(0), TensorRole::Parameter)}));
        }
        if (t == "Dropout") {
            check_extra_outputs(1);
            double p = attr_f(i, "ratio", 0.5f);
            if (opset_ >= 12) p = n.input_size() > 1 && !n.input(1).empty() ? constant(i, n.input(1)).v.at(0) : 0.5;
            const bool training = opset_ >= 12 && n.input_size() > 2 && !n.input(2).empty() && constant(i, n.input(2)).v.at(0) != 0;
            if (!training || p == 0) return alias(n.output(0), in(0));  // an inference-mode export: dropout is the identity
            return out(add(i, OpKind::Dropout, DropoutAttrs{float(p), 0}, {tensor(i, in(0))}));
        }
        if (t == "SoftmaxCrossEntropyLoss" || t == "NegativeLogLikelihoodLoss") return loss(i);
        if (t == "Erf") fail(i, "joule has no op for ONNX Erf outside GELU's erf form x * 0.5 * (1 + erf(x / sqrt 2))");
        fail(i, "joule has no op for ONNX " + t, "the ops joule imports are listed in src/import/README.md");
    }

    // Outputs from `from` on (BatchNorm's running statistics, Dropout's mask, ...) may be graph outputs
    // (PyTorch's training-mode export lists updated statistics there) but no node may read them.
    void only_first_output_read(int i, int from) const {
        const NodeProto& n = g_.node(i);
        for (int k = from; k < n.output_size(); ++k) {
            if (n.output(k).empty()) continue;
            for (int c : consumers_.count(n.output(k)) ? consumers_.at(n.output(k)) : std::vector<int>{})
                if (c >= 0) fail(i, "output " + std::to_string(k) + " ('" + n.output(k) + "') is read by another node; joule computes only the first");
        }
    }

    // A binary op's operand: a computed tensor, a weight (a float initializer of more than one element,
    // trained) or a constant (a scalar initializer, a Constant node, folded arithmetic).
    TensorId operand(int i, const std::string& name) {
        const auto v = values_.find(name);
        if (v != values_.end() && v->second.t != kNone) return v->second.t;
        if (is_initializer(name) && onnx_io::is_float_type(inits_.at(name)->data_type()) && onnx_io::element_count(inits_.at(name)->dims(), name) > 1)
            return weight(i, name, TensorRole::Parameter);
        const Const& c = constant(i, name);
        if (!c.floating) fail(i, "integer constant '" + name + "' in floating-point arithmetic");
        std::vector<float> data(c.v.begin(), c.v.end());
        const TensorId t = graph_.constant(name, {c.dims.empty() ? Shape{1} : c.dims}, Init::data(std::move(data)));
        values_[name].t = t;
        return t;
    }
    // Add, Mul, Sub, Div with numpy broadcasting: joule's ops broadcast B to A; an A that is itself
    // broadcast is swapped with B (Add, Mul) or expanded first.
    TensorId binary(int i) {
        const NodeProto& n = g_.node(i);
        const std::string& t = n.op_type();
        const OpKind k = t == "Add" ? OpKind::Add : t == "Mul" ? OpKind::Mul : t == "Sub" ? OpKind::Sub : OpKind::Div;
        TensorId a = operand(i, n.input(0)), b = operand(i, n.input(1));
        const Shape y = broadcast_dims(graph_.tensor(a).desc.shape, graph_.tensor(b).desc.shape, what(i));
        if (graph_.tensor(a).desc.shape != y && (k == OpKind::Add || k == OpKind::Mul) && graph_.tensor(b).desc.shape == y) std::swap(a, b);
        if (graph_.tensor(a).desc.shape != y)
            a = graph_.add1(OpKind::Expand, BroadcastAttrs{y, 1.0f, Layout::Plain}, {plain(a, joule_name(i))}, joule_name(i) + ".expand");
        return add(i, k, NoAttrs{}, {a, b});
    }
    // ReduceMean / ReduceSum over axes (all when none are given): a SumTo with the kept dims, then a
    // reshape that drops them unless keepdims.
    TensorId reduce(int i) {
        const NodeProto& n = g_.node(i);
        const TensorId x = tensor(i, n.input(0));
        const TensorDesc& d = graph_.tensor(x).desc;
        std::vector<int64_t> axes = n.op_type() == "ReduceSum" && opset_ >= 13 ? (n.input_size() > 1 && !n.input(1).empty() ? ints(i, n.input(1)) : std::vector<int64_t>{})
                                                                               : attr_ints(i, "axes");
        if (axes.empty() && attr_i(i, "noop_with_empty_axes", 0) == 1) return x;
        const int64_t r = d.rank();
        if (axes.empty())
            for (int64_t k = 0; k < r; ++k) axes.push_back(k);
        Shape kept = d.shape;
        int64_t count = 1;
        for (int64_t a : axes) {
            const int64_t ax = a < 0 ? a + r : a;
            if (ax < 0 || ax >= r) fail(i, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(r));
            if (kept[size_t(ax)] != 1) count *= kept[size_t(ax)];
            kept[size_t(ax)] = 1;
        }
        const float scale = n.op_type() == "ReduceMean" ? float(1.0 / double(count)) : 1.0f;
        TensorId y = add(i, OpKind::SumTo, BroadcastAttrs{kept, scale, r == 4 ? d.layout : Layout::Plain}, {x});
        if (attr_i(i, "keepdims", 1) == 0) {
            Shape dropped;
            for (int64_t k = 0; k < r; ++k)
                if (std::find_if(axes.begin(), axes.end(), [&](int64_t a) { return (a < 0 ? a + r : a) == k; }) == axes.end()) dropped.push_back(d.shape[size_t(k)]);
            if (dropped.empty()) dropped = {1};
            y = graph_.add1(OpKind::Reshape, ReshapeAttrs{dropped, Layout::Plain}, {y}, joule_name(i) + ".squeeze");
        }
        return y;
    }

    TensorId conv(int i) {
        const NodeProto& n = g_.node(i);
        const auto pad_in = pads_.find(i);
        const TensorId x = tensor(i, pad_in == pads_.end() ? n.input(0) : pad_in->second.input);
        const TensorId w = weight(i, n.input(1), TensorRole::Parameter);
        const Shape& ws = graph_.tensor(w).desc.shape;
        if (ws.size() != 4) fail(i, "joule convolves 2-D images; the weight is " + shape_str(ws));
        const std::string pad = attr_s(i, "auto_pad", "NOTSET");
        if (pad != "NOTSET" && pad != "VALID") fail(i, "auto_pad " + pad + " (export with explicit pads)");
        ConvAttrs a;
        const std::vector<int64_t> st = attr_ints(i, "strides"), di = attr_ints(i, "dilations"), pads = attr_ints(i, "pads");
        if ((!st.empty() && st.size() != 2) || (!di.empty() && di.size() != 2)) fail(i, "strides and dilations must have 2 values (a 2-D convolution)");
        for (int k = 0; k < 2; ++k) {
            if (!st.empty()) a.stride[k] = st.at(size_t(k));
            if (!di.empty()) a.dilation[k] = di.at(size_t(k));
        }
        if (!pads.empty()) {
            if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) fail(i, "joule pads both sides alike; pads are " + shape_str(pads));
            a.pad[0] = pads[0], a.pad[1] = pads[1];
        }
        if (pad_in != pads_.end()) a.pad[0] += pad_in->second.h, a.pad[1] += pad_in->second.w;
        a.groups = attr_i(i, "group", 1);
        std::vector<TensorId> ins = {x, w};
        if (n.input_size() > 2 && !n.input(2).empty()) ins.push_back(weight(i, n.input(2), TensorRole::Parameter)), a.bias = true;
        return add(i, OpKind::Conv2d, a, ins);
    }

    TensorId pool(int i) {
        const NodeProto& n = g_.node(i);
        const bool max = n.op_type() == "MaxPool";
        if (max) check_pool_indices(i);
        const std::vector<int64_t> k = attr_ints(i, "kernel_shape"), st = attr_ints(i, "strides"), pads = attr_ints(i, "pads"), di = attr_ints(i, "dilations");
        if (k.size() != 2 || (!st.empty() && st.size() != 2)) fail(i, "joule pools 2-D windows; kernel_shape is " + shape_str(k) + ", strides " + shape_str(st));
        if (attr_i(i, "ceil_mode", 0) != 0) fail(i, "ceil_mode=1 (joule rounds output sizes down)");
        if (std::any_of(di.begin(), di.end(), [](int64_t d) { return d != 1; })) fail(i, "dilated pooling");
        if (attr_s(i, "auto_pad", "NOTSET") != "NOTSET" && attr_s(i, "auto_pad", "NOTSET") != "VALID") fail(i, "auto_pad (export with explicit pads)");
        PoolAttrs a;
        for (int d = 0; d < 2; ++d) a.kernel[d] = k[size_t(d)], a.stride[d] = st.empty() ? 1 : st.at(size_t(d));
        if (!pads.empty()) {
            if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) fail(i, "joule pads both sides alike; pads are " + shape_str(pads));
            a.pad[0] = pads[0], a.pad[1] = pads[1];
            if (!max && attr_i(i, "count_include_pad", 0) == 0 && (pads[0] || pads[1]))
                fail(i, "average pooling that leaves padding out of the count (joule counts it: count_include_pad=True)");
        }
        const auto pad_in = pads_.find(i);
        if (pad_in != pads_.end()) a.pad[0] += pad_in->second.h, a.pad[1] += pad_in->second.w;
        return add(i, max ? OpKind::MaxPool2d : OpKind::AvgPool2d, a, {tensor(i, pad_in == pads_.end() ? n.input(0) : pad_in->second.input)});
    }
    void check_pool_indices(int i) {
        const NodeProto& n = g_.node(i);
        if (n.output_size() > 1 && !n.output(1).empty() && uses(n.output(1)) > 0) fail(i, "the arg-max indices output is read (joule keeps them internal)");
    }

    TensorId reshape(int i) {
        const NodeProto& n = g_.node(i);
        const std::string& t = n.op_type();
        const TensorId x = tensor(i, n.input(0));
        const Shape& s = graph_.tensor(x).desc.shape;
        Shape y;
        if (t == "Flatten") {
            int64_t axis = attr_i(i, "axis", 1);
            axis = axis < 0 ? axis + int64_t(s.size()) : axis;
            if (axis < 0 || axis > int64_t(s.size())) fail(i, "axis out of range");
            const int64_t lead = numel_of(Shape(s.begin(), s.begin() + axis));
            y = {lead, numel_of(s) / lead};
        } else if (t == "Reshape") {
            const std::vector<int64_t> want = ints(i, n.input(1));
            for (size_t k = 0; k < want.size(); ++k) y.push_back(want[k] == 0 && attr_i(i, "allowzero", 0) == 0 && k < s.size() ? s[k] : want[k]);
        } else {  // Squeeze / Unsqueeze on a computed tensor
            std::vector<int64_t> axes = opset_ >= 13 ? (n.input_size() > 1 && !n.input(1).empty() ? ints(i, n.input(1)) : std::vector<int64_t>{}) : attr_ints(i, "axes");
            const int64_t rank = int64_t(s.size()) + (t == "Unsqueeze" ? int64_t(axes.size()) : 0);
            for (int64_t& a : axes) a = a < 0 ? a + rank : a;
            if (t == "Squeeze") {
                for (int64_t k = 0; k < int64_t(s.size()); ++k)
                    if (!(axes.empty() ? s[size_t(k)] == 1 : std::find(axes.begin(), axes.end(), k) != axes.end())) y.push_back(s[size_t(k)]);
            } else {
                y = s;
                std::sort(axes.begin(), axes.end());
                for (int64_t a : axes) {
                    if (a < 0 || a > int64_t(y.size())) fail(i, "axis out of range");
                    y.insert(y.begin() + a, 1);
                }
            }
        }
        if (y == s && graph_.tensor(x).desc.layout == Layout::Plain) return x;
        return add(i, OpKind::Reshape, ReshapeAttrs{y, Layout::Plain}, {x});
    }

    TensorId slice(int i) {
        const NodeProto& n = g_.node(i);
        TensorId x = tensor(i, n.input(0));
        if (opset_ < 10 || n.input_size() < 3) fail(i, "slice without starts and ends inputs");
        const std::vector<int64_t> starts = ints(i, n.input(1)), ends = ints(i, n.input(2));
        std::vector<int64_t> axes = n.input_size() > 3 && !n.input(3).empty() ? ints(i, n.input(3)) : std::vector<int64_t>{};
        const std::vector<int64_t> steps = n.input_size() > 4 && !n.input(4).empty() ? ints(i, n.input(4)) : std::vector<int64_t>{};
        if (axes.empty())
            for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
        if (axes.size() != starts.size() || ends.size() != starts.size()) fail(i, "starts, ends and axes differ in length");
        const std::string& name = joule_name(i);
        for (size_t k = 0; k < axes.size(); ++k) {
            if (!steps.empty() && steps[k] != 1) fail(i, "slice step " + std::to_string(steps[k]) + " (joule slices with step 1)");
            const Shape& s = graph_.tensor(x).desc.shape;
            const int64_t a = axes[k] < 0 ? axes[k] + int64_t(s.size()) : axes[k];
            if (a < 0 || a >= int64_t(s.size())) fail(i, "axis out of range");
            const int64_t dim = s[size_t(a)];
            const int64_t b = std::clamp(starts[k] < 0 ? starts[k] + dim : starts[k], int64_t(0), dim);
            const int64_t e = std::clamp(ends[k] < 0 ? ends[k] + dim : ends[k], int64_t(0), dim);
            if (e <= b) fail(i, "an empty slice");
            if (b == 0 && e == dim) continue;
            try {
                x = graph_.add1(OpKind::Slice, SliceAttrs{a, b, e - b}, {x}, k == 0 ? name : name + "." + std::to_string(k));
            } catch (const Error& err) {
                fail(i, err.what());
            }
        }
        return x;
    }

    void linear(int i, const Linear& l) {
        const NodeProto& n = g_.node(i);
        if (n.op_type() == "Gemm") {
            if (attr_f(i, "alpha", 1.0f) != 1.0f || (!l.bias.empty() && attr_f(i, "beta", 1.0f) != 1.0f)) fail(i, "alpha or beta other than 1");
        }
        TensorId x = plain(tensor(i, n.input(0)), joule_name(i));
        if (n.op_type() == "Gemm" && attr_i(i, "transA", 0) != 0) {  // A^T: the linear layer takes [batch, features]
            if (graph_.tensor(x).desc.rank() != 2) fail(i, "Gemm's A must be 2-D");
            x = graph_.add1(OpKind::Transpose, TransposeAttrs{{1, 0}}, {x}, joule_name(i) + ".transpose_a");
        }
        std::vector<TensorId> ins = {x, weight(i, l.weight, TensorRole::Parameter, l.weight_transposed)};
        if (!l.bias.empty()) {
            const onnx::TensorProto& b = initializer(i, l.bias);
            if (b.dims_size() != 1) fail(i, "bias '" + l.bias + "' must be 1-D (a broadcast bias of shape " + std::to_string(b.dims_size()) + "-D is not supported)");
            ins.push_back(weight(i, l.bias, TensorRole::Parameter));
        }
        set(l.out, add(i, OpKind::Linear, LinearAttrs{!l.bias.empty()}, ins));
    }

    TensorId layer_norm(int i, const LayerNormParts& p) {
        const TensorId x = plain(tensor(i, p.x), joule_name(i));
        return add(i, OpKind::LayerNorm, NormAttrs{p.eps, 0.0f}, {x, weight(i, p.gamma, TensorRole::Parameter), weight(i, p.beta, TensorRole::Parameter)});
    }

    void loss(int i) {
        const NodeProto& n = g_.node(i);
        const bool nll = n.op_type() == "NegativeLogLikelihoodLoss";
        if (attr_s(i, "reduction", "mean") != "mean") fail(i, "reduction '" + attr_s(i, "reduction", "mean") + "' (joule's loss is the batch mean)");
        if (n.input_size() > 2 && !n.input(2).empty()) fail(i, "class weights");
        if (attr(n, "ignore_index") && attr_i(i, "ignore_index", -1) >= 0)  // PyTorch writes -100, which no class id is
            fail(i, "ignore_index " + std::to_string(attr_i(i, "ignore_index", -1)) + " (joule's loss counts every label)");
        if (!nll) only_first_output_read(i, 1);
        const std::string& scores = nll ? g_.node(producer(n.input(0))).input(0) : n.input(0);
        const TensorId logits = plain(tensor(i, scores), joule_name(i));
        if (graph_.tensor(logits).desc.rank() != 2) fail(i, "scores must be [batch, classes], got " + desc_str(graph_.tensor(logits).desc));
        model_.logits = logits;
        set(n.output(0), add(i, OpKind::SoftmaxCrossEntropy, NoAttrs{}, {logits, tensor(i, n.input(1))}));
    }

    const onnx::ModelProto& m_;
    const onnx::GraphProto& g_;
    std::string where_, dir_;
    OnnxImportOptions o_;
    int64_t opset_ = 0;
    std::unordered_map<std::string, const onnx::TensorProto*> inits_;
    std::unordered_map<std::string, std::vector<int>> consumers_;  // node indices; -1: a graph output
    std::unordered_map<std::string, int> producer_;
    std::set<int> absorbed_;
    std::map<int, Linear> linears_;
    std::map<int, MatMulFold> matmuls_;
    std::map<int, std::string> gelus_;  // the final node of a GELU pattern -> its input
    std::map<int, LayerNormParts> layer_norms_;
    std::map<int, Padding> pads_;  // a Conv or AveragePool -> the Pad absorbed into it
    std::vector<std::pair<std::string, int>> loss_nodes_;  // (loss output, node)
    std::unordered_map<std::string, Value> values_;
    std::unordered_map<std::string, TensorId> weights_;
    std::unordered_map<TensorId, TensorId> plain_;
    std::set<std::string> names_;
    std::map<int, std::string> node_names_;
    std::map<int, std::string> weight_of_;  // a layer's node -> its weight initializer (names the joule node)
    Graph graph_;
    zoo::Model model_;
};

onnx::ModelProto parse(const std::string& bytes, const std::string& where) {
    onnx::ModelProto m;
    if (bytes.empty()) throw Error(where + " is empty, not an ONNX model");
    if (!m.ParseFromString(bytes)) throw Error(where + " is not an ONNX model (it does not parse as an ONNX ModelProto: truncated or another format?)");
    if (!m.has_graph()) throw Error(where + " is not an ONNX model (it has no graph)");
    return m;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot open model file " + path);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

zoo::Model import(const onnx::ModelProto& m, const std::string& where, const std::string& dir, const OnnxImportOptions& o) {
    zoo::Model model = Importer(m, where, dir, o).run();
    const std::string stem = std::filesystem::path(where).stem().string();
    model.name = stem.empty() ? "onnx" : stem;
    return model;
}
}  // namespace

zoo::Model import_onnx(const std::string& path, const OnnxImportOptions& o) {
    const onnx::ModelProto m = parse(read_file(path), path);
    std::string dir = std::filesystem::path(path).parent_path().string();
    return import(m, path, dir.empty() ? "." : dir, o);
}

zoo::Model import_onnx_bytes(const std::string& bytes, const std::string& where, const OnnxImportOptions& o) {
    return import(parse(bytes, where), where, "", o);
}

int64_t onnx_fixed_batch(const std::string& path) {
    const onnx::ModelProto m = parse(read_file(path), path);
    std::set<std::string> inits;
    for (const auto& t : m.graph().initializer()) inits.insert(t.name());
    for (const auto& v : m.graph().input()) {
        if (inits.count(v.name()) || !v.type().has_tensor_type()) continue;
        const auto& s = v.type().tensor_type().shape();
        if (s.dim_size() > 0 && s.dim(0).has_dim_value() && s.dim(0).dim_value() > 0) return s.dim(0).dim_value();
        return 0;
    }
    return 0;
}

zoo::Model load_model(const std::string& net, const std::string& onnx_file, const zoo::NetConfig& cfg, const std::string& labels) {
    if (onnx_file.empty()) return zoo::build(net, cfg);
    zoo::Model m = import_onnx(onnx_file, {cfg.batch, labels});
    const Graph& g = m.graph;
    const Shape& in = g.tensor(m.input).desc.shape;
    auto disagree = [&](const std::string& what, int64_t want, int64_t have) {
        if (want != 0 && want != have)
            throw Error(onnx_file + ": the model takes " + what + " " + std::to_string(have) + ", not " + std::to_string(want),
                        "export the model for the data, or use --dataset synthetic");
    };
    if (g.tensor(m.input).desc.dtype == DType::F32) {
        if (in.size() != 4 && cfg.image_size && cfg.in_channels) {  // a model of flattened images (an MLP) takes the same values
            int64_t per_sample = 1;
            for (size_t d = 1; d < in.size(); ++d) per_sample *= in[d];
            disagree("values per sample", cfg.in_channels * cfg.image_size * cfg.image_size, per_sample);
        }
        if (in.size() == 4) disagree("images of height", cfg.image_size, in[2]), disagree("images of width", cfg.image_size, in[3]), disagree("channels", cfg.in_channels, in[1]);
    }
    disagree("classes", cfg.classes, g.tensor(m.logits).desc.shape[1]);
    return m;
}

}  // namespace joule

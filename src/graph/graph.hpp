// Graph: tensors and nodes in topological order, shape-checked as they are added.
//
//   Graph g;
//   TensorId x = g.input("images", {{64, 1, 28, 28}, DType::F32, Layout::ChannelsLast});
//   TensorId w = g.parameter("conv1.weight", {{6, 1, 5, 5}}, Init::uniform(0.2f));
//   TensorId y = g.add1(OpKind::Conv2d, ConvAttrs{.pad = {2, 2}}, {x, w}, "conv1");
//
// add() runs the op's shape rule; an inconsistent graph throws Error naming the op. Nodes are only ever
// appended after their inputs exist, so node order is a valid execution order.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/ops.hpp"
#include "graph/tensor_desc.hpp"

namespace joule {

using TensorId = int32_t;
using NodeId = int32_t;
constexpr int32_t kNone = -1;

enum class TensorRole : uint8_t { Input, Label, Parameter, State, Constant, Activation, Gradient };
enum class Phase : uint8_t { Forward, Loss, Backward, Update };
const char* role_name(TensorRole r);
// Tensors that outlive an iteration (inputs, labels, parameters, state, constants); activations and
// gradients live only between their producer and their last reader.
inline bool persists(TensorRole r) { return r != TensorRole::Activation && r != TensorRole::Gradient; }
// Tensors each step's batch fills (inputs, labels): the host's data loader writes them.
inline bool is_batch(TensorRole r) { return r == TensorRole::Input || r == TensorRole::Label; }
const char* phase_name(Phase p);

// How a parameter, state or constant tensor is initialised.
struct Init {
    // Position: i32 tensor whose element i holds i modulo its last dimension (BERT position ids).
    // Data: the given values, row-major in the logical shape (an imported model's initializers).
    enum class Kind : uint8_t { Zeros, Ones, Uniform, Normal, Position, Data } kind = Kind::Zeros;
    float scale = 0.0f;  // Uniform: bound (U(-scale, scale)); Normal: standard deviation
    std::shared_ptr<const std::vector<float>> values;     // Data of a float tensor (shared: passes copy tensors)
    std::shared_ptr<const std::vector<int32_t>> indices;  // Data of an i32 tensor
    static Init zeros() { return {Kind::Zeros, 0}; }
    static Init ones() { return {Kind::Ones, 0}; }
    static Init uniform(float bound) { return {Kind::Uniform, bound}; }
    static Init normal(float stddev) { return {Kind::Normal, stddev}; }
    static Init position() { return {Kind::Position, 0}; }
    static Init data(std::vector<float> v) { return {Kind::Data, 0, std::make_shared<const std::vector<float>>(std::move(v)), nullptr}; }
    static Init data(std::vector<int32_t> v) { return {Kind::Data, 0, nullptr, std::make_shared<const std::vector<int32_t>>(std::move(v))}; }
};

struct Tensor {
    TensorDesc desc;
    std::string name;
    TensorRole role = TensorRole::Activation;
    NodeId producer = kNone;
    Init init;
};

struct Node {
    OpKind kind = OpKind::Count;
    Attrs attrs;
    std::vector<TensorId> inputs;
    std::vector<TensorId> outputs;
    std::string name;
    Phase phase = Phase::Forward;
    NodeId source = kNone;         // the forward node this node was derived from (itself for forward nodes)
    DType compute = DType::F32;    // precision the backend computes in (set by plan/'s decide pass)
    std::string device = "cpu";    // plan device "backend[:spec]" that runs it (set by plan/'s decide pass)
    std::optional<TensorDesc> grad_of;  // backward ops: desc of the forward tensor whose gradient output 0 is
    // An activation folded into this node by plan/'s fuse pass (fusable()): output 0 holds post_op applied
    // to the op's result. Count: none.
    OpKind post_op = OpKind::Count;
    // A backward node folded into this node by plan/'s fuse pass (fusable_backward()): it read (input 0, B)
    // -- an activation's backward (dY, Y), or a gradient sum (a, b) --, B is the node's last input (one past
    // the op's own, same desc as input 0), and the op reads pre_op(input 0, B) where it read input 0.
    // Count: none.
    OpKind pre_op = OpKind::Count;
};

class Graph {
public:
    TensorId input(const std::string& name, const TensorDesc& desc, TensorRole role = TensorRole::Input);
    TensorId parameter(const std::string& name, const TensorDesc& desc, Init init);
    TensorId state(const std::string& name, const TensorDesc& desc, Init init);
    TensorId constant(const std::string& name, const TensorDesc& desc, Init init);

    // Appends a node; returns its output tensors. Throws Error (naming the op) when shapes disagree.
    std::vector<TensorId> add(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& name,
                              Phase phase = Phase::Forward, NodeId source = kNone,
                              std::optional<TensorDesc> grad_of = std::nullopt, TensorRole out_role = TensorRole::Activation);
    TensorId add1(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& name) {
        return add(kind, std::move(attrs), std::move(inputs), name).front();
    }

    const Tensor& tensor(TensorId id) const { return tensors_.at(size_t(id)); }
    Tensor& tensor(TensorId id) { return tensors_.at(size_t(id)); }
    const Node& node(NodeId id) const { return nodes_.at(size_t(id)); }
    Node& node(NodeId id) { return nodes_.at(size_t(id)); }
    const std::vector<Tensor>& tensors() const { return tensors_; }
    const std::vector<Node>& nodes() const { return nodes_; }
    size_t num_tensors() const { return tensors_.size(); }
    size_t num_nodes() const { return nodes_.size(); }

    std::vector<TensorId> tensors_with_role(TensorRole r) const;
    // Nodes that read tensor t, in order (indexed: constant time).
    const std::vector<NodeId>& consumers(TensorId t) const { return consumers_.at(size_t(t)); }

    // For graph passes that rebuild a graph: the same tensors (same ids, no producers) and no nodes;
    // then append() the nodes again in a valid order, rewired or interleaved with new ones.
    Graph tensors_only() const;
    // Appends a node whose outputs already exist as tensors of this graph (without producers). Its shape
    // rule must give those tensors' shapes and layouts; dtypes may differ (passes set storage dtypes), and
    // so may a blocked layout (plan/'s layout pass stores a kernel's output in the layout it writes).
    NodeId append(Node node);
    std::optional<TensorId> find_tensor(const std::string& name) const;
    int64_t parameter_count() const;  // elements over all Parameter tensors

private:
    TensorId add_tensor(const std::string& name, const TensorDesc& desc, TensorRole role, Init init);
    std::vector<TensorDesc> infer(const Node& node, const std::string& where) const;
    NodeId push_node(Node node);
    std::vector<Tensor> tensors_;
    std::vector<Node> nodes_;
    std::vector<std::vector<NodeId>> consumers_;  // per tensor
};

// The storage dtype of operand t (input or output `index` of node n) when n computes in `compute`:
// float operands take `compute`, except those the op keeps in f32 (OpInfo f32_inputs / f32_outputs);
// integer operands keep theirs; a Cast reads its stored source dtype and writes `compute`, a Transfer
// moves its tensor's dtype.
DType operand_dtype(const Graph& g, NodeId n, TensorId t, bool output, size_t index, DType compute);
// A graph of node n alone, computing in `compute`, its operands stored as operand_dtype() says and
// keeping their roles: a context-free view of the node for supports() and cost questions.
Graph node_alone(const Graph& g, NodeId n, DType compute);

template <class A>
const A& attrs_as(const Node& n) {
    return std::get<A>(n.attrs);
}

// How many bf16 copies of its parameter an optimizer update keeps (SgdAttrs / AdamAttrs low_copies: its last
// inputs); 0 for any other node.
int low_copy_count(const Node& n);
// Whether input i of n is one of those copies.
bool is_low_copy_input(const Node& n, size_t i);
// (parameter, a bf16 copy) for every copy an update keeps: tensors derived from their parameter, which an
// executor refreshes after writing parameters from outside (initialisation, a checkpoint).
std::vector<std::pair<TensorId, TensorId>> low_copies(const Graph& g);

// "f32[8, 3, 224, 224] f32[64, 3, 7, 7] -> f32[8, 64, 112, 112]": a node's operand descriptors (as
// profiles store them and traces show them).
std::string shapes_of(const Graph& g, const Node& n);
// "Conv2d", or "Conv2d+Relu" for a node with a fused activation.
std::string op_label(const Node& n);
// A Cast node that changes the dtype (with a reorder in it or not); a pure reorder (plan/'s layout pass) is not.
bool is_dtype_cast(const Graph& g, NodeId n);

}  // namespace joule

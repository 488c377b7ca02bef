// Autodiff: Graph -> TrainGraph (forward, loss, backward, optimizer-update nodes).
//
//   zoo::Model m = zoo::build("lenet5", cfg);
//   TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.05f, 0.9f));
//
// differentiate() walks the forward nodes in reverse and calls each op's gradient rule (written in IR
// ops, beside the op's shape rule). A tensor read by several nodes (a residual connection) gets the
// sum of its gradient contributions, emitted as Add nodes. Every emitted node records its phase and the
// forward node it came from (Node::source): this is the graph the planner places node by node.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace joule {

// What a gradient rule sees: the forward node's output gradients, and a way to emit IR nodes and to
// hand gradient contributions to the node's inputs.
class GradBuilder {
public:
    GradBuilder(Graph& g, NodeId forward, std::vector<TensorId> output_grads, const std::vector<bool>& needs_grad,
                std::map<TensorId, std::vector<TensorId>>& contributions);
    const Graph& graph() const { return g_; }
    const Tensor& tensor(TensorId t) const { return g_.tensor(t); }
    // Gradient of the forward node's i-th output, or kNone when nothing downstream needs it.
    TensorId dy(size_t i) const { return i < dys_.size() ? dys_[i] : kNone; }
    bool needs_grad(TensorId t) const { return size_t(t) < needs_.size() && needs_[size_t(t)]; }  // emitted tensors: never
    // Emits a backward node named "<forward name>.<suffix>" whose output 0 is the gradient of `like`.
    std::vector<TensorId> emit(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& suffix,
                               TensorId like);
    // Emits a backward node with no gradient-of descriptor (its shape rule infers the outputs).
    std::vector<TensorId> emit(OpKind kind, Attrs attrs, std::vector<TensorId> inputs, const std::string& suffix);
    // Adds `grad` to the gradient of forward tensor `t` (ignored when t needs no gradient).
    void accumulate(TensorId t, TensorId grad);

private:
    Graph& g_;
    NodeId fwd_;
    std::vector<TensorId> dys_;
    const std::vector<bool>& needs_;
    std::map<TensorId, std::vector<TensorId>>& contrib_;
};

// Emits the backward of `output` seeded with gradient tensor `seed` (same shape). Returns, for every
// Parameter (and every other tensor that received a gradient), its gradient tensor.
std::map<TensorId, TensorId> differentiate(Graph& g, TensorId output, TensorId seed);

struct OptimizerConfig {
    enum class Kind : uint8_t { Sgd, Adam, AdamW } kind = Kind::Sgd;  // AdamW: decoupled weight decay
    float lr = 0.01f;
    float momentum = 0.0f;
    float weight_decay = 0.0f;
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    static OptimizerConfig sgd(float lr, float momentum = 0.0f, float wd = 0.0f) {
        return {Kind::Sgd, lr, momentum, wd};
    }
    static OptimizerConfig adam(float lr, float wd = 0.0f, bool decoupled = false) {
        OptimizerConfig c;
        c.kind = decoupled ? Kind::AdamW : Kind::Adam;
        c.lr = lr;
        c.weight_decay = wd;
        return c;
    }
};
OptimizerConfig::Kind parse_optimizer(const std::string& s);

struct TrainGraph {
    Graph graph;
    TensorId loss = kNone;
    std::vector<std::pair<TensorId, TensorId>> param_grads;  // (parameter, gradient)
    NodeId first_backward = kNone;  // nodes [0, first_backward) are forward + loss
    NodeId first_update = kNone;    // nodes [first_update, end) are optimizer updates
};

// Builds the training graph for a scalar loss: forward and loss nodes as given, backward nodes from
// differentiate(), then one update node per parameter (with optimizer state tensors).
TrainGraph build_train_graph(Graph forward, TensorId loss, const OptimizerConfig& opt);

// Conv, linear and matmul nodes, forward and backward: PyTorch autocast's lower-precision list.
bool is_gemm_node(const Graph& g, NodeId n);
}  // namespace joule

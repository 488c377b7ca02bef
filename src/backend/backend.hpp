// The device interface every backend implements (ggml's backend interface, oneDNN's "validate, then
// execute"): a backend first answers whether it can run a node, then prepares a kernel bound to the
// node's buffers, then runs it any number of times.
//
//   Support s = backend.supports(graph, n);          // {ok, reason}
//   std::unique_ptr<Kernel> k = backend.prepare(graph, n, inputs, outputs);
//   k->run({.training = true});
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace joule {

struct RunContext {
    bool training = true;  // false: BatchNorm uses running statistics, Dropout is the identity
};

struct Support {
    bool ok = true;
    std::string reason;  // why not, when !ok
};

// A node's prepared kernel, bound to the buffers it was prepared with.
class Kernel {
public:
    virtual ~Kernel() = default;
    virtual void run(const RunContext& ctx) = 0;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;
    virtual Support supports(const Graph& g, NodeId n) const = 0;
    // Buffers are in the node's input/output order; each holds the tensor in its TensorDesc's dtype
    // (f32 for floating-point tensors, i32 for indices and labels) and layout.
    virtual std::unique_ptr<Kernel> prepare(const Graph& g, NodeId n, const std::vector<void*>& inputs,
                                            const std::vector<void*>& outputs) = 0;
    virtual int threads() const = 0;
};

// Whether `backend` can run node n of g in `dtype` (asks supports() with Node::compute set to it).
bool supports_in(const Backend& backend, Graph& g, NodeId n, DType dtype);

}  // namespace joule

// Executor: runs a Graph (usually a TrainGraph's) on a backend, node by node, owning every buffer.
//
//   cpu::CpuBackend cpu(2);
//   Executor ex(tg.graph, cpu, {.keep = {logits}});
//   std::copy(images, images + n, ex.f32(input));
//   ex.run_all();                      // one training iteration: forward, loss, backward, update
//   float loss = ex.f32(tg.loss)[0];
//
// Buffers are allocated once. Parameters, optimizer state, constants, inputs, labels and `keep`
// tensors own theirs; every other activation and gradient gets one from a pool by liveness (a buffer
// freed after its last reader is reused by a later tensor), so backward reuses forward memory.
// Each node's wall time (steady clock) is accumulated per node.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "energy/sampler.hpp"
#include "graph/graph.hpp"

namespace joule {

struct ExecutorOptions {
    std::vector<TensorId> keep;  // tensors whose contents must survive a run (read by the caller)
    uint64_t seed = 42;          // parameter initialisation
};

class Executor {
public:
    Executor(const Graph& g, Backend& backend, ExecutorOptions opts = {});
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // Runs nodes [begin, end) in order.
    void run(NodeId begin, NodeId end, const RunContext& ctx = {});
    void run_all(const RunContext& ctx = {}) { run(0, NodeId(g_.num_nodes()), ctx); }
    // Runs only Forward and Loss nodes (evaluation: training=false).
    void run_forward(const RunContext& ctx);

    float* f32(TensorId t);
    int32_t* i32(TensorId t);
    void* data(TensorId t) { return ptr_[size_t(t)]; }

    const Graph& graph() const { return g_; }
    Backend& backend() { return backend_; }
    // Accumulated wall seconds per node since the last reset, and how many runs each node had.
    const std::vector<double>& node_seconds() const { return seconds_; }
    const std::vector<int64_t>& node_runs() const { return runs_; }
    void reset_timing();
    // While set, every node run appends its span (steady-clock start and end) here.
    void record_spans(std::vector<energy::NodeSpan>* sink) { spans_ = sink; }
    size_t bytes_allocated() const { return bytes_; }
    size_t bytes_if_unshared() const;  // what one buffer per tensor would need

private:
    void allocate(const ExecutorOptions& opts);
    void initialise(uint64_t seed);
    const Graph& g_;
    Backend& backend_;
    struct Block;
    std::vector<std::unique_ptr<Block>> blocks_;
    std::vector<void*> ptr_;
    std::vector<std::unique_ptr<Kernel>> kernels_;
    std::vector<double> seconds_;
    std::vector<int64_t> runs_;
    size_t bytes_ = 0;
    std::vector<energy::NodeSpan>* spans_ = nullptr;
};

}  // namespace joule

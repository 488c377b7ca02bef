// Executor: runs a lowered graph (a TrainGraph after plan/'s passes) on its devices, node by node,
// owning every buffer.
//
//   BackendSet backends({.threads = 2});
//   LoweredGraph lg = lower(std::move(tg), plan, {.keep = {logits, loss}});
//   Executor ex(lg, backends, {.seed = 1});
//   std::copy(images, images + n, ex.f32(input));
//   ex.run_all();                      // one training iteration: forward, loss, backward, update
//   float loss = ex.f32(tg.loss)[0];
//
// Buffers follow the lowered graph's memory plan: one per persistent or kept tensor, the rest shared by
// liveness, per device, sized by each tensor's storage dtype. Before preparing a node the executor asks
// its device's backend supports(); an unsupported (op, dtype) is an Error naming node, device, reason and
// the plan entry that put it there. Each node's time is accumulated per node, tagged: measured (wall
// clock) or modelled (an emulated device's kernel reports it; the wall time is then emulation time,
// kept apart).
//
// Executor(graph, backend) runs a plain graph whose every node is on that one backend (tests, probes).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "energy/sampler.hpp"
#include "graph/graph.hpp"

namespace joule {

struct LoweredGraph;
class BackendSet;
struct MemoryPlan;

struct ExecutorOptions {
    std::vector<TensorId> keep;  // tensors whose contents must survive a run (read by the caller); one backend only
    uint64_t seed = 42;          // parameter initialisation
};

class Executor {
public:
    Executor(const LoweredGraph& lg, BackendSet& backends, ExecutorOptions opts = {});
    Executor(const Graph& g, Backend& backend, ExecutorOptions opts = {});
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // Runs nodes [begin, end) in order.
    void run(NodeId begin, NodeId end, const RunContext& ctx = {});
    void run_all(const RunContext& ctx = {}) { run(0, NodeId(g_.num_nodes()), ctx); }
    // Runs only Forward and Loss nodes (evaluation: training=false).
    void run_forward(const RunContext& ctx);

    float* f32(TensorId t);  // an f32 tensor's buffer (not a blocked one: InternalError)
    int32_t* i32(TensorId t);
    void* data(TensorId t) { return ptr_[size_t(t)]; }
    const void* data(TensorId t) const { return ptr_[size_t(t)]; }
    std::vector<float> read_f32(TensorId t) const;  // any floating-point tensor, widened to f32, in logical order
    // Rewrites every parameter's bf16 copy that an update keeps (graph low_copies) from the parameter: after
    // the parameters were written from outside (initialisation does it; a checkpoint read calls it).
    void refresh_low_copies();

    const Graph& graph() const { return g_; }
    // Devices in first-use order; node n ran on devices()[node_device()[n]].
    const std::vector<std::string>& devices() const { return devices_; }
    const std::vector<int16_t>& node_device() const { return node_device_; }
    // Per node since the last reset: accumulated seconds (measured, or modelled where node_modelled()),
    // host seconds spent emulating modelled nodes, and how many runs each node had.
    const std::vector<double>& node_seconds() const { return seconds_; }
    const std::vector<bool>& node_modelled() const { return modelled_; }
    const std::vector<double>& node_emulation_seconds() const { return emulation_; }
    const std::vector<int64_t>& node_runs() const { return runs_; }
    void reset_timing();
    // While set, every node run appends its span (steady-clock start and end, device) here.
    void record_spans(std::vector<energy::NodeSpan>* sink) { spans_ = sink; }
    size_t bytes_allocated() const { return bytes_; }
    size_t bytes_if_unshared() const { return unshared_; }
    int threads() const { return threads_; }

private:
    void setup(const MemoryPlan& mp, const std::vector<Backend*>& backend_of, const std::vector<std::string>* origin);
    void initialise(uint64_t seed);
    const Graph& g_;
    struct Block;
    std::vector<std::unique_ptr<Block>> blocks_;
    std::vector<void*> ptr_;
    std::vector<std::unique_ptr<Kernel>> kernels_;
    std::vector<std::string> devices_;
    std::vector<int16_t> node_device_;
    std::vector<double> seconds_, emulation_;
    std::vector<bool> modelled_;
    std::vector<int64_t> runs_;
    size_t bytes_ = 0, unshared_ = 0;
    int threads_ = 1;
    std::vector<energy::NodeSpan>* spans_ = nullptr;
};

}  // namespace joule

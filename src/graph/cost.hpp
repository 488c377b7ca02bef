// Cost accounting per node: FLOPs, bytes read and written, parameter and activation bytes.
//
// Bytes count each input and output tensor once at its storage size (a lower bound on memory traffic;
// predict/ models reuse and caches on top). In-place updates count their parameter and state as read
// and written.
#pragma once

#include "graph/graph.hpp"

namespace joule {

struct NodeCost {
    double flops = 0;            // a multiply-add counts 2
    double macs = 0;             // multiply-adds of conv / linear / matmul (the figure papers publish)
    double bytes_read = 0;
    double bytes_written = 0;
    double param_bytes = 0;      // bytes of Parameter inputs
    double activation_bytes = 0; // bytes of outputs
};

NodeCost node_cost(const Graph& g, NodeId n);

// A small node: at most 128 KiB of traffic and 512 kFLOP. The cpu backend runs one on the calling thread
// alone (CpuBackend::serial: on a 2-vCPU machine an OpenMP region's fork and join costs ~3.5 us, a 16-element
// op alone ~0.3 us, and one core beats two up to these sizes; bench/node_overhead.cpp), and the memory model
// charges it the small-node overhead (predict::MemoryConfig).
constexpr double kSmallNodeBytes = 128 * 1024, kSmallNodeFlops = 512 * 1024;
inline bool small_node(const NodeCost& c) { return c.bytes_read + c.bytes_written <= kSmallNodeBytes && c.flops <= kSmallNodeFlops; }

struct GraphCost {
    NodeCost total;
    NodeCost forward;  // Forward and Loss phases
};
GraphCost graph_cost(const Graph& g);

}  // namespace joule

// Trace-driven simulation of the same schedule with an optimal (Belady) replacement buffer, the check
// on the analytical model (memory_model.hpp).
//
// Tensors are split into blocks; every node emits the block accesses of its loop nest (streaming ops
// read their inputs in order, BatchNorm twice; GEMM nodes walk the model's chosen tiling, strip by strip
// in tile-major order) and writes its outputs. A fully associative buffer of capacity / block blocks
// replaces the block whose next access is furthest in the future (Belady's MIN, optimal for equal-size
// blocks); a dirty block is written back when evicted if it is read again or persistent (parameters,
// state), and dirty persistent blocks are flushed at the end.
#pragma once

#include "predict/memory_model.hpp"

namespace joule::predict {

struct SimulationResult {
    double read_bytes = 0, write_bytes = 0;
    std::vector<double> node_read_bytes, node_write_bytes;  // by the node whose access caused them
    int64_t accesses = 0;
    double block_bytes = 0;
};

// block_bytes 0: capacity / 256, clipped to [4 KiB, 1 MiB].
SimulationResult simulate_belady(const Graph& g, const MemoryConfig& cfg, double block_bytes = 0);

}  // namespace joule::predict

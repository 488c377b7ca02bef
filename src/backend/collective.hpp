// The host backends' all-reduce kernels (cpu, reference): gradients in host memory, summed over the job
// by dist::world() -- MPI under mpirun, the identity in one process. A device with memory of its own
// (a GPU: NCCL) brings its own kernels for the same two nodes; the graph does not change.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.hpp"

namespace joule {

// AllReduceStart: packs the gradients into the bucket and starts its sum; AllReduceWait: completes it
// (Error past dist's deadline) and writes each gradient's mean over the processes.
std::unique_ptr<Kernel> make_allreduce_kernel(const Graph& g, NodeId n, const std::vector<void*>& inputs, const std::vector<void*>& outputs);

}  // namespace joule

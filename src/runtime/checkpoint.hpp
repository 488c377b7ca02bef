// Checkpoints of a training run: every parameter and optimizer-state tensor (the executor's buffers, as
// stored), the step counts that kernels read from RunContext, the data order and generator states, and
// where in which epoch the run stood -- all a resumed run needs to continue as if never stopped.
//
//   write_checkpoint(dir, ex, state);             // dir/checkpoint.bin, atomically
//   CheckpointState s = read_checkpoint(dir, ex, expected);  // loads the tensors into ex
//
// One file: "JOULECKP", a JSON header (format, joule version, the run's identity, counts, tensor table),
// the tensors' bytes, then an FNV-1a 64 checksum of all before it. Written to checkpoint.bin.tmp,
// fsync'd, renamed over checkpoint.bin and the directory fsync'd: a crash at any point leaves the
// previous checkpoint whole.
#pragma once

#include <cstdint>
#include <string>

namespace joule {

class Executor;

struct CheckpointState {
    // what the run is: a checkpoint of another is refused
    std::string net, dataset, plan;
    int64_t batch = 0, accumulate = 1;
    uint64_t seed = 0;
    // where it stands
    int64_t epoch = 0, step_in_epoch = 0;  // the next step to run
    int64_t steps_done = 0;                 // optimizer steps
    uint64_t passes_done = 0;               // forward/backward passes (micro-batches)
    double epoch_loss_sum = 0;              // the epoch's losses so far (its mean loss stays exact)
    std::string data_order, synthetic;      // BatchIterator::state(), SyntheticData::state()
};

// Creates the directory; throws Error when it cannot be created or written (before a run starts).
void prepare_checkpoint_dir(const std::string& dir);

// Throws Error when the directory or file cannot be written.
void write_checkpoint(const std::string& dir, const Executor& ex, const CheckpointState& s);

// Reads dir/checkpoint.bin, checks it against `expected`'s identity and ex's graph (every tensor's name,
// dtype and shape), loads the tensors into ex and returns the state. Errors name the file and what is
// wrong: missing, not a checkpoint, truncated or corrupt (checksum), another joule version, another
// net / batch / plan / dataset / seed, another graph.
CheckpointState read_checkpoint(const std::string& dir, Executor& ex, const CheckpointState& expected);

}  // namespace joule

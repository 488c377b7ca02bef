// The pass pipeline that turns a TrainGraph and a Plan into the graph the executor runs. Each pass is a
// pure function of its inputs, in DESIGN.md's order (layout comes later). A cast or transfer a
// pass adds for an update's gradient is backward work, placed ahead of every update:
//
//   decide            the Plan's device and compute dtype onto every node (validating entries)
//   insert_casts      storage dtypes (a tensor is stored in its producer's compute dtype unless the plan
//                     says otherwise or the op keeps it f32); one Cast per (tensor, dtype) a consumer needs,
//                     shared by all such consumers, named "cast:<tensor>:<dtype>"
//   insert_allreduce  data-parallel jobs only (ranks > 1): the f32 gradients the updates read, in the
//                     order backward produces them, packed into buckets of at most bucket_bytes per device
//                     (PyTorch DDP's 25 MiB); one AllReduceStart per bucket right after its last
//                     gradient's producer, so the sum travels while backward goes on, and one AllReduceWait
//                     per bucket before the first update, whose means the updates read. Named
//                     "allreduce:<k>" and "allreduce:<k>:wait", k = 0 for the bucket backward fills first.
//                     A bucket runs on its updates' device when that backend all-reduces
//                     (runs_allreduce), else on the host, the transfers to and fro inserted next
//   insert_transfers  one Transfer per (tensor, device) where a tensor crosses devices, named
//                     "transfer:<tensor>:<device>"; parameters and state live on the device that writes
//                     them in place (else their first reader)
//   assign_layouts    storage layouts the devices' kernels want (registry: layout_wishes; on the cpu,
//                     oneDNN's blocked formats for convolution weights and weight gradients): a parameter
//                     and its optimizer state are stored for good in the layout most of its uses want (its
//                     readers', its gradient producer's, and at half weight its bf16 copies' readers', whose
//                     cast would pass over it anyway; ties: the forward's),
//                     an output a kernel wants blocked is written so, and every reader that wants another
//                     layout reads a reorder -- a Cast with CastAttrs::reorder, op label "Reorder", one per
//                     (tensor, layout), named "reorder:<tensor>:<layout>"; a reorder of a cast's output is
//                     that cast doing both, "cast:<tensor>:<dtype>:<layout>". An update reads its gradient
//                     in its parameter's layout. Data-parallel gradients (read by an all-reduce) stay plain
//   fuse_activations  a Relu or Relu6 folds into the node producing its input (Node::post_op) when that
//                     node is fusable() with it, on a device whose backend fuses (fuses_activations), and
//                     the activation is the input's only reader (its backward reads its output), same
//                     storage, not kept; the pre-activation tensor is then neither written nor stored.
//                     Likewise a ReluBackward / Relu6Backward folds into the batch-norm backward reading its
//                     result (Node::pre_op, fusable_backward): that node reads (dY, ..., Y) and the
//                     activation's gradient is never stored -- or, where the forward is a batch norm with
//                     that activation fused in, (dY, ..., beta), Y recomputed from X (NormAttrs::
//                     recompute_act); a ReLU / ReLU6 backward after a max-pool backward, the pool reading
//                     the activation, into that pool backward, commuted: it reads (dY, argmax, Y_pool) and
//                     masks dY by f'(Y_pool) (the same bits), so Y is not read in the backward at all; and a
//                     gradient sum (a residual junction's Add) into the ReLU / ReLU6 backward reading it,
//                     which reads (a, Y, b)
//   fold_casts        (part of the fuse step) a Cast from f32 to bf16, same storage order, folds into the
//                     node writing its input when that node rounds as it stores (stores_output_low), on a
//                     device whose backend fuses, and the cast is the input's only reader, not kept: the node
//                     writes the bf16 tensor itself, the f32 one is neither written nor stored (the same bits).
//                     A parameter's casts into bf16 fold into the parameter's update on the same device, where
//                     its backend writes such a copy (writes_low_copy: on the cpu the same storage order or a
//                     convolution weight's bf16 formats) and the copy's readers all run before the update: the
//                     copies become state the update rewrites (is_low_copy_input), so no step casts the parameter
//   fold_transposes   (part of the fuse step) a Transpose keeping the last dim last folds into a MatMul on a
//                     device whose backend fuses: into the product writing its input, when the transpose is that
//                     input's only reader, not kept (the product writes the output through the inverse view,
//                     MatMulAttrs::perm_c); else into the products reading its output, when they are all MatMuls
//                     and it is not kept (each reads the input through the transpose's view, perm_a / perm_b).
//                     BERT's head split and merge, forward and backward: no copies, the products read strides
//   fold_grad_sums    (part of the fuse step) a gradient sum (an f32 Add of two same-desc terms) folds into the
//                     LinearBackwardData writing one term, on a device whose backend fuses, when that term is
//                     its only reader, not kept, and the other term is written before the product runs: the
//                     product reads the other term as its third input and writes the sum (dX = dY W + G; on
//                     the cpu a binary post-op of oneDNN's matmul). BERT's layer inputs feed Q, K, V and the
//                     residual: three chained sums each, and the FFN's input two terms -- no pass of their own
//   plan_memory       a buffer per persistent or kept tensor; the rest share one arena per device by liveness;
//                     a Reshape between row-major tensors is a view of its input (no copy)
//
//   LoweredGraph lg = lower(std::move(tg), plan, {.keep = {logits, loss}});
//   lower(..., {.dump_after = "casts", .dump = &std::cout}) prints the graph after that pass.
//
// Tensor ids of the input graph stay valid (passes only add tensors); node ids do not (passes insert
// nodes): anything that must stay stable keys on names.
#pragma once

#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "graph/autodiff.hpp"
#include "plan/plan.hpp"

namespace joule {

// Where each tensor lives: persistent and kept tensors own a buffer; the transient ones (activations,
// gradients) share one arena per device, at offsets planned greedily by size (TFLite's "greedy by size":
// largest first, each at the lowest offset clear of every tensor whose lifetime overlaps its own).
struct MemoryPlan {
    struct Buffer {
        std::string device;
        size_t bytes = 0;
    };
    std::vector<Buffer> buffers;
    std::vector<int32_t> buffer_of;  // per tensor id; -1: not stored (a fused-away tensor nothing writes or reads)
    std::vector<size_t> offset_of;   // per tensor id: byte offset inside its buffer (64-byte aligned)
    size_t bytes_total = 0;          // all buffers
    size_t bytes_if_unshared = 0;    // one buffer per tensor
};

struct LoweredGraph {
    TrainGraph train;
    MemoryPlan memory;
    Plan plan;
    std::vector<std::string> origin;                                  // per node: the plan entry or pass that decided it
    std::map<std::string, std::map<std::string, std::string>> options;  // per node name: backend options
    size_t casts = 0, transfers = 0;                                  // nodes the passes inserted
    size_t fused = 0;                                                 // activations folded into their producers
    size_t fused_backward = 0;                                        // backward nodes folded into a neighbour (Node::pre_op)
    size_t folded_casts = 0;                                          // casts folded into the node writing their input
    size_t update_copies = 0;                                         // parameters' casts folded into their updates (low_copies)
    size_t folded_transposes = 0;                                     // transposes folded into matmuls (MatMulAttrs::perm_*)
    size_t folded_grad_sums = 0;                                      // gradient sums folded into backward-data products
    size_t reorders = 0;                                              // layout changes the layout pass inserted
    size_t allreduce_buckets = 0;                                     // data-parallel: gradient buckets
};

struct AllReduceOptions {
    int ranks = 1;                           // processes of the job; 1: no all-reduce
    size_t bucket_bytes = size_t(25) << 20;  // a bucket's most gradient bytes (one larger gradient is a bucket alone)
};

struct LowerOptions {
    std::vector<TensorId> keep;  // tensors the caller reads after a run (own buffers)
    AllReduceOptions allreduce;  // data-parallel training: the job's processes and bucket size
    // The layout pass and the fuse pass. The planners' cost models (PlacementProblem::evaluate, amp_cost)
    // describe the graph without either (the kernels' own reorders were never costed), so joule plan and
    // joule amp lower with both off and report exactly what they optimised; training runs both.
    bool layout = true;
    bool fuse = true;
    bool fold_casts = true;      // with fuse: casts folded into their producers (off: tests compare)
    bool fold_transposes = true;  // with fuse: transposes folded into matmuls (off: tests compare)
    bool fold_grad_sums = true;   // with fuse: gradient sums folded into backward-data products (off: tests compare)
    std::string dump_after;      // "", or a pass name: decide, casts, allreduce, transfers, layout, fuse, memory
    std::ostream* dump = nullptr;
};

extern const std::vector<std::string> kPassNames;  // in pipeline order
void check_pass_name(const std::string& name);     // Error naming the passes when unknown

// The device a tensor lives on: its producer's, or for a persistent tensor (no producer) the device of
// the node writing it in place, else of its first reader ("cpu" when nothing reads it).
const std::string& tensor_device(const Graph& g, TensorId t);

TrainGraph decide(TrainGraph tg, const Plan& plan, std::vector<std::string>* origin,
                  std::map<std::string, std::map<std::string, std::string>>* options);
TrainGraph insert_casts(TrainGraph tg, const Plan& plan);
TrainGraph insert_transfers(TrainGraph tg);
TrainGraph insert_allreduce(TrainGraph tg, const AllReduceOptions& o);
TrainGraph assign_layouts(TrainGraph tg, const std::vector<TensorId>& keep, size_t* reorders = nullptr);
TrainGraph fuse_activations(TrainGraph tg, const std::vector<TensorId>& keep);
// folded: casts folded into their producers; copies: parameters' casts folded into their updates
TrainGraph fold_casts(TrainGraph tg, const std::vector<TensorId>& keep, size_t* folded = nullptr, size_t* copies = nullptr);
TrainGraph fold_transposes(TrainGraph tg, const std::vector<TensorId>& keep, size_t* folded = nullptr);
TrainGraph fold_grad_sums(TrainGraph tg, const std::vector<TensorId>& keep, size_t* folded = nullptr);
MemoryPlan plan_memory(const Graph& g, const std::vector<TensorId>& keep);

// The whole pipeline. Throws Error for a plan made for another graph (fingerprint), an entry naming no
// node or layer, an unknown device, a dtype for an f32-only op, or an in-place operand across devices or
// dtypes — each naming the entry (file:line).
LoweredGraph lower(TrainGraph tg, const Plan& plan, const LowerOptions& opts = {});

// One line per node: id, phase, name, op, device, compute dtype, inputs -> outputs.
void print_graph(std::ostream& os, const Graph& g);

}  // namespace joule

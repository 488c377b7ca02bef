// Data-parallel training on a cluster, modelled: every rank runs the whole training step on its own
// batch (weak scaling: the per-rank batch is fixed, the global batch grows with the ranks), and the
// gradients are averaged by ring all-reduces of buckets that start as backward produces them (PyTorch
// DDP's and Horovod's overlap), on one communication stream.
//
//   Cluster c{.nodes = 4, .per_node = 8, .intra = &nvlink, .inter = &ib, .nics_per_node = 4};
//   DataParallel p = predict_data_parallel(lowered.train, device, c);
//   p.iteration_s, p.exposed_s, p.efficiency
//
// A bucket of S bytes over P ranks takes the faster of a ring, 2 (P-1)/P S / B + 2 (P-1) a (reduce-
// scatter and all-gather: Thakur, Rabenseifner and Gropp 2005; Patarasuk and Yuan 2009), and a
// double binary tree, 2 S / B + 2 ceil(log2 P) a (reduce up, broadcast down, each tree half the data:
// Sanders, Speck and Traeff 2009), as NCCL picks per size; B is the slowest hop's bandwidth (inside a
// node the intra link; between nodes each node's NICs, one ring per NIC as NCCL runs them) and a its
// latency. The iteration is forward + max(backward, the last bucket's end) +
// the update (with accumulation: the other micro-batches' forward and backward before it); the devices
// idle while they wait, and their idle power counts.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/autodiff.hpp"
#include "hw/catalogue.hpp"
#include "predict/device_model.hpp"

namespace joule::predict {

struct Cluster {
    int nodes = 1, per_node = 1;            // ranks = nodes x per_node, one device each
    const hw::LinkSpec* intra = nullptr;    // between the devices of a node (needed when per_node > 1)
    const hw::LinkSpec* inter = nullptr;    // between nodes (needed when nodes > 1)
    int nics_per_node = 1;                  // rings across nodes run side by side, one per NIC
    double bucket_bytes = 25.0 * 1024 * 1024;  // DDP's default bucket_cap_mb
    // Micro-batches per iteration, their gradients accumulated locally and all-reduced once, during the
    // last one's backward (DDP's no_sync for the others): the global batch is ranks x accumulate x batch.
    int accumulate = 1;
};

struct DataParallel {
    int ranks = 1;
    double forward_s = 0, backward_s = 0, update_s = 0;  // one rank's nodes
    double gradient_bytes = 0;
    int buckets = 0;
    double allreduce_s = 0;  // the buckets' all-reduces, summed
    double exposed_s = 0;    // communication after backward ended (not hidden behind it)
    double iteration_s = 0;  // accumulate micro-batches' forward and backward, the exposed all-reduce, the update
    double single_s = 0;     // the same iteration on one device, no communication
    double efficiency = 1;   // single_s / iteration_s: the share of linear speed-up reached
    double samples_per_s = 0;  // global
    double joules = 0;         // the cluster per iteration: every rank's dynamic and idle energy, and the links'
    double link_joules = 0;
};

// Throws Error when a link the cluster needs is missing or the counts are not positive.
DataParallel predict_data_parallel(const TrainGraph& tg, int64_t batch, const DeviceModel& d, const Cluster& c, const Setting& s = {});

// One all-reduce of `bytes` over the cluster's ranks: seconds (the faster of ring and tree).
double allreduce_seconds(double bytes, const Cluster& c);

}  // namespace joule::predict

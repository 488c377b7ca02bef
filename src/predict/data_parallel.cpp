#include "predict/data_parallel.hpp"

#include <algorithm>
#include <cmath>

#include "graph/error.hpp"

namespace joule::predict {

namespace {

// The ring's slowest hop: its bandwidth (bytes/s) and latency (s).
std::pair<double, double> ring_hop(const Cluster& c) {
    double bw = 1e300, latency = 0;
    if (c.per_node > 1) bw = std::min(bw, c.intra->bandwidth_gbps * 1e9), latency = std::max(latency, c.intra->latency_us * 1e-6);
    if (c.nodes > 1) bw = std::min(bw, c.inter->bandwidth_gbps * 1e9 * c.nics_per_node), latency = std::max(latency, c.inter->latency_us * 1e-6);
    return {bw, latency};
}

void check(const Cluster& c) {
    if (c.nodes < 1 || c.per_node < 1 || c.nics_per_node < 1)
        throw Error("a cluster needs at least one node, one device per node and one NIC per node (got " + std::to_string(c.nodes) + ", " + std::to_string(c.per_node) +
                    ", " + std::to_string(c.nics_per_node) + ")");
    if (c.per_node > 1 && !c.intra) throw Error(std::to_string(c.per_node) + " devices per node need the link between them", "name it with --intra-link (e.g. nvlink2)");
    if (c.nodes > 1 && !c.inter) throw Error(std::to_string(c.nodes) + " nodes need the network between them", "name it with --inter-link (e.g. ib-hdr)");
    if (!(c.bucket_bytes > 0)) throw Error("the all-reduce bucket must be > 0 bytes");
    if (c.accumulate < 1) throw Error("--accumulate must be >= 1, got " + std::to_string(c.accumulate));
}

}  // namespace

double allreduce_seconds(double bytes, const Cluster& c) {
    check(c);
    const int p = c.nodes * c.per_node;
    if (p == 1) return 0;
    const auto [bw, latency] = ring_hop(c);
    const double ring = 2.0 * (p - 1) / p * bytes / bw + 2.0 * (p - 1) * latency;
    const double tree = 2.0 * bytes / bw + 2.0 * std::ceil(std::log2(double(p))) * latency;
    return std::min(ring, tree);
}

DataParallel predict_data_parallel(const TrainGraph& tg, int64_t batch, const DeviceModel& d, const Cluster& c, const Setting& s) {
    check(c);
    const Graph& g = tg.graph;
    DataParallel r;
    r.ranks = c.nodes * c.per_node;
    const double earlier = double(c.accumulate - 1);  // micro-batches before the one whose backward all-reduces
    std::vector<double> finish(g.num_nodes());
    double t = 0, pass_j = 0, update_j = 0;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const NodeId n = NodeId(i);
        const Cost k = cost(g, n, d, g.node(n).compute, s);
        t += k.seconds;
        (n < tg.first_update ? pass_j : update_j) += k.joules;
        (n < tg.first_backward ? r.forward_s : n < tg.first_update ? r.backward_s : r.update_s) += k.seconds;
        finish[i] = t;
    }
    const double pass = r.forward_s + r.backward_s;
    for (double& f : finish) f += earlier * pass;  // the last micro-batch's nodes
    r.single_s = earlier * pass + t;
    const double dynamic_j = (earlier + 1) * pass_j + update_j;
    // each parameter's gradient, ready when the node producing what its update reads ends
    std::vector<std::pair<double, double>> grads;  // ready time, bytes
    for (size_t i = size_t(tg.first_update); i < g.num_nodes(); ++i) {
        const Node& u = g.node(NodeId(i));
        if (u.kind != OpKind::SgdUpdate && u.kind != OpKind::AdamUpdate) continue;
        const Tensor& grad = g.tensor(u.inputs[1]);
        grads.emplace_back(grad.producer == kNone ? 0.0 : finish[size_t(grad.producer)], double(grad.desc.bytes()));
        r.gradient_bytes += double(grad.desc.bytes());
    }
    std::stable_sort(grads.begin(), grads.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const double backward_end = (earlier + 1) * pass;
    double comm_end = 0;
    if (r.ranks > 1) {
        double bucket = 0, ready = 0;
        auto flush = [&] {
            const double x = allreduce_seconds(bucket, c);
            comm_end = std::max(comm_end, ready) + x;
            r.allreduce_s += x;
            ++r.buckets;
            bucket = 0;
        };
        for (const auto& [at, bytes] : grads) {
            bucket += bytes, ready = at;
            if (bucket >= c.bucket_bytes) flush();
        }
        if (bucket > 0) flush();
    }
    r.exposed_s = std::max(0.0, comm_end - backward_end);
    r.iteration_s = r.single_s + r.exposed_s;
    r.efficiency = r.single_s / r.iteration_s;
    r.samples_per_s = double(r.ranks) * double(c.accumulate) * double(batch) / r.iteration_s;
    // every rank's dynamic energy and its idle power over the whole iteration; the links': as a ring's,
    // whose P hops each carry 2 (P-1)/P of the gradients, `nodes` of them between nodes (one node: none)
    if (r.ranks > 1) {
        const int between = c.nodes > 1 ? c.nodes : 0;
        const double per_hop = 2.0 * (r.ranks - 1) / r.ranks * r.gradient_bytes * 1e-12;
        r.link_joules = per_hop * (double(between) * (between ? c.inter->energy_pj_per_byte : 0) +
                                   double(r.ranks - between) * (c.per_node > 1 ? c.intra->energy_pj_per_byte : 0));
    }
    r.joules = double(r.ranks) * (dynamic_j + d.idle_w() * r.iteration_s) + r.link_joules;
    return r;
}

}  // namespace joule::predict

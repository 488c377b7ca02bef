#include "backend/collective.hpp"

#include <algorithm>
#include <cstring>

#include "dist/communicator.hpp"
#include "graph/error.hpp"

namespace joule {

namespace {
// A gradient's buffer and its place in the bucket; `in_place` when the memory plan stores it there.
struct Part {
    float* p;
    int64_t n;
    float* in_bucket;
    bool in_place() const { return p == in_bucket; }
};

class AllReduceStartKernel final : public Kernel {
public:
    AllReduceStartKernel(std::vector<Part> grads, float* bucket, int64_t n) : grads_(std::move(grads)), bucket_(bucket), n_(n) {}
    void run(const RunContext& ctx) override {
        if (!ctx.reduce) return;
        float* end = bucket_;  // the gaps between gradients are zeros (other tensors may have used them between steps)
        for (const Part& g : grads_) {
            std::fill(end, g.in_bucket, 0.0f);
            if (!g.in_place()) std::copy(g.p, g.p + g.n, g.in_bucket);
            end = g.in_bucket + g.n;
        }
        dist::Communicator& c = dist::world();
        c.start_allreduce(bucket_, n_);
        c.progress();  // and lets the buckets started before it advance
    }

private:
    std::vector<Part> grads_;
    float* bucket_;
    int64_t n_;
};

class AllReduceWaitKernel final : public Kernel {
public:
    AllReduceWaitKernel(float* bucket, std::vector<Part> grads) : bucket_(bucket), grads_(std::move(grads)) {}
    void run(const RunContext& ctx) override {
        if (!ctx.reduce) return;
        dist::Communicator& c = dist::world();
        c.wait(bucket_);
        if (c.size() == 1 && std::all_of(grads_.begin(), grads_.end(), [](const Part& g) { return g.in_place(); })) return;  // the mean of one
        const float mean = 1.0f / float(c.size());
        for (const Part& g : grads_) {
            const float* from = g.in_bucket;
            float* to = g.p;
            const int64_t n = g.n;
#pragma omp parallel for simd schedule(static) if (n > 65536)
            for (int64_t j = 0; j < n; ++j) to[j] = from[j] * mean;
        }
    }

private:
    float* bucket_;
    std::vector<Part> grads_;
};
}  // namespace

std::unique_ptr<Kernel> make_allreduce_kernel(const Graph& g, NodeId id, const std::vector<void*>& inputs, const std::vector<void*>& outputs) {
    const Node& n = g.node(id);
    const std::vector<int64_t> at = bucket_offsets(attrs_as<AllReduceAttrs>(n).shapes);
    const bool start = n.kind == OpKind::AllReduceStart;
    if (!start && n.kind != OpKind::AllReduceWait) throw InternalError(std::string("not an all-reduce node: ") + op_name(n.kind));
    float* bucket = static_cast<float*>(start ? outputs[0] : inputs[0]);
    const std::vector<TensorId>& grads = start ? n.inputs : n.outputs;
    const std::vector<void*>& ptrs = start ? inputs : outputs;
    std::vector<Part> parts;
    for (size_t i = 0; i < grads.size(); ++i) parts.push_back({static_cast<float*>(ptrs[i]), g.tensor(grads[i]).desc.numel(), bucket + at[i]});
    if (start) return std::make_unique<AllReduceStartKernel>(std::move(parts), bucket, at.back());
    return std::make_unique<AllReduceWaitKernel>(bucket, std::move(parts));
}

}  // namespace joule

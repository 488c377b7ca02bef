#include "backend/collective.hpp"

#include <cstring>

#include "dist/communicator.hpp"
#include "graph/error.hpp"

namespace joule {

namespace {
struct Part {
    float* p;
    int64_t n;
};

class AllReduceStartKernel final : public Kernel {
public:
    AllReduceStartKernel(std::vector<Part> grads, float* bucket, int64_t n) : grads_(std::move(grads)), bucket_(bucket), n_(n) {}
    void run(const RunContext&) override {
        float* at = bucket_;
        for (const Part& g : grads_) at = std::copy(g.p, g.p + g.n, at);
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
    void run(const RunContext&) override {
        dist::Communicator& c = dist::world();
        c.wait(bucket_);
        const float mean = 1.0f / float(c.size());
        const float* at = bucket_;
        for (const Part& g : grads_) {
            float* out = g.p;
            const int64_t n = g.n;
#pragma omp parallel for simd schedule(static) if (n > 65536)
            for (int64_t j = 0; j < n; ++j) out[j] = at[j] * mean;
            at += n;
        }
    }

private:
    float* bucket_;
    std::vector<Part> grads_;
};
}  // namespace

std::unique_ptr<Kernel> make_allreduce_kernel(const Graph& g, NodeId id, const std::vector<void*>& inputs, const std::vector<void*>& outputs) {
    const Node& n = g.node(id);
    auto parts = [&](const std::vector<TensorId>& ts, const std::vector<void*>& ptrs) {
        std::vector<Part> v;
        for (size_t i = 0; i < ts.size(); ++i) v.push_back({static_cast<float*>(ptrs[i]), g.tensor(ts[i]).desc.numel()});
        return v;
    };
    if (n.kind == OpKind::AllReduceStart)
        return std::make_unique<AllReduceStartKernel>(parts(n.inputs, inputs), static_cast<float*>(outputs[0]), g.tensor(n.outputs[0]).desc.numel());
    if (n.kind == OpKind::AllReduceWait) return std::make_unique<AllReduceWaitKernel>(static_cast<float*>(inputs[0]), parts(n.outputs, outputs));
    throw InternalError(std::string("not an all-reduce node: ") + op_name(n.kind));
}

}  // namespace joule

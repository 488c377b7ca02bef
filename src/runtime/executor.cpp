#include "runtime/executor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include <unistd.h>

#include "graph/error.hpp"

namespace joule {

struct Executor::Block {
    void* p = nullptr;
    size_t bytes = 0;
    explicit Block(size_t n) : bytes(n) {
        p = std::aligned_alloc(64, (n + 63) / 64 * 64);
        if (!p) throw Error("cannot allocate " + std::to_string(n) + " bytes for tensors", "use a smaller batch");
        std::memset(p, 0, n);
    }
    ~Block() { std::free(p); }
};

Executor::Executor(const Graph& g, Backend& backend, ExecutorOptions opts) : g_(g), backend_(backend) {
    allocate(opts);
    initialise(opts.seed);
    kernels_.resize(g.num_nodes());
    for (size_t n = 0; n < g.num_nodes(); ++n) {
        const Node& node = g.node(NodeId(n));
        std::vector<void*> in, out;
        for (TensorId t : node.inputs) in.push_back(ptr_[size_t(t)]);
        for (TensorId t : node.outputs) out.push_back(ptr_[size_t(t)]);
        kernels_[n] = backend.prepare(g, NodeId(n), in, out);
    }
    seconds_.assign(g.num_nodes(), 0.0);
    runs_.assign(g.num_nodes(), 0);
}

Executor::~Executor() = default;

void Executor::allocate(const ExecutorOptions& opts) {
    const size_t nt = g_.num_tensors(), nn = g_.num_nodes();
    std::vector<bool> owned(nt, false);
    for (size_t t = 0; t < nt; ++t) owned[t] = persists(g_.tensor(TensorId(t)).role);
    for (TensorId t : opts.keep) owned[size_t(t)] = true;
    // Last node reading each pooled tensor (its producer when nothing reads it).
    std::vector<int64_t> last(nt, -1);
    for (size_t n = 0; n < nn; ++n) {
        for (TensorId t : g_.node(NodeId(n)).inputs) last[size_t(t)] = int64_t(n);
        for (TensorId t : g_.node(NodeId(n)).outputs) last[size_t(t)] = std::max(last[size_t(t)], int64_t(n));
    }
    // Plan: block sizes and each tensor's block, before allocating anything.
    std::vector<size_t> block_bytes;
    std::vector<int64_t> block_of(nt, -1);
    auto new_block = [&](size_t bytes) {
        block_bytes.push_back(std::max<size_t>(bytes, 4));
        return int64_t(block_bytes.size() - 1);
    };
    for (size_t t = 0; t < nt; ++t)
        if (owned[t]) block_of[t] = new_block(g_.tensor(TensorId(t)).desc.bytes());
    std::multimap<size_t, int64_t> free_blocks;  // by size
    std::vector<std::vector<TensorId>> dies_after(nn);
    for (size_t t = 0; t < nt; ++t)
        if (!owned[t] && last[t] >= 0) dies_after[size_t(last[t])].push_back(TensorId(t));
    for (size_t n = 0; n < nn; ++n) {
        for (TensorId t : g_.node(NodeId(n)).outputs) {
            if (owned[size_t(t)]) continue;
            const size_t need = g_.tensor(t).desc.bytes();
            auto it = free_blocks.lower_bound(need);
            if (it != free_blocks.end() && it->first <= 2 * need + 4096) {
                block_of[size_t(t)] = it->second;
                free_blocks.erase(it);
            } else {
                block_of[size_t(t)] = new_block(need);
            }
        }
        for (TensorId t : dies_after[n]) free_blocks.emplace(block_bytes[size_t(block_of[size_t(t)])], block_of[size_t(t)]);
    }
    for (size_t b : block_bytes) bytes_ += b;
    const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (physical > 0 && double(bytes_) > 0.9 * physical)
        throw Error("the graph needs " + std::to_string(bytes_ >> 20) + " MiB of tensor memory but this machine has " +
                        std::to_string(int64_t(physical) >> 20) + " MiB",
                    "use a smaller batch or input");
    for (size_t b : block_bytes) blocks_.push_back(std::make_unique<Block>(b));
    ptr_.assign(nt, nullptr);
    for (size_t t = 0; t < nt; ++t) {
        JOULE_ASSERT(block_of[t] >= 0, "tensor '" + g_.tensor(TensorId(t)).name + "' has no buffer");
        ptr_[t] = blocks_[size_t(block_of[t])]->p;
    }
}

size_t Executor::bytes_if_unshared() const {
    size_t b = 0;
    for (const Tensor& t : g_.tensors()) b += t.desc.bytes();
    return b;
}

void Executor::initialise(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t t = 0; t < g_.num_tensors(); ++t) {
        const Tensor& tt = g_.tensor(TensorId(t));
        if (tt.role != TensorRole::Parameter && tt.role != TensorRole::State && tt.role != TensorRole::Constant) continue;
        const int64_t n = tt.desc.numel();
        if (tt.desc.dtype == DType::I32) {
            int32_t* q = static_cast<int32_t*>(ptr_[t]);
            JOULE_ASSERT(tt.init.kind == Init::Kind::Zeros || tt.init.kind == Init::Kind::Position, "i32 init of " + tt.name);
            const int64_t last = tt.desc.shape.back();
            for (int64_t i = 0; i < n; ++i) q[i] = tt.init.kind == Init::Kind::Position ? int32_t(i % last) : 0;
            continue;
        }
        float* p = static_cast<float*>(ptr_[t]);
        switch (tt.init.kind) {
            case Init::Kind::Zeros: std::fill(p, p + n, 0.0f); break;
            case Init::Kind::Ones: std::fill(p, p + n, 1.0f); break;
            case Init::Kind::Uniform: {
                std::uniform_real_distribution<float> d(-tt.init.scale, tt.init.scale);
                for (int64_t i = 0; i < n; ++i) p[i] = d(rng);
                break;
            }
            case Init::Kind::Normal: {
                std::normal_distribution<float> d(0.0f, tt.init.scale);
                for (int64_t i = 0; i < n; ++i) p[i] = d(rng);
                break;
            }
            case Init::Kind::Position: throw InternalError("position init on a float tensor " + tt.name);
        }
    }
}

void Executor::run(NodeId begin, NodeId end, const RunContext& ctx) {
    using clock = std::chrono::steady_clock;
    for (NodeId n = begin; n < end; ++n) {
        const auto t0 = clock::now();
        try {
            kernels_[size_t(n)]->run(ctx);
        } catch (const InternalError& e) {
            throw InternalError("node '" + g_.node(n).name + "': " + e.what());
        }
        const auto t1 = clock::now();
        seconds_[size_t(n)] += std::chrono::duration<double>(t1 - t0).count();
        ++runs_[size_t(n)];
        if (spans_)
            spans_->push_back({n, std::chrono::duration<double>(t0.time_since_epoch()).count(), std::chrono::duration<double>(t1.time_since_epoch()).count()});
    }
}

void Executor::run_forward(const RunContext& ctx) {
    for (NodeId n = 0; n < NodeId(g_.num_nodes()); ++n) {
        const Phase p = g_.node(n).phase;
        if (p == Phase::Forward || p == Phase::Loss) kernels_[size_t(n)]->run(ctx);
    }
}

float* Executor::f32(TensorId t) {
    if (g_.tensor(t).desc.dtype == DType::I32) throw InternalError("tensor '" + g_.tensor(t).name + "' is i32");
    return static_cast<float*>(ptr_[size_t(t)]);
}
int32_t* Executor::i32(TensorId t) {
    if (g_.tensor(t).desc.dtype != DType::I32) throw InternalError("tensor '" + g_.tensor(t).name + "' is not i32");
    return static_cast<int32_t*>(ptr_[size_t(t)]);
}

void Executor::reset_timing() {
    std::fill(seconds_.begin(), seconds_.end(), 0.0);
    std::fill(runs_.begin(), runs_.end(), 0);
}

}  // namespace joule

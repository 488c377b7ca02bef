#include "runtime/executor.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include <unistd.h>

#include "backend/registry.hpp"
#include "graph/bf16.hpp"
#include "graph/error.hpp"
#include "plan/passes.hpp"

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

Executor::Executor(const LoweredGraph& lg, BackendSet& backends, ExecutorOptions opts) : g_(lg.train.graph) {
    JOULE_ASSERT(opts.keep.empty(), "a lowered graph's kept tensors are decided when it is lowered (LowerOptions::keep)");
    for (const auto& [device, s] : lg.plan.devices) {  // the plan's device settings, to the backends that model a device
        auto exact = [](double v) {  // text that reads back as the very value the plan was simulated with
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.17g", v);
            return std::string(buf);
        };
        std::map<std::string, std::string> text;
        if (s.power_limit_w) text["power_limit_w"] = exact(*s.power_limit_w);
        if (s.clock_mhz) text["clock_mhz"] = exact(*s.clock_mhz);
        if (s.fpga_design) text["fpga_design"] = *s.fpga_design;
        backends.set_settings(device, text);
    }
    std::vector<Backend*> backend_of(g_.num_nodes());
    for (size_t n = 0; n < g_.num_nodes(); ++n) {
        const Node& node = g_.node(NodeId(n));
        try {
            backend_of[n] = &backends.get(node.device);
        } catch (const Error& e) {
            throw Error(lg.origin.at(n) + ": node '" + node.name + "': " + e.what());
        }
    }
    threads_ = backends.threads();
    setup(lg.memory, backend_of, &lg.origin);
    initialise(opts.seed);
}

Executor::Executor(const Graph& g, Backend& backend, ExecutorOptions opts) : g_(g) {
    threads_ = backend.threads();
    setup(plan_memory(g, opts.keep), std::vector<Backend*>(g.num_nodes(), &backend), nullptr);
    initialise(opts.seed);
}

Executor::~Executor() = default;

void Executor::setup(const MemoryPlan& mp, const std::vector<Backend*>& backend_of, const std::vector<std::string>* origin) {
    bytes_ = mp.bytes_total;
    unshared_ = mp.bytes_if_unshared;
    const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (physical > 0 && double(bytes_) > 0.9 * physical)
        throw Error("the graph needs " + std::to_string(bytes_ >> 20) + " MiB of tensor memory but this machine has " +
                        std::to_string(int64_t(physical) >> 20) + " MiB",
                    "use a smaller batch or input");
    for (const auto& b : mp.buffers) blocks_.push_back(std::make_unique<Block>(b.bytes));
    ptr_.assign(g_.num_tensors(), nullptr);
    for (size_t t = 0; t < g_.num_tensors(); ++t)  // a tensor fused away has no storage (no node touches it)
        if (mp.buffer_of[t] >= 0) ptr_[t] = static_cast<std::byte*>(blocks_[size_t(mp.buffer_of[t])]->p) + mp.offset_of[t];
    kernels_.resize(g_.num_nodes());
    node_device_.resize(g_.num_nodes());
    for (size_t n = 0; n < g_.num_nodes(); ++n) {
        const Node& node = g_.node(NodeId(n));
        Backend& backend = *backend_of[n];
        auto d = std::find(devices_.begin(), devices_.end(), backend.device());
        if (d == devices_.end()) d = devices_.insert(devices_.end(), backend.device());
        node_device_[n] = int16_t(d - devices_.begin());
        const Support s = backend.supports(g_, NodeId(n));
        if (!s.ok)
            throw Error((origin ? origin->at(n) + ": " : std::string()) + "node '" + node.name + "' (" + op_name(node.kind) + ", " +
                        dtype_name(node.compute) + ") cannot run on " + backend.device() + ": " + s.reason);
        std::vector<void*> in, out;
        for (TensorId t : node.inputs) in.push_back(ptr_[size_t(t)]);
        for (TensorId t : node.outputs) out.push_back(ptr_[size_t(t)]);
        kernels_[n] = backend.prepare(g_, NodeId(n), in, out);
    }
    seconds_.assign(g_.num_nodes(), 0.0);
    emulation_.assign(g_.num_nodes(), 0.0);
    modelled_.assign(g_.num_nodes(), false);
    runs_.assign(g_.num_nodes(), 0);
}

void Executor::initialise(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<bool> copy(g_.num_tensors(), false);  // the parameters' bf16 copies: refreshed last
    for (const auto& [p, c] : low_copies(g_)) copy[size_t(c)] = true;
    for (size_t t = 0; t < g_.num_tensors(); ++t) {
        const Tensor& tt = g_.tensor(TensorId(t));
        if ((tt.role != TensorRole::Parameter && tt.role != TensorRole::State && tt.role != TensorRole::Constant) || copy[t]) continue;
        const int64_t n = tt.desc.numel();
        if (tt.desc.dtype == DType::I32) {
            int32_t* q = static_cast<int32_t*>(ptr_[t]);
            if (tt.init.kind == Init::Kind::Data) {
                JOULE_ASSERT(tt.init.indices && int64_t(tt.init.indices->size()) == n, "i32 data of " + tt.name);
                std::copy(tt.init.indices->begin(), tt.init.indices->end(), q);
                continue;
            }
            JOULE_ASSERT(tt.init.kind == Init::Kind::Zeros || tt.init.kind == Init::Kind::Position, "i32 init of " + tt.name);
            const int64_t last = tt.desc.shape.back();
            for (int64_t i = 0; i < n; ++i) q[i] = tt.init.kind == Init::Kind::Position ? int32_t(i % last) : 0;
            continue;
        }
        // a blocked tensor (plan/'s layout pass) is initialised in plain order, then laid out
        std::vector<float> plain(tt.desc.layout == Layout::Blocked ? size_t(n) : 0);
        float* p = plain.empty() ? static_cast<float*>(ptr_[t]) : plain.data();
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
            case Init::Kind::Data:
                JOULE_ASSERT(tt.init.values && int64_t(tt.init.values->size()) == n, "float data of " + tt.name);
                std::copy(tt.init.values->begin(), tt.init.values->end(), p);
                break;
            case Init::Kind::Position: throw InternalError("position init on a float tensor " + tt.name);
        }
        if (!plain.empty()) from_plain(tt.desc, plain.data(), ptr_[t]);
    }
    refresh_low_copies();
}

void Executor::refresh_low_copies() {
    for (const auto& [p, c] : low_copies(g_)) {
        const TensorDesc &dp = g_.tensor(p).desc, &dc = g_.tensor(c).desc;
        uint16_t* to = static_cast<uint16_t*>(ptr_[size_t(c)]);
        if (dp.layout == dc.layout && dp.blocking == dc.blocking) {  // element i of one is element i of the other
            const float* from = static_cast<const float*>(ptr_[size_t(p)]);
            for (int64_t i = 0; i < dp.storage_numel(); ++i) to[i] = f32_to_bf16(from[i]);
            continue;
        }
        // another layout (a convolution weight's bf16 formats): through row-major order
        const std::vector<std::byte> plain = to_plain(dp, ptr_[size_t(p)]);
        std::vector<uint16_t> rounded(size_t(dp.numel()));
        for (size_t i = 0; i < rounded.size(); ++i) {
            float v;
            std::memcpy(&v, &plain[i * sizeof v], sizeof v);
            rounded[i] = f32_to_bf16(v);
        }
        from_plain(dc, rounded.data(), to);
    }
}

void Executor::run(NodeId begin, NodeId end, const RunContext& ctx) {
    using clock = std::chrono::steady_clock;
    for (NodeId n = begin; n < end; ++n) {
        const size_t k = size_t(n);
        const auto t0 = clock::now();
        try {
            kernels_[k]->run(ctx);
        } catch (const InternalError& e) {
            throw InternalError("node '" + g_.node(n).name + "': " + e.what());
        }
        const auto t1 = clock::now();
        const double wall = std::chrono::duration<double>(t1 - t0).count();
        const std::optional<double> modelled = kernels_[k]->modelled_seconds();
        if (modelled) {
            seconds_[k] += *modelled;
            emulation_[k] += wall;
            modelled_[k] = true;
        } else {
            seconds_[k] += wall;
        }
        ++runs_[k];
        if (spans_)
            spans_->push_back({n, std::chrono::duration<double>(t0.time_since_epoch()).count(), std::chrono::duration<double>(t1.time_since_epoch()).count(),
                               node_device_[k], modelled.has_value(), modelled.value_or(0), modelled ? kernels_[k]->modelled_joules() : 0});
    }
}

void Executor::run_forward(const RunContext& ctx) {
    for (NodeId n = 0; n < NodeId(g_.num_nodes()); ++n) {
        const Phase p = g_.node(n).phase;
        if (p == Phase::Forward || p == Phase::Loss) kernels_[size_t(n)]->run(ctx);
    }
}

namespace {
void require_stored(const void* p, const Tensor& t) {
    if (!p) throw InternalError("tensor '" + t.name + "' was fused away (never stored); keep it (LowerOptions::keep) to read it");
}
}  // namespace

float* Executor::f32(TensorId t) {
    require_stored(ptr_[size_t(t)], g_.tensor(t));
    if (g_.tensor(t).desc.dtype != DType::F32)
        throw InternalError("tensor '" + g_.tensor(t).name + "' is " + dtype_name(g_.tensor(t).desc.dtype) + ", not f32");
    if (g_.tensor(t).desc.layout == Layout::Blocked)
        throw InternalError("tensor '" + g_.tensor(t).name + "' is stored blocked (" + layout_str(g_.tensor(t).desc) + "): read_f32 gives its elements, data() its storage");
    return static_cast<float*>(ptr_[size_t(t)]);
}

std::vector<float> Executor::read_f32(TensorId t) const {
    const TensorDesc& d = g_.tensor(t).desc;
    require_stored(ptr_[size_t(t)], g_.tensor(t));
    std::vector<float> v(size_t(d.numel()));
    const std::vector<std::byte> plain = d.layout == Layout::Blocked ? to_plain(d, ptr_[size_t(t)]) : std::vector<std::byte>();
    const void* src = plain.empty() ? ptr_[size_t(t)] : plain.data();
    if (d.dtype == DType::F32) {
        std::memcpy(v.data(), src, v.size() * 4);
    } else if (d.dtype == DType::BF16) {
        const auto* p = static_cast<const uint16_t*>(src);
        for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(p[i]);
    } else {
        throw InternalError("tensor '" + g_.tensor(t).name + "' is not floating-point");
    }
    return v;
}
int32_t* Executor::i32(TensorId t) {
    if (g_.tensor(t).desc.dtype != DType::I32) throw InternalError("tensor '" + g_.tensor(t).name + "' is not i32");
    return static_cast<int32_t*>(ptr_[size_t(t)]);
}

void Executor::reset_timing() {
    std::fill(seconds_.begin(), seconds_.end(), 0.0);
    std::fill(emulation_.begin(), emulation_.end(), 0.0);
    std::fill(runs_.begin(), runs_.end(), 0);
}

}  // namespace joule

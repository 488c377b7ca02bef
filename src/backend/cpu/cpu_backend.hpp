// The CPU backend on oneDNN. Every op of the catalogue runs forward and backward, in f32 or bf16 (every
// op but the loss, the optimizer updates and embeddings): a bf16 node reads and writes bf16 buffers
// (oneDNN accumulates in f32), and the plan's Cast nodes are oneDNN reorders; no kernel casts by itself. Primitive descriptors are cached per shape and attributes, so nodes
// with the same shape (repeated residual blocks) share one primitive.
#pragma once

#include <omp.h>

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "backend/backend.hpp"

namespace joule::cpu {

// Shape-keyed cache of primitive descriptors and primitives. oneDNN decomposes a primitive's work for the
// thread count at its creation and must run with that count, so the key includes it (small nodes'
// primitives are created and run on one thread: see CpuBackend::serial).
class PrimitiveCache {
public:
    template <class Prim>
    struct Entry {
        typename Prim::primitive_desc pd;
        Prim prim;
    };
    // Returns the cached entry for `key`, creating it with make() -> Prim::primitive_desc on a miss.
    template <class Prim, class Make>
    std::shared_ptr<Entry<Prim>> get(const std::string& key, Make make) {
        const std::string k = std::string(typeid(Prim).name()) + "|" + std::to_string(omp_get_max_threads()) + "|" + key;
        auto it = map_.find(k);
        if (it != map_.end()) return std::static_pointer_cast<Entry<Prim>>(it->second);
        typename Prim::primitive_desc pd = make();
        auto e = std::make_shared<Entry<Prim>>(Entry<Prim>{pd, Prim(pd)});
        map_[k] = e;
        return e;
    }
    size_t size() const { return map_.size(); }

private:
    std::unordered_map<std::string, std::shared_ptr<void>> map_;
};

struct CpuContext {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    PrimitiveCache cache;
};

class CpuBackend : public Backend {
public:
    // threads 0: all cores. serial_small_nodes false: every node on all threads (tests and
    // bench/node_overhead.cpp compare the two).
    explicit CpuBackend(int threads = 0, std::string device = "cpu", bool serial_small_nodes = true);
    const std::string& device() const override { return device_; }
    Support supports(const Graph& g, NodeId n) const override;
    std::unique_ptr<Kernel> prepare(const Graph& g, NodeId n, const std::vector<void*>& inputs,
                                    const std::vector<void*>& outputs) override;
    int threads() const override { return threads_; }
    CpuContext& context() { return *ctx_; }
    // Whether node n runs on the calling thread alone (its primitives created and run with one thread): a
    // small node (graph/cost.hpp small_node), not an all-reduce.
    static bool serial(const Graph& g, NodeId n);
    // The layouts this backend's kernels want for node n's operands (plan/'s layout pass): a convolution's
    // weights (forward, backward-data) and weight gradient in the blocked formats oneDNN picks for its
    // shapes, dtypes and this CPU; no wish for anything else (activations stay nhwc, which oneDNN's brgemm
    // kernels read directly).
    static LayoutWishes layout_wishes(const Graph& g, NodeId n);
    // Whether this backend's optimizer updates write a bf16 copy of an f32 parameter in layout `copy`
    // (plan/'s fold_casts): the parameter's own storage order, or a convolution weight's f32 master into
    // the bf16 convolution formats (convert.cpp's CopyToBf16).
    static bool writes_low_copy(const TensorDesc& param, const TensorDesc& copy);

private:
    std::unique_ptr<Kernel> prepare_kernel(const Graph& g, NodeId n, const std::vector<void*>& inputs, const std::vector<void*>& outputs);
    std::string device_;
    int threads_;
    bool serial_small_nodes_;
    std::unique_ptr<CpuContext> ctx_;
};

}  // namespace joule::cpu

// BatchNorm2d and LayerNorm, forward (training and inference) and backward, on oneDNN's
// normalisation primitives with separate scale and shift. BatchNorm updates the running statistics
// after each training forward as PyTorch does (unbiased variance into the running estimate). In bf16
// the data tensors are bf16; statistics, scale and shift stay f32 (oneDNN's bf16 normalisation).
// A fused ReLU (Node::post_op) is oneDNN's fuse_norm_relu flag; the workspace (a mask of the ReLU) that
// training forward writes is the kernel's own: ReluBackward reads the output instead.
#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;
const normalization_flags kScaleShift = normalization_flags::use_scale | normalization_flags::use_shift;

std::string norm_key(const TensorDesc& x, const NormAttrs& at, dt type) { return key_of(x) + std::to_string(at.eps) + "t" + std::to_string(int(type)); }

class BatchNormForward : public Kernel {
public:
    explicit BatchNormForward(const KernelArgs& a) : train_(a.ctx), infer_(a.ctx), attrs_(attrs_as<NormAttrs>(a.node)) {
        const TensorDesc& x = a.in_desc(0);
        const dt type = compute_type(a.node.compute);
        const memory::desc data = md_of(x), cdata = with_type(data, type);
        JOULE_ASSERT(a.node.post_op == OpKind::Count || a.node.post_op == OpKind::Relu, "batch norm fuses ReLU only");
        const normalization_flags flags = a.node.post_op == OpKind::Relu ? kScaleShift | normalization_flags::fuse_norm_relu : kScaleShift;
        const std::string key = norm_key(x, attrs_, type) + post_op_key(a.node);
        auto train = a.ctx.cache.get<batch_normalization_forward>(key, [&] {
            return batch_normalization_forward::primitive_desc({prop_kind::forward_training, cdata, attrs_.eps, flags}, a.ctx.engine);
        });
        auto infer = a.ctx.cache.get<batch_normalization_forward>(key + "inference", [&] {
            return batch_normalization_forward::primitive_desc(
                {prop_kind::forward_inference, cdata, attrs_.eps, flags | normalization_flags::use_global_stats}, a.ctx.engine);
        });
        const memory::desc c({x.shape[1]}, dt::f32, tag::a);
        channels_ = x.shape[1];
        count_ = x.numel() / x.shape[1];
        running_mean_ = static_cast<float*>(a.in[3]);
        running_var_ = static_cast<float*>(a.in[4]);
        mean_ = static_cast<float*>(a.out[1]);
        var_ = static_cast<float*>(a.out[2]);
        for (PrimitiveKernel* k : {&train_, &infer_}) {
            const bool training = k == &train_;
            StagedOutputs outs;
            std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, compute_input(a, data, a.in[0], type)},
                                                    {DNNL_ARG_SCALE, a.mem(c, a.in[1])},
                                                    {DNNL_ARG_SHIFT, a.mem(c, a.in[2])},
                                                    {DNNL_ARG_DST, outs.add(a, data, a.out[0], type)},
                                                    {DNNL_ARG_MEAN, a.mem(c, training ? a.out[1] : a.in[3])},
                                                    {DNNL_ARG_VARIANCE, a.mem(c, training ? a.out[2] : a.in[4])}};
            if (training && a.node.post_op != OpKind::Count) args[DNNL_ARG_WORKSPACE] = memory(train->pd.workspace_desc(), a.ctx.engine);
            k->add(training ? train->prim : infer->prim, args);
            outs.finish(*k);
        }
    }
    void run(const RunContext& rc) override {
        if (!rc.training) {
            infer_.run(rc);
            return;
        }
        train_.run(rc);
        const float m = attrs_.momentum;
        const float unbias = count_ > 1 ? float(count_) / float(count_ - 1) : 1.0f;
        for (int64_t c = 0; c < channels_; ++c) {
            running_mean_[c] = (1 - m) * running_mean_[c] + m * mean_[c];
            running_var_[c] = (1 - m) * running_var_[c] + m * var_[c] * unbias;
        }
    }

private:
    PrimitiveKernel train_, infer_;
    NormAttrs attrs_;
    int64_t channels_ = 0, count_ = 0;
    float *running_mean_, *running_var_, *mean_, *var_;
};

// (dY, X, gamma, mean, var) -> (dX, dgamma, dbeta) for either normalisation, given its forward primitive.
template <class Backward, class Forward>
std::unique_ptr<Kernel> norm_backward(const KernelArgs& a, const memory::desc& data, const memory::desc& stat, const memory::desc& chan,
                                      const std::shared_ptr<PrimitiveCache::Entry<Forward>>& fwd, const std::string& key, dt type,
                                      const typename Backward::desc& desc) {
    auto e = a.ctx.cache.get<Backward>(key, [&] { return typename Backward::primitive_desc(desc, a.ctx.engine, fwd->pd); });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    // oneDNN 2.6 wants the shift argument with use_shift even in backward, where it is not read.
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, compute_input(a, data, a.in[0], type)},
                     {DNNL_ARG_SRC, compute_input(a, data, a.in[1], type)},
                     {DNNL_ARG_SCALE, a.mem(chan, a.in[2])},
                     {DNNL_ARG_SHIFT, a.mem(chan, a.in[2])},
                     {DNNL_ARG_MEAN, a.mem(stat, a.in[3])},
                     {DNNL_ARG_VARIANCE, a.mem(stat, a.in[4])},
                     {DNNL_ARG_DIFF_SRC, outs.add(a, data, a.out[0], type)},
                     {DNNL_ARG_DIFF_SCALE, a.mem(chan, a.out[1])},
                     {DNNL_ARG_DIFF_SHIFT, a.mem(chan, a.out[2])}});
    outs.finish(*k);
    return k;
}

std::unique_ptr<Kernel> batch_norm_backward(const KernelArgs& a) {
    const auto& at = attrs_as<NormAttrs>(a.node);
    const TensorDesc& x = a.in_desc(1);
    const dt type = compute_type(a.node.compute);
    const memory::desc data = md_of(x), cdata = with_type(data, type), c({x.shape[1]}, dt::f32, tag::a);
    const std::string key = norm_key(x, at, type);
    auto fwd = a.ctx.cache.get<batch_normalization_forward>(key, [&] {
        return batch_normalization_forward::primitive_desc({prop_kind::forward_training, cdata, at.eps, kScaleShift}, a.ctx.engine);
    });
    return norm_backward<batch_normalization_backward>(a, data, c, c, fwd, key, type, {prop_kind::backward, cdata, cdata, at.eps, kScaleShift});
}

// LayerNorm over the last dim of a [..., H] tensor, viewed as [rows, H].
std::unique_ptr<Kernel> layer_norm(const KernelArgs& a) {
    const auto& at = attrs_as<NormAttrs>(a.node);
    const bool fwd_node = a.node.kind == OpKind::LayerNorm;
    const TensorDesc& x = fwd_node ? a.in_desc(0) : a.in_desc(1);
    const dt type = compute_type(a.node.compute);
    const int64_t h = x.shape.back(), rows = x.numel() / h;
    const memory::desc data({rows, h}, dnnl_type(x.dtype), tag::ab), cdata = with_type(data, type), stat({rows}, dt::f32, tag::a), chan({h}, dt::f32, tag::a);
    const std::string key = norm_key(x, at, type);
    auto fwd = a.ctx.cache.get<layer_normalization_forward>(key, [&] {
        return layer_normalization_forward::primitive_desc({prop_kind::forward_training, cdata, stat, at.eps, kScaleShift}, a.ctx.engine);
    });
    if (!fwd_node)
        return norm_backward<layer_normalization_backward>(a, data, stat, chan, fwd, key, type,
                                                           {prop_kind::backward, cdata, cdata, stat, at.eps, kScaleShift});
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    k->add(fwd->prim, {{DNNL_ARG_SRC, compute_input(a, data, a.in[0], type)}, {DNNL_ARG_SCALE, a.mem(chan, a.in[1])},
                       {DNNL_ARG_SHIFT, a.mem(chan, a.in[2])}, {DNNL_ARG_DST, outs.add(a, data, a.out[0], type)},
                       {DNNL_ARG_MEAN, a.mem(stat, a.out[1])}, {DNNL_ARG_VARIANCE, a.mem(stat, a.out[2])}});
    outs.finish(*k);
    return k;
}
}  // namespace

std::unique_ptr<Kernel> make_norm(const KernelArgs& a) {
    switch (a.node.kind) {
        case OpKind::BatchNorm2d: return std::make_unique<BatchNormForward>(a);
        case OpKind::BatchNormBackward: return batch_norm_backward(a);
        default: return layer_norm(a);
    }
}

}  // namespace joule::cpu

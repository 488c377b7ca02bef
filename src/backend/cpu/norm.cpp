// BatchNorm2d and LayerNorm, forward (training and inference) and backward, on oneDNN's
// normalisation primitives with separate scale and shift. BatchNorm updates the running statistics
// after each training forward as PyTorch does (unbiased variance into the running estimate).
#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;
const normalization_flags kScaleShift = normalization_flags::use_scale | normalization_flags::use_shift;

class BatchNormForward : public Kernel {
public:
    BatchNormForward(const KernelArgs& a) : ctx_(a.ctx), attrs_(attrs_as<NormAttrs>(a.node)) {
        const TensorDesc& x = a.in_desc(0);
        const memory::desc data = md_of(x);
        const std::string key = key_of(x) + std::to_string(attrs_.eps);
        train_ = a.ctx.cache.get<batch_normalization_forward>(key, [&] {
            return batch_normalization_forward::primitive_desc({prop_kind::forward_training, data, attrs_.eps, kScaleShift}, a.ctx.engine);
        });
        infer_ = a.ctx.cache.get<batch_normalization_forward>(key + "inference", [&] {
            return batch_normalization_forward::primitive_desc(
                {prop_kind::forward_inference, data, attrs_.eps, kScaleShift | normalization_flags::use_global_stats}, a.ctx.engine);
        });
        const memory::desc c({x.shape[1]}, dt::f32, tag::a);
        channels_ = x.shape[1];
        count_ = x.numel() / x.shape[1];
        running_mean_ = static_cast<float*>(a.in[3]);
        running_var_ = static_cast<float*>(a.in[4]);
        mean_ = static_cast<float*>(a.out[1]);
        var_ = static_cast<float*>(a.out[2]);
        train_args_ = {{DNNL_ARG_SRC, a.mem(data, a.in[0])}, {DNNL_ARG_SCALE, a.mem(c, a.in[1])}, {DNNL_ARG_SHIFT, a.mem(c, a.in[2])},
                       {DNNL_ARG_DST, a.mem(data, a.out[0])}, {DNNL_ARG_MEAN, a.mem(c, a.out[1])}, {DNNL_ARG_VARIANCE, a.mem(c, a.out[2])}};
        infer_args_ = train_args_;
        infer_args_[DNNL_ARG_MEAN] = a.mem(c, a.in[3]);
        infer_args_[DNNL_ARG_VARIANCE] = a.mem(c, a.in[4]);
    }
    void run(const RunContext& rc) override {
        if (!rc.training) {
            infer_->prim.execute(ctx_.stream, infer_args_);
            ctx_.stream.wait();
            return;
        }
        train_->prim.execute(ctx_.stream, train_args_);
        ctx_.stream.wait();
        const float m = attrs_.momentum;
        const float unbias = count_ > 1 ? float(count_) / float(count_ - 1) : 1.0f;
        for (int64_t c = 0; c < channels_; ++c) {
            running_mean_[c] = (1 - m) * running_mean_[c] + m * mean_[c];
            running_var_[c] = (1 - m) * running_var_[c] + m * var_[c] * unbias;
        }
    }

private:
    CpuContext& ctx_;
    NormAttrs attrs_;
    std::shared_ptr<PrimitiveCache::Entry<batch_normalization_forward>> train_, infer_;
    std::unordered_map<int, memory> train_args_, infer_args_;
    int64_t channels_ = 0, count_ = 0;
    float *running_mean_, *running_var_, *mean_, *var_;
};

std::unique_ptr<Kernel> batch_norm_backward(const KernelArgs& a) {
    const auto& at = attrs_as<NormAttrs>(a.node);
    const TensorDesc& x = a.in_desc(1);
    const memory::desc data = md_of(x), c({x.shape[1]}, dt::f32, tag::a);
    const std::string key = key_of(x) + std::to_string(at.eps);
    auto fwd = a.ctx.cache.get<batch_normalization_forward>(key, [&] {
        return batch_normalization_forward::primitive_desc({prop_kind::forward_training, data, at.eps, kScaleShift}, a.ctx.engine);
    });
    auto e = a.ctx.cache.get<batch_normalization_backward>(key, [&] {
        return batch_normalization_backward::primitive_desc({prop_kind::backward, data, data, at.eps, kScaleShift}, a.ctx.engine, fwd->pd);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    // oneDNN 2.6 wants the shift argument with use_shift even in backward, where it is not read.
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, a.mem(data, a.in[0])}, {DNNL_ARG_SRC, a.mem(data, a.in[1])}, {DNNL_ARG_SCALE, a.mem(c, a.in[2])},
                     {DNNL_ARG_SHIFT, a.mem(c, a.in[2])},
                     {DNNL_ARG_MEAN, a.mem(c, a.in[3])}, {DNNL_ARG_VARIANCE, a.mem(c, a.in[4])}, {DNNL_ARG_DIFF_SRC, a.mem(data, a.out[0])},
                     {DNNL_ARG_DIFF_SCALE, a.mem(c, a.out[1])}, {DNNL_ARG_DIFF_SHIFT, a.mem(c, a.out[2])}});
    return k;
}

// LayerNorm over the last dim of a [..., H] tensor, viewed as [rows, H].
struct LayerNormDescs {
    memory::desc data, stat, chan;
};
LayerNormDescs layer_norm_descs(const TensorDesc& x) {
    const int64_t h = x.shape.back(), rows = x.numel() / h;
    return {memory::desc({rows, h}, dt::f32, tag::ab), memory::desc({rows}, dt::f32, tag::a), memory::desc({h}, dt::f32, tag::a)};
}

std::unique_ptr<Kernel> layer_norm(const KernelArgs& a) {
    const auto& at = attrs_as<NormAttrs>(a.node);
    const bool fwd_node = a.node.kind == OpKind::LayerNorm;
    const TensorDesc& x = fwd_node ? a.in_desc(0) : a.in_desc(1);
    const LayerNormDescs d = layer_norm_descs(x);
    const std::string key = key_of(x) + std::to_string(at.eps);
    auto fwd = a.ctx.cache.get<layer_normalization_forward>(key, [&] {
        return layer_normalization_forward::primitive_desc({prop_kind::forward_training, d.data, d.stat, at.eps, kScaleShift}, a.ctx.engine);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    if (fwd_node) {
        k->add(fwd->prim, {{DNNL_ARG_SRC, a.mem(d.data, a.in[0])}, {DNNL_ARG_SCALE, a.mem(d.chan, a.in[1])}, {DNNL_ARG_SHIFT, a.mem(d.chan, a.in[2])},
                           {DNNL_ARG_DST, a.mem(d.data, a.out[0])}, {DNNL_ARG_MEAN, a.mem(d.stat, a.out[1])},
                           {DNNL_ARG_VARIANCE, a.mem(d.stat, a.out[2])}});
        return k;
    }
    auto e = a.ctx.cache.get<layer_normalization_backward>(key, [&] {
        return layer_normalization_backward::primitive_desc({prop_kind::backward, d.data, d.data, d.stat, at.eps, kScaleShift}, a.ctx.engine, fwd->pd);
    });
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, a.mem(d.data, a.in[0])}, {DNNL_ARG_SRC, a.mem(d.data, a.in[1])}, {DNNL_ARG_SCALE, a.mem(d.chan, a.in[2])},
                     {DNNL_ARG_SHIFT, a.mem(d.chan, a.in[2])},  // see batch_norm_backward
                     {DNNL_ARG_MEAN, a.mem(d.stat, a.in[3])}, {DNNL_ARG_VARIANCE, a.mem(d.stat, a.in[4])}, {DNNL_ARG_DIFF_SRC, a.mem(d.data, a.out[0])},
                     {DNNL_ARG_DIFF_SCALE, a.mem(d.chan, a.out[1])}, {DNNL_ARG_DIFF_SHIFT, a.mem(d.chan, a.out[2])}});
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

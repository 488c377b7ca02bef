// Max, average and global-average pooling on oneDNN pooling primitives. Max pooling's workspace is
// the graph's explicit arg-max tensor: oneDNN's workspace holds the same thing (the index kh * KW + kw
// inside the window, u8 up to 255 elements, in the output's layout), checked when the kernel is prepared.
#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

struct PoolGeometry {
    algorithm alg;
    memory::dims strides, kernel, pad_l, pad_r;
};
PoolGeometry pool_geometry(const Node& n, const TensorDesc& x) {
    switch (n.kind) {
        case OpKind::GlobalAvgPool: case OpKind::GlobalAvgPoolBackward:
            return {algorithm::pooling_avg_exclude_padding, {1, 1}, {x.shape[2], x.shape[3]}, {0, 0}, {0, 0}};
        default: {
            const auto& a = attrs_as<PoolAttrs>(n);
            const bool max = n.kind == OpKind::MaxPool2d || n.kind == OpKind::MaxPool2dBackward;
            return {max ? algorithm::pooling_max : algorithm::pooling_avg_include_padding, {a.stride[0], a.stride[1]},
                    {a.kernel[0], a.kernel[1]}, {a.pad[0], a.pad[1]}, {a.pad[0], a.pad[1]}};
        }
    }
}
std::string pool_key(const PoolGeometry& g, const TensorDesc& x, const TensorDesc& y) {
    std::string k = key_of(x) + key_of(y) + std::to_string(int(g.alg));
    for (const auto* v : {&g.strides, &g.kernel, &g.pad_l}) k += "," + std::to_string((*v)[0]) + "," + std::to_string((*v)[1]);
    return k;
}

// The arg-max tensor as oneDNN's workspace: same element type, same dims, same (dst) layout.
memory argmax_memory(const KernelArgs& a, const memory::desc& ws, const TensorDesc& argmax, void* p) {
    const memory::desc want = md_of(argmax);
    if (ws != want)
        throw InternalError("op '" + a.node.name + "': oneDNN's max-pooling workspace is not the arg-max tensor " + desc_str(argmax));
    return a.mem(ws, p);
}
}  // namespace

std::unique_ptr<Kernel> make_pool(const KernelArgs& a) {
    const bool forward = op_info(a.node.kind).grad != nullptr;
    // forward: (X) -> (Y[, argmax]); MaxPool2dBackward: (dY, argmax) -> dX; avg backward: (dY) -> dX
    const TensorDesc& x = forward ? a.in_desc(0) : a.out_desc(0);
    const TensorDesc& y = forward ? a.out_desc(0) : a.in_desc(0);
    const PoolGeometry g = pool_geometry(a.node, x);
    const dt type = compute_type(a.node.compute);
    const memory::desc src = md_of(x), dst = md_of(y), csrc = with_type(src, type), cdst = with_type(dst, type);
    const std::string key = pool_key(g, x, y) + "t" + std::to_string(int(type));
    auto fwd = a.ctx.cache.get<pooling_forward>(key, [&] {
        return pooling_forward::primitive_desc({prop_kind::forward_training, g.alg, csrc, cdst, g.strides, g.kernel, g.pad_l, g.pad_r}, a.ctx.engine);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    const bool max = g.alg == algorithm::pooling_max;
    if (forward) {
        std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, compute_input(a, src, a.in[0], type)}, {DNNL_ARG_DST, outs.add(a, dst, a.out[0], type)}};
        if (max) args[DNNL_ARG_WORKSPACE] = argmax_memory(a, fwd->pd.workspace_desc(), a.out_desc(1), a.out[1]);
        k->add(fwd->prim, args);
        outs.finish(*k);
        return k;
    }
    auto e = a.ctx.cache.get<pooling_backward>(key, [&] {
        return pooling_backward::primitive_desc({g.alg, csrc, cdst, g.strides, g.kernel, g.pad_l, g.pad_r}, a.ctx.engine, fwd->pd);
    });
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, compute_input(a, dst, a.in[0], type)}, {DNNL_ARG_DIFF_SRC, outs.add(a, src, a.out[0], type)}};
    if (max) args[DNNL_ARG_WORKSPACE] = argmax_memory(a, e->pd.workspace_desc(), a.in_desc(1), a.in[1]);
    k->add(e->prim, args);
    outs.finish(*k);
    return k;
}

}  // namespace joule::cpu

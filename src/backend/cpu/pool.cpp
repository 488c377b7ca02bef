// Max, average and global-average pooling on oneDNN pooling primitives. Max pooling's forward keeps
// its workspace (the arg-max) in the context, keyed by node, for its backward.
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
}  // namespace

std::unique_ptr<Kernel> make_pool(const KernelArgs& a) {
    const bool forward = op_info(a.node.kind).grad != nullptr;
    // forward: (X) -> Y; MaxPool2dBackward: (dY, X) -> dX; avg backward: (dY) -> dX
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
        std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, cast_input(*k, a, src, a.in[0], type)}, {DNNL_ARG_DST, outs.add(a, dst, a.out[0], type)}};
        if (max) {
            memory ws(fwd->pd.workspace_desc(), a.ctx.engine);
            a.ctx.workspaces[a.id] = ws;
            args[DNNL_ARG_WORKSPACE] = ws;
        }
        k->add(fwd->prim, args);
        outs.finish(*k);
        return k;
    }
    auto e = a.ctx.cache.get<pooling_backward>(key, [&] {
        return pooling_backward::primitive_desc({g.alg, csrc, cdst, g.strides, g.kernel, g.pad_l, g.pad_r}, a.ctx.engine, fwd->pd);
    });
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, cast_input(*k, a, dst, a.in[0], type)}, {DNNL_ARG_DIFF_SRC, outs.add(a, src, a.out[0], type)}};
    if (max) {
        auto it = a.ctx.workspaces.find(a.node.source);
        if (it == a.ctx.workspaces.end())
            throw Error("op '" + a.node.name + "': the max-pool forward node it differentiates was not prepared on this backend");
        args[DNNL_ARG_WORKSPACE] = it->second;
    }
    k->add(e->prim, args);
    outs.finish(*k);
    return k;
}

}  // namespace joule::cpu

// Activations f(x) (and Sqrt, Pow) and their backward dY * f'(X), Add, Mul, Sub, Div (B broadcast to A),
// SumTo, Expand and Dropout, one element at a time.
// Derivatives at the kinks follow PyTorch: relu'(0) = 0, relu6'(x) = 1 only for 0 < x < 6.
// Dropout's mask is graph/ops.hpp's counter-based hash of (stream, the RunContext's run, storage
// position), so masks are bit-identical across backends and a resumed run draws the same ones.
#include <cmath>

#include "backend/reference/kernels.hpp"

namespace joule::reference {

namespace {
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

double activation(const Node& n, double x) {
    switch (n.kind) {
        case OpKind::Sqrt: return std::sqrt(x);
        case OpKind::Pow: return std::pow(x, double(attrs_as<PowAttrs>(n).exponent));
        case OpKind::Clip: return std::min(std::max(x, double(attrs_as<ClipAttrs>(n).lo)), double(attrs_as<ClipAttrs>(n).hi));
        case OpKind::Relu: return x > 0 ? x : 0.0;
        case OpKind::Relu6: return x < 0 ? 0.0 : (x > 6 ? 6.0 : x);
        case OpKind::Gelu: return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2));
        case OpKind::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
        case OpKind::Tanh: return std::tanh(x);
        default: throw InternalError("not an activation");
    }
}

// f'(x) of the forward op whose backward is k; for ReluBackward and Relu6Backward the argument is the
// forward output y, for which the same test holds (y > 0 iff x > 0, 0 < y < 6 iff 0 < x < 6).
double derivative(const Node& n, double x) {
    switch (n.kind) {
        case OpKind::SqrtBackward: return 0.5 / std::sqrt(x);
        case OpKind::ClipBackward: return x > attrs_as<ClipAttrs>(n).lo && x < attrs_as<ClipAttrs>(n).hi ? 1.0 : 0.0;
        case OpKind::PowBackward: {
            const double c = attrs_as<PowAttrs>(n).exponent;
            return c * std::pow(x, c - 1);
        }
        case OpKind::ReluBackward: return x > 0 ? 1.0 : 0.0;
        case OpKind::Relu6Backward: return x > 0 && x < 6 ? 1.0 : 0.0;
        case OpKind::GeluBackward: return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
        case OpKind::SigmoidBackward: {
            const double s = 1.0 / (1.0 + std::exp(-x));
            return s * (1.0 - s);
        }
        case OpKind::TanhBackward: {
            const double t = std::tanh(x);
            return 1.0 - t * t;
        }
        default: throw InternalError("not an activation backward");
    }
}

std::unique_ptr<Kernel> dropout(const Op& op) {
    const float p = op.attrs<DropoutAttrs>().p;
    const Buf x = op.in[0], y = op.out[0], mask = op.out[1];
    const uint64_t stream = dropout_stream(op.node);
    return loop([=](const RunContext& rc) {
        if (!rc.training || p == 0.0f) {  // identity, mask 1
            for (int64_t i = 0; i < x.numel(); ++i) {
                y.set(i, x.get(i));
                mask.set(i, 1.0);
            }
            return;
        }
        const uint64_t base = mix64(stream + rc.run);
        const float keep_scale = 1.0f / (1.0f - p);
        for (int64_t i = 0; i < x.numel(); ++i) {
            const float m = dropout_keeps(base, rc.shard * x.numel() + x.storage(i), p) ? keep_scale : 0.0f;
            mask.set(i, m);
            y.set(i, x.get(i) * m);  // the product in float, as every backend rounds it
        }
    });
}
}  // namespace

std::unique_ptr<Kernel> with_post_op(std::unique_ptr<Kernel> k, const Op& op) {
    Node act;
    act.kind = op.node.post_op;
    const Buf y = op.out[0];
    return loop([k = std::shared_ptr<Kernel>(std::move(k)), act, y](const RunContext& rc) {
        k->run(rc);
        for (int64_t i = 0; i < y.numel(); ++i) y.set(i, activation(act, y.get(i)));
    });
}

std::unique_ptr<Kernel> with_pre_op(std::unique_ptr<Kernel> k, const Op& op, const Buf& dz, std::shared_ptr<std::vector<char>> scratch) {
    Node pre;
    pre.kind = op.node.pre_op;
    const Buf a = op.in.front(), b = op.in.back();  // (dY, Y) of an activation backward, or a gradient sum's (a, b)
    if (recomputes_activation(op.node)) {
        // batch norm's backward (dY, X, gamma, mean, var, beta): Y's pre-activation Z = gamma (X - mean) /
        // sqrt(var + eps) + beta as the forward stored it, in X's dtype (f'(Y) = f'(Z), see derivative())
        const Buf x = op.in[1], gamma = op.in[2], mean = op.in[3], var = op.in[4];
        const double eps = op.attrs<NormAttrs>().eps;
        auto z_store = std::make_shared<std::vector<char>>(x.desc.bytes());
        const Buf z{TensorDesc{x.desc.shape, x.desc.dtype}, z_store->data()};
        const int64_t C = x.dim(1), S = x.dim(2) * x.dim(3);
        return loop([=, k = std::shared_ptr<Kernel>(std::move(k)), scratch = std::move(scratch), z_store = std::move(z_store)](const RunContext& rc) {
            for (int64_t i = 0; i < dz.numel(); ++i) {
                const int64_t c = i / S % C;
                const double rstd = 1.0 / std::sqrt(double(var.get(c)) + eps);  // as the forward's
                z.set(i, double(gamma.get(c)) * (x.get(i) - double(mean.get(c))) * rstd + double(b.get(c)));
                dz.set(i, double(a.get(i)) * derivative(pre, z.get(i)));
            }
            k->run(rc);
        });
    }
    return loop([k = std::shared_ptr<Kernel>(std::move(k)), pre, a, b, dz, scratch = std::move(scratch)](const RunContext& rc) {
        if (pre.kind == OpKind::Add)
            for (int64_t i = 0; i < dz.numel(); ++i) dz.set(i, double(a.get(i)) + double(b.get(i)));
        else
            for (int64_t i = 0; i < dz.numel(); ++i) dz.set(i, double(a.get(i)) * derivative(pre, b.get(i)));
        k->run(rc);
    });
}

std::unique_ptr<Kernel> make_eltwise(const Op& op) {
    const OpKind k = op.kind();
    switch (k) {
        case OpKind::Relu: case OpKind::Relu6: case OpKind::Gelu: case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::Sqrt: case OpKind::Pow: case OpKind::Clip: {
            const Buf x = op.in[0], y = op.out[0];
            const Node n = op.node;
            return loop([=](const RunContext&) {
                for (int64_t i = 0; i < x.numel(); ++i) y.set(i, activation(n, x.get(i)));
            });
        }
        case OpKind::ReluBackward: case OpKind::Relu6Backward: case OpKind::GeluBackward: case OpKind::SigmoidBackward:
        case OpKind::TanhBackward: case OpKind::SqrtBackward: case OpKind::PowBackward: case OpKind::ClipBackward: {  // (dY, X or Y) -> dX
            const Buf dy = op.in[0], x = op.in[1], dx = op.out[0];
            const Node n = op.node;
            return loop([=](const RunContext&) {
                for (int64_t i = 0; i < x.numel(); ++i) dx.set(i, double(dy.get(i)) * derivative(n, x.get(i)));
            });
        }
        case OpKind::Add: case OpKind::Mul: case OpKind::Sub: case OpKind::Div: {
            const Buf a = op.in[0], b = op.in[1], y = op.out[0];
            return loop([=](const RunContext&) {
                for (int64_t i = 0; i < y.numel(); ++i) {
                    const double u = a.get(i), v = b.get(broadcast_source_index(b.desc.shape, y.desc.shape, i));
                    y.set(i, k == OpKind::Add ? u + v : k == OpKind::Mul ? u * v : k == OpKind::Sub ? u - v : u / v);
                }
            });
        }
        case OpKind::SumTo: {
            const Buf x = op.in[0], y = op.out[0];
            const double scale = op.attrs<BroadcastAttrs>().scale;
            return loop([=](const RunContext&) {
                std::vector<double> sum(size_t(y.numel()), 0.0);
                for (int64_t i = 0; i < x.numel(); ++i) sum[size_t(broadcast_source_index(y.desc.shape, x.desc.shape, i))] += x.get(i);
                for (int64_t j = 0; j < y.numel(); ++j) y.set(j, scale * sum[size_t(j)]);
            });
        }
        case OpKind::Expand: {
            const Buf x = op.in[0], y = op.out[0];
            const double scale = op.attrs<BroadcastAttrs>().scale;
            return loop([=](const RunContext&) {
                for (int64_t i = 0; i < y.numel(); ++i) y.set(i, scale * x.get(broadcast_source_index(x.desc.shape, y.desc.shape, i)));
            });
        }
        case OpKind::Dropout: return dropout(op);
        default: throw InternalError("not an elementwise op");
    }
}

}  // namespace joule::reference

// Softmax over the last axis and its backward, Embedding (gather) and its backward (scatter-add), and
// SoftmaxCrossEntropy, in double:
//   Softmax: y = exp(x - max) / sum exp(x - max);  SoftmaxBackward(dY, Y): dX = Y (dY - sum(dY Y))
//   SoftmaxCrossEntropy(logits [N, C], labels): probs = softmax(logits), loss = mean_n -log probs[n, label_n]
//   SoftmaxCrossEntropyBackward(dloss, probs, labels): dlogits = dloss (probs - onehot) / N
// Out-of-range indices or labels are a clear error when the kernel runs.
#include <cmath>

#include "backend/reference/kernels.hpp"

namespace joule::reference {

namespace {
void check_index(const Op& op, int64_t v, int64_t pos, int64_t limit, const char* what) {
    if (v < 0 || v >= limit)
        op.fail(std::string(what) + " " + std::to_string(v) + " at position " + std::to_string(pos) + " is outside [0, " +
                std::to_string(limit) + ")");
}

// softmax of row r of a [rows, C] view into p; returns the row's log-sum-exp.
double softmax_row(const Buf& x, int64_t r, int64_t C, std::vector<double>& p) {
    double m = x.get(r * C);
    for (int64_t j = 1; j < C; ++j) m = std::max(m, double(x.get(r * C + j)));
    double s = 0;
    for (int64_t j = 0; j < C; ++j) s += (p[size_t(j)] = std::exp(double(x.get(r * C + j)) - m));
    for (int64_t j = 0; j < C; ++j) p[size_t(j)] /= s;
    return m + std::log(s);
}
}  // namespace

std::unique_ptr<Kernel> make_loss(const Op& op) {
    switch (op.kind()) {
        case OpKind::Softmax: {
            const Buf x = op.in[0], y = op.out[0];
            const int64_t C = x.desc.shape.back(), rows = x.numel() / C;
            return loop([=](const RunContext&) {
                std::vector<double> p(static_cast<size_t>(C));
                for (int64_t r = 0; r < rows; ++r) {
                    softmax_row(x, r, C, p);
                    for (int64_t j = 0; j < C; ++j) y.set(r * C + j, p[size_t(j)]);
                }
            });
        }
        case OpKind::SoftmaxBackward: {  // (dY, Y) -> dX
            const Buf dy = op.in[0], y = op.in[1], dx = op.out[0];
            const int64_t C = y.desc.shape.back(), rows = y.numel() / C;
            return loop([=](const RunContext&) {
                for (int64_t r = 0; r < rows; ++r) {
                    double dot = 0;
                    for (int64_t j = 0; j < C; ++j) dot += double(dy.get(r * C + j)) * double(y.get(r * C + j));
                    for (int64_t j = 0; j < C; ++j) dx.set(r * C + j, double(y.get(r * C + j)) * (double(dy.get(r * C + j)) - dot));
                }
            });
        }
        case OpKind::Embedding: {  // (indices [...], table [V, D]) -> Y [..., D]
            const Buf idx = op.in[0], table = op.in[1], y = op.out[0];
            const int64_t V = table.dim(0), D = table.dim(1);
            return loop([=](const RunContext&) {
                for (int64_t i = 0; i < idx.numel(); ++i) {
                    const int64_t v = idx.index(i);
                    check_index(op, v, i, V, "index");
                    for (int64_t d = 0; d < D; ++d) y.copy(i * D + d, table, v * D + d);
                }
            });
        }
        case OpKind::EmbeddingBackward: {  // (dY [..., D], indices [...]) -> dtable [V, D]
            const Buf dy = op.in[0], idx = op.in[1], dtable = op.out[0];
            const int64_t V = dtable.dim(0), D = dtable.dim(1);
            return loop([=](const RunContext&) {
                std::vector<double> acc(size_t(V * D), 0.0);
                for (int64_t i = 0; i < idx.numel(); ++i) {
                    const int64_t v = idx.index(i);
                    check_index(op, v, i, V, "index");
                    for (int64_t d = 0; d < D; ++d) acc[size_t(v * D + d)] += dy.get(i * D + d);
                }
                dtable.store_all(acc);
            });
        }
        case OpKind::SoftmaxCrossEntropy: {  // (logits [N, C], labels [N]) -> (loss [1], probs [N, C])
            const Buf logits = op.in[0], labels = op.in[1], loss = op.out[0], probs = op.out[1];
            const int64_t N = logits.dim(0), C = logits.dim(1);
            return loop([=](const RunContext&) {
                std::vector<double> p(static_cast<size_t>(C));
                double total = 0;
                for (int64_t n = 0; n < N; ++n) {
                    const int64_t label = labels.index(n);
                    check_index(op, label, n, C, "label");
                    const double lse = softmax_row(logits, n, C, p);
                    for (int64_t j = 0; j < C; ++j) probs.set(n * C + j, p[size_t(j)]);
                    total += lse - double(logits.get(n * C + label));  // -log softmax[label]
                }
                loss.set(0, total / double(N));
            });
        }
        case OpKind::SoftmaxCrossEntropyBackward: {  // (dloss [1], probs [N, C], labels [N]) -> dlogits
            const Buf dloss = op.in[0], probs = op.in[1], labels = op.in[2], dz = op.out[0];
            const int64_t N = probs.dim(0), C = probs.dim(1);
            return loop([=](const RunContext&) {
                const double s = double(dloss.get(0)) / double(N);
                for (int64_t n = 0; n < N; ++n) {
                    const int64_t label = labels.index(n);
                    check_index(op, label, n, C, "label");
                    for (int64_t j = 0; j < C; ++j) dz.set(n * C + j, s * (double(probs.get(n * C + j)) - (j == label ? 1.0 : 0.0)));
                }
            });
        }
        default: throw InternalError("not a softmax, embedding or loss op");
    }
}

}  // namespace joule::reference

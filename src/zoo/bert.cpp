// BERT encoder (Devlin et al. 2019): token + position + segment embeddings, LayerNorm, L post-norm
// transformer layers (multi-head self-attention, GELU feed-forward), tanh pooler on [CLS], and a
// classifier. Weights ~ N(0, 0.02) as in the reference implementation.
#include <cmath>

#include "zoo/builder.hpp"

namespace joule::zoo {

namespace {
constexpr float kInitStd = 0.02f;

// [B, S, H] -> [B, heads, S, H/heads]
TensorId split_heads(Graph& g, TensorId x, int64_t heads, const std::string& n) {
    const Shape& s = g.tensor(x).desc.shape;
    TensorId r = g.add1(OpKind::Reshape, ReshapeAttrs{{s[0], s[1], heads, s[2] / heads}}, {x}, n + ".split");
    return g.add1(OpKind::Transpose, TransposeAttrs{{0, 2, 1, 3}}, {r}, n + ".heads");
}
}  // namespace

Model build_bert(const BertConfig& c, const NetConfig& cfg, const std::string& name) {
    if (c.hidden % c.heads != 0)
        throw Error(name + ": hidden size " + std::to_string(c.hidden) + " is not divisible by " + std::to_string(c.heads) + " heads");
    if (cfg.seq_len < 1 || cfg.seq_len > c.max_positions)
        throw Error(name + ": sequence length " + std::to_string(cfg.seq_len) + " must be in [1, " + std::to_string(c.max_positions) + "]");
    if (cfg.batch < 1) throw Error("batch size must be >= 1, got " + std::to_string(cfg.batch));
    Model m;
    m.name = name;
    m.vocab = c.vocab;
    Graph& g = m.graph;
    NetBuilder b(g);
    const int64_t B = cfg.batch, S = cfg.seq_len, H = c.hidden, D = c.hidden / c.heads;
    m.input = g.input("tokens", {{B, S}, DType::I32});
    const TensorId positions = g.constant("position_ids", {{B, S}, DType::I32}, Init::position());
    const TensorId segments = g.constant("token_type_ids", {{B, S}, DType::I32}, Init::zeros());
    auto embed = [&](TensorId ids, int64_t rows, const std::string& n) {
        const TensorId table = g.parameter(n + ".weight", {{rows, H}}, Init::normal(kInitStd));
        return g.add1(OpKind::Embedding, NoAttrs{}, {ids, table}, n);
    };
    TensorId x = b.add(embed(m.input, c.vocab, "embeddings.word_embeddings"), embed(positions, c.max_positions, "embeddings.position_embeddings"),
                       "embeddings.add0");
    x = b.add(x, embed(segments, 2, "embeddings.token_type_embeddings"), "embeddings.add1");
    x = b.dropout(b.layer_norm(x, "embeddings.LayerNorm"), c.dropout, "embeddings.dropout");
    for (int64_t l = 0; l < c.layers; ++l) {
        const std::string n = "encoder.layer." + std::to_string(l);
        const TensorId q = split_heads(g, b.linear(x, H, n + ".attention.self.query", true, kInitStd), c.heads, n + ".q");
        const TensorId k = split_heads(g, b.linear(x, H, n + ".attention.self.key", true, kInitStd), c.heads, n + ".k");
        const TensorId v = split_heads(g, b.linear(x, H, n + ".attention.self.value", true, kInitStd), c.heads, n + ".v");
        TensorId scores = g.add1(OpKind::MatMul, MatMulAttrs{false, true, float(1.0 / std::sqrt(double(D)))}, {q, k}, n + ".attention.scores");
        TensorId probs = b.dropout(g.add1(OpKind::Softmax, AxisAttrs{-1}, {scores}, n + ".attention.softmax"), c.dropout, n + ".attention.dropout");
        TensorId ctx = g.add1(OpKind::MatMul, MatMulAttrs{}, {probs, v}, n + ".attention.context");
        ctx = g.add1(OpKind::Transpose, TransposeAttrs{{0, 2, 1, 3}}, {ctx}, n + ".attention.merge");
        ctx = g.add1(OpKind::Reshape, ReshapeAttrs{{B, S, H}}, {ctx}, n + ".attention.merge_heads");
        TensorId att = b.dropout(b.linear(ctx, H, n + ".attention.output.dense", true, kInitStd), c.dropout, n + ".attention.output.dropout");
        x = b.layer_norm(b.add(att, x, n + ".attention.output.add"), n + ".attention.output.LayerNorm");
        TensorId h = b.unary(OpKind::Gelu, b.linear(x, c.intermediate, n + ".intermediate.dense", true, kInitStd), n + ".intermediate.gelu");
        h = b.dropout(b.linear(h, H, n + ".output.dense", true, kInitStd), c.dropout, n + ".output.dropout");
        x = b.layer_norm(b.add(h, x, n + ".output.add"), n + ".output.LayerNorm");
    }
    TensorId cls = g.add1(OpKind::Slice, SliceAttrs{1, 0, 1}, {x}, "pooler.cls");
    cls = g.add1(OpKind::Reshape, ReshapeAttrs{{B, H}}, {cls}, "pooler.flatten");
    TensorId pooled = b.unary(OpKind::Tanh, b.linear(cls, H, "pooler.dense", true, kInitStd), "pooler.tanh");
    const int64_t classes = cfg.classes > 0 ? cfg.classes : 2;
    b.classifier_loss(m, b.linear(b.dropout(pooled, c.dropout, "classifier.dropout"), classes, "classifier", true, kInitStd));
    return m;
}

}  // namespace joule::zoo

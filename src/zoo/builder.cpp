#include "zoo/builder.hpp"

namespace joule::zoo {

TensorId NetBuilder::conv(TensorId x, int64_t out_ch, int64_t k, int64_t stride, int64_t pad, const std::string& name, int64_t groups,
                          bool bias, ConvInit init) {
    const int64_t in_ch = g_.tensor(x).desc.shape.at(1);
    const Shape w = {out_ch, in_ch / groups, k, k};
    const double fan_in = double(in_ch / groups * k * k), fan_out = double(out_ch / groups * k * k);
    // PyTorch's default: kaiming_uniform(a = sqrt 5) = U(+-1/sqrt(fan_in)); torchvision CNNs: kaiming_normal(fan_out, relu).
    const Init wi = init == ConvInit::PyTorchDefault ? Init::uniform(float(1.0 / std::sqrt(fan_in))) : Init::normal(float(std::sqrt(2.0 / fan_out)));
    std::vector<TensorId> ins = {x, g_.parameter(name + ".weight", {w}, wi)};
    if (bias) ins.push_back(g_.parameter(name + ".bias", {{out_ch}}, init == ConvInit::PyTorchDefault ? Init::uniform(float(1.0 / std::sqrt(fan_in))) : Init::zeros()));
    ConvAttrs a;
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = a.pad[1] = pad;
    a.groups = groups;
    a.bias = bias;
    return g_.add1(OpKind::Conv2d, a, ins, name);
}

TensorId NetBuilder::batch_norm(TensorId x, const std::string& name, float eps) {
    const Shape c = {g_.tensor(x).desc.shape.at(1)};
    const TensorId gamma = g_.parameter(name + ".weight", {c}, Init::ones());
    const TensorId beta = g_.parameter(name + ".bias", {c}, Init::zeros());
    const TensorId mean = g_.state(name + ".running_mean", {c}, Init::zeros());
    const TensorId var = g_.state(name + ".running_var", {c}, Init::ones());
    return g_.add(OpKind::BatchNorm2d, NormAttrs{eps, 0.1f}, {x, gamma, beta, mean, var}, name)[0];
}

TensorId NetBuilder::layer_norm(TensorId x, const std::string& name, float eps) {
    const Shape h = {g_.tensor(x).desc.shape.back()};
    const TensorId gamma = g_.parameter(name + ".weight", {h}, Init::ones());
    const TensorId beta = g_.parameter(name + ".bias", {h}, Init::zeros());
    return g_.add(OpKind::LayerNorm, NormAttrs{eps, 0.0f}, {x, gamma, beta}, name)[0];
}

TensorId NetBuilder::max_pool(TensorId x, int64_t k, int64_t stride, int64_t pad, const std::string& name) {
    PoolAttrs a;
    a.kernel[0] = a.kernel[1] = k;
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = a.pad[1] = pad;
    return g_.add1(OpKind::MaxPool2d, a, {x}, name);
}

TensorId NetBuilder::flatten(TensorId x, const std::string& name) {
    const Shape& s = g_.tensor(x).desc.shape;
    return g_.add1(OpKind::Reshape, ReshapeAttrs{{s[0], -1}, Layout::Plain}, {x}, name);
}

TensorId NetBuilder::linear(TensorId x, int64_t out, const std::string& name, bool bias, float init_std) {
    const int64_t in = g_.tensor(x).desc.shape.back();
    const float bound = float(1.0 / std::sqrt(double(in)));
    const Init wi = init_std > 0 ? Init::normal(init_std) : Init::uniform(bound);
    std::vector<TensorId> ins = {x, g_.parameter(name + ".weight", {{out, in}}, wi)};
    if (bias) ins.push_back(g_.parameter(name + ".bias", {{out}}, init_std > 0 ? Init::zeros() : Init::uniform(bound)));
    return g_.add1(OpKind::Linear, LinearAttrs{bias}, ins, name);
}

void NetBuilder::classifier_loss(Model& m, TensorId logits) {
    const int64_t n = g_.tensor(logits).desc.shape.at(0);
    m.logits = logits;
    m.labels = g_.input("labels", {{n}, DType::I32}, TensorRole::Label);
    m.loss = g_.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {logits, m.labels}, "loss")[0];
}

TensorId image_input(Graph& g, const NetConfig& cfg, int64_t channels, int64_t size) {
    if (cfg.batch < 1) throw Error("batch size must be >= 1, got " + std::to_string(cfg.batch));
    return g.input("images", {{cfg.batch, channels, size, size}, DType::F32, Layout::ChannelsLast});
}

}  // namespace joule::zoo

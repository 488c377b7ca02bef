// Internal to zoo/: a small layer-level builder over Graph that names parameters "<layer>.weight",
// "<layer>.bias" and initialises them as PyTorch does.
#pragma once

#include <cmath>
#include <string>

#include "graph/error.hpp"
#include "zoo/zoo.hpp"

namespace joule::zoo {

enum class ConvInit { PyTorchDefault, KaimingFanOut };

class NetBuilder {
public:
    explicit NetBuilder(Graph& g) : g_(g) {}
    Graph& graph() { return g_; }
    TensorId conv(TensorId x, int64_t out_ch, int64_t k, int64_t stride, int64_t pad, const std::string& name, int64_t groups = 1,
                  bool bias = false, ConvInit init = ConvInit::KaimingFanOut);
    TensorId batch_norm(TensorId x, const std::string& name, float eps = 1e-5f);
    TensorId layer_norm(TensorId x, const std::string& name, float eps = 1e-12f);
    TensorId relu(TensorId x, const std::string& name) { return unary(OpKind::Relu, x, name); }
    TensorId relu6(TensorId x, const std::string& name) { return unary(OpKind::Relu6, x, name); }
    TensorId unary(OpKind k, TensorId x, const std::string& name) { return g_.add1(k, NoAttrs{}, {x}, name); }
    TensorId max_pool(TensorId x, int64_t k, int64_t stride, int64_t pad, const std::string& name);
    TensorId global_avg_pool(TensorId x, const std::string& name) { return g_.add1(OpKind::GlobalAvgPool, NoAttrs{}, {x}, name); }
    TensorId flatten(TensorId x, const std::string& name);
    TensorId linear(TensorId x, int64_t out, const std::string& name, bool bias = true, float init_std = 0.0f);
    TensorId dropout(TensorId x, float p, const std::string& name) { return g_.add1(OpKind::Dropout, DropoutAttrs{p, 0}, {x}, name); }
    TensorId add(TensorId a, TensorId b, const std::string& name) { return g_.add1(OpKind::Add, NoAttrs{}, {a, b}, name); }
    // logits [N, classes] + labels -> loss; fills m.logits, m.labels, m.loss.
    void classifier_loss(Model& m, TensorId logits);

private:
    Graph& g_;
};

TensorId image_input(Graph& g, const NetConfig& cfg, int64_t channels, int64_t size);

}  // namespace joule::zoo

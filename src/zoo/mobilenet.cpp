// MobileNetV2 (Sandler et al. 2018) as in torchvision: inverted residual blocks (1x1 expand, 3x3
// depthwise, 1x1 linear projection), ReLU6, width 1.0.
#include "zoo/builder.hpp"
#include "zoo/nets.hpp"

namespace joule::zoo {

namespace {
TensorId conv_bn_act(NetBuilder& b, TensorId x, int64_t out, int64_t k, int64_t s, int64_t groups, bool act, const std::string& n) {
    TensorId y = b.batch_norm(b.conv(x, out, k, s, (k - 1) / 2, n + ".0", groups), n + ".1");
    return act ? b.relu6(y, n + ".2") : y;
}
}  // namespace

Model build_mobilenet_v2(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes) {
    Model m;
    NetBuilder b(m.graph);
    TensorId x = m.input = image_input(m.graph, cfg, channels, size);
    x = conv_bn_act(b, x, 32, 3, 2, 1, true, "features.0");
    struct Stage {
        int64_t t, c, n, s;
    };
    const Stage stages[] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    int idx = 1;
    for (const Stage& st : stages) {
        for (int64_t i = 0; i < st.n; ++i, ++idx) {
            const std::string n = "features." + std::to_string(idx);
            const int64_t in = m.graph.tensor(x).desc.shape[1], hidden = in * st.t, stride = i == 0 ? st.s : 1;
            TensorId y = x;
            int part = 0;
            if (st.t != 1) y = conv_bn_act(b, y, hidden, 1, 1, 1, true, n + ".conv." + std::to_string(part++));
            y = conv_bn_act(b, y, hidden, 3, stride, hidden, true, n + ".conv." + std::to_string(part++));
            y = conv_bn_act(b, y, st.c, 1, 1, 1, false, n + ".conv." + std::to_string(part++));
            x = (stride == 1 && in == st.c) ? b.add(x, y, n + ".add") : y;
        }
    }
    x = conv_bn_act(b, x, 1280, 1, 1, 1, true, "features.18");
    x = b.flatten(b.global_avg_pool(x, "avgpool"), "flatten");
    b.classifier_loss(m, b.linear(b.dropout(x, 0.2f, "classifier.0"), classes, "classifier.1", true, 0.01f));
    return m;
}

}  // namespace joule::zoo

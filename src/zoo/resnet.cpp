// ResNet v1.5 as in torchvision: 7x7/2 stem, 3x3/2 max-pool, four stages (stride 2 on the 3x3 conv of
// a bottleneck), projection shortcuts (1x1 conv + BN) where shape changes, global average pool, fc.
#include "zoo/builder.hpp"
#include "zoo/nets.hpp"

namespace joule::zoo {

namespace {
TensorId conv_bn(NetBuilder& b, TensorId x, int64_t out, int64_t k, int64_t s, int64_t p, const std::string& conv, const std::string& bn) {
    return b.batch_norm(b.conv(x, out, k, s, p, conv), bn);
}

TensorId block(NetBuilder& b, TensorId x, int64_t planes, int64_t stride, bool bottleneck, const std::string& n) {
    const int64_t in = b.graph().tensor(x).desc.shape[1];
    const int64_t out = bottleneck ? planes * 4 : planes;
    TensorId y;
    if (bottleneck) {
        y = b.relu(conv_bn(b, x, planes, 1, 1, 0, n + ".conv1", n + ".bn1"), n + ".relu1");
        y = b.relu(conv_bn(b, y, planes, 3, stride, 1, n + ".conv2", n + ".bn2"), n + ".relu2");
        y = conv_bn(b, y, out, 1, 1, 0, n + ".conv3", n + ".bn3");
    } else {
        y = b.relu(conv_bn(b, x, planes, 3, stride, 1, n + ".conv1", n + ".bn1"), n + ".relu1");
        y = conv_bn(b, y, planes, 3, 1, 1, n + ".conv2", n + ".bn2");
    }
    TensorId shortcut = x;
    if (stride != 1 || in != out) shortcut = conv_bn(b, x, out, 1, stride, 0, n + ".downsample.0", n + ".downsample.1");
    return b.relu(b.add(y, shortcut, n + ".add"), n + ".relu");
}
}  // namespace

Model build_resnet(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes, const std::vector<int>& blocks, bool bottleneck) {
    Model m;
    NetBuilder b(m.graph);
    TensorId x = m.input = image_input(m.graph, cfg, channels, size);
    x = b.relu(conv_bn(b, x, 64, 7, 2, 3, "conv1", "bn1"), "relu");
    x = b.max_pool(x, 3, 2, 1, "maxpool");
    const int64_t planes[] = {64, 128, 256, 512};
    for (size_t s = 0; s < blocks.size(); ++s)
        for (int i = 0; i < blocks[s]; ++i)
            x = block(b, x, planes[s], (s > 0 && i == 0) ? 2 : 1, bottleneck, "layer" + std::to_string(s + 1) + "." + std::to_string(i));
    x = b.flatten(b.global_avg_pool(x, "avgpool"), "flatten");
    b.classifier_loss(m, b.linear(x, classes, "fc"));
    return m;
}

}  // namespace joule::zoo

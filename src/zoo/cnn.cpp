// LeNet-5 (ReLU, max-pool: the modern form used by the PyTorch reference recipe), AlexNet and VGG as
// in torchvision.
#include "zoo/builder.hpp"
#include "zoo/nets.hpp"

namespace joule::zoo {

Model build_lenet5(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes) {
    Model m;
    NetBuilder b(m.graph);
    TensorId x = m.input = image_input(m.graph, cfg, channels, size);
    x = b.relu(b.conv(x, 6, 5, 1, 2, "conv1", 1, true, ConvInit::PyTorchDefault), "relu1");
    x = b.max_pool(x, 2, 2, 0, "pool1");
    x = b.relu(b.conv(x, 16, 5, 1, 0, "conv2", 1, true, ConvInit::PyTorchDefault), "relu2");
    x = b.max_pool(x, 2, 2, 0, "pool2");
    x = b.flatten(x, "flatten");
    x = b.relu(b.linear(x, 120, "fc1"), "relu3");
    x = b.relu(b.linear(x, 84, "fc2"), "relu4");
    b.classifier_loss(m, b.linear(x, classes, "fc3"));
    return m;
}

Model build_alexnet(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes) {
    Model m;
    NetBuilder b(m.graph);
    TensorId x = m.input = image_input(m.graph, cfg, channels, size);
    const ConvInit init = ConvInit::PyTorchDefault;
    x = b.max_pool(b.relu(b.conv(x, 64, 11, 4, 2, "features.0", 1, true, init), "features.1"), 3, 2, 0, "features.2");
    x = b.max_pool(b.relu(b.conv(x, 192, 5, 1, 2, "features.3", 1, true, init), "features.4"), 3, 2, 0, "features.5");
    x = b.relu(b.conv(x, 384, 3, 1, 1, "features.6", 1, true, init), "features.7");
    x = b.relu(b.conv(x, 256, 3, 1, 1, "features.8", 1, true, init), "features.9");
    x = b.relu(b.conv(x, 256, 3, 1, 1, "features.10", 1, true, init), "features.11");
    x = b.max_pool(x, 3, 2, 0, "features.12");
    x = b.flatten(x, "flatten");
    x = b.relu(b.linear(b.dropout(x, 0.5f, "classifier.0"), 4096, "classifier.1"), "classifier.2");
    x = b.relu(b.linear(b.dropout(x, 0.5f, "classifier.3"), 4096, "classifier.4"), "classifier.5");
    b.classifier_loss(m, b.linear(x, classes, "classifier.6"));
    return m;
}

Model build_vgg(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes, const std::vector<int64_t>& plan) {
    Model m;
    NetBuilder b(m.graph);
    TensorId x = m.input = image_input(m.graph, cfg, channels, size);
    int i = 0;
    for (int64_t c : plan) {
        if (c == 0) {
            x = b.max_pool(x, 2, 2, 0, "features." + std::to_string(i++));
        } else {
            x = b.conv(x, c, 3, 1, 1, "features." + std::to_string(i++), 1, true);
            x = b.relu(x, "features." + std::to_string(i++));
        }
    }
    x = b.flatten(x, "flatten");
    x = b.dropout(b.relu(b.linear(x, 4096, "classifier.0", true, 0.01f), "classifier.1"), 0.5f, "classifier.2");
    x = b.dropout(b.relu(b.linear(x, 4096, "classifier.3", true, 0.01f), "classifier.4"), 0.5f, "classifier.5");
    b.classifier_loss(m, b.linear(x, classes, "classifier.6", true, 0.01f));
    return m;
}

}  // namespace joule::zoo

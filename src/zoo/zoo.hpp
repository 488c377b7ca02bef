// zoo/: the built-in networks, each a forward Graph ending in a SoftmaxCrossEntropy loss.
//
//   zoo::Model m = zoo::build("resnet50", {.batch = 8});     // 224x224x3, 1000 classes
//   TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
//
// Architectures follow torchvision (AlexNet, VGG-11/16, ResNet-18/50 v1.5, MobileNetV2) and the
// original BERT encoder; parameter counts match the published figures exactly (tests check them).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace joule::zoo {

struct NetConfig {
    int64_t batch = 32;
    int64_t image_size = 0;   // 0: the net's default (28 for LeNet-5, 224 for ImageNet nets)
    int64_t in_channels = 0;  // 0: default (1 for LeNet-5, 3 otherwise)
    int64_t classes = 0;      // 0: default (10 for LeNet-5, 1000 for ImageNet nets, 2 for BERT)
    int64_t seq_len = 128;    // BERT only
};

struct Model {
    std::string name;
    Graph graph;
    TensorId input = kNone;   // images f32[N, C, H, W] (nhwc) or tokens i32[N, S]
    TensorId labels = kNone;  // i32[N]
    TensorId logits = kNone;  // f32[N, classes]
    TensorId loss = kNone;    // f32[1]
    int64_t vocab = 0;        // BERT: token ids are in [0, vocab)
};

struct NetInfo {
    std::string name;
    std::string description;
    bool sequence;              // token input (BERT) rather than images
    int64_t default_image, default_channels, default_classes;
    double published_params;    // from the paper / torchvision model card
    double published_gmacs;     // forward multiply-adds per sample at the default input
    std::string source;
};

const std::vector<NetInfo>& nets();
const NetInfo& net_info(const std::string& name);  // throws Error listing the nets when unknown
Model build(const std::string& name, const NetConfig& cfg);

// BERT encoder with explicit sizes (bert-tiny / bert-base are presets of this).
struct BertConfig {
    int64_t layers = 2, hidden = 128, heads = 2, intermediate = 512, vocab = 30522, max_positions = 512;
    float dropout = 0.1f;
};
Model build_bert(const BertConfig& bert, const NetConfig& cfg, const std::string& name = "bert");

}  // namespace joule::zoo

#include "zoo/zoo.hpp"

#include "graph/error.hpp"
#include "zoo/nets.hpp"

namespace joule::zoo {

const std::vector<NetInfo>& nets() {
    static const std::vector<NetInfo> list = {
        {"lenet5", "LeNet-5 (ReLU, max-pool), 28x28 grey", false, 28, 1, 10, 61706, 0.000417,
         "LeCun et al. 1998 layer sizes; counts follow from them"},
        {"alexnet", "AlexNet (torchvision one-GPU variant)", false, 224, 3, 1000, 61100840, 0.714, "torchvision AlexNet_Weights model card"},
        {"vgg11", "VGG-11 (configuration A, no BN)", false, 224, 3, 1000, 132863336, 7.61, "torchvision VGG11_Weights model card"},
        {"vgg16", "VGG-16 (configuration D, no BN)", false, 224, 3, 1000, 138357544, 15.47, "torchvision VGG16_Weights model card"},
        {"resnet18", "ResNet-18 (BasicBlock 2-2-2-2)", false, 224, 3, 1000, 11689512, 1.81, "torchvision ResNet18_Weights model card"},
        {"resnet50", "ResNet-50 v1.5 (Bottleneck 3-4-6-3)", false, 224, 3, 1000, 25557032, 4.09, "torchvision ResNet50_Weights model card"},
        {"mobilenet_v2", "MobileNetV2 (width 1.0, ReLU6)", false, 224, 3, 1000, 3504872, 0.30, "torchvision MobileNet_V2_Weights; Sandler et al. 2018 (300M MACs)"},
        {"bert-tiny", "BERT encoder L=2 H=128 A=2 (+pooler, 2-class head)", true, 0, 0, 2, 4385920, 0.0587,
         "google-research/bert L-2_H-128_A-2 (4.4M); MACs at 128 tokens = layers*S*(12H^2+2SH)"},
        {"bert-base", "BERT-base encoder L=12 H=768 A=12 (+pooler, 2-class head)", true, 0, 0, 2, 109482240, 11.17,
         "Devlin et al. 2019 (110M); MACs at 128 tokens = layers*S*(12H^2+2SH)"},
        {"bert-large", "BERT-large encoder L=24 H=1024 A=16 (+pooler, 2-class head)", true, 0, 0, 2, 335141888, 39.46,
         "Devlin et al. 2019 (340M; 335,141,888 in bert-large-uncased); MACs at 128 tokens = layers*S*(12H^2+2SH)"},
    };
    return list;
}

const NetInfo& net_info(const std::string& name) {
    for (const NetInfo& n : nets())
        if (n.name == name) return n;
    std::string all;
    for (const NetInfo& n : nets()) all += (all.empty() ? "" : ", ") + n.name;
    throw Error("unknown network '" + name + "'", "choose one of: " + all);
}

Model build(const std::string& name, const NetConfig& cfg) {
    const NetInfo& info = net_info(name);
    if (cfg.image_size < 0 || cfg.in_channels < 0 || cfg.classes < 0)
        throw Error(name + ": image size, channels and classes must be positive (0 for the default)");
    Model m;
    if (info.sequence) {
        BertConfig b;
        if (name == "bert-base") b = BertConfig{12, 768, 12, 3072, 30522, 512, 0.1f};
        if (name == "bert-large") b = BertConfig{24, 1024, 16, 4096, 30522, 512, 0.1f};
        m = build_bert(b, cfg, name);
    } else {
        const int64_t size = cfg.image_size ? cfg.image_size : info.default_image;
        const int64_t ch = cfg.in_channels ? cfg.in_channels : info.default_channels;
        const int64_t classes = cfg.classes ? cfg.classes : info.default_classes;
        try {
            if (name == "lenet5") m = build_lenet5(cfg, ch, size, classes);
            else if (name == "alexnet") m = build_alexnet(cfg, ch, size, classes);
            else if (name == "vgg11") m = build_vgg(cfg, ch, size, classes, {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0});
            else if (name == "vgg16") m = build_vgg(cfg, ch, size, classes, {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0});
            else if (name == "resnet18") m = build_resnet(cfg, ch, size, classes, {2, 2, 2, 2}, false);
            else if (name == "resnet50") m = build_resnet(cfg, ch, size, classes, {3, 4, 6, 3}, true);
            else m = build_mobilenet_v2(cfg, ch, size, classes);
        } catch (const Error& e) {
            throw Error(name + " at " + std::to_string(size) + "x" + std::to_string(size) + ": " + e.what());
        }
    }
    m.name = name;
    return m;
}

}  // namespace joule::zoo

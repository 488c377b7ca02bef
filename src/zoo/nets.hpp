// Internal to zoo/: one builder per architecture family.
#pragma once

#include <vector>

#include "zoo/zoo.hpp"

namespace joule::zoo {

Model build_lenet5(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes);
Model build_alexnet(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes);
// plan: output channels of each 3x3 conv, 0 for a 2x2 max-pool
Model build_vgg(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes, const std::vector<int64_t>& plan);
// blocks per stage; bottleneck = false: BasicBlock (ResNet-18/34), true: Bottleneck (ResNet-50)
Model build_resnet(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes, const std::vector<int>& blocks, bool bottleneck);
Model build_mobilenet_v2(const NetConfig& cfg, int64_t channels, int64_t size, int64_t classes);

}  // namespace joule::zoo

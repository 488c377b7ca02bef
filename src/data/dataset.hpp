// Datasets for training: labelled images in memory, a shuffling batch iterator, and synthetic data.
//
//   data::ImageDataset train = data::load_idx_dataset(dir + "/train-images-idx3-ubyte.gz",
//                                                     dir + "/train-labels-idx1-ubyte.gz", "fashion-mnist/train");
//   data::BatchIterator it(train.size(), 64, /*shuffle=*/true, /*seed=*/1);
//   while (auto idx = it.next()) train.gather(*idx, images, labels);
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace joule::data {

// Fashion-MNIST from Debian's dataset-fashion-mnist package.
inline const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct ImageDataset {
    std::string name;
    int64_t channels = 1, height = 0, width = 0, classes = 10;
    std::vector<float> pixels;     // [n, c, h, w], normalised
    std::vector<int32_t> labels;   // [n]
    int64_t size() const { return int64_t(labels.size()); }
    int64_t image_elements() const { return channels * height * width; }
    // Copies the samples at `indices` into a batch (images in nchw = nhwc order for one channel).
    void gather(const std::vector<int64_t>& indices, float* images, int32_t* batch_labels) const;
};

// Loads an images/labels pair of IDX files; pixels become (x/255 - mean) / std.
ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path, const std::string& name,
                              float mean = 0.2860f, float stddev = 0.3530f);

struct TrainTestSplit {
    ImageDataset train, test;
};
// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`.
TrainTestSplit load_fashion_mnist(const std::string& dir = kDefaultFashionMnistDir);

// Batches of sample indices over an epoch; a final partial batch is dropped unless keep_partial.
class BatchIterator {
public:
    BatchIterator(int64_t samples, int64_t batch, bool shuffle, uint64_t seed, bool keep_partial = false);
    std::optional<std::vector<int64_t>> next();
    void reset();  // next epoch (reshuffles)
    int64_t batches_per_epoch() const;
    // Its whole state (order, position, generator) as text, and back (a checkpoint's data order);
    // set_state throws Error for text that is not one of this iterator's states.
    std::string state() const;
    void set_state(const std::string& s);

private:
    int64_t samples_, batch_;
    bool shuffle_, keep_partial_;
    std::mt19937_64 rng_;
    std::vector<int64_t> order_;
    int64_t pos_ = 0;
};

// Synthetic tensors for nets without a dataset: N(0, 1) pixels, uniform labels / tokens.
class SyntheticData {
public:
    explicit SyntheticData(uint64_t seed) : rng_(seed) {}
    void fill_normal(float* p, int64_t n);
    void fill_uniform_int(int32_t* p, int64_t n, int32_t limit);
    std::string state() const;  // the generator's state as text, and back (checkpoints)
    void set_state(const std::string& s);

private:
    std::mt19937_64 rng_;
};

}  // namespace joule::data

#include "data/dataset.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "data/idx.hpp"
#include "graph/error.hpp"

namespace joule::data {

void ImageDataset::gather(const std::vector<int64_t>& indices, float* images, int32_t* batch_labels) const {
    const int64_t e = image_elements();
    for (size_t i = 0; i < indices.size(); ++i) {
        const int64_t s = indices[i];
        std::memcpy(images + int64_t(i) * e, pixels.data() + s * e, size_t(e) * sizeof(float));
        batch_labels[i] = labels[size_t(s)];
    }
}

ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path, const std::string& name, float mean,
                              float stddev) {
    const IdxArray img = read_idx(images_path);
    const IdxArray lab = read_idx(labels_path);
    if (img.dims.size() != 3) throw Error(images_path + ": expected a rank-3 image array [n, rows, cols], got rank " + std::to_string(img.dims.size()));
    if (lab.dims.size() != 1) throw Error(labels_path + ": expected a rank-1 label array [n], got rank " + std::to_string(lab.dims.size()));
    if (img.dims[0] != lab.dims[0])
        throw Error(images_path + " has " + std::to_string(img.dims[0]) + " images but " + labels_path + " has " + std::to_string(lab.dims[0]) + " labels",
                    "use matching image and label files");
    ImageDataset d;
    d.name = name;
    d.height = img.dims[1];
    d.width = img.dims[2];
    d.pixels.resize(img.values.size());
    const float scale = 1.0f / (255.0f * stddev), shift = mean / stddev;
    for (size_t i = 0; i < img.values.size(); ++i) d.pixels[i] = float(img.values[i]) * scale - shift;
    d.labels.resize(lab.values.size());
    for (size_t i = 0; i < lab.values.size(); ++i) {
        if (lab.values[i] >= d.classes)
            throw Error(labels_path + ": label " + std::to_string(lab.values[i]) + " at index " + std::to_string(i) + " is outside 0.." +
                        std::to_string(d.classes - 1));
        d.labels[i] = int32_t(lab.values[i]);
    }
    return d;
}

TrainTestSplit load_fashion_mnist(const std::string& dir) {
    return {load_idx_dataset(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz", "fashion-mnist/train"),
            load_idx_dataset(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz", "fashion-mnist/test")};
}

BatchIterator::BatchIterator(int64_t samples, int64_t batch, bool shuffle, uint64_t seed, bool keep_partial)
    : samples_(samples), batch_(batch), shuffle_(shuffle), keep_partial_(keep_partial), rng_(seed) {
    if (batch < 1) throw Error("batch size must be >= 1, got " + std::to_string(batch));
    if (samples < batch && !keep_partial)
        throw Error("dataset has " + std::to_string(samples) + " samples, fewer than one batch of " + std::to_string(batch));
    order_.resize(size_t(samples));
    std::iota(order_.begin(), order_.end(), 0);
    reset();
}

void BatchIterator::reset() {
    pos_ = 0;
    if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
}

int64_t BatchIterator::batches_per_epoch() const { return keep_partial_ ? (samples_ + batch_ - 1) / batch_ : samples_ / batch_; }

std::string BatchIterator::state() const {
    std::ostringstream os;
    os << samples_ << ' ' << pos_ << ' ' << rng_;
    for (int64_t i : order_) os << ' ' << i;
    return os.str();
}

void BatchIterator::set_state(const std::string& s) {
    std::istringstream is(s);
    int64_t samples = 0, pos = 0;
    std::mt19937_64 rng;
    std::vector<int64_t> order(static_cast<size_t>(samples_));
    is >> samples >> pos >> rng;
    for (int64_t& i : order) is >> i;
    const bool in_range = std::all_of(order.begin(), order.end(), [&](int64_t i) { return i >= 0 && i < samples_; });
    if (!is || samples != samples_ || pos < 0 || pos > samples_ || !in_range || !(is >> std::ws).eof())
        throw Error("a data order of " + std::to_string(samples) + " samples, not of this dataset's " + std::to_string(samples_));
    pos_ = pos, rng_ = rng, order_ = std::move(order);
}

std::string SyntheticData::state() const {
    std::ostringstream os;
    os << rng_;
    return os.str();
}

void SyntheticData::set_state(const std::string& s) {
    std::istringstream is(s);
    is >> rng_;
    if (!is) throw Error("not a synthetic data generator's state");
}

std::optional<std::vector<int64_t>> BatchIterator::next() {
    if (pos_ >= samples_ || (!keep_partial_ && pos_ + batch_ > samples_)) return std::nullopt;
    const int64_t end = std::min(samples_, pos_ + batch_);
    std::vector<int64_t> idx(order_.begin() + pos_, order_.begin() + end);
    pos_ = end;
    return idx;
}

void SyntheticData::fill_normal(float* p, int64_t n) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) p[i] = d(rng_);
}

void SyntheticData::fill_uniform_int(int32_t* p, int64_t n, int32_t limit) {
    std::uniform_int_distribution<int32_t> d(0, limit - 1);
    for (int64_t i = 0; i < n; ++i) p[i] = d(rng_);
}

}  // namespace joule::data

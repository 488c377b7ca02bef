// data/: IDX reader on good and bad files (written here with zlib), Fashion-MNIST, batching.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "graph/error.hpp"
#include "test_util.hpp"

namespace joule::data {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("joule_test_data_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return (d / name).string();
}

std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, size_t values, uint8_t fill = 7) {
    std::vector<uint8_t> b = {0, 0, type, uint8_t(dims.size())};
    for (uint32_t d : dims) {
        b.push_back(uint8_t(d >> 24)), b.push_back(uint8_t(d >> 16)), b.push_back(uint8_t(d >> 8)), b.push_back(uint8_t(d));
    }
    for (size_t i = 0; i < values; ++i) b.push_back(uint8_t((fill + i) % 10));
    return b;
}

std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gz) {
    const std::string p = tmp(name);
    if (gz) {
        gzFile f = gzopen(p.c_str(), "wb");
        gzwrite(f, bytes.data(), unsigned(bytes.size()));
        gzclose(f);
    } else {
        std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    return p;
}

using test::expect_error;

TEST(Idx, ReadsPlainAndGzip) {
    for (bool gz : {false, true}) {
        const IdxArray a = read_idx(write(gz ? "ok.gz" : "ok.idx", idx_bytes(0x08, {3, 2, 2}, 12), gz));
        EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 2, 2}));
        ASSERT_EQ(a.values.size(), 12u);
        EXPECT_EQ(a.values[0], 7);
        EXPECT_EQ(a.values[11], (7 + 11) % 10);
    }
}

TEST(Idx, BadFilesGiveClearErrors) {
    expect_error([] { read_idx("/nonexistent/dir/images.gz"); }, "/nonexistent/dir/images.gz: cannot open IDX file");
    expect_error([] { read_idx(write("empty.idx", {}, false)); }, "file is truncated: the IDX header");
    std::vector<uint8_t> magic = idx_bytes(0x08, {4}, 4);
    magic[0] = 0x1f;
    expect_error([&] { read_idx(write("magic.idx", magic, false)); }, "not an IDX file");
    expect_error([] { read_idx(write("float.idx", idx_bytes(0x0D, {4}, 16), false)); }, "is not supported");
    expect_error([] { read_idx(write("rank.idx", idx_bytes(0x08, {}, 0), false)); }, "rank 0 is outside 1..4");
    expect_error([] { read_idx(write("zero.idx", idx_bytes(0x08, {0}, 0), false)); }, "dimension 0 is 0");
    expect_error([] { read_idx(write("short.gz", idx_bytes(0x08, {10, 28, 28}, 1000), true)); }, "file is truncated: the IDX data needs 7840 bytes, only 1000 present");
    // a header claiming 16 GiB over 12 bytes of data: refused on the first missing chunk, not allocated (found by fuzz_idx)
    expect_error([] { read_idx(write("huge.idx", idx_bytes(0x08, {1u << 28, 64}, 12), false)); }, "file is truncated: the IDX data");
    // a gzip stream cut in the middle
    const std::string good = write("cut.gz", idx_bytes(0x08, {100, 28, 28}, 78400), true);
    const auto size = fs::file_size(good);
    fs::resize_file(good, size / 2);
    try {
        read_idx(good);
        ADD_FAILURE() << "cut gzip accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(good), std::string::npos) << e.what();
    }
}

TEST(Idx, DatasetChecksPairs) {
    const std::string img = write("img.gz", idx_bytes(0x08, {5, 2, 3}, 30), true);
    const std::string lab = write("lab.gz", idx_bytes(0x08, {5}, 5, 0), true);
    const ImageDataset d = load_idx_dataset(img, lab, "tiny");
    EXPECT_EQ(d.size(), 5);
    EXPECT_EQ(d.height, 2);
    EXPECT_EQ(d.width, 3);
    EXPECT_NEAR(d.pixels[0], (7 / 255.0f - 0.2860f) / 0.3530f, 1e-6);
    expect_error([&] { load_idx_dataset(img, write("lab4.gz", idx_bytes(0x08, {4}, 4, 0), true), "x"); }, "has 5 images but");
    std::vector<uint8_t> bad = idx_bytes(0x08, {5}, 5, 0);
    bad.back() = 12;
    expect_error([&] { load_idx_dataset(img, write("lab12.gz", bad, true), "x"); }, "label 12 at index 4");
    expect_error([&] { load_idx_dataset(lab, lab, "x"); }, "expected a rank-3 image array");
}

TEST(FashionMnist, LoadsTheDebianPackage) {
    if (!fs::exists(std::string(kDefaultFashionMnistDir) + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist not installed";
    const TrainTestSplit s = load_fashion_mnist();
    EXPECT_EQ(s.train.size(), 60000);
    EXPECT_EQ(s.test.size(), 10000);
    EXPECT_EQ(s.train.height, 28);
    std::vector<int> count(10, 0);
    for (int32_t l : s.test.labels) ++count[size_t(l)];
    for (int c : count) EXPECT_EQ(c, 1000);
    expect_error([] { load_fashion_mnist("/nonexistent"); }, "/nonexistent/train-images-idx3-ubyte.gz");
}

TEST(BatchIterator, ShufflesAndCoversEachSampleOnce) {
    BatchIterator it(10, 3, true, 42);
    EXPECT_EQ(it.batches_per_epoch(), 3);
    std::set<int64_t> seen;
    std::vector<int64_t> first;
    int batches = 0;
    while (auto b = it.next()) {
        EXPECT_EQ(b->size(), 3u);
        if (batches == 0) first = *b;
        for (int64_t i : *b) EXPECT_TRUE(seen.insert(i).second);
        ++batches;
    }
    EXPECT_EQ(batches, 3);
    it.reset();
    EXPECT_NE(*it.next(), first);  // reshuffled (for this seed)
    BatchIterator all(10, 3, false, 0, true);
    int64_t total = 0;
    while (auto b = all.next()) total += int64_t(b->size());
    EXPECT_EQ(total, 10);
    EXPECT_THROW(BatchIterator(10, 0, false, 0), Error);
    EXPECT_THROW(BatchIterator(2, 3, false, 0), Error);
}

}  // namespace
}  // namespace joule::data

namespace joule::data {
namespace {

// A checkpoint's data order: an iterator and a generator restored from their state continue as the
// originals do; a state of another dataset, or not one at all, is an Error.
TEST(BatchIterator, StateRestoresTheOrderAndGenerator) {
    BatchIterator a(50, 8, true, 3);
    a.next(), a.next();
    BatchIterator b(50, 8, true, 99);
    b.set_state(a.state());
    for (int epoch = 0; epoch < 2; ++epoch) {
        while (auto x = a.next()) EXPECT_EQ(*x, *b.next());
        EXPECT_FALSE(b.next());
        a.reset(), b.reset();
    }
    SyntheticData s(5), t(6);
    std::vector<float> u(10), v(10);
    s.fill_normal(u.data(), 3);
    t.set_state(s.state());
    s.fill_normal(u.data(), 10), t.fill_normal(v.data(), 10);
    EXPECT_EQ(u, v);
    BatchIterator other(40, 8, true, 3);
    test::expect_error([&] { other.set_state(a.state()); }, "a data order of 50 samples, not of this dataset's 40");
    test::expect_error([&] { other.set_state("garbage"); }, "not of this dataset's 40");
    std::string bad_index = a.state();
    bad_index.replace(bad_index.rfind(' '), std::string::npos, " 77");
    test::expect_error([&] { b.set_state(bad_index); }, "not of this dataset's 50");
    test::expect_error([&] { t.set_state("x"); }, "not a synthetic data generator's state");
}

}  // namespace
}  // namespace joule::data

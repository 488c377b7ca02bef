// Fuzz target: the IDX reader (plain and gzip MNIST / Fashion-MNIST files).
#include "data/idx.hpp"
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = joule::fuzz::as_file(data, size, ".idx");
    return joule::fuzz::expect_clean([&] { joule::data::read_idx(path); });
}

// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed (zlib reads both).
//
//   data::IdxArray a = data::read_idx("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
//   // a.dims == {10000}, a.values.size() == 10000
//
// Only unsigned-byte arrays (type code 0x08) are accepted. A missing, truncated or malformed file
// throws Error naming the file and what is wrong with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace joule::data {

struct IdxArray {
    std::vector<int64_t> dims;
    std::vector<uint8_t> values;
};

IdxArray read_idx(const std::string& path);

}  // namespace joule::data

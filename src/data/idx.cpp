#include "data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <memory>

#include "graph/error.hpp"

namespace joule::data {

namespace {
struct GzFile {
    gzFile f;
    ~GzFile() {
        if (f) gzclose(f);
    }
};

// Reads exactly n bytes or throws.
void read_exact(gzFile f, void* dst, size_t n, const std::string& path, const char* what) {
    size_t done = 0;
    while (done < n) {
        const unsigned chunk = unsigned(std::min<size_t>(n - done, 1u << 30));
        const int got = gzread(f, static_cast<char*>(dst) + done, chunk);
        if (got < 0) {
            int err = 0;
            const char* msg = gzerror(f, &err);
            throw Error(path + ": cannot read " + what + ": " + (msg ? msg : "zlib error"), "the file is corrupt; re-install or re-download it");
        }
        if (got == 0)
            throw Error(path + ": file is truncated: " + what + " needs " + std::to_string(n) + " bytes, only " + std::to_string(done) + " present",
                        "the file is incomplete; re-install or re-download it");
        done += size_t(got);
    }
}
}  // namespace

IdxArray read_idx(const std::string& path) {
    GzFile file{gzopen(path.c_str(), "rb")};
    if (!file.f) throw Error(path + ": cannot open IDX file", "check the path (--data-dir)");
    uint8_t header[4];
    read_exact(file.f, header, 4, path, "the IDX header");
    if (header[0] != 0 || header[1] != 0)
        throw Error(path + ": not an IDX file (magic bytes " + std::to_string(header[0]) + " " + std::to_string(header[1]) + ", expected 0 0)");
    if (header[2] != 0x08)
        throw Error(path + ": IDX element type 0x" + std::to_string(header[2]) + " is not supported", "only unsigned-byte (0x08) arrays are read");
    const int rank = header[3];
    if (rank < 1 || rank > 4) throw Error(path + ": IDX rank " + std::to_string(rank) + " is outside 1..4");
    IdxArray a;
    uint64_t total = 1;
    for (int i = 0; i < rank; ++i) {
        uint8_t d[4];
        read_exact(file.f, d, 4, path, "the IDX dimensions");
        const uint32_t v = (uint32_t(d[0]) << 24) | (uint32_t(d[1]) << 16) | (uint32_t(d[2]) << 8) | uint32_t(d[3]);
        if (v == 0 || v > (1u << 28)) throw Error(path + ": IDX dimension " + std::to_string(i) + " is " + std::to_string(v) + ", outside 1..2^28");
        a.dims.push_back(int64_t(v));
        total *= v;
    }
    if (total > (uint64_t(1) << 34)) throw Error(path + ": IDX array of " + std::to_string(total) + " elements is too large");
    // Grow the array as the data arrives: a header that claims more than the file holds fails on its
    // first missing chunk, never by allocating what it claims.
    constexpr size_t kChunk = size_t(64) << 20;
    while (a.values.size() < total) {
        const size_t at = a.values.size(), n = std::min<size_t>(kChunk, size_t(total) - at);
        a.values.resize(at + n);
        read_exact(file.f, a.values.data() + at, n, path, "the IDX data");
    }
    return a;
}

}  // namespace joule::data

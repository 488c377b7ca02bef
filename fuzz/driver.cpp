// A driver for joule's libFuzzer targets when they are built without libFuzzer (GCC, the default build):
// it runs the target on every seed file, then on random mutations of the seeds (byte flips, insertions,
// deletions, truncations, duplicated chunks, splices of two seeds) until the time is up. Deterministic
// for a given --seed. A target reports a bug by crashing or throwing anything but joule::Error, which ends
// this process abnormally: ctest counts that as a failure, and the sanitizer build pins the fault.
//
//   fuzz_plan --seconds 5 fuzz/corpus/plan          # what ctest runs
//   clang++ -fsanitize=fuzzer,address ... fuzz/plan.cpp   # the same target under real libFuzzer
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
using Bytes = std::vector<uint8_t>;

Bytes mutate(const std::vector<Bytes>& seeds, std::mt19937_64& rng) {
    auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
    Bytes b = seeds[pick(seeds.size())];
    for (int k = 0, n = 1 + int(rng() % 8); k < n; ++k) {
        switch (rng() % 6) {
            case 0: if (!b.empty()) b[pick(b.size())] ^= uint8_t(1u << (rng() % 8)); break;
            case 1: b.insert(b.begin() + long(pick(b.size() + 1)), uint8_t(rng())); break;
            case 2: if (!b.empty()) b.erase(b.begin() + long(pick(b.size()))); break;
            case 3: b.resize(pick(b.size() + 1)); break;
            case 4: if (!b.empty()) { const size_t at = pick(b.size()), len = 1 + pick(std::min<size_t>(64, b.size() - at));
                        b.insert(b.begin() + long(pick(b.size())), b.begin() + long(at), b.begin() + long(at + len)); } break;
            default: { const Bytes& o = seeds[pick(seeds.size())];
                       b.resize(pick(b.size() + 1)); b.insert(b.end(), o.begin() + long(pick(o.size() + 1)), o.end()); }
        }
    }
    return b;
}
}  // namespace

int main(int argc, char** argv) {
    double seconds = 5;
    uint64_t seed = 1;
    std::vector<Bytes> seeds;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
        else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
        else
            for (const auto& e : std::filesystem::directory_iterator(a)) {
                std::ifstream f(e.path(), std::ios::binary);
                seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
            }
    }
    if (seeds.empty()) {
        std::fprintf(stderr, "usage: %s [--seconds S] [--seed N] CORPUS_DIR...\n", argv[0]);
        return 2;
    }
    for (const Bytes& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
    std::mt19937_64 rng(seed);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    long runs = 0;
    while (std::chrono::steady_clock::now() < end) {
        const Bytes b = mutate(seeds, rng);
        LLVMFuzzerTestOneInput(b.data(), b.size());
        ++runs;
    }
    std::printf("%zu seeds and %ld mutated inputs: no crash, no error other than joule::Error\n", seeds.size(), runs);
    return 0;
}

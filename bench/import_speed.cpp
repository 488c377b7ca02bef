// How fast an ONNX file imports (bench/onnx_import.py runs it): the best of N imports, in ms.
//   bench_import FILE.onnx [N]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "graph/error.hpp"
#include "import/onnx.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_import FILE.onnx [N]\n");
        return 2;
    }
    const int n = argc > 2 ? std::atoi(argv[2]) : 5;
    double best = 1e30;
    int64_t params = 0;
    try {
        for (int i = 0; i < n; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            const joule::zoo::Model m = joule::import_onnx(argv[1]);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            params = m.graph.parameter_count();
        }
    } catch (const joule::Error& e) {
        std::fprintf(stderr, "joule: error: %s\n", e.what());
        return 1;
    }
    std::printf("{\"file\": \"%s\", \"imports\": %d, \"best_ms\": %.2f, \"parameters\": %lld}\n", argv[1], n, best * 1e3, static_cast<long long>(params));
    return 0;
}

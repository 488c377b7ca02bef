// Fuzz target: the efficiency-curve file loader (data/efficiency/*.yaml, joule calibrate's output).
#include "predict/efficiency.hpp"
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = joule::fuzz::as_file(data, size, ".yaml");
    return joule::fuzz::expect_clean([&] { joule::predict::load_efficiency(path); });
}

// Fuzz target: the device-spec loader (data/hw/*.yaml).
#include "hw/device_spec.hpp"
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = joule::fuzz::as_file(data, size, ".yaml");
    return joule::fuzz::expect_clean([&] { joule::hw::load_device_spec(path); });
}

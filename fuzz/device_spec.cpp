// Fuzz target: the data/hw loaders (device, link and system specs), chosen by the file's kind as the
// catalogue chooses them.
#include "hw/catalogue.hpp"
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = joule::fuzz::as_file(data, size, ".yaml");
    return joule::fuzz::expect_clean([&] {
        const std::string kind = joule::hw::spec_file_kind(path);
        if (kind == "link") joule::hw::load_link_spec(path);
        else if (kind == "system") joule::hw::load_system_spec(path);
        else joule::hw::load_device_spec(path);
    });
}

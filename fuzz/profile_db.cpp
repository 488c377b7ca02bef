// Fuzz target: opening a profile database read-only and reading every record (joule profile --report).
#include "profile/store.hpp"
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = joule::fuzz::as_file(data, size, ".db");
    return joule::fuzz::expect_clean([&] {
        joule::profile::Store s(path, joule::profile::Store::Mode::ReadOnly);
        for (const auto& c : s.configs()) s.nodes(c.key);
    });
}

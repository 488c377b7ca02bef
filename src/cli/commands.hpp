// One file per subcommand; each registers itself on the root CLI11 app. The callbacks call library
// functions and print; errors propagate as joule::Error to main(), which maps them to exit codes.
#pragma once

#include <CLI/CLI.hpp>

namespace joule::cli {

void add_train(CLI::App& app);
void add_nets(CLI::App& app);
void add_inspect(CLI::App& app);
void add_profile(CLI::App& app);
void add_analyze(CLI::App& app);
void add_probe(CLI::App& app);

// Options shared by commands that build a net.
struct NetOptions {
    std::string net = "lenet5";
    int64_t batch = 64;
    int64_t image_size = 0;
    int64_t seq_len = 128;
    std::string optimizer = "adam";
    std::string dtype = "f32";
};
void add_net_options(CLI::App& cmd, NetOptions& o, bool net_positional);

}  // namespace joule::cli

// joule: energy-efficient DNN training on heterogeneous machines. See README.md.
#include <iostream>

#include "cli/commands.hpp"
#include "graph/error.hpp"

namespace joule::cli {

void add_net_options(CLI::App& cmd, NetOptions& o, bool net_positional) {
    if (net_positional) cmd.add_option("net", o.net, "network from the zoo (see `joule nets`)")->required();
    else cmd.add_option("--net", o.net, "network from the zoo (see `joule nets`)")->capture_default_str();
    cmd.add_option("--batch", o.batch, "batch size")->capture_default_str()->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd.add_option("--image-size", o.image_size, "input height = width (0: the net's default)")->check(CLI::NonNegativeNumber);
    cmd.add_option("--seq-len", o.seq_len, "sequence length for BERT nets")->capture_default_str()->check(CLI::Range(int64_t(1), int64_t(4096)));
    cmd.add_option("--optimizer", o.optimizer, "sgd or adam")->capture_default_str()->check(CLI::IsMember({"sgd", "adam"}));
    cmd.add_option("--dtype", o.dtype, "precision of the built-in plan: f32 or bf16 (tensors stored in their producer's dtype, casts as nodes)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f32", "bf16"}));
    cmd.add_option("--dtype-scope", o.scope, "gemm: --dtype on conv/linear/matmul (autocast's list); all: on every op the cpu runs in it")
        ->capture_default_str()
        ->check(CLI::IsMember({"gemm", "all"}));
}

}  // namespace joule::cli

int main(int argc, char** argv) {
    CLI::App app{"joule: fast, energy-efficient DNN training on heterogeneous machines"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("joule ") + JOULE_VERSION);
    joule::cli::add_train(app);
    joule::cli::add_nets(app);
    joule::cli::add_inspect(app);
    joule::cli::add_profile(app);
    joule::cli::add_analyze(app);
    joule::cli::add_probe(app);
    joule::cli::add_calibrate(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const joule::Error& e) {
        std::cerr << "joule: error: " << e.what() << '\n';
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "joule: internal error: " << e.what() << '\n';
        return 3;
    }
    return 0;
}

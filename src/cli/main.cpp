// joule: energy-efficient DNN training on heterogeneous machines. See README.md.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>

#include "cli/commands.hpp"
#include "dist/communicator.hpp"
#include "graph/error.hpp"
#include "import/onnx.hpp"

namespace joule::cli {

namespace {
// A bound as people write it: 4096, 1048576, 0.1 (never DBL_MAX's 309 digits).
std::string bound_str(double v) {
    char buf[32];
    if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
    else std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}
// "" when `s` is not a number at all (the option's own conversion then says what is wrong); otherwise
// the value, or an error message in `error` when it is not finite.
bool parse_number(const std::string& s, double& v, std::string& error) {
    errno = 0;
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0') return false;
    if (!std::isfinite(v) || (errno == ERANGE && std::fabs(v) > 1)) error = "'" + s + "' is not a finite number";
    return true;
}
}  // namespace

CLI::Validator finite_number() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            double v;
            std::string error;
            parse_number(s, v, error);
            return error;
        },
        "", "FINITE");
}

CLI::Validator number_in(double lo, double hi, bool open_low) {
    const std::string range = std::isfinite(hi) ? std::string(open_low ? "(" : "[") + bound_str(lo) + ", " + bound_str(hi) + "]"
                                                : std::string(open_low ? "> " : ">= ") + bound_str(lo);
    return CLI::Validator(
        [lo, hi, open_low, range](std::string& s) -> std::string {
            double v;
            std::string error;
            if (!parse_number(s, v, error)) return "";
            if (!error.empty()) return error;
            if (v < lo || (open_low && v == lo) || v > hi)
                return "'" + s + "' is out of range: " + (std::isfinite(hi) ? "must be in " + range : "must be " + range);
            return "";
        },
        range, "NUMBER_IN");
}

void add_net_options(CLI::App& cmd, NetOptions& o, bool net_positional, bool with_f16) {
    CLI::Option* net = net_positional ? cmd.add_option("net", o.net, "network from the zoo (see `joule nets`)")
                                      : cmd.add_option("--net", o.net, "network from the zoo (see `joule nets`)")->capture_default_str();
    CLI::Option* model = cmd.add_option("--model", o.model, "an ONNX model file (e.g. from torch.onnx.export) instead of a zoo net")->excludes(net);
    cmd.add_option("--labels", o.labels, "with --model: the model's input that holds the labels (default: its loss's, or joule adds one)")->needs(model);
    cmd.add_option("--batch", o.batch, "batch size (with --model: default the file's fixed batch)")
        ->capture_default_str()
        ->check(number_in(1, 1 << 20))
        ->each([&o](const std::string&) { o.batch_given = true; });
    cmd.parse_complete_callback([&o, net, net_positional] {
        if (o.model.empty()) {
            if (net_positional && net->count() == 0) throw Error("a net is required: a zoo net (see joule nets) or --model FILE.onnx");
            return;
        }
        if (!o.batch_given)
            if (const int64_t b = onnx_fixed_batch(o.model); b > 0) o.batch = b;
        o.net = std::filesystem::path(o.model).stem().string();  // what headers and reports call it
    });
    cmd.add_option("--image-size", o.image_size, "input height = width (0: the net's default)")->check(number_in(0));
    cmd.add_option("--seq-len", o.seq_len, "sequence length for BERT nets")->capture_default_str()->check(number_in(1, 4096));
    cmd.add_option("--optimizer", o.optimizer, "sgd, adam or adamw (decoupled weight decay)")->capture_default_str()->check(CLI::IsMember({"sgd", "adam", "adamw"}));
    if (with_f16)
        cmd.add_option("--dtype", o.dtype, "precision of the built-in plan: f32, bf16 or f16 (tensors stored in their producer's dtype, casts as nodes)")
            ->capture_default_str()
            ->check(CLI::IsMember({"f32", "bf16", "f16"}));
    else
        cmd.add_option("--dtype", o.dtype, "precision of the built-in plan: f32 or bf16 (tensors stored in their producer's dtype, casts as nodes)")
            ->capture_default_str()
            ->check(CLI::IsMember({"f32", "bf16"}));
    cmd.add_option("--dtype-scope", o.scope, "gemm: --dtype on conv/linear/matmul (autocast's list); all: on every op the cpu runs in it")
        ->capture_default_str()
        ->check(CLI::IsMember({"gemm", "all"}));
}

}  // namespace joule::cli

namespace {
// Under mpirun every rank prints its own error, naming itself, and ends the whole job: a rank that stops
// alone would leave the others waiting on it.
int fail(int code, const std::string& message, const char* kind = "error", bool every_rank = false) {
    joule::dist::Communicator& world = joule::dist::world();
    const bool job = world.size() > 1;
    const std::string who = job && message.rfind("rank ", 0) != 0 ? "rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) + ": " : "";
    const std::string line = "joule: " + std::string(kind) + ": " + who + message + "\n";
    std::fflush(stdout);
    std::fwrite(line.data(), 1, line.size(), stderr);  // one write: the ranks' lines do not interleave
    if (job && !every_rank) world.abort(code);
    return code;  // (every rank failed alike: each ends on its own, MPI finalised at exit)
}
}  // namespace

int main(int argc, char** argv) {
    try {
        joule::dist::init(argc, argv);  // a rank of an MPI job when mpirun started this process
    } catch (const joule::Error& e) {
        return fail(1, e.what());
    }
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
    joule::cli::add_devices(app);
    joule::cli::add_predict(app);
    joule::cli::add_amp(app);
    joule::cli::add_fpga_tune(app);
    joule::cli::add_plan(app);
    joule::cli::add_report(app);
    app.parse_complete_callback([&app] {  // before any command runs
        const joule::dist::Communicator& world = joule::dist::world();
        const std::vector<CLI::App*> parsed = app.get_subcommands();
        if (world.size() > 1 && !parsed.empty() && parsed.front()->get_name() != "train")
            throw joule::Error("joule " + parsed.front()->get_name() + " runs in one process; of a job's " + std::to_string(world.size()) +
                                   " processes (mpirun -np " + std::to_string(world.size()) + ") only `joule train` runs, data-parallel",
                               "run it without mpirun");
    });
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all, --version: print, exit 0
        // Usage errors read like every other error: the joule prefix, what was wrong, where to look.
        std::string commands;
        for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; })) commands += (commands.empty() ? "" : ", ") + c->get_name();
        const std::vector<CLI::App*> parsed = app.get_subcommands();
        std::string message = e.what();
        if (parsed.empty()) {
            std::string first;  // the first word that is not a flag
            for (int i = 1; i < argc && first.empty(); ++i)
                if (argv[i][0] != '-') first = argv[i];
            if (!first.empty()) message = "unknown command '" + first + "'; the commands are " + commands;
            else if (argc > 1) message = "unknown option '" + std::string(argv[1]) + "' before a command; the commands are " + commands;
            else message = "a command is required: " + commands;
        }
        return fail(2, message + " (see joule " + (parsed.empty() ? "" : parsed.back()->get_name() + " ") + "--help)");
    } catch (const joule::dist::JobError& e) {
        return fail(1, e.what(), "error", true);
    } catch (const joule::Error& e) {
        return fail(1, e.what());
    } catch (const std::exception& e) {
        return fail(3, e.what(), "internal error");
    }
    return 0;
}

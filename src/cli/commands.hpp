// One file per subcommand; each registers itself on the root CLI11 app. The callbacks call library
// functions and print; errors propagate as joule::Error to main(), which maps them to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <limits>
#include <memory>

#include "plan/passes.hpp"
#include "predict/device_model.hpp"
#include "predict/efficiency.hpp"
#include "predict/memory_model.hpp"
#include "zoo/zoo.hpp"

namespace joule::cli {

void add_train(CLI::App& app);
void add_nets(CLI::App& app);
void add_inspect(CLI::App& app);
void add_profile(CLI::App& app);
void add_analyze(CLI::App& app);
void add_probe(CLI::App& app);
void add_calibrate(CLI::App& app);
void add_devices(CLI::App& app);
void add_predict(CLI::App& app);
void add_amp(CLI::App& app);
void add_fpga_tune(CLI::App& app);
void add_plan(CLI::App& app);
void add_report(CLI::App& app);

// Every floating-point flag checks with this: NaN and infinities (nan, inf, 1e999) are refused with a
// message, never silently replaced or passed on.
// The numeric checks (instead of CLI::Range / PositiveNumber, whose messages print DBL_MAX in full):
// finite, and in [lo, hi] (or (lo, hi] with open_low), bounds printed as written.
CLI::Validator finite_number();
CLI::Validator number_in(double lo, double hi = std::numeric_limits<double>::infinity(), bool open_low = false);
inline CLI::Validator positive_number() { return number_in(0, std::numeric_limits<double>::infinity(), true); }

// Options shared by commands that build a net.
struct NetOptions {
    std::string net = "lenet5";
    int64_t batch = 64;
    int64_t image_size = 0;
    int64_t seq_len = 128;
    std::string optimizer = "adam";
    std::string dtype = "f32";
    std::string scope = "gemm";  // --dtype-scope
    std::string model;           // --model FILE.onnx: the user's model instead of a zoo net (`net` is then the file's stem)
    std::string labels;          // --labels: the model's input that holds the labels
    bool batch_given = false;    // --batch was on the command line (else a model file's fixed batch is taken)
};
// with_f16: --dtype also takes f16 (commands that model devices with an f16 path; the cpu has none)
void add_net_options(CLI::App& cmd, NetOptions& o, bool net_positional, bool with_f16 = false);

// The net of `o` (a zoo net or the --model file) at `cfg`'s sizes.
zoo::Model model_of(const NetOptions& o, const zoo::NetConfig& cfg);
// The net of `o` as a lowered train graph under its built-in precision plan (--dtype, --dtype-scope).
// Scope `all` asks the cpu backend which ops it runs in the dtype, or, for a modelled device, takes
// every op that is not f32-only (loss, updates) nor an embedding (the table stays f32), as the cpu does.
LoweredGraph lower_net(const NetOptions& o, const predict::DeviceModel* modelled = nullptr);
// The unlowered train graph of `o` (the optimizer with joule train's default hyper-parameters).
TrainGraph train_graph_of(const NetOptions& o);
// --optimizer with joule's defaults (sgd: lr 0.05, momentum 0.9; adam: lr 2e-3; adamw: lr 2e-3, decoupled
// decay 0.01, PyTorch's), each overridden where given: lr > 0, momentum >= 0 (sgd), weight_decay >= 0.
OptimizerConfig optimizer_of(const NetOptions& o, float lr = 0, float momentum = -1, float weight_decay = -1);
// What a modelled device computes in a dtype: every op it has the dtype for, but f32-only ops and
// embeddings (the table stays f32). `d` must outlive the function.
RunsInDtype modelled_runs(const predict::DeviceModel& d);
// A device that runs a whole net (predict, amp, profile --device): its model, or an Error for an FPGA,
// which runs part of one (no kernel for losses, softmax, ...) -- fpga-tune and plans are for those.
predict::DeviceModel load_whole_net_device(const std::string& name_alias_or_path, const std::string& flag = "--device");
// Error when the lowered net's tensor memory (its memory plan) exceeds a device's memory (0: unknown).
void check_fits(const LoweredGraph& lg, const NetOptions& o, double memory_bytes, const std::string& device);

// The modelled machine for analyze and calibrate: a data/hw device, explicit figures over it, and (analyze)
// an efficiency file whose hardware is the default.
struct HardwareOptions {
    std::string device, capacity, bandwidth, peak, peak_bf16, overhead, overhead_small, efficiency;
};
void add_hardware_options(CLI::App& cmd, HardwareOptions& o, bool with_efficiency);
struct Hardware {
    predict::MemoryConfig config;
    bool capacity = false, bandwidth = false, peak = false;  // given (by a flag, the device or the efficiency file)
    std::shared_ptr<predict::EfficiencyModel> efficiency;   // loaded --efficiency; config.efficiency points to it
    double memory_bytes = 0;                                 // the --device's memory capacity (0: unknown)
    std::string memory_of;                                   // which device
    void require(const std::string& command) const;          // Error when capacity, bandwidth or peak is missing
};
Hardware resolve_hardware(const HardwareOptions& o);

}  // namespace joule::cli

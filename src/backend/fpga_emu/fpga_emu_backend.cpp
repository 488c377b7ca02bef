#include "backend/fpga_emu/fpga_emu_backend.hpp"

#include "graph/error.hpp"
#include "predict/device_model.hpp"
#include "predict/units.hpp"

namespace joule {

namespace {

// A functional kernel whose time and energy are the kernel model's (or the host link's, for a transfer).
class Emulated : public Kernel {
public:
    Emulated(std::unique_ptr<Kernel> k, double seconds, double joules) : k_(std::move(k)), seconds_(seconds), joules_(joules) {}
    void run(const RunContext& ctx) override { k_->run(ctx); }
    std::optional<double> modelled_seconds() const override { return seconds_; }
    double modelled_joules() const override { return joules_; }

private:
    std::unique_ptr<Kernel> k_;
    double seconds_, joules_;
};

predict::DeviceModel fpga_model(const std::string& device) {
    const size_t colon = device.find(':');  // "fpga_emu:SPEC" (the registry checked the form)
    const std::string spec = colon == std::string::npos ? "" : device.substr(colon + 1);
    if (spec.empty()) throw Error("device '" + device + "': the emulated FPGA needs a spec", "e.g. fpga_emu:s10 (joule devices lists the FPGAs)");
    predict::DeviceModel m = predict::load_device_model(spec);
    if (m.spec().kind != "fpga") throw Error("device '" + device + "': " + m.spec().name + " is a " + m.spec().kind + ", not an FPGA", "choose s10, a10, de5, u250 or u280");
    return m;
}

}  // namespace

FpgaEmuBackend::FpgaEmuBackend(std::string device, const std::map<std::string, std::string>& settings)
    : device_(std::move(device)), model_(fpga_model(device_)), host_link_(hw::load_catalogue().link(model_.spec().fpga.host_link)), functional_(device_) {
    for (const auto& [key, value] : settings) {
        auto number = [&] {
            const std::optional<double> v = predict::parse_number(value);
            if (!v) throw Error("device '" + device_ + "': setting " + key + " '" + value + "' is not a number");
            return *v;
        };
        if (key == "power_limit_w") setting_.power_limit_w = number();
        else if (key == "clock_mhz") setting_.clock_mhz = number();
        else if (key == "fpga_design") setting_.fpga_design = predict::parse_fpga_design(value);
        else throw Error("device '" + device_ + "': unknown setting '" + key + "'", "power_limit_w, clock_mhz or fpga_design");
    }
}

Support FpgaEmuBackend::supports(const Graph& g, NodeId id) const {
    const Node& n = g.node(id);
    if (n.kind != OpKind::Transfer && !predict::fpga_runs(n.kind))
        return {false, std::string("no FPGA kernel for ") + op_name(n.kind) + " (it runs on the host)"};
    for (const OpKind f : {n.post_op, n.pre_op})
        if (f != OpKind::Count) return {false, std::string("no FPGA kernel with a fused ") + op_name(f) + " (the fuse pass leaves FPGA nodes unfused)"};
    if (n.compute == DType::BF16 && !model_.has(DType::BF16)) return {false, spec().name + " has no bf16 arithmetic"};
    if (has_blocked_operand(g, id)) return {false, "an operand is in a blocked layout; FPGA kernels read plain and nhwc tensors"};
    return functional_.supports(g, id);  // the dtype contract: f32 or bf16 operands, f32 losses and updates
}

std::unique_ptr<Kernel> FpgaEmuBackend::prepare(const Graph& g, NodeId id, const std::vector<void*>& inputs, const std::vector<void*>& outputs) {
    const Node& n = g.node(id);
    const Support s = supports(g, id);
    if (!s.ok) throw Error("op '" + n.name + "' (" + op_name(n.kind) + ") on " + device_ + ": " + s.reason);
    if (n.kind == OpKind::Transfer) {  // into the board over its host link
        const double bytes = double(g.tensor(n.outputs[0]).desc.bytes());
        const predict::Cost c = predict::transfer_cost(bytes, host_link_);
        return std::make_unique<Emulated>(functional_.prepare(g, id, inputs, outputs), c.seconds, c.joules);
    }
    const predict::TunedKernel& t = predict::fpga_kernel(g, id, model_, n.compute, setting_);  // the kernel predict::cost charges, cached
    std::unique_ptr<Kernel> k = t.config.kernel == predict::FpgaKernel::Gemm ? fpga_emu::make_gemm(g, id, inputs, outputs, t.config)
                                                                              : functional_.prepare(g, id, inputs, outputs);
    return std::make_unique<Emulated>(std::move(k), t.estimate.seconds, t.estimate.dynamic_joules);
}

}  // namespace joule

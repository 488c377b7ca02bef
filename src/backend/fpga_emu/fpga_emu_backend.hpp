// The emulated FPGA backend ("fpga_emu:SPEC", SPEC an FPGA of data/hw: s10, a10, de5, u250, u280): the
// FPGA's kernels run functionally on the CPU for their results; their time and energy come from the
// kernel model (predict/fpga_model.hpp) and are tagged modelled.
//
// GEMM nodes (conv forward / backward-data / backward-weights, linear and its backward, matmul) run as
// the kernel model's loop nest with the configuration its tuner picks for the node's shape: tiles of
// A and B loaded into on-chip buffers (ping-pong buffers when the configuration double-buffers), a
// pe_rows x pe_cols array of vec-wide dot products (a pairwise adder tree) accumulating the C tile in
// f32, the C tile stored once -- so tile remainders, strides, padding and groups go through the same
// code a bitstream would. bf16 nodes read bf16 operands, multiply exactly in f32 and accumulate in f32.
// Stream nodes (pooling, batch norm, activations, element-wise, updates, casts, reshapes) compute what
// a streaming pipeline computes, element by element: the reference backend's loops. Transfers into the
// board take the time of its host link (the spec's host_link). Nodes without an FPGA kernel (softmax,
// losses, embeddings, layer norm, dropout, transposes, slices) are refused with the reason: a plan puts
// them on the host.
#pragma once

#include <map>
#include <memory>

#include "backend/backend.hpp"
#include "backend/reference/reference_backend.hpp"
#include "hw/catalogue.hpp"
#include "predict/device_model.hpp"

namespace joule {

class FpgaEmuBackend : public Backend {
public:
    // device: "fpga_emu:SPEC"; settings: a plan's for it (power_limit_w, clock_mhz, fpga_design as text).
    // Throws Error when SPEC is not an FPGA of data/hw or a setting is not one.
    explicit FpgaEmuBackend(std::string device, const std::map<std::string, std::string>& settings = {});
    const std::string& device() const override { return device_; }
    Support supports(const Graph& g, NodeId n) const override;
    std::unique_ptr<Kernel> prepare(const Graph& g, NodeId n, const std::vector<void*>& inputs,
                                    const std::vector<void*>& outputs) override;
    int threads() const override { return 1; }
    TimeSource time_source() const override { return TimeSource::Modelled; }
    const hw::DeviceSpec& spec() const { return model_.spec(); }

private:
    std::string device_;
    predict::DeviceModel model_;  // the kernels cost() charges are the ones run here
    predict::Setting setting_;    // at the plan's settings
    hw::LinkSpec host_link_;
    ReferenceBackend functional_;  // the stream kernels' element-wise semantics
};

namespace fpga_emu {
// The tiled loop nest of a GEMM node under configuration c (pe_rows, pe_cols, vec, tiles, buffering);
// buffers in the node's input/output order, as Backend::prepare receives them.
std::unique_ptr<Kernel> make_gemm(const Graph& g, NodeId n, const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                                  const predict::FpgaConfig& c);
}  // namespace fpga_emu

}  // namespace joule

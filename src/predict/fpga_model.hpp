// The FPGA kernel model: training ops as HLS-style loop nests with parameters (Hype-training's design
// space; CNNLab's layer kernels), giving cycles, resource use and power for a configuration, and a
// tuner that picks the best feasible configuration per op shape.
//
//   const hw::DeviceSpec s10 = hw::find_device_spec("s10");
//   std::optional<FpgaWork> w = fpga_work(g, n, DType::F32);       // nullopt: no FPGA kernel for the op
//   FpgaEstimate e = fpga_estimate(*w, config, s10);                 // cycles, DSP / RAM use, joules
//   TunedKernel best = fpga_tune(*w, s10);                           // the fastest configuration that fits
//
// Two kernel templates cover the ops an FPGA runs:
//
//  GEMM (conv forward / backward-data / backward-weights, linear, matmul): C[M,N] += A[M,K] B[K,N] per
//  group, as predict::gemm_shape() maps each op (a convolution's windows are assembled on chip from line
//  buffers, so A streams as the activation tensor itself, not its im2col expansion):
//      for m0 in tiles(M, tile_m): for n0 in tiles(N, tile_n):          // C tile stays on chip
//        for k0 in tiles(K, tile_k):                                     // load A, B tiles (ping-pong
//          for each pe_rows x pe_cols block of the C tile:               //  buffers when double-buffered)
//            for k in the tile, vec at a time: PE(r, c) += dot(A[r, k:k+vec], B[k:k+vec, c])
//        store C tile
//    A is streamed ceil(N / tile_n) times, B ceil(M / tile_m) times, C written once. A tile takes
//    ceil(tm / rows) ceil(tn / cols) ceil(tk / vec) cycles plus the array's fill (rows + cols + the adder
//    tree); its loads take their bytes over the off-chip bandwidth. Double buffering overlaps the loads
//    of the next tile with the compute of this one (a tile costs the longer of the two, plus the first
//    load and the last store); without it they add. Remainder tiles are costed at their own sizes.
//  Stream (pooling, batch norm, activations, element-wise, optimizer updates, casts, reshapes): `vec` lanes, each a
//    pipeline of ceil(FLOPs per element / 2) multiply-adds, reading and writing the node's tensors once
//    (batch norm's statistics pass reads its input twice) with burst buffers.
//
// Resources: DSP blocks = MACs per cycle x the fabric's DSPs per MAC in the compute dtype (FP32 FMA, or
// a bf16 multiply accumulated in f32); on-chip RAM blocks per buffer = max(capacity, ports): a buffer
// read `p` elements per cycle is split into p banks, each at least one block, and double buffering
// doubles A and B (UltraRAM takes the buffers BRAM cannot hold, largest first). A configuration over a
// budget is an estimate with fits == false and the reason, never an exception. Soft logic (ALMs / LUTs)
// is not budgeted.
// Energy (Accelergy's counts x energy per action): DSP-cycles x dsp_pj_per_cycle + on-chip bits read and
// written x ram_pj_per_bit + off-chip bytes x mem_pj_per_byte, plus static power (the spec's idle_w)
// over the kernel's time. Everything here is MODELLED.
//
// Switching configurations between consecutive FPGA nodes is not in a node's cost (costs are
// context-free): fpga_switch_seconds() is what a schedule adds -- nothing when both kernels fit one
// bitstream, else the device's reconfiguration time.
#pragma once

#include <optional>
#include <string>

#include "graph/graph.hpp"
#include "hw/device_spec.hpp"

namespace joule::predict {

enum class FpgaKernel : uint8_t { Gemm, Stream };
const char* fpga_kernel_name(FpgaKernel k);

// What one node asks of an FPGA kernel.
struct FpgaWork {
    FpgaKernel kernel = FpgaKernel::Stream;
    DType dtype = DType::F32;        // compute dtype (f32, or bf16 where the fabric has it)
    double element_bytes = 4;        // operands as stored
    // GEMM: per group; the operand bytes are the whole tensors (all groups)
    double m = 0, n = 0, k = 0, groups = 1;
    double a_bytes = 0, b_bytes = 0, c_bytes = 0;
    // Stream: elements of the largest tensor, FLOPs per element, passes over them (batch norm's
    // statistics, then its normalisation: 2), off-chip bytes (all passes)
    double elements = 0, flops_per_element = 0, passes = 1, bytes = 0;
    double flops = 0;                // the node's FLOPs (graph/cost)
};
// The FPGA work of node n in `dtype`; nullopt when no FPGA kernel runs the op (softmax, layer norm,
// embeddings, losses, dropout, transposes, slices, transfers: they stay on the host).
std::optional<FpgaWork> fpga_work(const Graph& g, NodeId n, DType dtype);
bool fpga_runs(OpKind k);

struct FpgaConfig {
    FpgaKernel kernel = FpgaKernel::Stream;
    int pe_rows = 1, pe_cols = 1, vec = 1;        // GEMM: PE array and dot-product width; Stream: vec lanes
    double tile_m = 1, tile_n = 1, tile_k = 1;    // GEMM only
    bool double_buffer = true;
    double clock_mhz = 0;                         // 0: the device's default kernel clock
    DType dtype = DType::F32;
    std::string str() const;  // "gemm 8x16x8 tile 64x128x256 db 300MHz"
    bool operator==(const FpgaConfig&) const = default;
};

struct FpgaUse {
    double dsp = 0, ram_blocks = 0, uram_blocks = 0;
};

struct FpgaEstimate {
    bool fits = true;
    std::string why_not;  // when !fits: which budget, how much over
    FpgaUse use;
    double clock_mhz = 0;
    double cycles = 0, compute_cycles = 0, memory_cycles = 0;  // total; compute / memory as if alone
    double seconds = 0;
    double flops = 0, offchip_bytes = 0, ram_bits = 0, dsp_cycles = 0;
    double dynamic_joules = 0, static_joules = 0;
    double watts() const { return seconds > 0 ? (dynamic_joules + static_joules) / seconds : 0; }
    double gflops() const { return seconds > 0 ? flops / seconds * 1e-9 : 0; }
    double gflops_per_watt() const { return dynamic_joules + static_joules > 0 ? flops * 1e-9 / (dynamic_joules + static_joules) : 0; }
};

// The estimate of one configuration (its kernel must match the work's).
FpgaEstimate fpga_estimate(const FpgaWork& w, const FpgaConfig& c, const hw::DeviceSpec& d);

struct TunedKernel {
    FpgaConfig config;
    FpgaEstimate estimate;
    int candidates = 0;  // configurations estimated
    int feasible = 0;    // of which fit (and hold the power limit)
};
// A design for a whole run: one bitstream holding a GEMM kernel of a fixed PE array and a stream kernel
// of fixed lanes side by side. Every node runs on one of them with tile sizes of its own (tiles are
// run-time parameters: input-adaptive kernels, as Hype-training's), so consecutive nodes never
// reconfigure; the price is an array that fits no shape as well as a kernel tuned for it alone. Written
// "8x16x8/s16" (rows x cols x vector width / stream lanes), with "/sb" when buffers are single. The
// empty design (pe_rows 0) means each node its own tuned kernel, switches charged.
struct FpgaDesign {
    int pe_rows = 0, pe_cols = 0, vec = 0, stream_vec = 0;
    bool double_buffer = true;
    bool empty() const { return pe_rows == 0; }
    std::string str() const;
    bool operator==(const FpgaDesign&) const = default;
};
FpgaDesign parse_fpga_design(const std::string& text);  // Error naming the text and the form

// The fastest feasible configuration (ties: fewer joules) at `clock_mhz` (0: the device's default);
// with power_limit_w > 0, only configurations whose board power stays under it; with a design, only
// its kernels, each leaving room on the fabric for the other. Throws Error when the device has no
// fabric for the dtype or no configuration is feasible (the limit below static power, a design that
// does not fit).
TunedKernel fpga_tune(const FpgaWork& w, const hw::DeviceSpec& d, double clock_mhz = 0, double power_limit_w = 0, const FpgaDesign& design = {});

// What running b right after a costs beyond their node costs: 0 when they are one kernel or both fit
// the fabric together (one bitstream), else the device's reconfiguration time.
double fpga_switch_seconds(const TunedKernel& a, const TunedKernel& b, const hw::DeviceSpec& d);

}  // namespace joule::predict

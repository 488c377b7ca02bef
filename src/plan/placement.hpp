// The placement planner: which device of a system runs each node of a training graph, decided by a
// strategy and judged by the schedule simulation of plan/schedule.hpp -- modelled, like every figure
// it prints.
//
//   const SystemModel sys = load_system_model("cpu+v100+s10");
//   const Placed p = place(tg, sys, parse_strategy("energy"));     // or heft, cnnlab, powercap:200, exact, ...
//   p.plan        // node entries: `joule train --plan` runs it; lower(tg, p.plan) + simulate() reproduce p.outcome
//
// A PlacementProblem holds what every strategy asks millions of times: each node's context-free cost
// on each device (predict::cost at the devices' settings; f32), the FPGA kernel each would run, and the
// graph's tensors. evaluate() simulates one placement exactly as simulate(lower(plan)) does -- graph
// order, one node at a time per device, a Transfer per (tensor, device) on the links (through the host
// where no direct link exists) while devices compute, FPGA configuration switches between consecutive
// FPGA nodes, idle power of every device over the iteration -- without building the lowered graph
// (test: they agree). Memory: a device's persistent tensors plus the peak of its live transient ones
// (the arena simulate() checks is at least that; the final plan is checked by simulate() itself).
//
// Decision units. Nodes that write one tensor in place (an optimizer update and the parameter it owns)
// form an atom that must share a device. Placing a node on a device that has no kernel for it (an
// FPGA: the loss, softmax, embeddings, ...) puts its whole atom on the host instead. cnnlab and exact
// decide per layer (a forward node with its backward and update nodes: CNNLab's granularity); energy
// and powercap per layer, then per atom; heft per atom, as classic HEFT schedules tasks.
//
// Settings searched (search_settings): each FPGA with per-node kernels or the graph's best one-bitstream
// design; under powercap each GPU's power limits. A strategy works on every combination (local search:
// on the three most promising, every one for small nets) and keeps the best.
//
// Strategies (each returns the better, under its own objective, of its plan and every single-device
// baseline -- a device at its best setting; `Placed::chosen` says which):
//   single:<device>  every node the device runs on it, the rest on the host (objective: time)
//   cnnlab           per layer the device with the least energy-delay product of the layer's own nodes
//                    (CNNLab's per-layer trade-off, transfers not weighed); judged as energy is
//   heft             HEFT (Topcuoglu et al. 2002): upward rank on mean costs, insertion-based earliest
//                    finish time; minimises time only
//   energy[:slack]   least energy with time <= (1 + slack) x the fastest baseline (default slack 0: no
//                    throughput loss); local search (improve()) from every baseline, the per-layer
//                    least-energy / least-time / least energy-delay placements and HEFT's
//   powercap:<W>     least time with average power <= W, power counted over the system's accelerators
//                    (and the host when it runs nodes) and links; the same search
//   exact[:slack|:time|:powercap:<W>]  branch and bound over layer placements (depth-first, layers in
//                    graph order, incumbent: the best seed; bounds: each device's busy time, the unplaced
//                    layers' least busy time and dynamic energy); default objective energy's. Refused
//                    beyond 10^7 placements per setting or 2 x 10^6 simulated.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/schedule.hpp"

namespace joule {

class PlacementProblem {
public:
    // `settings`: per device of sys (default: sys.settings).
    PlacementProblem(const TrainGraph& tg, const SystemModel& sys, std::vector<predict::Setting> settings = {});
    const TrainGraph& train() const { return *tg_; }
    const SystemModel& system() const { return *sys_; }
    const std::vector<predict::Setting>& settings() const { return settings_; }
    size_t nodes() const { return costs_.size(); }
    size_t devices() const { return sys_->devices.size(); }
    // nullptr: the device has no kernel for the node.
    const predict::Cost* cost(size_t node, int device) const { return costs_[node][size_t(device)] ? &*costs_[node][size_t(device)] : nullptr; }

    // Decision units: atoms (in-place writers of one tensor together) and layers (atoms of one source layer).
    const std::vector<std::vector<int>>& atoms() const { return atoms_; }
    const std::vector<std::vector<int>>& layers() const { return layers_; }  // each a list of atoms

    // Moving `bytes` from device a to device b over the system's route (0 when a == b).
    double transfer_seconds(double bytes, int a, int b) const;

    // The device each node runs on when `atom` is put on `device`: device, or the host when the device
    // lacks a kernel for one of its nodes.
    int device_for(int atom, int device) const;

    struct Outcome {
        double seconds = 0;
        double dynamic_joules = 0, idle_joules = 0, transfer_joules = 0, switch_seconds = 0;
        int switches = 0, transfers = 0;
        std::vector<double> busy_seconds, dynamic_by_device, bytes_by_device;
        bool fits = true;
        std::string why_not;
        double joules() const { return dynamic_joules + idle_joules + transfer_joules; }
        double watts() const { return seconds > 0 ? joules() / seconds : 0; }
        double capped_watts = 0;  // the power a cap counts: accelerators, the host when it runs nodes, links
    };
    using Placement = std::vector<int>;  // a device per node of train().graph
    Outcome evaluate(const Placement& p) const;

private:
    const TrainGraph* tg_;
    const SystemModel* sys_;
    std::vector<predict::Setting> settings_;
    std::vector<std::vector<std::optional<predict::Cost>>> costs_;
    std::vector<std::vector<const predict::TunedKernel*>> kernels_;
    std::vector<int> atom_of_;
    std::vector<std::vector<int>> atoms_, layers_;
    struct TensorInfo {
        double bytes = 0;
        int producer = -1, inplace_writer = -1, first_reader = -1, last_use = -1;
        bool persistent = false;
    };
    std::vector<TensorInfo> tensors_;
    std::vector<std::vector<std::pair<int, const hw::LinkSpec*>>> routes_;  // per (from x D + to): (link slot, link)
};

struct Strategy {
    enum class Kind { Single, Cnnlab, Heft, Energy, Powercap, Exact } kind = Kind::Energy;
    enum class Objective { Energy, Time, Powercap } objective = Objective::Energy;  // exact's
    std::string device;  // single:<device>
    double slack = 0;    // energy: time <= (1 + slack) x the fastest baseline
    double watts = 0;    // powercap
    std::string name() const;
};
// "single:<device>", "cnnlab", "heft", "energy", "energy:<slack>", "powercap:<W>", "exact", "exact:time",
// "exact:powercap:<W>"; Error naming the text and the forms otherwise.
Strategy parse_strategy(const std::string& text);

struct Placed {
    std::string strategy;                    // its name
    std::string chosen;                      // the strategy's own plan, or the baseline that beat it
    Plan plan;                               // node entries and device settings
    PlacementProblem::Placement placement;
    std::vector<predict::Setting> settings;  // per device
    PlacementProblem::Outcome outcome;
    double bound_seconds = 0;  // energy: the time it had to meet
    bool meets = true;         // the constraint held (energy's time bound, powercap's watts)
    long evaluations = 0;      // placements simulated
};

// Raises Error for an exact search beyond its budget or a single:<device> the system lacks.
Placed place(const TrainGraph& tg, const SystemModel& sys, const Strategy& s);

// The device settings a strategy searches, all combinations of: each FPGA per-node kernels (switches
// charged) or the one-bitstream design best for the graph (predict::best_fpga_design); under
// powercap:<W>, each GPU's power limit over its range in quarters, at W when W is inside it, and at the
// highest limit under which the GPU alone (the other accelerators idle) holds W. The
// other devices at sys.settings; the first combination is sys.settings itself.
std::vector<std::vector<predict::Setting>> search_settings(const TrainGraph& tg, const SystemModel& sys, const Strategy& s);

// The plan that runs placement p (node entries for every node off the host) with the devices' settings.
Plan plan_of(const TrainGraph& tg, const SystemModel& sys, const PlacementProblem::Placement& p, const std::vector<predict::Setting>& settings,
             const std::string& name);

}  // namespace joule

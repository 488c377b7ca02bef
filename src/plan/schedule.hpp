// A placed training iteration simulated on a system (data/hw `kind: system`): the foundation of the
// placement planner. Every node of a lowered graph runs on its plan device, costed by the one cost
// interface (predict::cost); the simulation respects the graph's dependencies, runs one node at a time
// per device, moves each Transfer over the link between its two devices (through the host when the
// system has no direct link) while the devices go on computing, and charges an FPGA's kernel
// configuration switches (predict::fpga_switch_seconds) where consecutive FPGA nodes need them, and
// charges f16's dynamic loss scaling (predict::loss_scaling_cost) to each device computing in f16.
//
//   const SystemModel sys = load_system_model("cpu+v100+s10");
//   const Schedule s = simulate(lower(tg, plan), sys);
//   s.seconds, s.joules(), s.watts()          // the iteration: modelled
//
// Energy = the dynamic energy of every node (above its device's idle power) + every device's idle /
// static power over the whole iteration + the links' energy per byte moved. A plan whose tensors do not
// fit a device's memory is infeasible (fits == false, and why).
//
// Plan devices of a system: its CPU is "cpu" (the host, where the cpu backend runs), a GPU
// "cuda:<alias>", an FPGA "fpga_emu:<alias>" (its first alias), e.g. cpu, cuda:v100, fpga_emu:s10.
#pragma once

#include <string>
#include <vector>

#include "hw/catalogue.hpp"
#include "plan/passes.hpp"
#include "predict/device_model.hpp"

namespace joule {

struct SystemModel {
    hw::Catalogue catalogue;
    hw::SystemSpec system;
    std::vector<predict::DeviceModel> devices;  // in the system's order
    std::vector<std::string> plan_devices;      // each one's plan device
    std::vector<predict::Setting> settings;     // each one's clock or power limit (default: none)
    int host = -1;                              // the CPU's index
    int index_of(const std::string& plan_device) const;  // Error naming the system's devices when absent
    // The settings a plan runs the devices at: `settings`, overridden by the plan's `devices:` entries.
    std::vector<predict::Setting> settings_of(const Plan& p) const;
};
// The system (name, alias or path) of data/hw with a cost model per device.
SystemModel load_system_model(const std::string& name_alias_or_path);
// A plan device's name on a system device ("cpu", "cuda:v100", "fpga_emu:s10").
std::string plan_device_of(const hw::DeviceSpec& d);

struct ScheduledNode {
    int device = -1;  // the device that runs it (a transfer: its destination)
    double start = 0, end = 0;
    double joules = 0;  // dynamic energy (a transfer: the link's)
};

struct Schedule {
    std::vector<ScheduledNode> nodes;  // per node id
    double seconds = 0;                // the iteration's makespan
    double dynamic_joules = 0, idle_joules = 0, transfer_joules = 0;
    double switch_seconds = 0;  // FPGA kernel switches inside `seconds`
    double loss_scaling_seconds = 0;  // f16's dynamic loss scaling, once per step per device computing in f16
    int switches = 0;
    int batch_copies = 0;  // the step's inputs and labels copied from the host to the device first reading them
    std::vector<double> busy_seconds;  // per device: its nodes' time
    bool fits = true;
    std::string why_not;  // when !fits: which device's memory, how much over
    double joules() const { return dynamic_joules + idle_joules + transfer_joules; }
    double watts() const { return seconds > 0 ? joules() / seconds : 0; }
};

// Each device at the settings of lg.plan (SystemModel::settings_of).
Schedule simulate(const LoweredGraph& lg, const SystemModel& sys);

// The links a transfer from device a to device b crosses, each with its (lower, higher) device-index
// key: their own link, else through the host. Error when neither exists.
std::vector<std::pair<std::pair<int, int>, const hw::LinkSpec*>> route(const SystemModel& sys, int a, int b);

// The single-device baseline: every node on `device` (an index of sys) that it runs, the rest on the
// host (an FPGA has no kernel for the loss, softmax, embeddings, ...).
Plan single_device_plan(const TrainGraph& tg, const SystemModel& sys, int device);

}  // namespace joule

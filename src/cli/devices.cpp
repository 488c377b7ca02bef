// `joule devices`: the devices, links and systems of data/hw with their key figures (every figure there
// cites its source in the file).
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "hw/catalogue.hpp"
#include "report/table.hpp"

namespace joule::cli {

namespace {

std::string range(double lo, double hi, const char* unit) {
    if (hi <= 0) return "-";
    return fixed(lo, 0) + "-" + fixed(hi, 0) + " " + unit;
}

std::string tflops(double gflops) { return gflops > 0 ? fixed(gflops / 1e3, gflops < 1e3 ? 3 : 1) : "-"; }

}  // namespace

void add_devices(CLI::App& app) {
    auto* cmd = app.add_subcommand("devices", "list the devices, links and systems joule can model (data/hw), with their key figures");
    auto json = std::make_shared<bool>(false);
    cmd->add_flag("--json", *json, "machine-readable output");
    cmd->callback([json] {
        const hw::Catalogue c = hw::load_catalogue();
        if (*json) {
            nlohmann::json d = nlohmann::json::array(), l = nlohmann::json::array(), s = nlohmann::json::array();
            for (const hw::DeviceSpec& x : c.devices)
                d.push_back({{"name", x.name}, {"aliases", x.aliases}, {"kind", x.kind}, {"cores", x.cores}, {"peak_f32_gflops", x.peak_f32_gflops},
                             {"peak_bf16_gflops", x.peak_bf16_gflops}, {"peak_f16_gflops", x.peak_f16_gflops}, {"mem_bandwidth_gbps", x.mem_bandwidth_gbps},
                             {"mem_gib", x.mem_gib}, {"onchip_kib", x.onchip_kib}, {"tdp_w", x.tdp_w}, {"idle_w", x.idle_w},
                             {"power_limit_w", {x.power_limit_min_w, x.power_limit_default_w, x.power_limit_max_w}},
                             {"clock_mhz", {x.clock_min_mhz, x.clock_default_mhz, x.clock_max_mhz}}, {"efficiency", x.efficiency}, {"file", x.path}});
            for (const hw::LinkSpec& x : c.links)
                l.push_back({{"name", x.name}, {"aliases", x.aliases}, {"bandwidth_gbps", x.bandwidth_gbps}, {"latency_us", x.latency_us},
                             {"energy_pj_per_byte", x.energy_pj_per_byte}, {"file", x.path}});
            for (const hw::SystemSpec& x : c.systems) {
                nlohmann::json links = nlohmann::json::array();
                for (const hw::SystemLink& k : x.links) links.push_back({{"between", {k.a, k.b}}, {"link", c.link(k.link).name}});
                s.push_back({{"name", x.name}, {"aliases", x.aliases}, {"devices", x.devices}, {"links", links},
                             {"network", x.network.empty() ? "" : c.link(x.network).name}, {"file", x.path}});
            }
            std::cout << nlohmann::json{{"schema", "joule.devices/1"}, {"devices", d}, {"links", l}, {"systems", s}}.dump(2) << '\n';
            return;
        }
        std::cout << "devices (" << c.dir << "; every figure cites its source in its file):\n";
        Table t({"device (aliases)", "kind", "f32 TFLOPS", "bf16", "f16", "GB/s", "memory", "on-chip", "idle / TDP W", "power limit", "clock", "time model"});
        for (const hw::DeviceSpec& x : c.devices)
            t.add({hw::with_aliases(x.name, x.aliases), x.kind, tflops(x.peak_f32_gflops), tflops(x.peak_bf16_gflops), tflops(x.peak_f16_gflops),
                   fixed(x.mem_bandwidth_gbps, 0), x.mem_gib > 0 ? fixed(x.mem_gib, 0) + " GiB" : "-", bytes_str(x.onchip_kib * 1024),
                   fixed(x.idle_w, 0) + " / " + fixed(x.tdp_w, 0), range(x.power_limit_min_w, x.power_limit_max_w, "W"),
                   range(x.clock_min_mhz, x.clock_max_mhz, "MHz"),
                   x.kind == "fpga" ? "kernel model (fpga-tune)" : x.efficiency.empty() ? "roofline" : "curves: " + x.efficiency});
        t.print(std::cout);
        std::cout << "\nlinks:\n";
        Table l({"link (aliases)", "GB/s per direction", "latency us", "pJ/byte"});
        for (const hw::LinkSpec& x : c.links) l.add({hw::with_aliases(x.name, x.aliases), fixed(x.bandwidth_gbps, 1), fixed(x.latency_us, 2), fixed(x.energy_pj_per_byte, 1)});
        l.print(std::cout);
        std::cout << "\nsystems (one node: its devices and links):\n";
        Table s({"system (aliases)", "devices", "links", "network"});
        for (const hw::SystemSpec& x : c.systems) {
            std::string devices, links;
            for (const std::string& d : x.devices) devices += (devices.empty() ? "" : " + ") + d;
            for (const hw::SystemLink& k : x.links) links += (links.empty() ? "" : "; ") + k.a + " - " + k.b + ": " + c.link(k.link).name;
            s.add({hw::with_aliases(x.name, x.aliases), devices, links, x.network.empty() ? "-" : c.link(x.network).name});
        }
        s.print(std::cout);
    });
}

}  // namespace joule::cli

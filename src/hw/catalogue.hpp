// The catalogue of data/hw: devices (device_spec.hpp), links and systems, loaded once and looked up by
// name or alias.
//
//   hw::Catalogue c = hw::load_catalogue();            // every file of data/hw
//   const hw::SystemSpec& s = c.system("v100+cpu");   // a node: its devices and the links between them
//   const hw::LinkSpec* l = c.link_between(s, "cpu", "v100");
//
// A link file (`kind: link`) describes one interconnect: PCIe gen3/4/5 x16, NVLink, and between nodes
// InfiniBand HDR/NDR or Ethernet: the bandwidth a large pinned copy reaches (per direction), the fixed
// latency of one transfer, and the energy per byte moved. A system file (`kind: system`) names its
// devices (by name or alias; any kind, FPGAs included) and the links between pairs of them, and
// optionally the network between nodes. Every number cites a source; a system naming a device or link
// the folder lacks, a link between devices it does not hold, or a pair linked twice is an error naming
// the file and line.
#pragma once

#include <string>
#include <vector>

#include "hw/device_spec.hpp"

namespace joule::hw {

struct LinkSpec {
    std::string name, path;
    std::vector<std::string> aliases;
    double bandwidth_gbps = 0;      // achieved by large transfers, per direction
    double raw_bandwidth_gbps = 0;  // signalling rate per direction (0: not given)
    double latency_us = 0;          // fixed cost of one transfer
    double energy_pj_per_byte = 0;  // both ends and the wire
    bool answers_to(const std::string& n) const;
};

struct SystemLink {
    std::string a, b;  // device names as the system lists them
    std::string link;  // link name
};

struct SystemSpec {
    std::string name, path;
    std::vector<std::string> aliases;
    std::vector<std::string> devices;  // device spec names (resolved from the file's names or aliases)
    std::vector<SystemLink> links;
    std::string network;  // link between nodes ("" none)
    // A system may name its CPU `host`: this machine's CPU, the spec whose `match` its /proc/cpuinfo model
    // holds (a system joule train --system can plan for and then run here). Where no spec matches, the
    // system cannot be used here and this says why (Catalogue::system throws it).
    std::string unusable;
    bool answers_to(const std::string& n) const;
};

LinkSpec load_link_spec(const std::string& path);
SystemSpec load_system_spec(const std::string& path);  // names are checked against a catalogue by load_catalogue

struct Catalogue {
    std::vector<DeviceSpec> devices;
    std::vector<LinkSpec> links;
    std::vector<SystemSpec> systems;
    std::string dir;
    // Lookups by name or alias; throw Error listing the candidates when none fits.
    const DeviceSpec& device(const std::string& name) const;
    const LinkSpec& link(const std::string& name) const;
    const SystemSpec& system(const std::string& name) const;
    // The link a system declares between two of its devices (either order), null when none.
    const LinkSpec* link_between(const SystemSpec& s, const std::string& a, const std::string& b) const;
};

// Every file of the folder, cross-checked: unique names and aliases across devices, links and systems;
// systems name devices and links the folder has.
Catalogue load_catalogue(const std::string& dir = spec_dir());

}  // namespace joule::hw

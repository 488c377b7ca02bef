#include "hw/catalogue.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "graph/error.hpp"
#include "hw/yaml_file.hpp"

namespace joule::hw {

namespace {

bool in(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string scalar(const std::string& path, const YAML::Node& y, const char* key, bool required) {
    if (!y[key]) {
        if (required) throw Error(path + ": missing key '" + key + "'");
        return "";
    }
    if (!y[key].IsScalar() || y[key].as<std::string>().empty()) throw Error(yaml_where(path, y[key]) + ": '" + key + "' must be a non-empty name");
    return y[key].as<std::string>();
}

void only_keys(const std::string& path, const YAML::Node& y, const std::set<std::string>& allowed) {
    for (auto it = y.begin(); it != y.end(); ++it)
        if (!allowed.count(it->first.as<std::string>())) throw Error(yaml_where(path, it->first) + ": unknown key '" + it->first.as<std::string>() + "'");
}

template <class T>
const T& find_named(const std::vector<T>& v, const std::string& name, const std::string& what, const std::string& dir) {
    std::string list;
    for (const T& x : v) {
        if (x.answers_to(name)) return x;
        list += (list.empty() ? "" : ", ") + x.name;
    }
    throw Error("no " + what + " named '" + name + "' in " + dir, "choose one of: " + list + " (joule devices lists them)");
}

}  // namespace

bool LinkSpec::answers_to(const std::string& n) const { return n == name || in(aliases, n); }
bool SystemSpec::answers_to(const std::string& n) const { return n == name || in(aliases, n); }

LinkSpec load_link_spec(const std::string& path) try {
    const YAML::Node y = load_versioned_yaml(path, "link spec", "check the path");
    only_keys(path, y, {"version", "name", "kind", "aliases", "bandwidth_gbps", "raw_bandwidth_gbps", "latency_us", "energy_pj_per_byte", "sources"});
    if (scalar(path, y, "kind", true) != "link") throw Error(yaml_where(path, y["kind"]) + ": a link spec has 'kind: link'");
    LinkSpec l;
    l.path = path;
    l.name = scalar(path, y, "name", true);
    if (y["aliases"]) l.aliases = yaml_names(path, y["aliases"], "aliases");
    const YAML::Node sources = y["sources"];
    struct Field {
        const char* key;
        double* value;
        bool required;
    };
    const Field fields[] = {{"bandwidth_gbps", &l.bandwidth_gbps, true},
                            {"raw_bandwidth_gbps", &l.raw_bandwidth_gbps, false},
                            {"latency_us", &l.latency_us, true},
                            {"energy_pj_per_byte", &l.energy_pj_per_byte, true}};
    for (const Field& f : fields) {
        if (!y[f.key]) {
            if (f.required) throw Error(path + ": missing key '" + f.key + "'", "a link needs bandwidth_gbps, latency_us and energy_pj_per_byte");
            continue;
        }
        *f.value = yaml_number(path, y[f.key], f.key);
        if (!sources || !sources.IsMap() || !sources[f.key])
            throw Error(yaml_where(path, y[f.key]) + ": '" + f.key + "' has no entry in 'sources'", "every number in data/hw must say where it comes from");
    }
    if (l.bandwidth_gbps <= 0) throw Error(yaml_where(path, y["bandwidth_gbps"]) + ": 'bandwidth_gbps' must be positive");
    if (l.raw_bandwidth_gbps > 0 && l.bandwidth_gbps > l.raw_bandwidth_gbps)
        throw Error(yaml_where(path, y["bandwidth_gbps"]) + ": bandwidth_gbps " + std::to_string(l.bandwidth_gbps) + " exceeds raw_bandwidth_gbps " +
                    std::to_string(l.raw_bandwidth_gbps));
    return l;
} catch (const YAML::Exception& e) {
    yaml_error(path, e, "link spec");
}

SystemSpec load_system_spec(const std::string& path) try {
    const YAML::Node y = load_versioned_yaml(path, "system spec", "check the path");
    only_keys(path, y, {"version", "name", "kind", "aliases", "devices", "links", "network"});
    if (scalar(path, y, "kind", true) != "system") throw Error(yaml_where(path, y["kind"]) + ": a system spec has 'kind: system'");
    SystemSpec s;
    s.path = path;
    s.name = scalar(path, y, "name", true);
    if (y["aliases"]) s.aliases = yaml_names(path, y["aliases"], "aliases");
    if (!y["devices"]) throw Error(path + ": missing key 'devices' (the devices of one node)");
    s.devices = yaml_names(path, y["devices"], "devices");
    if (s.devices.empty()) throw Error(yaml_where(path, y["devices"]) + ": 'devices' must name at least one device");
    s.network = scalar(path, y, "network", false);
    if (const YAML::Node links = y["links"]) {
        if (!links.IsSequence()) throw Error(yaml_where(path, links) + ": 'links' must be a list of {between: [A, B], link: NAME}");
        for (const YAML::Node& l : links) {
            if (!l.IsMap()) throw Error(yaml_where(path, l) + ": a link entry is {between: [A, B], link: NAME}");
            only_keys(path, l, {"between", "link"});
            if (!l["between"] || !l["link"]) throw Error(yaml_where(path, l) + ": a link entry needs 'between' and 'link'");
            const std::vector<std::string> ends = yaml_names(path, l["between"], "between");
            if (ends.size() != 2 || ends[0] == ends[1]) throw Error(yaml_where(path, l["between"]) + ": 'between' names two different devices");
            s.links.push_back({ends[0], ends[1], scalar(path, l, "link", true)});
        }
    }
    return s;
} catch (const YAML::Exception& e) {
    yaml_error(path, e, "system spec");
}

const DeviceSpec& Catalogue::device(const std::string& n) const { return find_named(devices, n, "device", dir); }
const LinkSpec& Catalogue::link(const std::string& n) const { return find_named(links, n, "link", dir); }
const SystemSpec& Catalogue::system(const std::string& n) const {
    const SystemSpec& s = find_named(systems, n, "system", dir);
    if (!s.unusable.empty()) throw Error(s.path + ": system '" + s.name + "' " + s.unusable, "use a system that names its CPU (joule devices lists them)");
    return s;
}

const LinkSpec* Catalogue::link_between(const SystemSpec& s, const std::string& a, const std::string& b) const {
    const std::string& da = device(a).name;
    const std::string& db = device(b).name;
    for (const SystemLink& l : s.links)
        if ((device(l.a).name == da && device(l.b).name == db) || (device(l.a).name == db && device(l.b).name == da)) return &link(l.link);
    return nullptr;
}

Catalogue load_catalogue(const std::string& dir) {
    Catalogue c;
    c.dir = dir;
    c.devices = load_all_specs(dir);
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".yaml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
        const std::string kind = spec_file_kind(p.string());
        if (kind == "link") c.links.push_back(load_link_spec(p.string()));
        else if (kind == "system") c.systems.push_back(load_system_spec(p.string()));
    }
    // every name and alias picks one entry of the whole folder
    std::vector<std::pair<std::string, std::string>> taken;  // (name, file)
    auto claim = [&](const std::string& n, const std::string& path) {
        for (const auto& [t, file] : taken)
            if (t == n) throw Error(path + ": the name '" + n + "' is also used by " + file, "names and aliases must be unique across " + dir);
        taken.push_back({n, path});
    };
    for (const DeviceSpec& d : c.devices) {
        claim(d.name, d.path);
        for (const std::string& a : d.aliases) claim(a, d.path);
    }
    for (const LinkSpec& l : c.links) {
        claim(l.name, l.path);
        for (const std::string& a : l.aliases) claim(a, l.path);
    }
    for (const DeviceSpec& d : c.devices)  // an FPGA board's host link is a link of the folder
        if (!d.fpga.host_link.empty() && std::none_of(c.links.begin(), c.links.end(), [&](const LinkSpec& l) {
                return l.name == d.fpga.host_link || std::find(l.aliases.begin(), l.aliases.end(), d.fpga.host_link) != l.aliases.end();
            }))
            throw Error(d.path + ": host_link '" + d.fpga.host_link + "' is not a link in " + dir, "name a link file's name or alias");
    const std::string model = cpu_model_name();
    const DeviceSpec* host = nullptr;  // this machine's CPU: the first spec (by file name) whose match it holds
    for (const DeviceSpec& d : c.devices)
        if (!host && d.kind == "cpu" && !d.match.empty() && model.find(d.match) != std::string::npos) host = &d;
    for (SystemSpec& s : c.systems) {
        claim(s.name, s.path);
        for (const std::string& a : s.aliases) claim(a, s.path);
        if (in(s.devices, std::string("host"))) {
            if (!host) s.unusable = "names 'host', this machine's CPU, but no CPU spec in " + dir + " matches it ('" + model + "')";
            for (std::string& d : s.devices)
                if (d == "host" && host) d = host->name;
            for (SystemLink& l : s.links)
                for (std::string* end : {&l.a, &l.b})
                    if (*end == "host" && host) *end = host->name;
        }
        // names of the system's devices, checked (an unmatched host stays 'host')
        auto device_name = [&](const std::string& n) { return n == "host" && !host ? n : c.device(n).name; };
        auto must = [&](auto&& lookup, const std::string& n, const std::string& what) {
            try {
                return lookup(n);
            } catch (const Error& e) {
                throw Error(s.path + ": system '" + s.name + "' names " + what + " '" + n + "', which " + dir + " does not have", e.what());
            }
        };
        std::vector<std::string> resolved;
        for (const std::string& d : s.devices) {
            const std::string full = must(device_name, d, "the device");
            if (in(resolved, full)) throw Error(s.path + ": system '" + s.name + "' lists device '" + d + "' twice");
            resolved.push_back(full);
        }
        std::set<std::pair<std::string, std::string>> pairs;
        for (const SystemLink& l : s.links) {
            for (const std::string& end : {l.a, l.b})
                if (!in(resolved, must(device_name, end, "the device")))
                    throw Error(s.path + ": a link of system '" + s.name + "' ends at '" + end + "', which is not one of its devices");
            must([&](const std::string& n) { return c.link(n).name; }, l.link, "the link");
            const std::string a = device_name(l.a), b = device_name(l.b);
            if (!pairs.insert({std::min(a, b), std::max(a, b)}).second)
                throw Error(s.path + ": system '" + s.name + "' links '" + l.a + "' and '" + l.b + "' twice");
        }
        if (!s.network.empty()) must([&](const std::string& n) { return c.link(n).name; }, s.network, "the network link");
        s.devices = resolved;
    }
    return c;
}

}  // namespace joule::hw

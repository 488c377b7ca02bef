#include "hw/yaml_file.hpp"

#include <cmath>
#include <filesystem>

#include "graph/error.hpp"

namespace joule::hw {

YAML::Node load_versioned_yaml(const std::string& path, const std::string& what, const std::string& missing_hint) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
        throw Error(path + ": cannot open " + what + ": " + (std::filesystem::is_directory(path, ec) ? "it is a directory" : "not a regular file"),
                    "give the path of a .yaml file");
    YAML::Node y;
    try {
        y = YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
        throw Error(path + ": cannot open " + what, missing_hint);
    } catch (const YAML::Exception& e) {
        throw Error(path + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
    }
    if (!y.IsMap()) throw Error(path + ": " + what + " must be a YAML map");
    if (!y["version"] || y["version"].as<std::string>() != "1") throw Error(path + ": unsupported or missing 'version' (this joule reads version 1)");
    return y;
}

std::string yaml_where(const std::string& path, const YAML::Node& n) { return path + ":" + std::to_string(n.Mark().line + 1); }

std::vector<std::string> yaml_names(const std::string& path, const YAML::Node& n, const std::string& key) {
    if (!n.IsSequence()) throw Error(yaml_where(path, n) + ": '" + key + "' must be a list of names");
    std::vector<std::string> v;
    for (const YAML::Node& x : n) {
        if (!x.IsScalar() || x.as<std::string>().empty()) throw Error(yaml_where(path, x) + ": '" + key + "' entries must be non-empty names");
        v.push_back(x.as<std::string>());
    }
    return v;
}

double yaml_number(const std::string& path, const YAML::Node& n, const std::string& key) {
    double v = 0;
    try {
        v = n.as<double>();
    } catch (const YAML::Exception&) {
        throw Error(yaml_where(path, n) + ": '" + key + "' must be a number");
    }
    if (!std::isfinite(v) || v < 0) throw Error(yaml_where(path, n) + ": '" + key + "' must be a finite, non-negative number");
    return v;
}

void yaml_error(const std::string& path, const YAML::Exception& e, const std::string& what) {
    throw Error(path + (e.mark.is_null() ? "" : ":" + std::to_string(e.mark.line + 1)) + ": not a valid " + what + ": " + e.msg,
                "check the value's type (a number, a string, a list or a map) there");
}

}  // namespace joule::hw

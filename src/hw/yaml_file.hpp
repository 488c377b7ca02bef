// Loading joule's versioned YAML files (data/hw specs, efficiency curves): the file read, a map, and
// `version: 1`, with errors that name the file (and line) and say what to do.
//
//   YAML::Node y = hw::load_versioned_yaml(path, "device spec", "check the path");
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace joule::hw {

// `what` names the kind of file in messages ("cannot open <what>", "<what> must be a YAML map").
YAML::Node load_versioned_yaml(const std::string& path, const std::string& what, const std::string& missing_hint);

// "file:line" of a node, for messages.
std::string yaml_where(const std::string& path, const YAML::Node& n);

// A list of non-empty names (aliases, a system's devices), and a finite, non-negative number; errors
// name the file, line and key.
std::vector<std::string> yaml_names(const std::string& path, const YAML::Node& n, const std::string& key);
double yaml_number(const std::string& path, const YAML::Node& n, const std::string& key);

// For a loader's function-try-block: a YAML exception that escaped the loader's own checks (a value of
// the wrong shape where a map, a list or a scalar belongs) becomes an Error naming file, line and what.
//   DeviceSpec load(const std::string& path) try { ... } catch (const YAML::Exception& e) { hw::yaml_error(path, e, "device spec"); }
[[noreturn]] void yaml_error(const std::string& path, const YAML::Exception& e, const std::string& what);

}  // namespace joule::hw

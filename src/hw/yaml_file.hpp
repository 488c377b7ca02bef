// Loading joule's versioned YAML files (data/hw specs, efficiency curves): the file read, a map, and
// `version: 1`, with errors that name the file (and line) and say what to do.
//
//   YAML::Node y = hw::load_versioned_yaml(path, "device spec", "check the path");
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace joule::hw {

// `what` names the kind of file in messages ("cannot open <what>", "<what> must be a YAML map").
YAML::Node load_versioned_yaml(const std::string& path, const std::string& what, const std::string& missing_hint);

// "file:line" of a node, for messages.
std::string yaml_where(const std::string& path, const YAML::Node& n);

}  // namespace joule::hw

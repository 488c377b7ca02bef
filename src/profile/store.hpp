// Store: profile records in SQLite — one row per configuration (net, device, dtype, batch, threads,
// meter kind) with its step totals, and one row per node of that configuration.
//
//   profile::Store db("joule-profile.db");      // creates or migrates; WAL mode
//   profile::Store r("joule-profile.db", profile::Store::Mode::ReadOnly);  // reports: never writes
//   if (!db.has_config(key, iters)) db.put(config, nodes);   // re-running a sweep is incremental
//
// The schema is versioned (PRAGMA user_version) and migrated step by step on open; the file carries
// joule's application_id, so a foreign or corrupt file is refused with a clear error. Writers use
// BEGIN IMMEDIATE with a busy timeout, so concurrent processes serialise instead of failing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct sqlite3;

namespace joule::profile {

constexpr int kSchemaVersion = 3;

struct ConfigKey {
    std::string net, device, dtype, meter_kind;
    int64_t batch = 0;
    int threads = 0;
    bool operator==(const ConfigKey&) const = default;
};

struct ConfigRecord {
    ConfigKey key;
    std::string meter, host, updated;
    int64_t iters = 0;
    double step_s = 0, step_spread_s = 0;    // mean and standard deviation over iterations
    double idle_w = 0, idle_j = 0, ops_j = 0, total_j = 0;  // per step; total = ops + idle
    double flops = 0, bytes = 0;             // per step
};

struct NodeRecord {
    std::string node, op, category, phase, shapes;
    int64_t reps = 0;
    double time_s = 0, time_spread_s = 0;      // per execution: mean, standard deviation
    double energy_j = 0, energy_spread_j = 0;  // per execution, above idle
    double power_w = 0;                        // energy_j / time_s
    double flops = 0, bytes = 0;
    std::string device, dtype;  // where it ran and its compute dtype ('' in records older than schema 3)
};

class Store {
public:
    // ReadWrite creates the file or migrates its schema; ReadOnly (reports, calibration) opens an existing
    // file for reading only (SQLITE_OPEN_READONLY): a missing file, or one with an older schema, is an Error.
    enum class Mode { ReadWrite, ReadOnly };
    explicit Store(const std::string& path, Mode mode = Mode::ReadWrite);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    int schema_version() const;
    const std::string& path() const { return path_; }
    bool has_config(const ConfigKey& key, int64_t min_iters) const;
    // Replaces the configuration and its nodes in one transaction.
    void put(const ConfigRecord& config, const std::vector<NodeRecord>& nodes);
    // All configurations (net == "" for every net), ordered by net, device, dtype, batch, threads.
    std::vector<ConfigRecord> configs(const std::string& net = "") const;
    std::vector<NodeRecord> nodes(const ConfigKey& key) const;

private:
    void exec(const std::string& sql) const;
    void migrate();
    std::string path_;
    sqlite3* db_ = nullptr;
};

}  // namespace joule::profile

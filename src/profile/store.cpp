#include "profile/store.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <ctime>

#include "graph/error.hpp"

namespace joule::profile {

namespace {

constexpr int kApplicationId = 0x4A4F554C;  // "JOUL"

// Migration i takes the schema from version i to i + 1.
const char* const kMigrations[] = {
    // 0 -> 1
    "CREATE TABLE configs (net TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL, batch INTEGER NOT NULL,"
    " threads INTEGER NOT NULL, meter_kind TEXT NOT NULL, meter TEXT NOT NULL, iters INTEGER NOT NULL,"
    " step_s REAL, step_spread_s REAL, idle_w REAL, idle_j REAL, ops_j REAL, total_j REAL, flops REAL, bytes REAL,"
    " updated TEXT, PRIMARY KEY (net, device, dtype, batch, threads, meter_kind));"
    "CREATE TABLE nodes (net TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL, batch INTEGER NOT NULL,"
    " threads INTEGER NOT NULL, meter_kind TEXT NOT NULL, seq INTEGER NOT NULL, node TEXT NOT NULL, op TEXT, category TEXT,"
    " phase TEXT, shapes TEXT, reps INTEGER, time_s REAL, time_spread_s REAL, energy_j REAL, power_w REAL, flops REAL, bytes REAL,"
    " PRIMARY KEY (net, device, dtype, batch, threads, meter_kind, seq));",
    // 1 -> 2: energy spread per node, host per configuration
    "ALTER TABLE nodes ADD COLUMN energy_spread_j REAL DEFAULT 0;"
    "ALTER TABLE configs ADD COLUMN host TEXT DEFAULT '';",
    // 2 -> 3: where each node ran and in which precision (plans mix devices and dtypes; casts and
    // transfers are nodes of their own). '' for records made before.
    "ALTER TABLE nodes ADD COLUMN node_device TEXT DEFAULT '';"
    "ALTER TABLE nodes ADD COLUMN node_dtype TEXT DEFAULT '';",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion, "one migration per schema version");

// A prepared statement; binds by position from 1.
class Stmt {
public:
    Stmt(sqlite3* db, const std::string& sql, const std::string& path) : path_(path) {
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) != SQLITE_OK)
            throw Error(path + ": SQLite error: " + sqlite3_errmsg(db));
    }
    ~Stmt() { sqlite3_finalize(s_); }
    Stmt& bind(int i, const std::string& v) { return check(sqlite3_bind_text(s_, i, v.c_str(), -1, SQLITE_TRANSIENT)); }
    Stmt& bind(int i, double v) { return check(sqlite3_bind_double(s_, i, v)); }
    Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
    Stmt& bind(int i, int v) { return check(sqlite3_bind_int(s_, i, v)); }
    bool step() {
        const int r = sqlite3_step(s_);
        if (r == SQLITE_ROW) return true;
        if (r == SQLITE_DONE) return false;
        throw Error(path_ + ": SQLite error: " + sqlite3_errmsg(sqlite3_db_handle(s_)));
    }
    void reset() {
        sqlite3_reset(s_);
        sqlite3_clear_bindings(s_);
    }
    std::string text(int c) const {
        const unsigned char* t = sqlite3_column_text(s_, c);
        return t ? reinterpret_cast<const char*>(t) : "";
    }
    double real(int c) const { return sqlite3_column_double(s_, c); }
    int64_t integer(int c) const { return sqlite3_column_int64(s_, c); }

private:
    Stmt& check(int r) {
        if (r != SQLITE_OK) throw Error(path_ + ": SQLite bind error " + std::to_string(r));
        return *this;
    }
    sqlite3_stmt* s_ = nullptr;
    std::string path_;
};

int bind_key(Stmt& s, const ConfigKey& k, int from) {
    s.bind(from, k.net).bind(from + 1, k.device).bind(from + 2, k.dtype).bind(from + 3, k.batch).bind(from + 4, k.threads).bind(from + 5, k.meter_kind);
    return from + 6;
}
const char* kKeyWhere = "net = ? AND device = ? AND dtype = ? AND batch = ? AND threads = ? AND meter_kind = ?";

std::string now_iso() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

}  // namespace

Store::Store(const std::string& path, Mode mode) : path_(path) {
    const bool read_only = mode == Mode::ReadOnly;
    if (read_only) {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) throw Error(path + ": no such profile database", "run joule profile --db " + path + " first");
        if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": not a file, so not a profile database", "pass another --db");
    }
    if (sqlite3_open_v2(path.c_str(), &db_, read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
        const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        throw Error(path + ": cannot open the profile database: " + msg, "check the path and its permissions (--db)");
    }
    sqlite3_busy_timeout(db_, 30000);
    try {
        int app = 0, tables = 0;
        {
            Stmt s(db_, "PRAGMA application_id", path_);
            if (s.step()) app = int(s.integer(0));
        }
        {
            Stmt s(db_, "SELECT count(*) FROM sqlite_master", path_);
            if (s.step()) tables = int(s.integer(0));
        }
        if (app != kApplicationId && (app != 0 || tables != 0))
            throw Error(path + " is an SQLite database of another program, not a joule profile", "pass another --db");
        if (read_only) {
            if (tables == 0) throw Error(path_ + " is an empty database, not a joule profile", "run joule profile --db " + path_ + " first");
            const int v = schema_version();
            if (v > kSchemaVersion)
                throw Error(path_ + " has profile schema version " + std::to_string(v) + ", newer than this joule's " + std::to_string(kSchemaVersion),
                            "upgrade joule");
            if (v < kSchemaVersion)
                throw Error(path_ + " has profile schema version " + std::to_string(v) + ", older than this joule's " + std::to_string(kSchemaVersion) +
                                " and is opened read-only here",
                            "a joule profile sweep on it migrates it first (it re-runs only what is missing)");
        } else {
            exec("PRAGMA journal_mode = WAL");
            exec("PRAGMA synchronous = NORMAL");
            migrate();
        }
    } catch (const Error& e) {
        sqlite3_close(db_);
        db_ = nullptr;
        const std::string what = e.what();
        if (what.find("file is not a database") != std::string::npos || what.find("malformed") != std::string::npos)
            throw Error(path + " is not a joule profile database (corrupt, or not SQLite)", "move it away or pass another --db");
        throw;
    }
}

Store::~Store() { sqlite3_close(db_); }

void Store::exec(const std::string& sql) const {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        const std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        throw Error(path_ + ": SQLite error: " + msg);
    }
}

int Store::schema_version() const {
    Stmt s(db_, "PRAGMA user_version", path_);
    return s.step() ? int(s.integer(0)) : 0;
}

void Store::migrate() {
    exec("BEGIN IMMEDIATE");  // one process migrates; the others wait, then see the new version
    try {
        const int v = schema_version();
        if (v > kSchemaVersion)
            throw Error(path_ + " has profile schema version " + std::to_string(v) + ", newer than this joule's " + std::to_string(kSchemaVersion),
                        "upgrade joule");
        for (int i = v; i < kSchemaVersion; ++i) exec(kMigrations[i]);
        if (v < kSchemaVersion) {
            exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
            exec("PRAGMA application_id = " + std::to_string(kApplicationId));
        }
        exec("COMMIT");
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

bool Store::has_config(const ConfigKey& key, int64_t min_iters) const {
    Stmt s(db_, std::string("SELECT iters FROM configs WHERE ") + kKeyWhere, path_);
    bind_key(s, key, 1);
    return s.step() && s.integer(0) >= min_iters;
}

void Store::put(const ConfigRecord& c, const std::vector<NodeRecord>& nodes) {
    exec("BEGIN IMMEDIATE");
    try {
        {
            Stmt d(db_, std::string("DELETE FROM nodes WHERE ") + kKeyWhere, path_);
            bind_key(d, c.key, 1);
            d.step();
        }
        {
            Stmt s(db_,
                   "INSERT OR REPLACE INTO configs (net, device, dtype, batch, threads, meter_kind, meter, iters, step_s, step_spread_s,"
                   " idle_w, idle_j, ops_j, total_j, flops, bytes, updated, host) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   path_);
            int i = bind_key(s, c.key, 1);
            s.bind(i, c.meter).bind(i + 1, c.iters).bind(i + 2, c.step_s).bind(i + 3, c.step_spread_s).bind(i + 4, c.idle_w);
            s.bind(i + 5, c.idle_j).bind(i + 6, c.ops_j).bind(i + 7, c.total_j).bind(i + 8, c.flops).bind(i + 9, c.bytes);
            char host[256] = {};
            gethostname(host, sizeof host - 1);
            s.bind(i + 10, c.updated.empty() ? now_iso() : c.updated).bind(i + 11, c.host.empty() ? std::string(host) : c.host);
            s.step();
        }
        Stmt s(db_,
               "INSERT INTO nodes (net, device, dtype, batch, threads, meter_kind, seq, node, op, category, phase, shapes, reps,"
               " time_s, time_spread_s, energy_j, power_w, flops, bytes, energy_spread_j, node_device, node_dtype)"
               " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
               path_);
        for (size_t k = 0; k < nodes.size(); ++k) {
            const NodeRecord& n = nodes[k];
            int i = bind_key(s, c.key, 1);
            s.bind(i, int64_t(k)).bind(i + 1, n.node).bind(i + 2, n.op).bind(i + 3, n.category).bind(i + 4, n.phase).bind(i + 5, n.shapes);
            s.bind(i + 6, n.reps).bind(i + 7, n.time_s).bind(i + 8, n.time_spread_s).bind(i + 9, n.energy_j).bind(i + 10, n.power_w);
            s.bind(i + 11, n.flops).bind(i + 12, n.bytes).bind(i + 13, n.energy_spread_j).bind(i + 14, n.device).bind(i + 15, n.dtype);
            s.step();
            s.reset();
        }
        exec("COMMIT");
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

std::vector<ConfigRecord> Store::configs(const std::string& net) const {
    Stmt s(db_,
           "SELECT net, device, dtype, batch, threads, meter_kind, meter, iters, step_s, step_spread_s, idle_w, idle_j, ops_j, total_j, flops,"
           " bytes, updated, host FROM configs WHERE (? = '' OR net = ?) ORDER BY net, device, dtype, batch, threads, meter_kind",
           path_);
    s.bind(1, net).bind(2, net);
    std::vector<ConfigRecord> out;
    while (s.step()) {
        ConfigRecord c;
        c.key = {s.text(0), s.text(1), s.text(2), s.text(5), s.integer(3), int(s.integer(4))};
        c.meter = s.text(6);
        c.iters = s.integer(7);
        c.step_s = s.real(8), c.step_spread_s = s.real(9), c.idle_w = s.real(10), c.idle_j = s.real(11), c.ops_j = s.real(12);
        c.total_j = s.real(13), c.flops = s.real(14), c.bytes = s.real(15);
        c.updated = s.text(16), c.host = s.text(17);
        out.push_back(c);
    }
    return out;
}

std::vector<NodeRecord> Store::nodes(const ConfigKey& key) const {
    Stmt s(db_,
           std::string("SELECT node, op, category, phase, shapes, reps, time_s, time_spread_s, energy_j, power_w, flops, bytes, energy_spread_j,"
                       " node_device, node_dtype FROM nodes WHERE ") + kKeyWhere + " ORDER BY seq",
           path_);
    bind_key(s, key, 1);
    std::vector<NodeRecord> out;
    while (s.step()) {
        NodeRecord n{s.text(0), s.text(1), s.text(2), s.text(3), s.text(4), s.integer(5), s.real(6), s.real(7), s.real(8), 0, s.real(9),
                     s.real(10), s.real(11), "", ""};
        n.energy_spread_j = s.real(12);
        n.power_w = s.real(9);
        n.device = s.text(13), n.dtype = s.text(14);
        out.push_back(n);
    }
    return out;
}

}  // namespace joule::profile

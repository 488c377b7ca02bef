// profile/: the SQLite store (schema, migration from version 1, two processes writing at once, corrupt
// and foreign files), incremental sweeps whose energies add up, derived metrics, list parsing, and
// calibration samples paired node by node with the rebuilt training graph.
#include <gtest/gtest.h>

#include "backend/registry.hpp"
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "graph/error.hpp"
#include "profile/calibrate.hpp"
#include "profile/report.hpp"
#include "profile/store.hpp"
#include "profile/sweep.hpp"
#include "test_util.hpp"

namespace joule::profile {
namespace {

namespace fs = std::filesystem;

std::string temp_db(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("joule_profile_" + std::to_string(getpid()));
    fs::create_directories(d);
    const fs::path p = d / name;
    for (const char* ext : {"", "-wal", "-shm"}) fs::remove(p.string() + ext);
    return p.string();
}

void sql(const std::string& path, const std::string& statements) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, statements.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
}

std::string sql_value(const std::string& path, const std::string& query) {
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, query.c_str(), -1, &s, nullptr);
    std::string v;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) v = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

ConfigRecord record(const std::string& net, int64_t batch) {
    ConfigRecord c;
    c.key = {net, "cpu", "f32", "modelled", batch, 2};
    c.meter = "modelled";
    c.iters = 3;
    c.step_s = 0.01, c.total_j = 0.2, c.idle_j = 0.12, c.ops_j = 0.08, c.flops = 1e9;
    return c;
}

std::vector<NodeRecord> node_records(int n) {
    std::vector<NodeRecord> v;
    for (int i = 0; i < n; ++i) {
        NodeRecord r;
        r.node = "n" + std::to_string(i);
        r.op = "Conv2d";
        r.category = i % 2 ? "conv" : "fc";
        r.reps = 3;
        r.time_s = 0.001;
        r.energy_j = 0.01;
        v.push_back(r);
    }
    return v;
}

TEST(Store, NewDatabaseIsVersionedWalAndTagged) {
    const std::string p = temp_db("new.db");
    {
        Store db(p);
        EXPECT_EQ(db.schema_version(), kSchemaVersion);
        db.put(record("lenet5", 8), node_records(4));
        EXPECT_TRUE(db.has_config(record("lenet5", 8).key, 3));
        EXPECT_FALSE(db.has_config(record("lenet5", 8).key, 4));
        EXPECT_FALSE(db.has_config(record("lenet5", 16).key, 1));
        ASSERT_EQ(db.configs().size(), 1u);
        EXPECT_EQ(db.nodes(record("lenet5", 8).key).size(), 4u);
        db.put(record("lenet5", 8), node_records(2));  // replaces
        EXPECT_EQ(db.nodes(record("lenet5", 8).key).size(), 2u);
    }
    EXPECT_EQ(sql_value(p, "PRAGMA journal_mode"), "wal");
    EXPECT_EQ(sql_value(p, "PRAGMA application_id"), std::to_string(0x4A4F554C));
}

std::string file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(Store, ReadOnlyNeverWritesNorCreates) {
    const std::string missing = temp_db("ro-missing.db");
    test::expect_error([&] { Store(missing, Store::Mode::ReadOnly); }, "no such profile database");
    EXPECT_FALSE(fs::exists(missing));
    const std::string p = temp_db("ro.db");
    Store(p).put(record("lenet5", 4), node_records(3));
    const std::string before = file_bytes(p);
    {
        const Store db(p, Store::Mode::ReadOnly);
        ASSERT_EQ(db.configs().size(), 1u);
        EXPECT_EQ(db.nodes(db.configs()[0].key).size(), 3u);
    }
    Store ro(p, Store::Mode::ReadOnly);
    EXPECT_THROW(ro.put(record("lenet5", 8), node_records(1)), Error);  // SQLITE_OPEN_READONLY refuses the write
    EXPECT_EQ(file_bytes(p), before);
    // an older schema is not migrated by a reader
    const std::string old = temp_db("ro-v2.db");
    Store(old).put(record("lenet5", 4), node_records(1));
    sql(old, "PRAGMA user_version = 2;");
    test::expect_error([&] { Store(old, Store::Mode::ReadOnly); }, "older than this joule's 3 and is opened read-only");
    const std::string empty = temp_db("ro-empty.db");
    std::ofstream(empty).close();
    test::expect_error([&] { Store(empty, Store::Mode::ReadOnly); }, "is an empty database, not a joule profile");
}

TEST(Store, MigratesAVersion1Database) {
    const std::string p = temp_db("v1.db");
    // the schema as joule's first release wrote it
    sql(p,
        "CREATE TABLE configs (net TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL, batch INTEGER NOT NULL,"
        " threads INTEGER NOT NULL, meter_kind TEXT NOT NULL, meter TEXT NOT NULL, iters INTEGER NOT NULL,"
        " step_s REAL, step_spread_s REAL, idle_w REAL, idle_j REAL, ops_j REAL, total_j REAL, flops REAL, bytes REAL,"
        " updated TEXT, PRIMARY KEY (net, device, dtype, batch, threads, meter_kind));"
        "CREATE TABLE nodes (net TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL, batch INTEGER NOT NULL,"
        " threads INTEGER NOT NULL, meter_kind TEXT NOT NULL, seq INTEGER NOT NULL, node TEXT NOT NULL, op TEXT, category TEXT,"
        " phase TEXT, shapes TEXT, reps INTEGER, time_s REAL, time_spread_s REAL, energy_j REAL, power_w REAL, flops REAL, bytes REAL,"
        " PRIMARY KEY (net, device, dtype, batch, threads, meter_kind, seq));"
        "INSERT INTO configs VALUES ('resnet18','cpu','f32',32,2,'measured','rapl-powercap',5,0.05,0.001,20,1,0.5,1.5,1e10,1e9,'2026-01-01');"
        "INSERT INTO nodes VALUES ('resnet18','cpu','f32',32,2,'measured',0,'conv1','Conv2d','conv','forward','',5,0.01,0,0.1,10,1e9,1e8);"
        "PRAGMA user_version = 1; PRAGMA application_id = 1246713164;");
    Store db(p);
    EXPECT_EQ(db.schema_version(), kSchemaVersion);
    const auto cs = db.configs();
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_EQ(cs[0].key.net, "resnet18");
    EXPECT_EQ(cs[0].host, "");
    const auto ns = db.nodes(cs[0].key);
    ASSERT_EQ(ns.size(), 1u);
    EXPECT_EQ(ns[0].node, "conv1");
    EXPECT_DOUBLE_EQ(ns[0].energy_spread_j, 0.0);
    db.put(record("lenet5", 4), node_records(3));
    EXPECT_EQ(db.configs().size(), 2u);
}

TEST(Store, TwoProcessesWritingAtOnce) {
    const std::string p = temp_db("concurrent.db");
    Store(p).put(record("warm", 1), node_records(1));  // created up front; both children open it
    pid_t kids[2];
    for (int k = 0; k < 2; ++k) {
        kids[k] = fork();
        if (kids[k] == 0) {
            try {
                Store db(p);
                for (int i = 0; i < 25; ++i) db.put(record("net" + std::to_string(k), i + 1), node_records(20));
                _exit(0);
            } catch (const std::exception& e) {
                fprintf(stderr, "child %d: %s\n", k, e.what());
                _exit(1);
            }
        }
    }
    for (pid_t pid : kids) {
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    Store db(p);
    EXPECT_EQ(db.configs().size(), 51u);
    for (const ConfigRecord& c : db.configs("net1")) EXPECT_EQ(db.nodes(c.key).size(), 20u);
    EXPECT_EQ(sql_value(p, "PRAGMA integrity_check"), "ok");
}

TEST(Store, RefusesCorruptForeignAndNewerFiles) {
    const std::string corrupt = temp_db("corrupt.db");
    {
        std::ofstream f(corrupt, std::ios::binary);
        for (int i = 0; i < 4096; ++i) f.put(char((i * 7919) & 0xff));
    }
    test::expect_error([&] { Store s(corrupt); }, corrupt + " is not a joule profile database");
    const std::string foreign = temp_db("foreign.db");
    sql(foreign, "CREATE TABLE songs (title TEXT);");
    test::expect_error([&] { Store s(foreign); }, "another program");
    const std::string newer = temp_db("newer.db");
    { Store s(newer); }
    sql(newer, "PRAGMA user_version = 9;");
    test::expect_error([&] { Store s(newer); }, "newer than this joule's " + std::to_string(kSchemaVersion));
    test::expect_error([] { Store s("/nonexistent/dir/p.db"); }, "cannot open the profile database");
}

TEST(Sweep, IncrementalAndEnergiesAddUp) {
    const std::string p = temp_db("sweep.db");
    Store db(p);
    SweepOptions o;
    o.nets = {"lenet5"};
    o.batches = {4};
    o.threads = {1};
    o.iters = 3;
    o.warmup = 1;
    o.meter = "modelled";
    o.device_spec = "cpu-amd-epyc-turin-2vcpu";  // any CPU: the modelled meter's spec is named
    EXPECT_EQ(run_sweep(db, o), 1);
    EXPECT_EQ(run_sweep(db, o), 0);  // already there
    o.force = true;
    int skipped = 0;
    EXPECT_EQ(run_sweep(db, o, [&](const SweepEvent& e) { skipped += e.skipped; }), 1);
    EXPECT_EQ(skipped, 0);
    const auto cs = db.configs("lenet5");
    ASSERT_EQ(cs.size(), 1u);
    const ConfigRecord& c = cs[0];
    EXPECT_EQ(c.key.meter_kind, "modelled");
    EXPECT_EQ(c.key.threads, 1);
    const auto ns = db.nodes(c.key);
    EXPECT_GT(ns.size(), 30u);
    double ops = 0;
    for (const NodeRecord& n : ns) {
        EXPECT_EQ(n.reps, 3);
        EXPECT_GE(n.time_s, 0);
        ops += n.energy_j;
    }
    EXPECT_NEAR(ops, c.ops_j, 1e-9 + 1e-6 * c.ops_j);
    EXPECT_NEAR(c.ops_j + c.idle_j, c.total_j, 1e-12);
    const ConfigMetrics m = derive(c, ns);
    EXPECT_NEAR(m.images_per_s, 4 / c.step_s, 1e-6);
    EXPECT_NEAR(m.gflops_per_w, c.flops / c.total_j / 1e9, 1e-9);
    double type_j = 0;
    for (const auto& [k, b] : m.by_type) type_j += b.joules;
    EXPECT_NEAR(type_j, ops, 1e-9);
    EXPECT_GT(m.by_type.at("conv").joules, 0);
}

TEST(Sweep, ParsesLists) {
    EXPECT_EQ(parse_int_list("8,16,32", "--batch"), (std::vector<int64_t>{8, 16, 32}));
    EXPECT_EQ(parse_int_list("0,2", "--threads", true), (std::vector<int64_t>{0, 2}));
    test::expect_error([] { parse_int_list("8,x", "--batch"); }, "--batch: 'x' is not a positive integer");
    test::expect_error([] { parse_int_list("0", "--batch"); }, "--batch: '0' is not a positive integer");
    test::expect_error([] { parse_int_list(",", "--batch"); }, "--batch needs a comma-separated list");
    SweepOptions o;
    o.nets = {"lenet5", "nope"};
    Store db(temp_db("bad.db"));
    test::expect_error([&] { run_sweep(db, o); }, "unknown network 'nope'");
}

TEST(Calibration, ScopeAllSweepsCalibrateTheNonGemmBf16Kinds) {
    EXPECT_EQ(precision_key(DType::BF16, PrecisionScope::All), "bf16-all");
    EXPECT_EQ(precision_key(DType::F32, PrecisionScope::All), "f32");  // f32 has no scope
    EXPECT_EQ(parse_precision_key("bf16-all"), (std::pair{DType::BF16, PrecisionScope::All}));
    EXPECT_EQ(parse_precision_key("bf16"), (std::pair{DType::BF16, PrecisionScope::Gemm}));
    test::expect_error([] { parse_precision_key("bf17-all"); }, "bf17");
    const std::string p = temp_db("calibrate_all.db");
    Store db(p);
    SweepOptions o;
    o.nets = {"lenet5"};
    o.batches = {2};
    o.dtypes = {DType::BF16};
    o.scope = PrecisionScope::All;
    o.threads = {1};
    o.iters = 1;
    o.warmup = 1;
    o.meter = "modelled";
    o.device_spec = "cpu-amd-epyc-turin-2vcpu";
    ASSERT_EQ(run_sweep(db, o), 1);
    ASSERT_EQ(db.configs().size(), 1u);
    EXPECT_EQ(db.configs()[0].key.dtype, "bf16-all");
    predict::MemoryConfig hw;
    hw.capacity_bytes = 1 << 20, hw.bandwidth_bytes_per_s = 20e9, hw.peak_f32_flops = 100e9, hw.peak_bf16_flops = 200e9;
    const CalibrationSet set = calibration_samples(db, hw, {});  // rebuilt in scope all, checked node by node
    bool relu_bf16 = false;  // (LeNet-5's forward ReLUs are fused into their producers: their backward)
    for (const predict::EfficiencySample& s : set.samples) relu_bf16 = relu_bf16 || s.key == "ReluBackward.bf16";
    EXPECT_TRUE(relu_bf16);
}

TEST(Calibration, PairsRecordsWithTheRebuiltGraph) {
    const std::string p = temp_db("calibrate.db");
    Store db(p);
    SweepOptions o;
    o.nets = {"lenet5"};
    o.batches = {2, 4};
    o.threads = {1};
    o.iters = 1;
    o.warmup = 1;
    o.meter = "modelled";
    o.device_spec = "cpu-amd-epyc-turin-2vcpu";  // any CPU: the modelled meter's spec is named
    ASSERT_EQ(run_sweep(db, o), 2);
    predict::MemoryConfig hw;
    hw.capacity_bytes = 1 << 20, hw.bandwidth_bytes_per_s = 20e9, hw.peak_f32_flops = 100e9;
    const CalibrationSet set = calibration_samples(db, hw, {});
    ASSERT_EQ(set.configs.size(), 2u);
    ASSERT_EQ(set.first_sample.size(), 2u);
    BackendSet backends;
    const ProfiledModel pm = profiled_model("lenet5", 2, "f32", 0, 128, backends.get("cpu"));
    const Graph& g = pm.lowered.train.graph;
    ASSERT_EQ(set.samples.size(), 2 * g.num_nodes());
    EXPECT_EQ(set.first_sample[1], g.num_nodes());
    const std::vector<NodeRecord> rec = db.nodes(set.configs[0].key);
    size_t gemms = 0;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const predict::EfficiencySample& s = set.samples[i];
        EXPECT_EQ(s.key, predict::efficiency_key(g, NodeId(i)));
        EXPECT_DOUBLE_EQ(s.measured_s, rec[i].time_s);
        EXPECT_DOUBLE_EQ(s.step_s, set.configs[0].step_s);
        EXPECT_GE(s.memory_s, 0);
        gemms += s.m > 0;
    }
    EXPECT_EQ(gemms, 14u);  // 5 conv / linear layers x (forward, backward data, backward weights), no data gradient for conv1
    const predict::EfficiencyModel e = predict::fit_efficiency(set.samples);
    EXPECT_TRUE(e.kinds.at("Conv2d").gemm);
    EXPECT_EQ(e.kinds.at("SgdUpdate").samples, 20);  // 10 parameters x 2 configurations
    CalibrationOptions held;
    held.exclude = {"lenet5:4"};
    EXPECT_EQ(calibration_samples(db, hw, held).configs.size(), 1u);
    held.exclude = {"lenet5"};
    test::expect_error([&] { calibration_samples(db, hw, held); }, "no profiled configuration left");
    held.exclude = {"lenet6"};
    test::expect_error([&] { calibration_samples(db, hw, held); }, "unknown network 'lenet6'");
    held.exclude = {"lenet5:x"};
    test::expect_error([&] { calibration_samples(db, hw, held); }, "'x' is not a positive integer");
    CalibrationOptions other_size;
    other_size.image_size = 32;
    test::expect_error([&] { calibration_samples(db, hw, other_size); }, "pass the --image-size / --seq-len the sweep used");
    o.threads = {2};
    o.batches = {2};
    ASSERT_EQ(run_sweep(db, o), 1);
    test::expect_error([&] { calibration_samples(db, hw, {}); }, "records for several thread counts");
    CalibrationOptions two;
    two.threads = 2;
    EXPECT_EQ(calibration_samples(db, hw, two).configs.size(), 1u);
    // records that are not the graph this joule builds (another version): refused, not fitted
    Store other(temp_db("foreign_records.db"));
    other.put(record("lenet5", 2), node_records(3));
    test::expect_error([&] { calibration_samples(other, hw, {}); }, "3 node records, the rebuilt training graph has");
}

}  // namespace
}  // namespace joule::profile

// `joule probe`: measures this CPU's memory bandwidth (STREAM copy / triad) and GEMM peak (oneDNN
// matmul, f32 and bf16), the inputs `joule analyze` needs to predict this machine.
#include <iostream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cores.hpp"
#include "backend/cpu/probe.hpp"
#include "cli/commands.hpp"
#include "report/table.hpp"

namespace joule::cli {

void add_probe(CLI::App& app) {
    auto o = std::make_shared<cpu::ProbeOptions>();
    auto json = std::make_shared<bool>(false);
    auto oversubscribe = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("probe", "measure this CPU's memory bandwidth (STREAM) and GEMM peak (oneDNN)");
    cmd->add_option("--threads", o->threads, "threads (0: all cores this process may run on)")->check(number_in(0));
    cmd->add_flag("--oversubscribe", *oversubscribe, "allow --threads above the cores this process may run on");
    cmd->add_option("--array-mib", o->array_mib, "MiB per STREAM array")->capture_default_str()->check(number_in(1, 65536));
    cmd->add_option("--gemm-size", o->gemm_size, "square GEMM edge")->capture_default_str()->check(number_in(16, 16384));
    cmd->add_option("--repeats", o->repeats, "best of this many runs")->capture_default_str()->check(positive_number());
    cmd->add_flag("--json", *json, "machine-readable output");
    cmd->callback([o, json, oversubscribe] {
        cpu::check_threads(o->threads, *oversubscribe);
        const cpu::ProbeResult r = cpu::probe(*o);
        if (*json) {
            std::cout << nlohmann::json{{"schema", "joule.probe/1"}, {"kind", "measured"}, {"threads", r.threads}, {"copy_gbps", r.copy_gbps}, {"triad_gbps", r.triad_gbps},
                                        {"gemm_size", r.gemm_size}, {"gemm_gflops_f32", r.gemm_gflops_f32}, {"gemm_gflops_bf16", r.gemm_gflops_bf16}, {"op_overhead_seconds", r.op_overhead_s},
                                        {"small_op_overhead_seconds", r.small_op_overhead_s}, {"core_round_trip_seconds", r.core_round_trip_s},
                                        {"array_bytes", r.array_bytes}}
                             .dump(2)
                      << '\n';
            return;
        }
        Table t({"probe (measured, best of " + std::to_string(o->repeats) + ", " + std::to_string(r.threads) + " threads)", "value"});
        t.add({"STREAM copy (" + bytes_str(r.array_bytes) + " arrays)", fixed(r.copy_gbps, 1) + " GB/s"});
        t.add({"STREAM triad", fixed(r.triad_gbps, 1) + " GB/s"});
        t.add({"GEMM f32 " + std::to_string(r.gemm_size) + "^3 (oneDNN matmul)", fixed(r.gemm_gflops_f32, 1) + " GFLOP/s"});
        t.add({"GEMM bf16 " + std::to_string(r.gemm_size) + "^3 (oneDNN matmul)", fixed(r.gemm_gflops_bf16, 1) + " GFLOP/s"});
        t.add({"fixed cost of one op (16-element relu)", fixed(r.op_overhead_s * 1e6, 2) + " us"});
        t.add({"... of a small op, run on one thread", fixed(r.small_op_overhead_s * 1e6, 2) + " us"});
        if (r.core_round_trip_s > 0) t.add({"a cache line's round trip between two cores", fixed(r.core_round_trip_s * 1e6, 2) + " us"});
        t.print(std::cout);
        std::cout << "use with: joule analyze --bandwidth " << fixed(r.triad_gbps, 1) << "GB/s --peak " << fixed(r.gemm_gflops_f32, 1)
                  << "GFLOPS --peak-bf16 " << fixed(r.gemm_gflops_bf16, 1) << "GFLOPS --overhead " << fixed(r.op_overhead_s * 1e6, 2)
                  << "us --overhead-small " << fixed(r.small_op_overhead_s * 1e6, 2) << "us --capacity <L2 or L3>\n";
    });
}

}  // namespace joule::cli

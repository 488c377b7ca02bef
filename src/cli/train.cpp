// `joule train`: a real training run on the CPU backend with a progress bar, final test accuracy and a
// per-layer time table. With no arguments: LeNet-5 on Fashion-MNIST, 1 epoch, Adam lr 2e-3, batch 64.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cores.hpp"
#include "cli/commands.hpp"
#include "dist/communicator.hpp"
#include "graph/error.hpp"
#include "report/run_trace.hpp"
#include "report/table.hpp"
#include "energy/meter.hpp"
#include "plan/placement.hpp"
#include "runtime/trainer.hpp"

namespace joule::cli {

namespace {
struct TrainFlags {
    NetOptions net;
    std::string dataset = "fashion-mnist", data_dir;
    int64_t epochs = 1, steps = 0, top = 15, warmup = 1, eval_samples = -1;
    float lr = 0, momentum = -1, weight_decay = -1;
    int64_t accumulate = 1;
    double clip_norm = 0;
    std::string lr_schedule = "constant", checkpoint, resume, save;
    int64_t checkpoint_every = 0;
    LrSchedule schedule;
    int threads = 0;
    uint64_t seed = 1;
    bool json = false, quiet = false, oversubscribe = false;
    std::string plan, amp, system, strategy;
    bool energy = false;
    std::string meter = "auto", device_spec, trace;
    double idle_seconds = 0.5, sample_ms = 10;
    double bucket_mib = 25, comm_timeout = 300;
};

// A data-parallel job's processes (rank 0's report): each one's step, the all-reduce's share of it, and
// energy; then the cluster's.
void print_ranks(const TrainResult& r) {
    const int n = int(r.ranks.size());
    std::cout << "data-parallel over " << n << " processes (mpi), " << r.allreduce_buckets << " gradient bucket(s) all-reduced per step; per step (measured):\n";
    Table t({"rank", "host", "step ms", "all-reduce ms", "of it waiting ms", "all-reduce share", "joules"});
    for (int i = 0; i < n; ++i) {
        const TrainResult::Rank& x = r.ranks[size_t(i)];
        t.add({std::to_string(i), x.host, fixed(x.step_seconds * 1e3, 2), fixed(x.allreduce_seconds * 1e3, 2), fixed(x.wait_seconds * 1e3, 2),
               fixed(100 * x.allreduce_seconds / std::max(x.step_seconds, 1e-12), 1) + " %",
               x.joules < 0 ? "-" : fixed(x.joules, 3) + (x.joules_measured ? " (measured)" : " (modelled)")});
    }
    t.print(std::cout);
    double slowest = 0;
    for (const auto& x : r.ranks) slowest = std::max(slowest, x.step_seconds);
    std::cout << "cluster: step " << fixed(slowest * 1e3, 2) << " ms (the slowest process, measured)";
    if (r.cluster_joules >= 0) std::cout << ", " << fixed(r.cluster_joules, 3) << " J per step (each host's meter counted once)";
    std::cout << "\n";
}

// ", accumulate 4 (global batch 256), clip norm 1, warm-up 100 steps then cosine to 0" (nothing for a plain run)
std::string schedule_str(const TrainOptions& o) {
    std::ostringstream os;
    const LrSchedule& s = o.schedule;
    if (o.accumulate > 1) os << ", accumulate " << o.accumulate << " (global batch " << o.accumulate * o.batch << ")";
    if (o.clip_norm > 0) os << ", clip norm " << o.clip_norm;
    if (s.warmup > 0) os << ", warm-up " << s.warmup << " steps from " << s.warmup_start << " x lr";
    if (s.kind == LrSchedule::Kind::Cosine) os << (s.warmup > 0 ? " then" : ",") << " cosine to " << s.min_lr;
    if (s.kind == LrSchedule::Kind::Step) os << (s.warmup > 0 ? " then" : ",") << " x" << s.gamma << " every " << s.step_size << " steps";
    return os.str();
}

void print_progress(const TrainProgress& p, bool tty) {
    const int width = 30;
    const double frac = double(p.step) / double(p.steps_per_epoch);
    const bool last = p.step == p.steps_per_epoch;
    if (!tty && !last && p.step % std::max<int64_t>(1, p.steps_per_epoch / 10) != 0) return;
    const int fill = int(frac * width);
    std::fprintf(stderr, "%sepoch %lld [%s%s] %5lld/%lld  loss %.4f  %.0f img/s (measured)%s", tty ? "\r" : "", (long long)p.epoch + 1,
                 std::string(size_t(fill), '#').c_str(), std::string(size_t(width - fill), '.').c_str(), (long long)p.step,
                 (long long)p.steps_per_epoch, p.loss, p.images_per_s, tty && !last ? "" : "\n");
    std::fflush(stderr);
}

// `previous`: the sample count of the previous call (non-tty output prints about every 10 %).
void print_eval_progress(const EvalProgress& p, bool tty, int64_t previous) {
    const int width = 30;
    const bool last = p.samples == p.total;
    const int64_t tenth = std::max<int64_t>(1, p.total / 10);
    if (!tty && !last && p.samples / tenth == previous / tenth) return;
    const int fill = int(double(p.samples) / double(p.total) * width);
    std::fprintf(stderr, "%stest  [%s%s] %5lld/%lld  %.0f img/s (measured)%s", tty ? "\r" : "", std::string(size_t(fill), '#').c_str(),
                 std::string(size_t(width - fill), '.').c_str(), (long long)p.samples, (long long)p.total, p.images_per_s, tty && !last ? "" : "\n");
    std::fflush(stderr);
}

void print_layers(const TrainResult& r, int64_t top) {
    std::vector<LayerTime> rows = r.layers;
    std::sort(rows.begin(), rows.end(), [](const LayerTime& a, const LayerTime& b) {
        return a.forward_s + a.backward_s + a.update_s > b.forward_s + b.backward_s + b.update_s;
    });
    double total = 0;
    for (const LayerTime& l : rows) total += l.forward_s + l.backward_s + l.update_s;
    Table t({"layer", "op", "fwd ms", "bwd ms", "update ms", "total ms", "share", "GFLOP/s"});
    LayerTime rest{"(" + std::to_string(rows.size() > size_t(top) ? rows.size() - size_t(top) : 0) + " more)", ""};
    for (size_t i = 0; i < rows.size(); ++i) {
        const LayerTime& l = rows[i];
        if (int64_t(i) >= top) {
            rest.forward_s += l.forward_s, rest.backward_s += l.backward_s, rest.update_s += l.update_s, rest.flops += l.flops;
            continue;
        }
        const double s = l.forward_s + l.backward_s + l.update_s;
        t.add({l.name, l.kind, fixed(l.forward_s * 1e3, 3), fixed(l.backward_s * 1e3, 3), fixed(l.update_s * 1e3, 3), fixed(s * 1e3, 3),
               fixed(100 * s / total, 1) + " %", s > 0 ? fixed(l.flops / s / 1e9, 1) : "-"});
    }
    if (rows.size() > size_t(top)) {
        const double s = rest.forward_s + rest.backward_s + rest.update_s;
        t.add({rest.name, "", fixed(rest.forward_s * 1e3, 3), fixed(rest.backward_s * 1e3, 3), fixed(rest.update_s * 1e3, 3), fixed(s * 1e3, 3),
               fixed(100 * s / total, 1) + " %", s > 0 ? fixed(rest.flops / s / 1e9, 1) : "-"});
    }
    const bool mixed = r.step_modelled_seconds > 0;
    std::cout << "\nper-layer time per step (" << (mixed ? "measured, steady clock, and modelled where a layer ran on an emulated device" : "measured, steady clock")
              << "; " << r.threads << " threads; mean of " << r.timed_steps << " steps after warm-up):\n";
    t.print(std::cout);
    if (!mixed) {
        std::cout << "step total " << fixed(total * 1e3, 3) << " ms (measured)\n";
        return;
    }
    std::cout << "step schedule " << fixed(r.step_seconds * 1e3, 3) << " ms = measured " << fixed((r.step_seconds - r.step_modelled_seconds) * 1e3, 3)
              << " ms + modelled " << fixed(r.step_modelled_seconds * 1e3, 3) << " ms; wall time " << fixed(r.step_wall_seconds * 1e3, 3)
              << " ms (measured), of which " << fixed(r.emulation_seconds * 1e3, 3) << " ms emulating modelled devices\n";
}
void print_energy(const TrainResult& r, int64_t top) {
    const EnergyResult& e = *r.energy;
    const std::string tag = energy::kind_name(e.kind);
    const double steps = double(std::max<int64_t>(e.steps, 1));
    std::vector<LayerTime> rows = r.layers;
    auto joules = [](const LayerTime& l) { return l.forward_j + l.backward_j + l.update_j; };
    std::sort(rows.begin(), rows.end(), [&](const LayerTime& a, const LayerTime& b) { return joules(a) > joules(b); });
    const double total = e.total_joules / steps, idle = e.idle_joules / steps;
    Table t({"layer", "op", "fwd mJ", "bwd mJ", "update mJ", "total mJ", "avg W above idle", "share"});
    LayerTime rest{"(" + std::to_string(rows.size() > size_t(top) ? rows.size() - size_t(top) : 0) + " more)", ""};
    auto add = [&](const LayerTime& l) {
        const double j = joules(l), s = l.forward_s + l.backward_s + l.update_s;
        t.add({l.name, l.kind, fixed(l.forward_j * 1e3, 3), fixed(l.backward_j * 1e3, 3), fixed(l.update_j * 1e3, 3), fixed(j * 1e3, 3),
               s > 0 ? fixed(j / s, 2) : "-", fixed(100 * j / total, 1) + " %"});
    };
    for (size_t i = 0; i < rows.size(); ++i) {
        if (int64_t(i) < top) {
            add(rows[i]);
        } else {
            rest.forward_j += rows[i].forward_j, rest.backward_j += rows[i].backward_j, rest.update_j += rows[i].update_j;
            rest.forward_s += rows[i].forward_s, rest.backward_s += rows[i].backward_s, rest.update_s += rows[i].update_s;
        }
    }
    if (rows.size() > size_t(top)) add(rest);
    t.add({"idle/static (" + e.meter.device + ")", "", "", "", "", fixed(idle * 1e3, 3), fixed(e.idle_w, 2) + " W idle", fixed(100 * idle / total, 1) + " %"});
    const double emulation = e.emulation_joules / steps;
    if (emulation > 0)  // host energy spent emulating modelled devices: in the total, in no layer
        t.add({"host emulating modelled devices", "", "", "", "", fixed(emulation * 1e3, 3), "", fixed(100 * emulation / total, 1) + " %"});
    std::cout << "\nper-layer energy per step (" << tag << (e.kind == energy::MeterKind::Measured ? " by " + e.meter.name : "") << "; mean of "
              << e.steps << " steps; energy above idle per layer, idle/static separately):\n";
    t.print(std::cout);
    std::cout << "step energy " << fixed(total * 1e3, 3) << " mJ (" << tag << ") = ops " << fixed((total - idle - emulation) * 1e3, 3)
              << (emulation > 0 ? " mJ + emulation " + fixed(emulation * 1e3, 3) : std::string()) << " mJ + idle/static "
              << fixed(idle * 1e3, 3) << " mJ; average power " << fixed(e.total_joules / std::max(e.seconds, 1e-12), 2) << " W (" << tag << "); "
              << fixed(total / double(r.batch * r.accumulate) * 1e3, 3) << " mJ per image (" << tag << ")\n";
}
// The plan's prediction (a simulated iteration on the system, devices overlapping) beside the step this
// run got (its nodes one at a time: the CPU's measured, the emulated devices' modelled).
void print_prediction(const Placed& p, const SystemModel& sys, const TrainResult& r) {
    std::cout << "\n" << p.strategy << " on " << sys.system.name << " (" << p.chosen << "): predicted iteration " << fixed(p.outcome.seconds * 1e3, 3)
              << " ms, " << fixed(p.outcome.joules(), 4) << " J (modelled, the devices overlapping)\n";
    Table t({"device", "predicted busy ms", "got ms", "timing", "error"});
    double predicted = 0;
    for (size_t d = 0; d < sys.plan_devices.size(); ++d) {
        predicted += p.outcome.busy_seconds[d];
        const auto it = std::find_if(r.devices.begin(), r.devices.end(), [&](const TrainResult::DeviceTime& x) { return x.device == sys.plan_devices[d]; });
        const double got = it == r.devices.end() ? 0 : it->seconds;
        t.add({sys.plan_devices[d], fixed(p.outcome.busy_seconds[d] * 1e3, 3), fixed(got * 1e3, 3),
               it == r.devices.end() ? "-" : it->modelled ? "modelled (+ transfers in)" : "measured",
               p.outcome.busy_seconds[d] > 0 ? (got >= p.outcome.busy_seconds[d] ? "+" : "") + fixed(100 * (got / p.outcome.busy_seconds[d] - 1), 1) + " %" : "-"});
    }
    t.print(std::cout);
    std::cout << "step, one node at a time: predicted " << fixed(predicted * 1e3, 3) << " ms of device time, got " << fixed(r.step_seconds * 1e3, 3) << " ms ("
              << (r.step_seconds >= predicted ? "+" : "") << fixed(100 * (r.step_seconds / predicted - 1), 1) << " %)\n";
    // Emulating a device takes far longer than the device would: OpenMP's idle threads fall asleep
    // meanwhile, and the CPU node after it measures their wake-up (LeNet-5's loss on cpu+s10: 131 us
    // passive, 22 us active). The runtime reads the policy at start-up, so it can only be said here.
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    const bool emulated = std::any_of(r.devices.begin(), r.devices.end(), [](const TrainResult::DeviceTime& x) { return x.modelled; });
    if (emulated && (!wait || std::string(wait) != "active"))
        std::cout << "note: CPU nodes after emulated ones include the CPU's threads waking from the emulation; OMP_WAIT_POLICY=active keeps them awake\n";
}

}  // namespace

void add_train(CLI::App& app) {
    auto f = std::make_shared<TrainFlags>();
    auto* cmd = app.add_subcommand("train", "train a network on the CPU (default: LeNet-5 on Fashion-MNIST, 1 epoch)");
    add_net_options(*cmd, f->net, false);
    cmd->add_option("--dataset", f->dataset, "fashion-mnist or synthetic")->capture_default_str()->check(CLI::IsMember({"fashion-mnist", "synthetic"}));
    cmd->add_option("--data-dir", f->data_dir, "directory with the Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)");
    cmd->add_option("--epochs", f->epochs, "epochs")->capture_default_str()->check(number_in(1, 100000));
    cmd->add_option("--steps", f->steps, "at most this many steps per epoch (0: the whole epoch; synthetic data: 20)")->check(number_in(0));
    cmd->add_option("--warmup", f->warmup, "first steps left out of the time table (kernel compilation)")->capture_default_str()->check(number_in(0));
    cmd->add_option("--lr", f->lr, "learning rate (default: 2e-3 for adam, 0.05 for sgd)")->check(positive_number());
    cmd->add_option("--momentum", f->momentum, "SGD momentum (default 0.9)")->check(number_in(0.0, 1.0));
    cmd->add_option("--weight-decay", f->weight_decay, "weight decay: L2 in the gradient (sgd, adam), decoupled (adamw; default 0.01, PyTorch's)")->check(number_in(0));
    cmd->add_option("--accumulate", f->accumulate, "micro-batches of --batch per optimizer step, their gradients averaged (global batch = accumulate x batch)")
        ->capture_default_str()
        ->check(number_in(1, 1 << 20));
    cmd->add_option("--clip-norm", f->clip_norm, "clip the gradients to this global L2 norm (0: no clipping)")->check(number_in(0));
    auto* schedule = cmd->add_option("--lr-schedule", f->lr_schedule, "after --lr-warmup: constant, cosine (to --lr-min over the remaining steps) or step (--lr-gamma every --lr-step-size steps)")
                         ->capture_default_str()
                         ->check(CLI::IsMember({"constant", "cosine", "step"}));
    cmd->add_option("--lr-warmup", f->schedule.warmup, "optimizer steps of linear learning-rate warm-up")->check(number_in(0));
    cmd->add_option("--lr-warmup-start", f->schedule.warmup_start, "the warm-up's first learning rate, as a fraction of --lr")->capture_default_str()->check(number_in(0, 1, true));
    cmd->add_option("--lr-min", f->schedule.min_lr, "cosine: the last learning rate")->capture_default_str()->check(number_in(0))->needs(schedule);
    cmd->add_option("--lr-step-size", f->schedule.step_size, "step: optimizer steps between decays")->check(number_in(1))->needs(schedule);
    cmd->add_option("--lr-gamma", f->schedule.gamma, "step: the decay factor")->capture_default_str()->check(number_in(0, 1, true))->needs(schedule);
    cmd->add_option("--threads", f->threads, "CPU threads (0: all cores this process may run on)")->check(number_in(0));
    cmd->add_flag("--oversubscribe", f->oversubscribe, "allow --threads above the cores this process may run on");
    cmd->add_option("--seed", f->seed, "seed for initialisation and shuffling")->capture_default_str();
    cmd->add_option("--top", f->top, "rows in the per-layer table")->capture_default_str()->check(number_in(1, 100000));
    auto* plan = cmd->add_option("--plan", f->plan, "plan file: device and precision per layer or node (see README: Plans)");
    for (const char* o : {"--dtype", "--dtype-scope"}) plan->excludes(o);
    auto* amp = cmd->add_option("--amp", f->amp, "mixed-precision policy: off, greedy (TF-AMP), autocast, campo or optimal (the last two weigh casts with --device-spec's model of this CPU)")
                    ->check(CLI::IsMember({"off", "greedy", "autocast", "campo", "optimal"}));
    for (const char* o : {"--dtype", "--dtype-scope", "--plan"}) amp->excludes(o);
    auto* system = cmd->add_option("--system", f->system, "plan for a system of data/hw whose CPU is this machine's (e.g. cpu+s10) with --strategy, then train under the plan");
    auto* strategy = cmd->add_option("--strategy", f->strategy,
                                     "a joule plan strategy (energy, powercap:W, heft, cnnlab, single:DEVICE, joint, ...); with --amp P, placement then policy P");
    system->needs(strategy);
    strategy->needs(system);
    for (const char* o : {"--dtype", "--dtype-scope", "--plan"}) system->excludes(o), strategy->excludes(o);
    auto* energy = cmd->add_flag("--energy", f->energy, "measure (or, without a readable counter, model) energy per layer");
    cmd->add_option("--meter", f->meter, "auto, rapl (powercap), perf (RAPL perf_event), nvml or modelled")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "rapl", "perf", "nvml", "modelled"}))
        ->needs(energy);
    cmd->add_option("--device-spec", f->device_spec, "data/hw spec (name or path) for the modelled meter (default: the one matching this CPU)")
        ->needs(energy);
    cmd->add_option("--idle-seconds", f->idle_seconds, "idle-power measurement before training (measured meters)")->capture_default_str()->check(number_in(0))
        ->needs(energy);
    cmd->add_option("--sample-ms", f->sample_ms, "power sampling period in ms")->capture_default_str()->check(number_in(0.1, 10000.0))
        ->needs(energy);
    cmd->add_option("--eval-samples", f->eval_samples, "evaluate test accuracy on at most the first N test images (0: no evaluation; default: all)")
        ->check(number_in(0));
    auto* checkpoint = cmd->add_option("--checkpoint", f->checkpoint, "write checkpoints (parameters, optimizer state, step, data order, RNG states) into this directory, atomically");
    cmd->add_option("--checkpoint-every", f->checkpoint_every, "a checkpoint every N optimizer steps and after the last (default: at the end of each epoch)")
        ->check(number_in(1))
        ->needs(checkpoint);
    cmd->add_option("--save", f->save, "after training, write the trained model (forward graph and weights) as ONNX to this file (opset 17)");
    cmd->add_option("--resume", f->resume, "continue the run whose checkpoint is in this directory (same flags; it continues exactly)");
    cmd->add_option("--trace", f->trace, "write every timed step's node spans (and, with --energy, power) as a Chrome trace (Perfetto, chrome://tracing)");
    cmd->add_option("--bucket-mib", f->bucket_mib, "data-parallel (mpirun): gradients all-reduced in buckets of at most this many MiB")
        ->capture_default_str()
        ->check(number_in(0, 4096, true));
    cmd->add_option("--comm-timeout", f->comm_timeout, "data-parallel (mpirun): seconds a process waits on a collective before it ends the job")
        ->capture_default_str()
        ->check(number_in(0, 1e6, true));
    cmd->add_flag("--json", f->json, "machine-readable output on stdout");
    cmd->add_flag("--quiet", f->quiet, "no progress bars");
    cmd->callback([f] {
        dist::Communicator& world = dist::world();
        world.timeout_s = f->comm_timeout;
        const bool report = world.rank() == 0;  // of a data-parallel job, rank 0 prints and writes files
        if (!report) f->quiet = true;
        std::ofstream trace_file;  // opened first: a path that cannot be written fails before training
        if (!f->trace.empty() && report) {
            trace_file.open(f->trace);
            if (!trace_file) throw Error("--trace " + f->trace + ": cannot write the trace file");
        }
        TrainOptions o;
        o.net = f->net.net;
        o.model_file = f->net.model;
        o.labels = f->net.labels;
        o.save_onnx = f->save;
        o.dataset = f->dataset;
        o.data_dir = f->data_dir;
        o.epochs = f->epochs;
        o.batch = f->net.batch;
        o.steps = f->steps;
        o.warmup = f->warmup;
        o.image_size = f->net.image_size;
        o.seq_len = f->net.seq_len;
        cpu::check_threads(f->threads, f->oversubscribe);
        o.eval_samples = f->eval_samples;
        o.threads = f->threads;
        o.seed = f->seed;
        o.plan_file = f->plan;
        o.amp = f->system.empty() ? f->amp : "";  // with --system, the policy goes over the placement
        o.dtype = parse_dtype(f->net.dtype);
        o.scope = parse_precision_scope(f->net.scope);
        o.energy = f->energy;
        o.meter = f->meter;
        o.device_spec = f->device_spec;
        o.energy_options.idle_seconds = f->idle_seconds;
        o.energy_options.period = std::chrono::microseconds(int64_t(f->sample_ms * 1000));
        o.trace = !f->trace.empty() && report;
        o.bucket_bytes = size_t(f->bucket_mib * 1048576.0);
        std::ostream* meter_out = f->json ? &std::cerr : &std::cout;
        if (report) o.on_meter = [meter_out](const std::string& m) { *meter_out << m << '\n'; };
        if (f->net.optimizer != "sgd" && f->momentum >= 0) throw Error("--momentum applies to --optimizer sgd only");
        o.optimizer = optimizer_of(f->net, f->lr, f->momentum, f->weight_decay);
        o.checkpoint_dir = f->checkpoint, o.checkpoint_every = f->checkpoint_every, o.resume_dir = f->resume;
        o.accumulate = f->accumulate;
        o.clip_norm = f->clip_norm;
        o.schedule = f->schedule;
        o.schedule.kind = parse_lr_schedule(f->lr_schedule);
        // --system --strategy: the planner places the run's own graph; the prediction is kept to set beside what the run got
        std::optional<SystemModel> sys;
        auto placed = std::make_shared<std::optional<Placed>>();
        if (!f->system.empty()) {
            sys.emplace(load_system_model(f->system));
            const Strategy st = parse_strategy(f->strategy);
            const std::optional<AmpPolicy> amp = f->amp.empty() ? std::nullopt : std::optional(parse_amp_policy(f->amp));
            if (amp && st.kind == Strategy::Kind::Joint) throw Error("--strategy joint chooses each node's precision itself", "drop --amp, or name another strategy");
            o.plan_for = [&sys, st, amp, placed](const TrainGraph& tg) {
                *placed = place(tg, *sys, st);
                if (amp) *placed = with_precision(tg, *sys, **placed, *amp);
                return (*placed)->plan;
            };
        }
        const bool tty = isatty(STDERR_FILENO);
        const std::string processes = world.size() == 1 ? "" : " over " + std::to_string(world.size()) + " processes (mpi; " + std::to_string(o.batch / std::max(world.size(), 1)) + " each)";
        if (!f->json && report)
            std::cout << "training " << o.net << " on " << o.dataset << ": batch " << o.batch << processes << ", " << o.epochs << " epoch(s), "
                      << f->net.optimizer << " lr " << o.optimizer.lr << schedule_str(o) << ", "
                      << (!f->system.empty()     ? "strategy " + f->strategy + " on " + sys->system.name
                          : !o.amp.empty()         ? "mixed-precision policy " + o.amp + ", cpu (oneDNN)"
                          : !o.plan_file.empty() ? "plan " + o.plan_file
                                               : f->net.dtype + (o.dtype == DType::F32 ? "" : o.scope == PrecisionScope::All ? " on every op that supports it" : " on conv/linear/matmul") + ", cpu (oneDNN)")
                      << "\n";
        auto open_line = std::make_shared<bool>(false);  // a tty progress line without its newline yet
        if (!f->quiet)
            o.on_eval_progress = [tty, open_line, previous = int64_t(0)](const EvalProgress& p) mutable {
                print_eval_progress(p, tty, previous);
                previous = p.samples;
                *open_line = tty && p.samples != p.total;
            };
        TrainResult r;
        try {
            r = train(o, f->quiet ? std::function<void(const TrainProgress&)>{} : [tty, open_line](const TrainProgress& p) {
                print_progress(p, tty);
                *open_line = tty && p.step != p.steps_per_epoch;
            });
        } catch (...) {
            if (*open_line) std::fputc('\n', stderr);  // the error starts on its own line
            throw;
        }
        if (!report) return;
        if (o.trace) write_chrome_trace(trace_file, train_trace(r));
        if (f->json) {
            nlohmann::json j = {{"schema", "joule.train/1"}, {"net", r.net}, {"dataset", r.dataset}, {"dtype", r.dtype}, {"threads", r.threads}, {"batch", r.batch},
                                {"accumulate", r.accumulate}, {"global_batch", r.batch * r.accumulate}, {"last_lr", r.last_lr},
                                {"resumed_at_step", r.resumed_at_step}, {"first_epoch", r.first_epoch + 1}, {"checkpoints", r.checkpoints},
                                {"parameters", r.parameters}, {"plan", r.plan}, {"casts", r.casts}, {"transfers", r.transfers},
                                {"step_seconds", r.step_seconds}, {"step_modelled_seconds", r.step_modelled_seconds},
                                {"step_wall_seconds", r.step_wall_seconds}, {"emulation_seconds", r.emulation_seconds}, {"timed_steps", r.timed_steps},
                                {"timing", r.step_modelled_seconds > 0 ? "measured and modelled" : "measured"},
                                {"buffer_bytes", r.buffer_bytes}, {"unshared_buffer_bytes", r.unshared_bytes}};
            for (const auto& d : r.devices)
                j["devices"].push_back({{"device", d.device}, {"seconds", d.seconds}, {"nodes", d.nodes}, {"timing", d.modelled ? "modelled" : "measured"}});
            for (const EpochResult& e : r.epochs)
                j["epochs"].push_back({{"loss", e.loss}, {"seconds", e.seconds}, {"images_per_second", e.images_per_s}, {"steps", e.steps}});
            if (r.test_accuracy >= 0) j["test_accuracy"] = r.test_accuracy, j["test_samples"] = r.test_samples;
            j["losses"] = r.step_losses;
            j["processes"] = world.size();
            if (!r.ranks.empty()) {
                j["allreduce_buckets"] = r.allreduce_buckets;
                for (const auto& x : r.ranks) {
                    nlohmann::json row = {{"host", x.host}, {"step_seconds", x.step_seconds}, {"allreduce_seconds", x.allreduce_seconds},
                                          {"allreduce_wait_seconds", x.wait_seconds}, {"allreduces_per_step", x.allreduces}, {"timing", "measured"}};
                    if (x.joules >= 0) row["joules"] = x.joules, row["energy"] = x.joules_measured ? "measured" : "modelled";
                    j["ranks"].push_back(row);
                }
                if (r.cluster_joules >= 0) j["cluster_joules_per_step"] = r.cluster_joules;
            }
            if (o.trace) j["trace"] = f->trace;
            for (const LayerTime& l : r.layers) {
                nlohmann::json row = {{"name", l.name}, {"op", l.kind}, {"forward_seconds", l.forward_s}, {"backward_seconds", l.backward_s},
                                      {"update_seconds", l.update_s}, {"flops", l.flops}, {"timing", l.modelled ? "measured and modelled" : "measured"}};
                if (r.energy) row["joules"] = {{"forward", l.forward_j}, {"backward", l.backward_j}, {"update", l.update_j}};
                j["layers"].push_back(row);
            }
            if (*placed) {
                const Placed& p = **placed;
                nlohmann::json devices = nlohmann::json::array();
                for (size_t d = 0; d < sys->plan_devices.size(); ++d) devices.push_back({{"device", sys->plan_devices[d]}, {"predicted_seconds", p.outcome.busy_seconds[d]}});
                j["placement"] = {{"system", sys->system.name}, {"strategy", p.strategy}, {"chosen", p.chosen}, {"predicted_iteration_seconds", p.outcome.seconds},
                                  {"predicted_joules", p.outcome.joules()}, {"predicted_devices", devices}, {"timing", "modelled"}};
            }
            if (r.energy) {
                const EnergyResult& e = *r.energy;
                const double steps = double(std::max<int64_t>(e.steps, 1));
                j["energy"] = {{"meter", e.meter.name}, {"kind", energy::kind_name(e.kind)}, {"source", e.meter.source},
                               {"steps", e.steps}, {"idle_watts", e.idle_w}, {"samples", e.samples},
                               {"per_step", {{"ops_joules", (e.total_joules - e.idle_joules) / steps}, {"idle_joules", e.idle_joules / steps},
                                             {"total_joules", e.total_joules / steps}, {"seconds", e.seconds / steps}}}};
            }
            std::cout << j.dump(2) << '\n';
            return;
        }
        if (!o.resume_dir.empty()) std::cout << "resumed from " << o.resume_dir << " after optimizer step " << r.resumed_at_step << "\n";
        if (r.checkpoints > 0) std::cout << "wrote " << r.checkpoints << " checkpoint(s) to " << o.checkpoint_dir << "/checkpoint.bin\n";
        const size_t first_epoch = size_t(r.first_epoch);
        for (size_t e = 0; e < r.epochs.size(); ++e)
            std::cout << "epoch " << first_epoch + e + 1 << ": mean loss " << fixed(r.epochs[e].loss, 4) << ", " << fixed(r.epochs[e].images_per_s, 0)
                      << " img/s, " << fixed(r.epochs[e].seconds, 1) << " s (measured)\n";
        if (r.test_accuracy >= 0)
            std::cout << "test accuracy " << fixed(100 * r.test_accuracy, 2) << " % on " << r.test_samples << " images\n";
        else if (o.dataset == "fashion-mnist")
            std::cout << "test accuracy not evaluated (--eval-samples 0)\n";
        std::cout << "tensor memory " << bytes_str(double(r.buffer_bytes)) << " (" << bytes_str(double(r.unshared_bytes))
                  << " without buffer reuse)\n";
        std::cout << "plan " << r.plan << ": " << r.casts << " casts, " << r.transfers << " transfers; per step:";
        for (const auto& d : r.devices)
            std::cout << " " << d.device << " " << fixed(d.seconds * 1e3, 3) << " ms (" << (d.modelled ? "modelled" : "measured") << ", " << d.nodes << " nodes)";
        std::cout << "\n";
        if (*placed) print_prediction(**placed, *sys, r);
        if (!r.ranks.empty()) print_ranks(r);
        print_layers(r, f->top);
        if (r.energy) print_energy(r, f->top);
        if (o.trace)
            std::cout << "wrote " << r.traced_steps.size() << " timed steps' node spans" << (r.energy ? " and power" : "") << " to " << f->trace
                      << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
    });
}

}  // namespace joule::cli

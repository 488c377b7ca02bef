#include "runtime/trainer.hpp"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include <unistd.h>

#include "backend/registry.hpp"
#include "data/dataset.hpp"
#include "dist/communicator.hpp"
#include "graph/cost.hpp"
#include "graph/error.hpp"
#include "hw/device_spec.hpp"
#include "import/onnx.hpp"
#include "plan/amp.hpp"
#include "plan/passes.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/executor.hpp"
#include "zoo/zoo.hpp"

namespace joule {

std::vector<LayerTime> layer_times(const Executor& ex, int64_t steps, const EnergyResult* energy) {
    const Graph& g = ex.graph();
    std::vector<LayerTime> out;
    std::map<NodeId, size_t> row;
    const double div = double(std::max<int64_t>(steps, 1));
    for (size_t n = 0; n < g.num_nodes(); ++n) {
        const Node& node = g.node(NodeId(n));
        const NodeId src = node.source == kNone ? NodeId(n) : node.source;
        auto it = row.find(src);
        if (it == row.end()) {
            it = row.emplace(src, out.size()).first;
            out.push_back(LayerTime{g.node(src).name, op_name(g.node(src).kind)});
        }
        LayerTime& l = out[it->second];
        l.modelled = l.modelled || ex.node_modelled()[n];
        const double s = ex.node_seconds()[n] / div;
        const double j = energy && energy->steps > 0 ? energy->node_joules[n] / double(energy->steps) : 0.0;
        switch (node.phase) {
            case Phase::Forward: case Phase::Loss: l.forward_s += s, l.forward_j += j; break;
            case Phase::Backward: l.backward_s += s, l.backward_j += j; break;
            case Phase::Update: l.update_s += s, l.update_j += j; break;
        }
        const int64_t runs = ex.node_runs()[n];  // per step: more than one where micro-batches accumulate
        l.flops += node_cost(g, NodeId(n)).flops * (runs > 0 ? double(runs) / div : 1.0);
    }
    return out;
}

void fill_synthetic(Executor& ex, const zoo::Model& m, data::SyntheticData& synth, int rank, int ranks) {
    const Graph& g = ex.graph();
    const TensorDesc& in = g.tensor(m.input).desc;
    const int64_t n = in.numel(), labels = g.tensor(m.labels).desc.numel();
    const int32_t classes = int32_t(g.tensor(m.logits).desc.shape[1]);
    // the global batch as one process draws it (batch-major tensors: a shard is a contiguous slice)
    auto shard = [&](auto& all, auto* mine, int64_t per_rank) { std::copy_n(all.begin() + rank * per_rank, per_rank, mine); };
    if (in.dtype == DType::I32) {
        std::vector<int32_t> all(size_t(n * ranks));
        synth.fill_uniform_int(all.data(), n * ranks, int32_t(m.vocab));
        shard(all, ex.i32(m.input), n);
    } else {
        std::vector<float> all(size_t(n * ranks));
        synth.fill_normal(all.data(), n * ranks);
        shard(all, ex.f32(m.input), n);
    }
    std::vector<int32_t> y(size_t(labels * ranks));
    synth.fill_uniform_int(y.data(), labels * ranks, classes);
    shard(y, ex.i32(m.labels), labels);
}

namespace {
// "nan", "inf" or "-inf" and the index of the first non-finite value of a floating-point tensor; false when all are finite.
std::string fmt_lr(float lr) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", double(lr));
    return buf;
}

bool first_non_finite(const Executor& ex, TensorId t, std::string& what) {
    const DType d = ex.graph().tensor(t).desc.dtype;
    if (d != DType::F32 && d != DType::BF16) return false;
    const std::vector<float> v = ex.read_f32(t);
    size_t bad = 0, first = v.size();
    for (size_t i = 0; i < v.size(); ++i)
        if (!std::isfinite(v[i])) {
            if (first == v.size()) first = i;
            ++bad;
        }
    if (bad == 0) return false;
    const float x = v[first];
    what = std::string(std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf") + " at element " + std::to_string(first) + " (" + std::to_string(bad) + " of " +
           std::to_string(v.size()) + " values non-finite)";
    return true;
}

// Called only once the loss is non-finite (the update has not run): which parameter holds a non-finite
// value, and which forward node first outputs one (the forward is re-run node by node, since buffers are
// shared by liveness and earlier outputs are overwritten).
std::string diagnose_non_finite(Executor& ex, NodeId first_backward) {
    const Graph& g = ex.graph();
    std::string out, what;
    for (size_t t = 0; t < g.num_tensors(); ++t)
        if (g.tensor(TensorId(t)).role == TensorRole::Parameter && first_non_finite(ex, TensorId(t), what)) {
            out = "parameter '" + g.tensor(TensorId(t)).name + "' holds " + what;
            break;
        }
    for (NodeId n = 0; n < first_backward; ++n) {
        ex.run(n, n + 1, {.training = true});
        for (TensorId t : g.node(n).outputs)
            if (first_non_finite(ex, t, what)) {
                return (out.empty() ? "" : out + "; ") + "the first forward node with a non-finite output is '" + g.node(n).name + "' (" +
                       op_name(g.node(n).kind) + "): '" + g.tensor(t).name + "' has " + what;
            }
    }
    return out.empty() ? "no parameter or forward output holds one on a re-run" : out;
}

// Every process of a data-parallel job must run the same graph with the same flags: a mismatch (another
// joule, other flags, an MPMD launch of two nets) would deadlock or silently average unrelated
// gradients. Every rank learns which ranks differ from rank 0 and throws the same Error.
void check_ranks_agree(dist::Communicator& world, const TrainGraph& tg, const TrainOptions& o, const Plan& plan) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a %a %a", double(o.optimizer.lr), o.clip_norm, double(o.optimizer.weight_decay));
    const std::string what = fingerprint(tg) + "|" + o.net + "|" + o.dataset + "|" + std::to_string(o.batch) + "|" + std::to_string(o.accumulate) + "|" +
                             std::to_string(o.seed) + "|" + std::to_string(o.epochs) + "|" + std::to_string(o.steps) + "|" + plan.name + "|" + buf + "|" +
                             o.checkpoint_dir + "|" + o.resume_dir + "|" + std::to_string(o.checkpoint_every);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : what) h = (h ^ c) * 0x100000001b3ULL;
    const std::vector<uint64_t> all = world.allgather(h);
    std::string differ;
    for (size_t i = 1; i < all.size(); ++i)
        if (all[i] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(i);
    if (!differ.empty())
        throw dist::JobError("rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) + ": the job's processes disagree: rank(s) " + differ +
                        " run another graph or other training flags than rank 0",
                    "start every rank with the same joule, net, batch, plan and flags");
}

// Each process's per-step time, all-reduce time and energy, to every rank (rank 0 reports them), and the
// cluster's energy: ranks on one host that read one measured meter (RAPL's package) count it once.
void gather_ranks(dist::Communicator& world, const Executor& ex, TrainResult& r, double per_step) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char* c = host; *c; ++c) h = (h ^ uint64_t(uint8_t(*c))) * 0x100000001b3ULL;
    double allreduce = 0;
    for (size_t n = 0; n < ex.graph().num_nodes(); ++n)
        if (op_info(ex.graph().node(NodeId(n)).kind).category == OpCategory::Communication) allreduce += ex.node_seconds()[n] * per_step;
    const bool energy = r.energy && r.energy->steps > 0;
    const std::vector<double> mine = {r.step_wall_seconds, allreduce, world.wait_seconds * per_step, double(world.allreduces) * per_step,
                                      energy ? r.energy->total_joules / double(r.energy->steps) : -1.0,
                                      energy && r.energy->kind != energy::MeterKind::Modelled ? 1.0 : 0.0};
    const std::vector<double> all = world.allgather(mine);
    const std::vector<uint64_t> hosts = world.allgather(h);
    std::vector<uint64_t> seen;
    std::map<uint64_t, double> measured_per_host;
    r.cluster_joules = 0;
    for (int i = 0; i < world.size(); ++i) {
        const double* v = &all[size_t(i) * mine.size()];
        TrainResult::Rank row;
        auto at = std::find(seen.begin(), seen.end(), hosts[size_t(i)]);
        if (at == seen.end()) at = seen.insert(seen.end(), hosts[size_t(i)]);
        row.host = "host " + std::to_string(at - seen.begin());
        row.step_seconds = v[0], row.allreduce_seconds = v[1], row.wait_seconds = v[2], row.allreduces = v[3], row.joules = v[4], row.joules_measured = v[5] > 0;
        if (row.joules < 0) r.cluster_joules = -1;
        else if (r.cluster_joules >= 0) {
            if (row.joules_measured) measured_per_host[hosts[size_t(i)]] = std::max(measured_per_host[hosts[size_t(i)]], row.joules);
            else r.cluster_joules += row.joules;
        }
        r.ranks.push_back(row);
    }
    if (r.cluster_joules >= 0)
        for (const auto& [host_id, j] : measured_per_host) r.cluster_joules += j;
}

}  // namespace

std::vector<TracedNode> traced_nodes(const Graph& g) {
    std::vector<TracedNode> out;
    for (size_t n = 0; n < g.num_nodes(); ++n) {
        const Node& x = g.node(NodeId(n));
        const NodeCost c = node_cost(g, NodeId(n));
        out.push_back({x.name, phase_name(x.phase), op_name(x.kind), dtype_name(x.compute), shapes_of(g, x), c.flops, c.bytes_read + c.bytes_written});
    }
    return out;
}

TrainResult train(const TrainOptions& o, const std::function<void(const TrainProgress&)>& on_progress) {
    if (o.epochs < 1) throw Error("--epochs must be >= 1, got " + std::to_string(o.epochs));
    if (o.batch < 1) throw Error("--batch must be >= 1, got " + std::to_string(o.batch));
    if (o.steps < 0) throw Error("--steps must be >= 0, got " + std::to_string(o.steps));
    if (o.warmup < 0) throw Error("--warmup must be >= 0, got " + std::to_string(o.warmup));
    if (o.eval_samples > 0 && o.dataset == "synthetic")
        throw Error("--eval-samples applies to --dataset fashion-mnist only (synthetic data has no test set)");
    const OptimizerConfig& oc = o.optimizer;
    if (!std::isfinite(oc.lr) || !(oc.lr > 0)) throw Error("--lr must be a positive finite number, got " + std::to_string(oc.lr));
    if (!std::isfinite(oc.momentum) || oc.momentum < 0 || oc.momentum > 1) throw Error("--momentum must be in [0, 1], got " + std::to_string(oc.momentum));
    if (!std::isfinite(oc.weight_decay) || oc.weight_decay < 0)
        throw Error("--weight-decay must be a non-negative finite number, got " + std::to_string(oc.weight_decay));
    if (!std::isfinite(o.energy_options.idle_seconds) || o.energy_options.idle_seconds < 0)
        throw Error("--idle-seconds must be a non-negative finite number, got " + std::to_string(o.energy_options.idle_seconds));
    const bool real_data = o.dataset == "fashion-mnist";
    if (!real_data && o.dataset != "synthetic") throw Error("unknown dataset '" + o.dataset + "'", "use fashion-mnist or synthetic");
    if (o.model_file.empty() && real_data && zoo::net_info(o.net).sequence) throw Error(o.net + " takes token sequences, not images", "use --dataset synthetic");

    // a data-parallel job: --batch is the global batch, each process takes its shard
    dist::Communicator& world = dist::world();
    const int ranks = world.size(), rank = world.rank();
    if (o.batch % ranks != 0)
        throw Error("--batch " + std::to_string(o.batch) + " is the global batch of the job's " + std::to_string(ranks) + " processes and must be divisible by it",
                    "use a multiple of " + std::to_string(ranks));
    const int64_t local_batch = o.batch / ranks;
    data::TrainTestSplit split;
    zoo::NetConfig cfg;
    cfg.batch = local_batch;
    cfg.seq_len = o.seq_len;
    if (real_data) {
        split = data::load_fashion_mnist(o.data_dir.empty() ? data::kDefaultFashionMnistDir : o.data_dir);
        if (o.image_size != 0 && o.image_size != split.train.height)
            throw Error("--image-size " + std::to_string(o.image_size) + ": Fashion-MNIST images are " + std::to_string(split.train.height) + "x" +
                            std::to_string(split.train.height),
                        "use --dataset synthetic for other sizes");
        cfg.image_size = split.train.height;
        cfg.in_channels = split.train.channels;
        cfg.classes = split.train.classes;
    } else {
        cfg.image_size = o.image_size;
    }
    zoo::Model m = load_model(o.net, o.model_file, cfg, o.labels);
    if (real_data && m.graph.tensor(m.input).desc.dtype == DType::I32) throw Error(o.net + " takes token sequences, not images", "use --dataset synthetic");
    const int64_t params = m.graph.parameter_count();
    TrainGraph train_graph = build_train_graph(std::move(m.graph), m.loss, o.optimizer);
    BackendSet backends({.threads = o.threads});
    std::optional<predict::DeviceModel> cpu_model;  // what campo and optimal weigh
    const AmpPolicy amp = o.amp.empty() ? AmpPolicy::Off : parse_amp_policy(o.amp);
    if (amp == AmpPolicy::Campo || amp == AmpPolicy::Optimal) cpu_model.emplace(predict::load_device_model(hw::find_cpu_spec(o.device_spec).path));
    const Plan plan = o.plan                ? *o.plan
                      : o.plan_for          ? o.plan_for(train_graph)
                      : !o.amp.empty()      ? amp_backend_plan(train_graph, amp, backends.get("cpu"), cpu_model ? &*cpu_model : nullptr)
                      : o.plan_file.empty() ? precision_plan(train_graph, o.dtype, o.scope, backends.get("cpu"))
                                            : read_plan_file(o.plan_file);
    LowerOptions lower_options;
    lower_options.keep = {m.logits, m.loss};
    lower_options.allreduce = {ranks, o.bucket_bytes};
    const LoweredGraph lg = lower(std::move(train_graph), plan, lower_options);
    const TrainGraph& tg = lg.train;
    if (ranks > 1) check_ranks_agree(world, tg, o, plan);
    ExecutorOptions exec_options;
    exec_options.seed = o.seed;
    Executor ex(lg, backends, exec_options);
    const int64_t classes = tg.graph.tensor(m.logits).desc.shape[1];

    TrainResult r;
    r.net = o.net;
    r.dataset = o.dataset;
    r.dtype = o.plan_file.empty() && !o.plan && !o.plan_for && o.amp.empty() ? dtype_name(o.dtype) : "plan";
    r.plan = plan.name;
    r.casts = int64_t(lg.casts);
    r.transfers = int64_t(lg.transfers);
    r.threads = ex.threads();
    r.batch = o.batch;
    r.parameters = params;
    r.allreduce_buckets = int64_t(lg.allreduce_buckets);
    r.buffer_bytes = ex.bytes_allocated();
    r.unshared_bytes = ex.bytes_if_unshared();

    std::optional<hw::DeviceSpec> spec;
    std::unique_ptr<energy::MeterChoice> meter;
    std::unique_ptr<EnergyRecorder> recorder;
    if (o.energy) {
        std::string spec_error;
        try {
            spec = hw::find_cpu_spec(o.device_spec);
        } catch (const Error& e) {
            if (!o.device_spec.empty() || o.meter == "modelled") throw;
            spec_error = e.what();
        }
        try {
            meter = std::make_unique<energy::MeterChoice>(energy::choose_meter(o.meter, spec ? &*spec : nullptr, ex.threads()));
        } catch (const Error& e) {
            throw Error(std::string(e.what()) + (spec_error.empty() ? "" : "; " + spec_error));
        }
        if (o.on_meter) o.on_meter(meter->message);
        recorder = std::make_unique<EnergyRecorder>(*meter, o.energy_options);
        recorder->begin(ex);
    }

    const int64_t k = o.accumulate;  // micro-batches per optimizer step
    if (k < 1) throw Error("--accumulate must be >= 1, got " + std::to_string(k));
    data::BatchIterator it(real_data ? split.train.size() : std::max<int64_t>(o.batch * k, o.steps * k * o.batch), o.batch, true, o.seed);
    data::SyntheticData synth(o.seed);
    int64_t steps_per_epoch = it.batches_per_epoch() / k;
    if (steps_per_epoch < 1)
        throw Error("--accumulate " + std::to_string(k) + " micro-batches per step is more than an epoch's " + std::to_string(it.batches_per_epoch()) +
                        " batches of " + std::to_string(o.batch),
                    "lower --accumulate or --batch");
    if (!real_data && o.steps == 0) steps_per_epoch = std::min<int64_t>(steps_per_epoch, 20);
    if (o.steps > 0) steps_per_epoch = std::min(steps_per_epoch, o.steps);
    StepRunner runner(ex, tg, o.optimizer, {.accumulate = k, .clip_norm = o.clip_norm, .schedule = o.schedule, .total_steps = steps_per_epoch * o.epochs,
                                           .shard = rank});
    r.accumulate = k;

    if (!o.save_onnx.empty()) {  // a path that cannot be written fails before training, not after it
        const std::filesystem::path dir = std::filesystem::path(o.save_onnx).parent_path();
        if (!dir.empty() && !std::filesystem::is_directory(dir)) throw Error("--save " + o.save_onnx + ": directory " + dir.string() + " does not exist");
    }
    // checkpoints: what the run is, and, resuming, where it stood
    if (o.checkpoint_every < 0) throw Error("--checkpoint-every must be >= 0, got " + std::to_string(o.checkpoint_every));
    const bool writes_checkpoints = !o.checkpoint_dir.empty() && rank == 0;  // the job's files are rank 0's
    if (writes_checkpoints) prepare_checkpoint_dir(o.checkpoint_dir);
    const CheckpointState identity{o.net, o.dataset, plan.name, o.batch, k, o.seed};
    int64_t start_epoch = 0, start_step = 0;
    double start_loss_sum = 0;
    if (!o.resume_dir.empty()) {
        const CheckpointState c = read_checkpoint(o.resume_dir, ex, identity);
        try {
            it.set_state(c.data_order);
            synth.set_state(c.synthetic);
        } catch (const Error& e) {
            throw Error("--resume " + o.resume_dir + ": " + e.what(), "resume with the flags of the run that wrote it");
        }
        if (c.step_in_epoch > steps_per_epoch)
            throw Error("--resume " + o.resume_dir + ": the checkpoint is at step " + std::to_string(c.step_in_epoch) + " of an epoch, this run's epochs have " +
                            std::to_string(steps_per_epoch),
                        "resume with the --steps of the run that wrote it");
        if (c.epoch * steps_per_epoch + c.step_in_epoch >= o.epochs * steps_per_epoch)
            throw Error("--resume " + o.resume_dir + ": the checkpoint is at the end of this run (epoch " + std::to_string(c.epoch + 1) + ", step " +
                            std::to_string(c.step_in_epoch) + "): nothing left to train",
                        "raise --epochs to train further");
        runner.resume_at(c.steps_done, c.passes_done);
        start_epoch = c.epoch, start_step = c.step_in_epoch, start_loss_sum = c.epoch_loss_sum;
        if (start_step == steps_per_epoch) ++start_epoch, start_step = 0, start_loss_sum = 0;  // written at an epoch's end: the next one
        r.resumed_at_step = c.steps_done, r.first_epoch = start_epoch;
    }
    // every process starts from rank 0's parameters and optimizer state (initialised or resumed; the bf16
    // copies updates keep of parameters are state too, and match rank 0's parameters)
    if (ranks > 1)
        for (size_t t = 0; t < tg.graph.num_tensors(); ++t) {
            const Tensor& x = tg.graph.tensor(TensorId(t));
            if (x.role == TensorRole::Parameter || x.role == TensorRole::State) world.broadcast(ex.data(TensorId(t)), x.desc.bytes(), 0);
        }
    auto checkpoint = [&](int64_t e, int64_t next_step, double loss_sum) {
        CheckpointState c = identity;
        c.epoch = e, c.step_in_epoch = next_step, c.steps_done = runner.steps_done(), c.passes_done = runner.passes_done(), c.epoch_loss_sum = loss_sum;
        c.data_order = it.state(), c.synthetic = synth.state();
        write_checkpoint(o.checkpoint_dir, ex, c);
        ++r.checkpoints;
    };
    const char* kill_after = std::getenv("JOULE_FAULT_KILL_AFTER_STEP");  // fault injection for the tests: a crash after that optimizer step
    const char* stall = std::getenv("JOULE_FAULT_STALL_RANK");            // ... and that process of a job stuck after its first step

    // at least one timed step: warm-up takes at most all but the last step
    const int64_t to_run = steps_per_epoch * (o.epochs - start_epoch) - start_step;
    const int64_t warmup = std::min(o.warmup, to_run - 1);
    int64_t total_steps = 0;  // run by this process
    double timed_wall = 0;
    using clock = std::chrono::steady_clock;
    for (int64_t e = start_epoch; e < o.epochs; ++e) {
        const bool resumed = start_step > 0 && e == start_epoch;  // resumed mid-epoch: its data order restored
        if (!resumed) it.reset();
        EpochResult er;
        double loss_sum = resumed ? start_loss_sum : 0;
        int64_t here = 0;  // steps of the epoch run by this process
        er.steps = resumed ? start_step : 0;
        const auto t0 = clock::now();
        for (int64_t s = resumed ? start_step : 0; s < steps_per_epoch; ++s) {
            auto feed = [&](int64_t) {
                auto idx = it.next();  // the global batch; this process's shard of it
                if (real_data) split.train.gather({idx->begin() + rank * local_batch, idx->begin() + (rank + 1) * local_batch}, ex.f32(m.input), ex.i32(m.labels));
                else fill_synthetic(ex, m, synth, rank, ranks);
            };
            feed(0);  // the first micro-batch before the step's clock starts; the others inside it
            const bool record = recorder && total_steps >= warmup;
            if (record) recorder->step_begin();
            const bool trace = o.trace && !recorder && total_steps >= warmup;  // (the recorder keeps its spans)
            if (trace) ex.record_spans(&r.traced_steps.emplace_back());
            const auto s0 = clock::now();
            // forward and loss first: a non-finite loss stops training before the update spreads it into the parameters
            auto check = [&](float loss) {
                if (!std::isfinite(loss))
                    throw Error("step " + std::to_string(s + 1) + " of epoch " + std::to_string(e + 1) + ": the loss is " + (std::isnan(loss) ? "nan" : "inf") +
                                    "; " + diagnose_non_finite(ex, tg.first_backward),
                                "training diverged: lower --lr (it is " + fmt_lr(o.optimizer.lr) + "), or check the input data");
            };
            const StepResult sr = runner.step(feed, check);
            double loss = sr.loss;
            if (ranks > 1) {  // the global batch's mean: the mean of the shards' means (equal shards)
                world.allreduce_sum(&loss, 1);
                loss /= ranks;
            }
            r.step_losses.push_back(loss);
            r.last_lr = sr.lr;
            if (total_steps >= warmup) timed_wall += std::chrono::duration<double>(clock::now() - s0).count();
            if (record) recorder->step_end();
            if (trace) ex.record_spans(nullptr);
            loss_sum += loss;
            ++er.steps, ++here;
            if (++total_steps == warmup) ex.reset_timing(), world.wait_seconds = 0, world.allreduces = 0;
            const bool last = e + 1 == o.epochs && s + 1 == steps_per_epoch;
            if (writes_checkpoints && (o.checkpoint_every > 0 ? runner.steps_done() % o.checkpoint_every == 0 || last : s + 1 == steps_per_epoch))
                checkpoint(e, s + 1, loss_sum);
            if (kill_after && std::atoll(kill_after) == runner.steps_done()) std::raise(SIGKILL);
            if (stall && std::atoi(stall) == rank && runner.steps_done() == 1) std::this_thread::sleep_for(std::chrono::hours(1));
            if (on_progress) {
                const double el = std::chrono::duration<double>(clock::now() - t0).count();
                on_progress({e, s + 1, steps_per_epoch, loss_sum / double(er.steps), double(here * k * o.batch) / el, sr.lr});
            }
        }
        er.seconds = std::chrono::duration<double>(clock::now() - t0).count();
        er.loss = loss_sum / double(std::max<int64_t>(er.steps, 1));
        er.images_per_s = double(here * k * o.batch) / er.seconds;
        r.epochs.push_back(er);
    }
    r.timed_steps = total_steps - warmup;
    if (recorder) r.energy = recorder->finish(tg.graph);
    if (o.trace) {
        if (recorder) r.traced_steps = recorder->spans();
        r.traced_nodes = traced_nodes(tg.graph);
    }
    r.layers = layer_times(ex, r.timed_steps, r.energy ? &*r.energy : nullptr);
    const double per_step = 1.0 / double(std::max<int64_t>(r.timed_steps, 1));
    for (const std::string& d : ex.devices()) r.devices.push_back({d});
    for (size_t n = 0; n < tg.graph.num_nodes(); ++n) {
        TrainResult::DeviceTime& d = r.devices[size_t(ex.node_device()[n])];
        const double s = ex.node_seconds()[n] * per_step;
        d.seconds += s;
        d.modelled = d.modelled || ex.node_modelled()[n];
        ++d.nodes;
        r.step_seconds += s;
        if (ex.node_modelled()[n]) r.step_modelled_seconds += s;
        if (is_dtype_cast(tg.graph, NodeId(n))) r.cast_seconds += s;
        r.emulation_seconds += ex.node_emulation_seconds()[n] * per_step;
    }
    r.step_wall_seconds = timed_wall * per_step;
    if (ranks > 1) gather_ranks(world, ex, r, per_step);
    if (!o.save_onnx.empty() && rank == 0) export_onnx(tg.graph, m.input, m.logits, [&ex](TensorId t) { return ex.read_f32(t); }, o.save_onnx);

    const int64_t eval_total = real_data && rank == 0 ? (o.eval_samples < 0 ? split.test.size() : std::min<int64_t>(o.eval_samples, split.test.size())) : 0;
    if (eval_total > 0) {
        // Evaluate on the first eval_total test images with the training batch size; the last batch is
        // padded and its padding ignored.
        data::BatchIterator test_it(eval_total, local_batch, false, 0, true);
        int64_t correct = 0;
        const auto t0 = clock::now();
        while (auto idx = test_it.next()) {
            const size_t valid = idx->size();
            while (int64_t(idx->size()) < local_batch) idx->push_back(idx->front());
            split.test.gather(*idx, ex.f32(m.input), ex.i32(m.labels));
            ex.run_forward({.training = false});
            const std::vector<float> z = ex.read_f32(m.logits);  // bf16 under a low-precision plan
            const int32_t* y = ex.i32(m.labels);
            for (size_t i = 0; i < valid; ++i) {
                int64_t best = 0;
                for (int64_t c = 1; c < classes; ++c)
                    if (z[int64_t(i) * classes + c] > z[int64_t(i) * classes + best]) best = c;
                correct += best == y[i];
            }
            r.test_samples += int64_t(valid);
            if (o.on_eval_progress) {
                const double el = std::chrono::duration<double>(clock::now() - t0).count();
                o.on_eval_progress({r.test_samples, eval_total, el > 0 ? double(r.test_samples) / el : 0.0});
            }
        }
        r.test_accuracy = double(correct) / double(r.test_samples);
    }
    return r;
}

}  // namespace joule

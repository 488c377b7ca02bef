#include "runtime/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "graph/error.hpp"
#include "runtime/executor.hpp"

#ifndef JOULE_VERSION
#error "JOULE_VERSION must be defined (CMakeLists.txt)"
#endif

namespace joule {

namespace {

constexpr char kMagic[8] = {'J', 'O', 'U', 'L', 'E', 'C', 'K', 'P'};
constexpr int kFormat = 1;

uint64_t fnv1a(const char* p, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
    for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(p[i])) * 0x100000001b3ULL;
    return h;
}

// Parameters and state, except the bf16 copies updates keep of parameters (derived: refreshed after a read).
std::vector<bool> saved_tensors(const Graph& g) {
    std::vector<bool> out(g.num_tensors());
    for (size_t t = 0; t < g.num_tensors(); ++t) out[t] = g.tensor(TensorId(t)).role == TensorRole::Parameter || g.tensor(TensorId(t)).role == TensorRole::State;
    for (const auto& [p, c] : low_copies(g)) out[size_t(c)] = false;
    return out;
}
// How a tensor is in the file: a blocked one (plan/'s layout pass, which depends on this CPU) in plain
// order, so a checkpoint resumes on any machine.
TensorDesc file_desc(TensorDesc d) {
    if (d.layout == Layout::Blocked) d.layout = Layout::Plain, d.blocking = {};
    return d;
}

std::string errno_text() { return std::strerror(errno); }

// Writes all of `data` to fd; false (errno set) on failure.
bool write_all(int fd, const char* data, size_t n) {
    while (n > 0) {
        const ssize_t w = ::write(fd, data, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        data += w, n -= size_t(w);
    }
    return true;
}

}  // namespace

void prepare_checkpoint_dir(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error("--checkpoint " + dir + ": cannot create the directory: " + ec.message());
    if (::access(dir.c_str(), W_OK) != 0) throw Error("--checkpoint " + dir + ": cannot write into the directory: " + errno_text());
}

void write_checkpoint(const std::string& dir, const Executor& ex, const CheckpointState& s) {
    prepare_checkpoint_dir(dir);
    std::error_code ec;
    const Graph& g = ex.graph();
    const std::vector<bool> saved = saved_tensors(g);
    nlohmann::json header = {{"format", kFormat},
                             {"joule", JOULE_VERSION},
                             {"net", s.net},
                             {"dataset", s.dataset},
                             {"plan", s.plan},
                             {"batch", s.batch},
                             {"accumulate", s.accumulate},
                             {"seed", s.seed},
                             {"epoch", s.epoch},
                             {"step_in_epoch", s.step_in_epoch},
                             {"steps_done", s.steps_done},
                             {"passes_done", s.passes_done},
                             {"epoch_loss_sum", s.epoch_loss_sum},
                             {"data_order", s.data_order},
                             {"synthetic", s.synthetic}};
    size_t offset = 0;
    std::vector<TensorId> tensors;
    for (size_t t = 0; t < g.num_tensors(); ++t) {
        const Tensor& x = g.tensor(TensorId(t));
        if (!saved[t]) continue;
        const TensorDesc d = file_desc(x.desc);
        header["tensors"].push_back({{"name", x.name}, {"desc", desc_str(d)}, {"offset", offset}, {"bytes", d.bytes()}});
        tensors.push_back(TensorId(t));
        offset += d.bytes();
    }
    // magic, header size, header, the tensors straight from the executor's buffers, the checksum: written
    // piece by piece (no copy of the model in memory), hashed as they go
    const std::string h = header.dump();
    const uint64_t h_size = h.size();
    std::vector<std::pair<const char*, size_t>> pieces = {{kMagic, sizeof kMagic}, {reinterpret_cast<const char*>(&h_size), sizeof h_size}, {h.data(), h.size()}};
    std::vector<std::vector<std::byte>> plain;  // blocked tensors, in the file's plain order (moves keep the bytes in place)
    plain.reserve(tensors.size());
    for (TensorId id : tensors) {
        const TensorDesc& d = g.tensor(id).desc;
        if (d.layout != Layout::Blocked) {
            pieces.emplace_back(static_cast<const char*>(ex.data(id)), d.bytes());
            continue;
        }
        plain.push_back(to_plain(d, ex.data(id)));
        pieces.emplace_back(reinterpret_cast<const char*>(plain.back().data()), plain.back().size());
    }
    size_t total = 0;
    for (const auto& [p, n] : pieces) total += n;

    const std::string path = dir + "/checkpoint.bin", tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("--checkpoint " + dir + ": cannot write " + tmp + ": " + errno_text());
    // fault injection for the tests: die half-way through writing (the previous checkpoint must survive)
    const char* fault = std::getenv("JOULE_FAULT_KILL_WRITING_CHECKPOINT");
    const size_t kill_at = fault && std::atoll(fault) == s.steps_done ? total / 2 : SIZE_MAX;
    uint64_t sum = 0xcbf29ce484222325ULL;
    size_t written = 0;
    bool ok = true;
    for (const auto& [p, n] : pieces) {
        if (written + n > kill_at) {
            write_all(fd, p, kill_at - written);
            ::raise(SIGKILL);
        }
        sum = fnv1a(p, n, sum);
        ok = ok && write_all(fd, p, n);
        written += n;
    }
    ok = ok && write_all(fd, reinterpret_cast<const char*>(&sum), sizeof sum) && ::fsync(fd) == 0;
    const std::string why = ok ? "" : errno_text();
    ::close(fd);
    if (!ok) {
        std::filesystem::remove(tmp, ec);
        throw Error("--checkpoint " + dir + ": cannot write " + tmp + ": " + why);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("--checkpoint " + dir + ": cannot rename " + tmp + " to " + path + ": " + errno_text());
    const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // the rename itself made durable
    if (d >= 0) ::fsync(d), ::close(d);
}

CheckpointState read_checkpoint(const std::string& dir, Executor& ex, const CheckpointState& expected) {
    const std::string path = dir + "/checkpoint.bin";
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("--resume " + dir + ": no checkpoint there (" + path + " cannot be read)", "pass the --checkpoint directory of an earlier run");
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    const std::string bad = "--resume " + dir + ": " + path;
    char magic[sizeof kMagic] = {};
    uint64_t h_size = 0;
    if (ec || size < sizeof kMagic + 2 * sizeof(uint64_t) || !in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
        throw Error(bad + " is not a joule checkpoint");
    in.read(reinterpret_cast<char*>(&h_size), sizeof h_size);
    if (!in || h_size > size - sizeof kMagic - 2 * sizeof(uint64_t)) throw Error(bad + " is truncated (its header runs past the end)");
    std::string h(size_t(h_size), '\0');
    in.read(h.data(), std::streamsize(h_size));
    const nlohmann::json header = nlohmann::json::parse(h, nullptr, false);
    if (!in || header.is_discarded() || !header.is_object()) throw Error(bad + " is corrupt (its header is not JSON)");
    uint64_t sum = fnv1a(h.data(), h.size(), fnv1a(reinterpret_cast<const char*>(&h_size), sizeof h_size, fnv1a(kMagic, sizeof kMagic)));
    CheckpointState s;
    try {
        // who wrote it first: another version's file is named as such, not as corrupt
        if (header.at("format").get<int>() != kFormat || header.at("joule").get<std::string>() != JOULE_VERSION)
            throw Error(bad + " was written by joule " + header.at("joule").get<std::string>() + " (checkpoint format " + std::to_string(header.at("format").get<int>()) +
                            "); this is joule " + JOULE_VERSION,
                        "resume it with that version, or start afresh");
        s.net = header.at("net"), s.dataset = header.at("dataset"), s.plan = header.at("plan");
        s.batch = header.at("batch"), s.accumulate = header.at("accumulate"), s.seed = header.at("seed");
        s.epoch = header.at("epoch"), s.step_in_epoch = header.at("step_in_epoch"), s.steps_done = header.at("steps_done");
        s.passes_done = header.at("passes_done"), s.epoch_loss_sum = header.at("epoch_loss_sum");
        s.data_order = header.at("data_order"), s.synthetic = header.at("synthetic");
        if (s.epoch < 0 || s.step_in_epoch < 0 || s.steps_done < 0 || s.batch < 1 || s.accumulate < 1) throw Error(bad + " is corrupt (a negative count)");
        auto same = [&](const std::string& what, const auto& got, const auto& want) {
            if (got != want)
                throw Error(bad + " is of a run with " + what + " " + nlohmann::json(got).dump() + ", this run has " + nlohmann::json(want).dump(),
                            "resume with the flags of the run that wrote it");
        };
        same("net", s.net, expected.net), same("dataset", s.dataset, expected.dataset), same("plan", s.plan, expected.plan);
        same("batch", s.batch, expected.batch), same("accumulate", s.accumulate, expected.accumulate), same("seed", s.seed, expected.seed);
        // the tensor table against this run's graph, and the file's length against the table, before any is read
        const Graph& g = ex.graph();
        const std::vector<bool> saved = saved_tensors(g);
        std::vector<TensorId> ids;
        uint64_t data_bytes = 0;
        for (const nlohmann::json& t : header.at("tensors")) {
            const std::string name = t.at("name");
            const std::optional<TensorId> found = g.find_tensor(name);
            if (!found || !saved[size_t(*found)] || t.at("desc").get<std::string>() != desc_str(file_desc(g.tensor(*found).desc)))
                throw Error(bad + ": tensor '" + name + "' " + t.at("desc").get<std::string>() + " is not one of this run's graph" +
                                (found ? " (here " + desc_str(file_desc(g.tensor(*found).desc)) + ")" : ""),
                            "resume with the flags of the run that wrote it");
            if (t.at("offset").get<uint64_t>() != data_bytes || t.at("bytes").get<uint64_t>() != file_desc(g.tensor(*found).desc).bytes())
                throw Error(bad + " is corrupt (tensor '" + name + "' is not where its table says)");
            ids.push_back(*found);
            data_bytes += file_desc(g.tensor(*found).desc).bytes();
        }
        const size_t want = size_t(std::count(saved.begin(), saved.end(), true));
        if (ids.size() != want) throw Error(bad + " holds " + std::to_string(ids.size()) + " parameter and state tensors, this run's graph has " + std::to_string(want));
        if (size != sizeof kMagic + sizeof h_size + h_size + data_bytes + sizeof sum) throw Error(bad + " is corrupt or truncated (its length is not its table's)");
        // straight into the executor's buffers; a checksum mismatch ends the run (the executor is not used after it)
        for (TensorId id : ids) {
            const TensorDesc& d = g.tensor(id).desc;
            std::vector<char> plain(d.layout == Layout::Blocked ? file_desc(d).bytes() : 0);
            char* p = plain.empty() ? static_cast<char*>(ex.data(id)) : plain.data();
            const size_t n = file_desc(d).bytes();
            in.read(p, std::streamsize(n));
            sum = fnv1a(p, n, sum);
            if (!plain.empty()) from_plain(d, plain.data(), ex.data(id));
        }
        uint64_t stored = 0;
        in.read(reinterpret_cast<char*>(&stored), sizeof stored);
        if (!in || stored != sum) throw Error(bad + " is corrupt or truncated (checksum mismatch)", "resume from an intact checkpoint");
        ex.refresh_low_copies();
    } catch (const nlohmann::json::exception& e) {
        throw Error(bad + " is corrupt (its header lacks a field: " + e.what() + ")");
    }
    return s;
}

}  // namespace joule

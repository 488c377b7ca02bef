// RAPL through powercap sysfs and through perf_event.
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "energy/meter.hpp"

namespace joule::energy {

namespace fs = std::filesystem;

namespace {

std::string read_line(const std::string& path) {
    std::ifstream f(path);
    if (!f) {
        const int err = errno;
        if (err == EACCES || err == EPERM)
            throw MeterUnavailable("cannot read " + path + ": permission denied (Linux 5.10+ makes RAPL counters root-only; run as root or `sudo chmod o+r " +
                                   path + "`)");
        throw MeterUnavailable("cannot read " + path + ": " + std::strerror(err));
    }
    std::string s;
    std::getline(f, s);
    return s;
}

uint64_t read_u64(const std::string& path) {
    const std::string s = read_line(path);
    try {
        size_t used = 0;
        const uint64_t v = std::stoull(s, &used);
        if (used == 0) throw std::invalid_argument("empty");
        return v;
    } catch (const std::exception&) {
        throw MeterUnavailable(path + ": expected an unsigned integer, read '" + s + "'");
    }
}

class RaplPowercap : public PowerMeter {
public:
    explicit RaplPowercap(const std::string& root) {
        if (!fs::is_directory(root))
            throw MeterUnavailable(root + " does not exist: no RAPL powercap driver (a virtual machine, or load intel_rapl_common)");
        std::vector<fs::path> dirs;
        for (const auto& e : fs::directory_iterator(root)) {
            const std::string n = e.path().filename().string();
            // top-level zones only (intel-rapl:0), not sub-zones (intel-rapl:0:0)
            if (n.rfind("intel-rapl:", 0) == 0 && n.find(':', 11) == std::string::npos) dirs.push_back(e.path());
        }
        std::sort(dirs.begin(), dirs.end());
        for (const fs::path& d : dirs) {
            const std::string name = read_line((d / "name").string());
            if (name.rfind("package", 0) != 0) continue;
            Zone z{(d / "energy_uj").string(), read_u64((d / "max_energy_range_uj").string()), 0};
            z.last = read_u64(z.file);
            zones_.push_back(z);
        }
        if (zones_.empty()) throw MeterUnavailable("no RAPL package zone (intel-rapl:N with name package-N) under " + root);
        info_ = {"rapl-powercap", MeterKind::Measured, "cpu", zones_.front().file + (zones_.size() > 1 ? " (+" + std::to_string(zones_.size() - 1) + " packages)" : "")};
    }
    const MeterInfo& info() const override { return info_; }
    double joules() override {
        for (Zone& z : zones_) {
            const uint64_t now = read_u64(z.file);
            // the counter wraps at max_energy_range_uj
            const uint64_t delta = now >= z.last ? now - z.last : now + (z.range - z.last);  // wrapped modulo the range
            total_uj_ += double(delta);
            z.last = now;
        }
        return total_uj_ * 1e-6;
    }

private:
    struct Zone {
        std::string file;
        uint64_t range, last;
    };
    std::vector<Zone> zones_;
    double total_uj_ = 0;
    MeterInfo info_;
};

class RaplPerf : public PowerMeter {
public:
    RaplPerf(const std::string& pmu_dir, const PerfEventSpec& ev) : ev_(ev) {
        perf_event_attr attr;
        std::memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = ev.type;
        attr.config = ev.config;
        fd_ = int(syscall(SYS_perf_event_open, &attr, -1, 0, -1, 0));
        if (fd_ < 0) {
            const int err = errno;
            std::string paranoid = "?";
            try {
                paranoid = read_line("/proc/sys/kernel/perf_event_paranoid");
            } catch (const MeterUnavailable&) {
            }
            if (err == EACCES || err == EPERM)
                throw MeterUnavailable("perf_event_open(" + pmu_dir + "/events/energy-pkg): permission denied (perf_event_paranoid is " + paranoid +
                                       "; run as root or `sudo sysctl kernel.perf_event_paranoid=0`)");
            throw MeterUnavailable("perf_event_open(" + pmu_dir + "/events/energy-pkg): " + std::strerror(err));
        }
        first_ = read_count();
        info_ = {"rapl-perf", MeterKind::Measured, "cpu", pmu_dir + "/events/energy-pkg"};
    }
    ~RaplPerf() override {
        if (fd_ >= 0) close(fd_);
    }
    const MeterInfo& info() const override { return info_; }
    double joules() override { return double(read_count() - first_) * ev_.scale; }

private:
    uint64_t read_count() {
        uint64_t v = 0;
        if (read(fd_, &v, sizeof v) != ssize_t(sizeof v)) throw MeterUnavailable("reading the perf RAPL counter failed: " + std::string(std::strerror(errno)));
        return v;  // a 64-bit count: no wrap-around in practice
    }
    PerfEventSpec ev_;
    int fd_ = -1;
    uint64_t first_ = 0;
    MeterInfo info_;
};

}  // namespace

PerfEventSpec parse_perf_event(const std::string& pmu_dir, const std::string& event) {
    if (!fs::is_directory(pmu_dir))
        throw MeterUnavailable(pmu_dir + " does not exist: the kernel exposes no RAPL perf PMU (a virtual machine, or an old kernel)");
    PerfEventSpec s;
    s.type = uint32_t(read_u64(pmu_dir + "/type"));
    const std::string desc = read_line(pmu_dir + "/events/" + event);  // e.g. "event=0x02"
    const auto eq = desc.find("event=");
    if (eq == std::string::npos) throw MeterUnavailable(pmu_dir + "/events/" + event + ": expected 'event=0x..', read '" + desc + "'");
    try {
        s.config = std::stoull(desc.substr(eq + 6), nullptr, 0);
    } catch (const std::exception&) {
        throw MeterUnavailable(pmu_dir + "/events/" + event + ": cannot parse '" + desc + "'");
    }
    const std::string scale_file = pmu_dir + "/events/" + event + ".scale";
    if (fs::exists(scale_file)) {
        try {
            s.scale = std::stod(read_line(scale_file));
        } catch (const std::invalid_argument&) {
            throw MeterUnavailable(scale_file + ": not a number");
        }
    }
    return s;
}

std::unique_ptr<PowerMeter> open_rapl_powercap(const std::string& root) { return std::make_unique<RaplPowercap>(root); }
std::unique_ptr<PowerMeter> open_rapl_perf(const std::string& pmu_dir) {
    return std::make_unique<RaplPerf>(pmu_dir, parse_perf_event(pmu_dir));
}

}  // namespace joule::energy

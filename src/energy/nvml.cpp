// NVML loaded with dlopen at run time: no build-time dependency on the NVIDIA driver.
#include <dlfcn.h>

#include <chrono>

#include "energy/meter.hpp"

namespace joule::energy {

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;

class Nvml : public PowerMeter {
public:
    Nvml(const std::string& library, unsigned index) {
        lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!lib_) {
            const char* e = dlerror();
            throw MeterUnavailable("cannot load " + library + ": " + (e ? e : "unknown error") +
                                   " (NVML ships with the NVIDIA driver; install it or run on a machine with an NVIDIA GPU)");
        }
        init_ = sym<nvmlReturn_t (*)()>("nvmlInit_v2");
        shutdown_ = sym<nvmlReturn_t (*)()>("nvmlShutdown");
        auto handle = sym<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
        energy_ = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*)>("nvmlDeviceGetTotalEnergyConsumption");
        power_ = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetPowerUsage");
        check(init_(), "nvmlInit_v2");
        initialised_ = true;
        check(handle(index, &dev_), "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(index) + ")");
        unsigned long long mj = 0;
        use_counter_ = energy_(dev_, &mj) == kNvmlSuccess;  // Volta and newer
        first_mj_ = mj;
        last_t_ = now();
        info_ = {"nvml", MeterKind::Measured, "gpu" + std::to_string(index),
                 library + (use_counter_ ? " nvmlDeviceGetTotalEnergyConsumption" : " nvmlDeviceGetPowerUsage (integrated)")};
    }
    ~Nvml() override {
        if (initialised_) shutdown_();
        if (lib_) dlclose(lib_);
    }
    const MeterInfo& info() const override { return info_; }
    double joules() override {
        if (use_counter_) {
            unsigned long long mj = 0;
            check(energy_(dev_, &mj), "nvmlDeviceGetTotalEnergyConsumption");
            return double(mj - first_mj_) * 1e-3;
        }
        unsigned mw = 0;
        check(power_(dev_, &mw), "nvmlDeviceGetPowerUsage");
        const double t = now(), w = double(mw) * 1e-3;
        if (have_power_) integrated_ += 0.5 * (w + last_w_) * (t - last_t_);  // trapezoid
        have_power_ = true;
        last_w_ = w;
        last_t_ = t;
        return integrated_;
    }

private:
    template <class F>
    F sym(const char* name) {
        void* p = dlsym(lib_, name);
        if (!p) throw MeterUnavailable(std::string("NVML has no symbol ") + name + " (driver too old?)");
        return reinterpret_cast<F>(p);
    }
    void check(nvmlReturn_t r, const std::string& what) {
        if (r != kNvmlSuccess) throw MeterUnavailable(what + " failed with NVML error " + std::to_string(r));
    }
    static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
    void* lib_ = nullptr;
    bool initialised_ = false, use_counter_ = false, have_power_ = false;
    nvmlReturn_t (*init_)() = nullptr;
    nvmlReturn_t (*shutdown_)() = nullptr;
    nvmlReturn_t (*energy_)(nvmlDevice_t, unsigned long long*) = nullptr;
    nvmlReturn_t (*power_)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlDevice_t dev_ = nullptr;
    unsigned long long first_mj_ = 0;
    double integrated_ = 0, last_w_ = 0, last_t_ = 0;
    MeterInfo info_;
};

}  // namespace

std::unique_ptr<PowerMeter> open_nvml(const std::string& library, unsigned index) { return std::make_unique<Nvml>(library, index); }

}  // namespace joule::energy

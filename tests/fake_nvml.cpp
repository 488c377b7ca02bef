// A stand-in for libnvidia-ml.so.1 for tests/test_energy.cpp: the NVML entry points joule uses.
// FAKE_NVML_NO_ENERGY=1 makes nvmlDeviceGetTotalEnergyConsumption unsupported (pre-Volta GPUs), so the
// meter integrates nvmlDeviceGetPowerUsage (a constant 50 W) instead.
#include <cstdlib>

extern "C" {
static unsigned long long g_energy_mj = 1000000;
int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** dev) {
    if (index != 0) return 2;  // NVML_ERROR_INVALID_ARGUMENT
    *dev = &g_energy_mj;
    return 0;
}
int nvmlDeviceGetTotalEnergyConsumption(void*, unsigned long long* mj) {
    if (std::getenv("FAKE_NVML_NO_ENERGY")) return 3;  // NVML_ERROR_NOT_SUPPORTED
    g_energy_mj += 250;                                 // 0.25 J per call
    *mj = g_energy_mj;
    return 0;
}
int nvmlDeviceGetPowerUsage(void*, unsigned* mw) {
    *mw = 50000;
    return 0;
}
}

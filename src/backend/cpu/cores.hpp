// The cores this process may run on, and the one check of a requested thread count against them.
//
//   int n = cpu::usable_cores();                            // sched_getaffinity's CPU_COUNT (taskset, cgroups' cpusets)
//   cpu::check_threads(8, false, "--threads");              // Error on a 2-core affinity mask
//   cpu::check_threads(8, true, "--threads");               // allowed: the user insists (--oversubscribe)
//
// 0 means "all cores" everywhere and resolves to usable_cores(), not omp_get_num_procs().
#pragma once

#include <cstdint>
#include <string>

namespace joule::cpu {

int usable_cores();
// Throws Error when `requested` < 0, or > usable_cores() and not `oversubscribe`; `flag` names it.
void check_threads(int64_t requested, bool oversubscribe, const std::string& flag = "--threads");

}  // namespace joule::cpu

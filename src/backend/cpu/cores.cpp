#include "backend/cpu/cores.hpp"

#include <sched.h>
#include <unistd.h>

#include "graph/error.hpp"

namespace joule::cpu {

int usable_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? int(n) : 1;
}

void check_threads(int64_t requested, bool oversubscribe, const std::string& flag) {
    if (requested < 0) throw Error(flag + " " + std::to_string(requested) + ": a thread count must be >= 0 (0: all cores)");
    if (requested > 65536) throw Error(flag + " " + std::to_string(requested) + ": too many threads (at most 65536, even with --oversubscribe)");
    const int cores = usable_cores();
    if (requested > cores && !oversubscribe)
        throw Error(flag + " " + std::to_string(requested) + ": this process may run on " + std::to_string(cores) + (cores == 1 ? " core" : " cores") +
                        " (sched_getaffinity)",
                    "use " + flag + " " + std::to_string(cores) + " or fewer (0: all cores), or add --oversubscribe to run more threads than cores");
}

}  // namespace joule::cpu

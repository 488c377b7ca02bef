#include "dist/communicator.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include <mpi.h>

#include "graph/error.hpp"

namespace joule::dist {

void SingleProcess::abort(int code) { std::exit(code); }

bool launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

namespace {

class Mpi final : public Communicator {
public:
    Mpi() {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    ~Mpi() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* engine() const override { return "mpi"; }

    void start_allreduce(float* buf, int64_t n) override {
        if (pending_.count(buf)) throw InternalError("an all-reduce on this buffer is already in flight");
        if (n > int64_t(INT32_MAX)) throw Error("an all-reduce bucket of " + std::to_string(n) + " elements is too large for MPI's int count", "use a smaller --bucket-mib");
        MPI_Request& r = pending_[buf];
        ++allreduces;
        check(MPI_Iallreduce(MPI_IN_PLACE, buf, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r), "MPI_Iallreduce");
    }
    void wait(float* buf) override {
        auto it = pending_.find(buf);
        if (it == pending_.end()) throw InternalError("wait on an all-reduce that was not started");
        const auto t0 = std::chrono::steady_clock::now();
        complete(it->second, "the all-reduce of a gradient bucket");
        wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        pending_.erase(it);
    }
    void progress() override {
        for (auto& [buf, r] : pending_) {
            int done = 0;
            if (r != MPI_REQUEST_NULL) check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
        }
    }
    void allreduce_sum(double* v, int n) override {
        MPI_Request r;
        check(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r), "MPI_Iallreduce");
        complete(r, "a sum over the ranks");
    }
    void broadcast(void* p, size_t bytes, int root) override {
        auto* b = static_cast<char*>(p);
        for (size_t off = 0; off < bytes;) {  // MPI counts are ints
            const int n = int(std::min<size_t>(bytes - off, size_t(1) << 30));
            MPI_Request r;
            check(MPI_Ibcast(b + off, n, MPI_BYTE, root, MPI_COMM_WORLD, &r), "MPI_Ibcast");
            complete(r, "the broadcast of the parameters from rank " + std::to_string(root));
            off += size_t(n);
        }
    }
    std::vector<uint64_t> allgather(uint64_t v) override {
        std::vector<uint64_t> all(size_t(size_), 0);
        MPI_Request r;
        check(MPI_Iallgather(&v, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &r), "MPI_Iallgather");
        complete(r, "the check that every rank runs the same graph");
        return all;
    }
    std::vector<double> allgather(const std::vector<double>& v) override {
        std::vector<double> all(v.size() * size_t(size_), 0.0);
        MPI_Request r;
        check(MPI_Iallgather(v.data(), int(v.size()), MPI_DOUBLE, all.data(), int(v.size()), MPI_DOUBLE, MPI_COMM_WORLD, &r), "MPI_Iallgather");
        complete(r, "the gathering of every rank's timings");
        return all;
    }
    [[noreturn]] void abort(int code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code);
    }

private:
    void check(int rc, const char* what) const {
        if (rc == MPI_SUCCESS) return;
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        throw Error(std::string(what) + " failed on rank " + std::to_string(rank_) + ": " + std::string(text, size_t(len)));
    }
    // Tests r until it completes or the deadline passes: spinning for the first millisecond (a small
    // all-reduce takes microseconds), then sleeping 50 us between tests so a waiting rank leaves its
    // core to the ranks still computing.
    void complete(MPI_Request& r, const std::string& what) {
        using clock = std::chrono::steady_clock;
        const auto t0 = clock::now();
        for (;;) {
            int done = 0;
            check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (done) return;
            const double waited = std::chrono::duration<double>(clock::now() - t0).count();
            if (waited > timeout_s)
                throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + what + " did not complete within " +
                                std::to_string(int(timeout_s)) + " s: another rank has failed, is stuck, or is much slower",
                            "see the other ranks' messages; --comm-timeout sets the deadline");
            if (waited > 1e-3) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    int rank_ = 0, size_ = 1;
    std::map<float*, MPI_Request> pending_;
};

std::unique_ptr<Communicator>& the_world() {
    static std::unique_ptr<Communicator> w;
    return w;
}

}  // namespace

Communicator& init(int& argc, char**& argv) {
    auto& w = the_world();
    if (w) throw InternalError("dist::init called twice");
    if (!launched_by_mpi()) {
        w = std::make_unique<SingleProcess>();
        return *w;
    }
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) throw Error("MPI_Init_thread failed: this process cannot join the MPI job");
    w = std::make_unique<Mpi>();
    return *w;
}

Communicator& world() {
    auto& w = the_world();
    if (!w) w = std::make_unique<SingleProcess>();
    return *w;
}

}  // namespace joule::dist

// The processes of a data-parallel job and the collectives joule asks of them, on an existing engine:
// MPI (Debian's OpenMPI), started by `mpirun` (or a scheduler that launches through it). Without a
// launcher the job is this one process.
//
//   dist::Communicator& world = dist::init(argc, argv);  // once, from main, before any thread starts
//   world.start_allreduce(buf, n);   ...   world.wait(buf);   // sum over ranks, in place
//   world.broadcast(p, bytes, 0);
//
// MPI has no timeout of its own: every collective here is non-blocking underneath and waited on with a
// deadline; past it, wait() throws Error naming the rank and the collective (the CLI then aborts the
// job, so no rank hangs). A rank that exits ends the job through mpirun.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/error.hpp"

namespace joule::dist {

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const char* engine() const = 0;  // "mpi" | "single process"
    // Starts summing buf[0, n) over every rank, in place; the buffer must not be touched until wait(buf).
    virtual void start_allreduce(float* buf, int64_t n) = 0;
    // Completes the all-reduce started on buf. Throws Error past the deadline.
    virtual void wait(float* buf) = 0;
    // Lets started collectives advance (MPI progresses non-blocking collectives only inside its calls).
    virtual void progress() {}
    // Blocking (with the deadline): v[0, n) summed over every rank; bytes copied from `root` to all.
    virtual void allreduce_sum(double* v, int n) = 0;
    virtual void broadcast(void* p, size_t bytes, int root) = 0;
    // Every rank's value, in rank order (to check that the ranks agree).
    virtual std::vector<uint64_t> allgather(uint64_t v) = 0;
    // Every rank's v (of one length on all), concatenated in rank order.
    virtual std::vector<double> allgather(const std::vector<double>& v) = 0;
    // Ends the whole job (every rank) with this exit code.
    [[noreturn]] virtual void abort(int code) = 0;
    double timeout_s = 300;  // the longest wait on a collective (--comm-timeout)
    double wait_seconds = 0;  // spent in wait() since the caller last reset it
    int64_t allreduces = 0;   // started since the caller last reset it
};

// The one process of a run without a launcher: collectives over one rank are the identity.
class SingleProcess final : public Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const char* engine() const override { return "single process"; }
    void start_allreduce(float*, int64_t) override {}
    void wait(float*) override {}
    void allreduce_sum(double*, int) override {}
    void broadcast(void*, size_t, int) override {}
    std::vector<uint64_t> allgather(uint64_t v) override { return {v}; }
    std::vector<double> allgather(const std::vector<double>& v) override { return v; }
    [[noreturn]] void abort(int code) override;
};

// An error every rank of the job raises at once (after a collective all of them completed, e.g. ranks that
// disagree): each prints it and ends without aborting the others, so every rank's message gets out.
struct JobError : Error {
    using Error::Error;
};

// Whether a launcher (mpirun, or srun/PMIx) started this process as a rank of a job.
bool launched_by_mpi();

// The job: initialises MPI when launched by one (MPI_Init_thread; finalised at exit), else one process.
// Call once, from main, before threads start. Throws Error when MPI cannot start.
Communicator& init(int& argc, char**& argv);
// The job init() made (a SingleProcess when init() was not called: tests, library use).
Communicator& world();

}  // namespace joule::dist

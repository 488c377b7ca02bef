/* Two MPI processes on one host: the latency (half a round trip of 8 bytes) and bandwidth (one way, of
 * 64 MiB) of the transport Open MPI picks between them (shared memory), the figures a link spec of
 * data/hw needs. Median of the repeats.
 *   mpicc -O2 bench/mpi_pingpong.c -o /tmp/mpi_pingpong && mpirun -np 2 /tmp/mpi_pingpong */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y); }

static double median_one_way(char* buf, int bytes, int rank, int repeats) {
    double* t = malloc(sizeof(double) * (size_t)repeats);
    for (int r = -2; r < repeats; ++r) { /* two warm-ups */
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
        if (r >= 0) t[r] = (MPI_Wtime() - t0) / 2;
    }
    qsort(t, (size_t)repeats, sizeof(double), cmp);
    const double m = t[repeats / 2];
    free(t);
    return m;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "run with mpirun -np 2\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int big = 64 << 20;
    char* buf = malloc((size_t)big);
    memset(buf, 1, (size_t)big);
    const double small = median_one_way(buf, 8, rank, 1001);
    const double large = median_one_way(buf, big, rank, 21);
    if (rank == 0) printf("{\"latency_us\": %.3f, \"bandwidth_gbps\": %.2f}\n", small * 1e6, big / large / 1e9);
    free(buf);
    MPI_Finalize();
    return 0;
}

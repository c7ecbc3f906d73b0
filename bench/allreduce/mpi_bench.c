/* MPI_Allreduce peer benchmark (Open MPI): one JSON line per size from rank 0.
 * usage: mpi_bench SIZES ITERS WARMUP ITER_BYTES   (sizes in bytes, f32 sum) */
#include <mpi.h>
#include <stdint.h>
#include "bench_common.h"

int main(int argc, char **argv)
{
	int rank, n, ns, iters, warmup;
	size_t sizes[BENCH_MAX_SIZES], iter_bytes, maxb = 0;
	float *sb, *rb;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc != 5) {
		if (rank == 0)
			fprintf(stderr, "usage: mpi_bench SIZES ITERS WARMUP ITER_BYTES\n");
		MPI_Finalize();
		return 2;
	}
	ns = bench_parse_sizes(argv[1], sizes);
	iters = atoi(argv[2]);
	warmup = atoi(argv[3]);
	iter_bytes = (size_t)strtoull(argv[4], NULL, 10);
	for (int i = 0; i < ns; i++)
		if (sizes[i] > maxb)
			maxb = sizes[i];
	sb = calloc(maxb / 4 + 1, 4);
	rb = calloc(maxb / 4 + 1, 4);
	for (int k = 0; k < ns; k++) {
		int count = (int)(sizes[k] / 4), it = bench_iters(iters, iter_bytes, sizes[k]);
		double t0, t, tmax;
		long wrong = 0, wsum = 0;
		for (int i = 0; i < count; i++)
			sb[i] = (float)((i + rank) % 7);
		for (int i = 0; i < (warmup < it ? warmup : it); i++)
			MPI_Allreduce(sb, rb, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		t0 = MPI_Wtime();
		for (int i = 0; i < it; i++)
			MPI_Allreduce(sb, rb, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		t = (MPI_Wtime() - t0) / it;
		for (int i = 0; i < count; i++) {
			float e = 0;
			for (int r = 0; r < n; r++)
				e += (float)((i + r) % 7);
			wrong += rb[i] != e;
		}
		MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&wrong, &wsum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0)
			printf("{\"impl\":\"mpi\",\"n\":%d,\"bytes\":%zu,\"iters\":%d,\"time_us\":%.3f,"
			       "\"wrong\":%ld}\n", n, sizes[k], it, tmax * 1e6, wsum);
		fflush(stdout);
	}
	free(sb);
	free(rb);
	MPI_Finalize();
	return 0;
}

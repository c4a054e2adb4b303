/*
 * mpi-check: the MPI job of the rxe cluster's e2e (built into localhost/rdma-perf:e2e by
 * images.sh). Run with two or more ranks:
 *
 *   1. an MPI_Allreduce (sum) of COUNT doubles, rank r contributing r+1+i at index i; every
 *      rank checks every element against the closed form and prints
 *      "allreduce ok ranks=N count=COUNT" or "allreduce FAILED ...";
 *   2. a point-to-point bandwidth run between ranks 0 and 1 in the manner of osu_bw: WINDOW
 *      non-blocking sends of SIZE bytes, ITERS times, each window acknowledged; rank 0
 *      prints "p2p bytes=SIZE iters=ITERS window=WINDOW seconds=S MBps=X".
 *
 * Arguments (all optional): COUNT SIZE ITERS WINDOW. Exit status 1 when a check failed.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
	int rank, size, bad = 0, i, it, w;
	long count = argc > 1 ? atol(argv[1]) : 1 << 16;
	long bytes = argc > 2 ? atol(argv[2]) : 1 << 16;
	int iters = argc > 3 ? atoi(argv[3]) : 20;
	int window = argc > 4 ? atoi(argv[4]) : 8;
	char host[MPI_MAX_PROCESSOR_NAME];
	int hostlen;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &hostlen);
	printf("rank %d of %d on %s\n", rank, size, host);
	fflush(stdout);
	if (count < 1 || bytes < 1 || iters < 1 || window < 1 || size < 2) {
		if (rank == 0)
			fprintf(stderr, "mpi-check: want 2+ ranks and positive COUNT SIZE ITERS WINDOW\n");
		MPI_Finalize();
		return 2;
	}

	double *in = malloc(count * sizeof(double)), *out = malloc(count * sizeof(double));
	for (i = 0; i < count; i++)
		in[i] = rank + 1 + i;
	MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	/* sum over r of (r+1+i) = N(N+1)/2 + N*i */
	for (i = 0; i < count; i++) {
		double want = (double)size * (size + 1) / 2 + (double)size * i;
		if (out[i] != want) {
			printf("allreduce FAILED rank=%d index=%d got=%.0f want=%.0f\n", rank, i, out[i], want);
			bad = 1;
			break;
		}
	}
	if (!bad)
		printf("allreduce ok rank=%d ranks=%d count=%ld\n", rank, size, count);
	fflush(stdout);

	char *buf = malloc(bytes);
	MPI_Request *req = malloc(window * sizeof(MPI_Request));
	memset(buf, rank, bytes);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	if (rank <= 1) {
		for (it = 0; it < iters; it++) {
			for (w = 0; w < window; w++) {
				if (rank == 0)
					MPI_Isend(buf, bytes, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[w]);
				else
					MPI_Irecv(buf, bytes, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[w]);
			}
			MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
			if (rank == 0)
				MPI_Recv(NULL, 0, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			else
				MPI_Send(NULL, 0, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
		}
	}
	double secs = MPI_Wtime() - t0;
	if (rank == 1) {
		for (i = 0; i < bytes; i++)
			if (buf[i] != 0) {
				printf("p2p FAILED: byte %d is %d, rank 0 sent 0\n", i, buf[i]);
				bad = 1;
				break;
			}
	}
	if (rank == 0)
		printf("p2p bytes=%ld iters=%d window=%d seconds=%.3f MBps=%.3f\n", bytes, iters, window, secs,
		       (double)bytes * iters * window / secs / 1e6);
	fflush(stdout);
	int anybad = 0;
	MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	MPI_Finalize();
	return anybad;
}

// Gloo peer benchmark: ring (gloo::allreduce, the path torch.distributed uses)
// and halving-doubling (AllreduceHalvingDoubling), TCP transport on loopback
// (or on GLOO_BENCH_ADDR), file-store rendezvous. One JSON line per size from
// rank 0.
// usage: gloo_bench RANK SIZE STOREDIR ring|hd SIZES ITERS WARMUP ITER_BYTES
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "bench_common.h"
}

static double now_s()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
	    .count();
}

int main(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: gloo_bench RANK SIZE STOREDIR ring|hd SIZES ITERS WARMUP ITER_BYTES\n");
		return 2;
	}
	int rank = atoi(argv[1]), n = atoi(argv[2]);
	std::string algo = argv[4];
	size_t sizes[BENCH_MAX_SIZES];
	int ns = bench_parse_sizes(argv[5], sizes);
	int iters = atoi(argv[6]), warmup = atoi(argv[7]);
	size_t iter_bytes = strtoull(argv[8], nullptr, 10), maxb = 0;
	for (int i = 0; i < ns; i++)
		maxb = std::max(maxb, sizes[i]);

	// GLOO_BENCH_ADDR: the address this rank listens on and gives its peers
	// (sim.sh: the node's fabric address); loopback otherwise.
	const char *addr = getenv("GLOO_BENCH_ADDR");
	gloo::transport::tcp::attr attr;
	attr.hostname = addr && *addr ? addr : "127.0.0.1";
	attr.ai_family = AF_INET;
	auto dev = gloo::transport::tcp::CreateDevice(attr);
	gloo::rendezvous::FileStore fstore(argv[3]);
	gloo::rendezvous::PrefixStore store("gloo-" + algo, fstore);
	auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
	ctx->setTimeout(std::chrono::seconds(120));
	ctx->connectFullMesh(store, dev);

	std::vector<float> buf(maxb / 4 + 1);
	double tsec = 0;
	for (int k = 0; k < ns; k++) {
		size_t count = sizes[k] / 4;
		int it = bench_iters(iters, iter_bytes, sizes[k]);
		auto fillv = [&] {
			for (size_t i = 0; i < count; i++)
				buf[i] = (float)((i + rank) % 7);
		};
		fillv();
		std::unique_ptr<gloo::AllreduceHalvingDoubling<float>> hd;
		std::vector<float *> ptrs{buf.data()};
		if (algo == "hd")
			hd.reset(new gloo::AllreduceHalvingDoubling<float>(ctx, ptrs, (int)count));
		auto once = [&] {
			if (hd) {
				hd->run();
			} else {
				gloo::AllreduceOptions opts(ctx);
				opts.setOutput(buf.data(), count);
				opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
				opts.setReduceFunction(
				    static_cast<void (*)(void *, const void *, const void *, size_t)>(
				        &gloo::sum<float>));
				opts.setTag(0);
				gloo::allreduce(opts);
			}
		};
		for (int i = 0; i < std::min(warmup, it); i++)
			once();
		{
			gloo::BarrierOptions bo(ctx);
			gloo::barrier(bo);
		}
		double t0 = now_s();
		for (int i = 0; i < it; i++)
			once();
		tsec = (now_s() - t0) / it;
		// in place: check one fresh call
		fillv();
		once();
		long wrong = 0;
		for (size_t i = 0; i < count; i++) {
			float e = 0;
			for (int r = 0; r < n; r++)
				e += (float)((i + r) % 7);
			wrong += buf[i] != e;
		}
		// max time, summed #wrong over ranks
		double vals[2] = {tsec, (double)wrong};
		double tmax[2] = {vals[0], vals[1]};
		{
			gloo::AllreduceOptions opts(ctx);
			opts.setOutput(tmax, 1);
			opts.setReduceFunction(
			    static_cast<void (*)(void *, const void *, const void *, size_t)>(
			        &gloo::max<double>));
			opts.setTag(1);
			gloo::allreduce(opts);
			gloo::AllreduceOptions o2(ctx);
			o2.setOutput(tmax + 1, 1);
			o2.setReduceFunction(
			    static_cast<void (*)(void *, const void *, const void *, size_t)>(
			        &gloo::sum<double>));
			o2.setTag(2);
			gloo::allreduce(o2);
		}
		if (rank == 0)
			printf("{\"impl\":\"gloo_%s\",\"n\":%d,\"bytes\":%zu,\"iters\":%d,\"time_us\":%.3f,"
			       "\"wrong\":%ld}\n",
			       algo.c_str(), n, sizes[k], it, tmax[0] * 1e6, (long)tmax[1]);
		fflush(stdout);
	}
	return 0;
}

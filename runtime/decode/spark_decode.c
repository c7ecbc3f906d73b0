/* spark-decode - tensor-parallel batch-1 decoding of a Llama/Qwen-family
 * model on libsparkcoll, with timings that separate compute from
 * communication.
 *
 *   spark-decode (--model DIR | --synthetic SHAPE [--layers N] [--dtype D])
 *       [--prompt IDS] [--tokens N] [--algo auto|oneshot|ring|relay|doubling]
 *       [--comm-dtype f32|bf16] [--dump-logits FILE] [--membw] [-o table|json]
 *       [--local N]
 *   spark-decode (--model DIR | --synthetic SHAPE) --serve [--host H] [--port P] ...
 *
 * Three ways to run: `--local N` forks N ranks on this machine over loopback;
 * inside a job (SPARK_WORLD_SIZE or WORLD_SIZE set) it is one rank and joins
 * the others with sc_comm_init_from_env(); otherwise it is a single rank
 * without communication. Rank 0 prints the report, or with --serve answers
 * HTTP requests (serve.h) that every rank decodes in lockstep. */
#include "dec.h"
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROG "spark-decode"

typedef struct {
	const char *model_dir, *shape_name, *catalog, *dump, *prompt_s;
	dec_config_t shape;
	dec_dtype_t dtype;
	uint64_t seed;
	int layers, tokens, local, json, membw, threads, prefault, warmup;
	sc_algo_t algo;
	sc_dtype_t comm_dtype;
	int *prompt, n_prompt;
	int serve;
	serve_opts_t so;
	char model_id[256];
	char store_path[4096]; /* --model NAME found in SPARK_MODEL_DIR */
} args_t;

/* A model pushed with `sparkctl model push` lies in each node's own store,
 * which a job gets as SPARK_MODEL_DIR, at a path that differs per node. So
 * --model NAME (no '/') is looked up in that store first: one recipe
 * (`model: NAME`) then serves the pushed copy on every node, whatever folder
 * of that name the directory it was started from holds (issue 28); a NAME
 * the store lacks is a directory here as given. Which one it loaded is in
 * the report (`model`) and, when served, on stderr (the job's log). */
static void resolve_store_model(args_t *a)
{
	const char *store = getenv("SPARK_MODEL_DIR");
	struct stat st;

	if (!a->model_dir || strchr(a->model_dir, '/') || !store || !*store)
		return;
	if ((size_t)snprintf(a->store_path, sizeof(a->store_path), "%s/%s", store, a->model_dir) >=
	    sizeof(a->store_path))
		return;
	if (stat(a->store_path, &st) == 0 && S_ISDIR(st.st_mode))
		a->model_dir = a->store_path;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: " PROG " (--model DIR | --synthetic SHAPE) [options]\n"
	        "\n"
	        "Greedy batch-1 decoding of a Llama/Qwen-family model, tensor-parallel over\n"
	        "libsparkcoll (two all-reduces per layer and token).\n"
	        "\n"
	        "model:\n"
	        "  --model DIR          Hugging Face directory: config.json + *.safetensors (f32/f16/bf16);\n"
	        "                       a bare NAME is looked up in $SPARK_MODEL_DIR first (the\n"
	        "                       node's store of `sparkctl model push`), then here\n"
	        "  --synthetic SHAPE    deterministic weights of a catalog shape (--list-shapes)\n"
	        "  --layers N           use only the first N layers (to fit memory)\n"
	        "  --dtype f32|f16|bf16 synthetic weights' type (default bf16)\n"
	        "  --seed N             synthetic weights' seed (default 1)\n"
	        "  --catalog FILE       another shape catalog (YAML) instead of the built-in one\n"
	        "  --list-shapes        print the catalog and exit\n"
	        "run:\n"
	        "  --prompt IDS         prompt token ids, comma-separated (default 1)\n"
	        "  --tokens N           tokens to generate (default 32)\n"
	        "  --warmup N           untimed steps before the prompt (default 1)\n"
	        "  --algo auto|oneshot|ring|relay|doubling  all-reduce algorithm (default auto)\n"
	        "  --comm-dtype f32|bf16     all-reduce element type (default f32)\n"
	        "  --local N            run N ranks on this machine over loopback\n"
	        "  --threads N          BLAS threads per rank (default 1)\n"
	        "  --no-prefault        do not touch this rank's weight pages before the run\n"
	        "output:\n"
	        "  --dump-logits FILE   write every step's full logits (f32) to FILE\n"
	        "  --membw              also measure memcpy bandwidth (rank 0) for comparison\n"
	        "  -o table|json        report format (default table)\n"
	        "server (--serve; docs/serving.md):\n"
	        "  --serve              rank 0 serves an OpenAI-compatible HTTP API until SIGTERM\n"
	        "  --host ADDR          listen address (default 0.0.0.0)\n"
	        "  --port N             listen port (default 8000; 0: any, logged)\n"
	        "  --served-model-name NAME  the model id of /v1/models (default from the\n"
	        "                       model dir, or synthetic:SHAPE)\n"
	        "  --tokenizer bytes|none  text as bytes (the stand-in; default for synthetic\n"
	        "                       shapes) or token ids only (default for --model)\n"
	        "  --eos ID             stop a request after generating this id\n"
	        "  --queue N            requests that may wait behind the running one (default 16)\n"
	        "  --max-conns N        concurrent connections (default 64)\n"
	        "  --max-body BYTES     request body limit (default 1048576)\n"
	        "  --max-tokens-cap N   largest max_tokens (default 4096)\n"
	        "  --max-context N      prompt + max_tokens limit (default 8192)\n"
	        "  --idle-timeout S     close idle connections after S seconds (default 30)\n"
	        "  --head-timeout S     a request's headers must arrive whole within S seconds of\n"
	        "                       the connection (or its last answer), else 408 and closed\n"
	        "                       (default 10)\n"
	        "  --api-key-file FILE  require Authorization: Bearer KEY (the file's first line;\n"
	        "                       or the variable SPARK_DECODE_API_KEY) on /v1/\n"
	        "\n"
	        "Without --local, inside a job (SPARK_* or RANK/WORLD_SIZE/MASTER_ADDR\n"
	        "variables) it is one rank of the job; otherwise a single rank.\n");
}

static void die_rank(int rank, int world, const char *msg)
{
	if (world > 1)
		fprintf(stderr, PROG ": rank %d: %s\n", rank, msg);
	else
		fprintf(stderr, PROG ": %s\n", msg);
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1 << 24) &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
		if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else {
			buf[n] = 0;
			*len = (size_t)n;
		}
	}
	fclose(f);
	return buf;
}

/* Load this rank's shard unless `rc` already failed (and was reported), then
 * agree with the others: everyone learns whether someone failed, instead of
 * waiting for a timeout. 0 with *m loaded, or 1 (nothing to free). */
static int load_agreed(sc_comm_t *comm, int rank, int world, const args_t *a, int rc,
                       dec_model_t *m, double *load_s)
{
	dec_load_opts_t lo = {.model_dir = a->model_dir,
	                      .shape = a->model_dir ? NULL : &a->shape,
	                      .dtype = a->dtype,
	                      .seed = a->seed,
	                      .layers = a->layers,
	                      .prefault = a->prefault};
	char err[DEC_ERR_LEN];
	double t0 = dec_now();
	int32_t bad;

	if (rc == 0 && (rc = dec_model_load(m, &lo, rank, world, err, sizeof(err))) < 0)
		die_rank(rank, world, err);
	*load_s = dec_now() - t0;
	bad = rc < 0;
	if (world > 1 && sc_allreduce(comm, &bad, &bad, 1, SC_I32, SC_MAX) < 0)
		bad = 1;
	if (bad && rc == 0)
		dec_model_free(m);
	return bad ? 1 : 0;
}

static int serve_rank(sc_comm_t *comm, int rank, int world, const args_t *a)
{
	dec_model_t m;
	char err[DEC_ERR_LEN];
	double load_s;
	int rc = 0;

	/* rank 0 binds first: a taken port fails before minutes of loading */
	if (rank == 0 && (rc = serve_bind(&a->so, err, sizeof(err))) < 0)
		die_rank(rank, world, err);
	if (load_agreed(comm, rank, world, a, rc, &m, &load_s))
		return 1;
	rc = rank == 0 ? serve_rank0(&m, comm, &a->so) : serve_follow(&m, comm, &a->so);
	dec_model_free(&m);
	return rc;
}

/* One rank: load its shard, decode, rank 0 reports. Returns an exit code. */
static int run_rank(sc_comm_t *comm, int rank, int world, const args_t *a, const char *mode)
{
	dec_model_t m;
	dec_run_opts_t ro = {.prompt = a->prompt,
	                     .n_prompt = a->n_prompt,
	                     .n_tokens = a->tokens,
	                     .warmup = a->warmup,
	                     .algo = a->algo,
	                     .comm_dtype = a->comm_dtype,
	                     .want_logits = a->dump != NULL};
	dec_result_t res;
	dec_report_t rep = {0};
	char err[DEC_ERR_LEN], source[300];
	int rc;

	dec_blas_threads(a->threads);
	if (a->serve)
		return serve_rank(comm, rank, world, a);
	if (a->membw && rank == 0 && dec_measure_membw((size_t)256 << 20, &rep.memcpy_gbs,
	                                               &rep.read_gbs) < 0) {
		die_rank(rank, world, "out of memory for the bandwidth probe");
		return 1;
	}
	if (world > 1 && (rc = sc_barrier(comm)) < 0) {
		snprintf(err, sizeof(err), "barrier failed: %s", sc_strerror(rc));
		die_rank(rank, world, err);
		return 1;
	}
	if (load_agreed(comm, rank, world, a, 0, &m, &rep.load_s))
		return 1;
	if (rank == 0 && a->dump && !(ro.dump = fopen(a->dump, "wb"))) {
		snprintf(err, sizeof(err), "%s: %s", a->dump, strerror(errno));
		die_rank(rank, world, err);
		/* the others still gather logits: keep going, fail at the end */
	}
	rc = dec_generate(&m, comm, &ro, &res, err, sizeof(err));
	if (ro.dump && fclose(ro.dump) != 0 && rc == 0) {
		snprintf(err, sizeof(err), "%s: write failed", a->dump);
		rc = -EIO;
	}
	if (rc < 0) {
		die_rank(rank, world, err);
		dec_model_free(&m);
		return 1;
	}
	if (a->membw && rank == 0) { /* again after the run: the best of both */
		double c2 = 0, r2 = 0;
		if (dec_measure_membw((size_t)256 << 20, &c2, &r2) == 0) {
			rep.memcpy_gbs = c2 > rep.memcpy_gbs ? c2 : rep.memcpy_gbs;
			rep.read_gbs = r2 > rep.read_gbs ? r2 : rep.read_gbs;
		}
	}
	if (rank == 0) {
		sc_info_t info;
		if (a->model_dir)
			snprintf(source, sizeof(source), "%s", a->model_dir);
		else
			snprintf(source, sizeof(source), "synthetic:%s", a->shape.name);
		rep.m = &m;
		rep.r = &res;
		rep.source = source;
		rep.mode = mode;
		rep.n_prompt = a->n_prompt;
		rep.algo_requested = a->algo;
		rep.comm_dtype = a->comm_dtype;
		snprintf(rep.transport, sizeof(rep.transport), "none");
		if (comm && sc_comm_info(comm, &info) == 0)
			snprintf(rep.transport, sizeof(rep.transport), "%s", info.transport);
		if (a->json)
			dec_report_json(stdout, &rep);
		else
			dec_report_table(stdout, &rep);
		fflush(stdout);
	}
	dec_result_free(&res);
	dec_model_free(&m);
	return a->dump && rank == 0 && !ro.dump ? 1 : 0;
}

static int local_child(int rank, int n, char **peers, int fd, const args_t *a)
{
	sc_options_t o;
	sc_comm_t *c = NULL;
	int rc;

	sc_options_default(&o);
	if (sc_options_from_env(&o) < 0) {
		die_rank(rank, n, "bad SPARK_COLL_* variable");
		return 2;
	}
	o.listen_fd = fd;
	if ((rc = sc_comm_init(&c, rank, n, (const char *const *)peers, &o)) < 0) {
		char err[DEC_ERR_LEN];
		snprintf(err, sizeof(err), "cannot connect the local ranks: %s", sc_strerror(rc));
		die_rank(rank, n, err);
		return 1;
	}
	rc = run_rank(c, rank, n, a, "local");
	sc_comm_destroy(c);
	return rc;
}

static pid_t local_pids[DEC_MAX_WORLD];
static volatile sig_atomic_t local_n;

static void forward_sig(int sig)
{
	for (int i = 0; i < local_n; i++)
		kill(local_pids[i], sig);
}

/* Fork n ranks wired over loopback: listeners are bound before the fork so no
 * port can be taken in between; each child gets its own as listen_fd. */
static int run_local(const args_t *a)
{
	int n = a->local, fds[DEC_MAX_WORLD], status = 0;
	char store[DEC_MAX_WORLD][32], *peers[DEC_MAX_WORLD];
	pid_t pids[DEC_MAX_WORLD];

	for (int i = 0; i < n; i++) {
		struct sockaddr_in sa = {.sin_family = AF_INET};
		socklen_t sl = sizeof(sa);
		peers[i] = store[i];
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    listen(fds[i], DEC_MAX_WORLD) < 0 ||
		    getsockname(fds[i], (struct sockaddr *)&sa, &sl) < 0) {
			fprintf(stderr, PROG ": cannot listen on loopback: %s\n", strerror(errno));
			for (int j = 0; j <= i; j++)
				if (fds[j] >= 0)
					close(fds[j]);
			return 1;
		}
		snprintf(store[i], sizeof(store[i]), "127.0.0.1:%u", ntohs(sa.sin_port));
	}
	fflush(stdout);
	fflush(stderr);
	local_n = 0;
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			for (int j = 0; j < n; j++)
				if (j != i)
					close(fds[j]);
			_exit(local_child(i, n, peers, fds[i], a));
		}
		if (pids[i] < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			for (int j = 0; j < i; j++)
				kill(pids[j], SIGTERM);
			for (int j = 0; j < i; j++)
				waitpid(pids[j], NULL, 0);
			for (int j = 0; j < n; j++)
				close(fds[j]);
			return 1;
		}
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	/* a TERM or INT for this process is for the ranks: rank 0 of a server
	 * drains and tells the others when to exit */
	{
		struct sigaction sa = {.sa_handler = forward_sig};
		memcpy(local_pids, pids, sizeof(pid_t) * (size_t)n);
		local_n = n;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
	}
	for (int i = 0; i < n; i++) {
		int st;
		pid_t w;
		while ((w = waitpid(pids[i], &st, 0)) < 0 && errno == EINTR)
			;
		if (w < 0)
			continue;
		if (WIFSIGNALED(st)) {
			fprintf(stderr, PROG ": rank %d was killed by signal %d\n", i, WTERMSIG(st));
			status = 1;
		} else if (WEXITSTATUS(st)) {
			status = status ? status : WEXITSTATUS(st);
		}
	}
	return status;
}

static int in_job(void)
{
	const char *s = getenv("SPARK_WORLD_SIZE");
	if (!s || !*s)
		s = getenv("WORLD_SIZE");
	if (!s || !*s)
		s = getenv("OMPI_COMM_WORLD_SIZE");
	return s && *s;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

#define USAGE_ERR(...)                                                              \
	do {                                                                            \
		fprintf(stderr, PROG ": " __VA_ARGS__);                                     \
		fprintf(stderr, " (try: " PROG " --help)\n");                               \
		rc = 2;                                                                     \
		goto out;                                                                   \
	} while (0)

int main(int argc, char **argv)
{
	enum { O_MODEL = 256, O_SYNTH, O_LAYERS, O_DTYPE, O_SEED, O_CATALOG, O_LIST, O_PROMPT,
	       O_TOKENS, O_ALGO, O_CDT, O_LOCAL, O_THREADS, O_NOPF, O_DUMP, O_MEMBW, O_VERSION, O_WARMUP,
	       O_SERVE, O_HOST, O_PORT, O_NAME, O_TOK, O_EOS, O_QUEUE, O_MAXCONN, O_MAXBODY,
	       O_MAXTOK, O_MAXCTX, O_IDLE, O_HEADTO, O_KEYFILE };
	static const struct option opts[] = {
		{"model", required_argument, 0, O_MODEL},
		{"synthetic", required_argument, 0, O_SYNTH},
		{"layers", required_argument, 0, O_LAYERS},
		{"dtype", required_argument, 0, O_DTYPE},
		{"seed", required_argument, 0, O_SEED},
		{"catalog", required_argument, 0, O_CATALOG},
		{"list-shapes", no_argument, 0, O_LIST},
		{"prompt", required_argument, 0, O_PROMPT},
		{"tokens", required_argument, 0, O_TOKENS},
		{"warmup", required_argument, 0, O_WARMUP},
		{"algo", required_argument, 0, O_ALGO},
		{"comm-dtype", required_argument, 0, O_CDT},
		{"local", required_argument, 0, O_LOCAL},
		{"threads", required_argument, 0, O_THREADS},
		{"no-prefault", no_argument, 0, O_NOPF},
		{"dump-logits", required_argument, 0, O_DUMP},
		{"membw", no_argument, 0, O_MEMBW},
		{"output", required_argument, 0, 'o'},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		{"serve", no_argument, 0, O_SERVE},
		{"host", required_argument, 0, O_HOST},
		{"port", required_argument, 0, O_PORT},
		{"served-model-name", required_argument, 0, O_NAME},
		{"tokenizer", required_argument, 0, O_TOK},
		{"eos", required_argument, 0, O_EOS},
		{"queue", required_argument, 0, O_QUEUE},
		{"max-conns", required_argument, 0, O_MAXCONN},
		{"max-body", required_argument, 0, O_MAXBODY},
		{"max-tokens-cap", required_argument, 0, O_MAXTOK},
		{"max-context", required_argument, 0, O_MAXCTX},
		{"idle-timeout", required_argument, 0, O_IDLE},
		{"head-timeout", required_argument, 0, O_HEADTO},
		{"api-key-file", required_argument, 0, O_KEYFILE},
		{0, 0, 0, 0},
	};
	args_t a = {.dtype = DEC_BF16, .seed = 1, .tokens = 32, .threads = 1, .prefault = 1, .warmup = 1,
	            .algo = SC_ALGO_AUTO, .comm_dtype = SC_F32, .prompt_s = "1"};
	char err[DEC_ERR_LEN], *catalog = NULL;
	size_t catlen = 0;
	int c, rc = 0, list = 0, tok = -1;
	const char *name = NULL, *keyfile = NULL;
	char *key = NULL;

	a.so = (serve_opts_t){.host = "0.0.0.0", .port = 8000, .queue = 16, .max_conns = 64,
	                      .max_body = 1 << 20, .max_tokens_cap = 4096, .max_context = 8192,
	                      .idle_timeout_s = 30, .head_timeout_s = 10};

	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case O_MODEL: a.model_dir = optarg; break;
		case O_SYNTH: a.shape_name = optarg; break;
		case O_LAYERS:
			if (parse_int(optarg, 1, 1024, &a.layers) < 0)
				USAGE_ERR("--layers wants a number of layers, 1-1024");
			break;
		case O_DTYPE:
			if (dec_dtype_parse(optarg, &a.dtype) < 0)
				USAGE_ERR("--dtype must be f32, f16 or bf16");
			break;
		case O_SEED: {
			char *end;
			errno = 0;
			a.seed = strtoull(optarg, &end, 0);
			if (errno || *end || end == optarg)
				USAGE_ERR("--seed wants a number");
			break;
		}
		case O_CATALOG: a.catalog = optarg; break;
		case O_LIST: list = 1; break;
		case O_PROMPT: a.prompt_s = optarg; break;
		case O_TOKENS:
			if (parse_int(optarg, 1, 1 << 20, &a.tokens) < 0)
				USAGE_ERR("--tokens wants a positive number");
			break;
		case O_WARMUP:
			if (parse_int(optarg, 0, 1000, &a.warmup) < 0)
				USAGE_ERR("--warmup wants a number of steps, 0-1000");
			break;
		case O_ALGO:
			if (sc_algo_parse(optarg, &a.algo) < 0)
				USAGE_ERR("--algo must be auto, oneshot, ring, relay or doubling");
			break;
		case O_CDT:
			if (strcmp(optarg, "f32") == 0)
				a.comm_dtype = SC_F32;
			else if (strcmp(optarg, "bf16") == 0)
				a.comm_dtype = SC_BF16;
			else
				USAGE_ERR("--comm-dtype must be f32 or bf16");
			break;
		case O_LOCAL:
			if (parse_int(optarg, 1, DEC_MAX_WORLD, &a.local) < 0)
				USAGE_ERR("--local wants a number of ranks, 1-%d", DEC_MAX_WORLD);
			break;
		case O_THREADS:
			if (parse_int(optarg, 1, 1024, &a.threads) < 0)
				USAGE_ERR("--threads wants a positive number");
			break;
		case O_NOPF: a.prefault = 0; break;
		case O_DUMP: a.dump = optarg; break;
		case O_MEMBW: a.membw = 1; break;
		case 'o':
			if (strcmp(optarg, "json") == 0)
				a.json = 1;
			else if (strcmp(optarg, "table") != 0)
				USAGE_ERR("-o must be table or json");
			break;
		case 'h': usage(stdout); return 0;
		case O_VERSION: printf(PROG " %d.%d\n", SC_VERSION_MAJOR, SC_VERSION_MINOR); return 0;
		case O_SERVE: a.serve = 1; break;
		case O_HOST: a.so.host = optarg; break;
		case O_PORT:
			if (parse_int(optarg, 0, 65535, &a.so.port) < 0)
				USAGE_ERR("--port wants a port number, 0-65535");
			break;
		case O_NAME:
			if (!*optarg || strlen(optarg) >= sizeof(a.model_id))
				USAGE_ERR("--served-model-name wants a name of 1-%zu characters",
				          sizeof(a.model_id) - 1);
			name = optarg;
			break;
		case O_TOK:
			if (strcmp(optarg, "bytes") == 0)
				tok = SERVE_TOK_BYTES;
			else if (strcmp(optarg, "none") == 0)
				tok = SERVE_TOK_NONE;
			else
				USAGE_ERR("--tokenizer must be bytes or none");
			break;
		case O_EOS:
			if (parse_int(optarg, 0, 1 << 30, &a.so.run.eos) < 0)
				USAGE_ERR("--eos wants a token id");
			a.so.run.eos_set = 1;
			break;
		case O_QUEUE:
			if (parse_int(optarg, 0, 100000, &a.so.queue) < 0)
				USAGE_ERR("--queue wants a number of requests, 0-100000");
			break;
		case O_MAXCONN:
			if (parse_int(optarg, 1, 100000, &a.so.max_conns) < 0)
				USAGE_ERR("--max-conns wants a number of connections, 1-100000");
			break;
		case O_MAXBODY:
			if (parse_int(optarg, 64, 1 << 30, &a.so.max_body) < 0)
				USAGE_ERR("--max-body wants a number of bytes, 64-1073741824");
			break;
		case O_MAXTOK:
			if (parse_int(optarg, 1, 1 << 20, &a.so.max_tokens_cap) < 0)
				USAGE_ERR("--max-tokens-cap wants a number of tokens, 1-1048576");
			break;
		case O_MAXCTX:
			if (parse_int(optarg, 2, SERVE_MAX_CONTEXT, &a.so.max_context) < 0)
				USAGE_ERR("--max-context wants a number of tokens, 2-1048576");
			break;
		case O_KEYFILE: keyfile = optarg; break;
		case O_IDLE:
			if (parse_int(optarg, 1, 86400, &a.so.idle_timeout_s) < 0)
				USAGE_ERR("--idle-timeout wants seconds, 1-86400");
			break;
		case O_HEADTO:
			if (parse_int(optarg, 1, 3600, &a.so.head_timeout_s) < 0)
				USAGE_ERR("--head-timeout wants seconds, 1-3600");
			break;
		default: fprintf(stderr, "(try: " PROG " --help)\n"); return 2;
		}
	}
	if (optind != argc)
		USAGE_ERR("unexpected argument '%s'", argv[optind]);
	if (a.catalog && !(catalog = read_file(a.catalog, &catlen))) {
		fprintf(stderr, PROG ": %s: cannot read the shape catalog\n", a.catalog);
		rc = 1;
		goto out;
	}
	if (list) {
		if (dec_shape_list(catalog, catlen, stdout, err, sizeof(err)) < 0) {
			fprintf(stderr, PROG ": %s\n", err);
			rc = 1;
		}
		goto out;
	}
	if (!a.model_dir == !a.shape_name)
		USAGE_ERR("give exactly one of --model DIR and --synthetic SHAPE");
	resolve_store_model(&a);
	if (a.serve && a.model_dir == a.store_path)
		fprintf(stderr, PROG ": model %s from the node's store (SPARK_MODEL_DIR)\n", a.model_dir);
	if (dec_parse_ids(a.prompt_s, &a.prompt, &a.n_prompt) < 0)
		USAGE_ERR("--prompt wants token ids like 1,2,3");
	if (a.shape_name &&
	    dec_shape_find(catalog, catlen, a.shape_name, &a.shape, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		rc = 1;
		goto out;
	}
	if (a.serve) {
		if (name) {
			snprintf(a.model_id, sizeof(a.model_id), "%s", name);
		} else if (a.model_dir) {
			/* the directory's last component */
			char tmp[sizeof(a.model_id)];
			size_t l;
			snprintf(tmp, sizeof(tmp), "%s", a.model_dir);
			while ((l = strlen(tmp)) > 1 && tmp[l - 1] == '/')
				tmp[l - 1] = 0;
			snprintf(a.model_id, sizeof(a.model_id), "%s",
			         strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp);
		} else {
			snprintf(a.model_id, sizeof(a.model_id), "synthetic:%s", a.shape.name);
		}
		a.so.model_id = a.model_id;
		a.so.tok = tok >= 0 ? (serve_tok_t)tok : a.model_dir ? SERVE_TOK_NONE : SERVE_TOK_BYTES;
		a.so.run.algo = a.algo;
		a.so.run.comm_dtype = a.comm_dtype;
		if (a.so.max_tokens_cap >= a.so.max_context)
			USAGE_ERR("--max-tokens-cap (%d) must be below --max-context (%d)",
			          a.so.max_tokens_cap, a.so.max_context);
		if (a.dump)
			USAGE_ERR("--dump-logits does not go with --serve");
		if (keyfile) {
			size_t kl = 0;
			if (!(key = read_file(keyfile, &kl))) {
				fprintf(stderr, PROG ": %s: cannot read the API key file\n", keyfile);
				rc = 1;
				goto out;
			}
			key[strcspn(key, "\r\n")] = 0;
		} else if (getenv("SPARK_DECODE_API_KEY") && *getenv("SPARK_DECODE_API_KEY")) {
			key = strdup(getenv("SPARK_DECODE_API_KEY"));
		}
		if (key && strlen(key) < 8) {
			fprintf(stderr, PROG ": the API key is shorter than 8 characters\n");
			rc = 2;
			goto out;
		}
		a.so.api_key = key;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (a.local) {
		/* check everything once here, so a bad model is one error, not N */
		int vocab = a.shape.vocab;
		if (a.model_dir) {
			dec_model_t m;
			dec_load_opts_t lo = {.model_dir = a.model_dir, .layers = a.layers};
			rc = dec_model_load(&m, &lo, 0, a.local, err, sizeof(err));
			if (rc == 0) {
				vocab = m.cfg.vocab;
				dec_model_free(&m);
			}
		} else {
			dec_config_t cfg = a.shape;
			rc = 0;
			if (a.layers > cfg.n_layers)
				rc = -EINVAL, snprintf(err, sizeof(err), "--layers %d: %s has only %d layers",
				                       a.layers, cfg.name, cfg.n_layers);
			else
				rc = dec_config_check_world(&cfg, a.local, err, sizeof(err));
		}
		for (int i = 0; rc == 0 && i < a.n_prompt; i++)
			if (a.prompt[i] >= vocab)
				rc = -EINVAL, snprintf(err, sizeof(err),
				                       "prompt token %d is outside the vocabulary (0-%d)",
				                       a.prompt[i], vocab - 1);
		if (rc < 0) {
			fprintf(stderr, PROG ": %s\n", err);
			rc = 1;
			goto out;
		}
		rc = run_local(&a);
	} else if (in_job()) {
		sc_comm_t *comm = NULL;
		int r = sc_comm_init_from_env(&comm);
		if (r < 0) {
			fprintf(stderr, PROG ": cannot join the job: %s\n", sc_strerror(r));
			rc = 1;
			goto out;
		}
		rc = run_rank(comm, sc_comm_rank(comm), sc_comm_size(comm), &a, "job");
		sc_comm_destroy(comm);
	} else {
		rc = run_rank(NULL, 0, 1, &a, "single");
	}
out:
	free(key);
	free(catalog);
	free(a.prompt);
	return rc;
}

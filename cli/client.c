/* client: requests over the agent's Unix control socket, plain or streaming,
 * through one read loop (read_answer). */
#include "cli.h"

#include "proto.h"
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int cli_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

void cli_connect_error(const char *path, int err, char *buf, size_t len)
{
	if (err == -ENOENT || err == -ECONNREFUSED)
		snprintf(buf, len,
			 "no sparkd is listening on %s; start it (systemctl start sparkd) or pass --socket PATH",
			 path);
	else if (err == -EACCES)
		snprintf(buf, len,
			 "permission denied on %s; run as root or as a member of the socket's group",
			 path);
	else
		snprintf(buf, len, "cannot connect to %s: %s", path, strerror(-err));
}

/* The frame of {"v", "type", "id":1, ...args}; args is borrowed (may be NULL). */
static int encode_request(const char *type, json_t *args, uint8_t **frame, size_t *len)
{
	json_t *req = proto_msg(type, 1);
	if (args) {
		json_object_update(req, args);
		json_object_set_new(req, "v", json_integer(PROTO_VERSION));
		json_object_set_new(req, "type", json_string(type));
		json_object_set_new(req, "id", json_integer(1));
	}
	int r = proto_encode(req, frame, len);
	json_decref(req);
	return r;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
	(void)sig;
	interrupted++;
}

/* The one read loop of the CLI: frames until the final "result" or "error"
 * (returned in *reply), "stream" frames to so->on_event on the way; Ctrl-C to
 * so->on_interrupt when it is set. 0, -ETIMEDOUT (deadline; 0 = none),
 * -ECONNRESET, -EBADMSG, -ENOMEM, -ECANCELED (on_interrupt said stop). */
static int read_answer(int fd, uint64_t deadline, const struct cli_stream *so, json_t **reply)
{
	struct sigaction sa = {.sa_handler = on_sigint}, old;
	bool catch = so && so->on_interrupt;
	if (catch) {
		interrupted = 0;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, &old);
	}
	proto_decoder dec;
	proto_decoder_init(&dec);
	int r = 0, handled = 0;
	*reply = NULL;
	for (;;) {
		json_t *msg = NULL;
		char err[128];
		int nr = proto_decoder_next(&dec, &msg, err, sizeof err);
		if (nr < 0) {
			r = -EBADMSG;
			break;
		}
		if (nr == 1) {
			if (strcmp(proto_type(msg), "stream") == 0) {
				if (so && so->on_event)
					so->on_event(so->arg, msg);
				json_decref(msg);
				continue;
			}
			*reply = msg;
			break;
		}
		if (catch && interrupted > handled) {
			handled = interrupted;
			if (so->on_interrupt(so->arg, handled)) {
				r = -ECANCELED;
				break;
			}
		}
		uint64_t now = util_now_ms();
		if (deadline && now >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int pr = poll(&pfd, 1, deadline ? (int)(deadline - now) : -1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			r = pr == 0 ? -ETIMEDOUT : -errno;
			break;
		}
		uint8_t buf[65536];
		ssize_t n = recv(fd, buf, sizeof buf, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n == 0 ? -ECONNRESET : -errno;
			break;
		}
		if (proto_decoder_feed(&dec, buf, (size_t)n) < 0) {
			r = -ENOMEM;
			break;
		}
	}
	proto_decoder_free(&dec);
	if (catch)
		sigaction(SIGINT, &old, NULL);
	return r;
}

static void set_err(char **code, char **message, const char *c, const char *m)
{
	if (code)
		*code = strdup(c);
	if (message)
		*message = strdup(m);
}

int cli_stream_raw(struct cli_ctx *ctx, const char *type, json_t *args, json_t **data,
		   unsigned timeout_ms, const struct cli_stream *so, char **code, char **message)
{
	if (data)
		*data = NULL;
	if (code)
		*code = NULL;
	if (message)
		*message = NULL;
	uint8_t *frame;
	size_t flen;
	int r = encode_request(type, args, &frame, &flen);
	json_decref(args);
	if (r < 0) {
		set_err(code, message, "bad_request", "request too large");
		return -1;
	}
	int fd = cli_connect(ctx->socket);
	if (fd < 0) {
		char m[512];
		cli_connect_error(ctx->socket, fd, m, sizeof m);
		free(frame);
		set_err(code, message, "unreachable", m);
		return -1;
	}
	r = write_all(fd, frame, flen);
	free(frame);
	json_t *reply = NULL;
	if (r == 0)
		r = read_answer(fd, so ? 0 : util_now_ms() + (timeout_ms ? timeout_ms : 30000), so,
				&reply);
	close(fd);
	if (r == -ECANCELED) {
		set_err(code, message, "detached", "");
		return -1;
	}
	if (r < 0) {
		char m[512];
		if (r == -ETIMEDOUT)
			snprintf(m, sizeof m, "sparkd on %s did not answer in time", ctx->socket);
		else if (r == -EBADMSG)
			snprintf(m, sizeof m, "bad answer from sparkd on %s", ctx->socket);
		else
			snprintf(m, sizeof m, "lost the connection to sparkd on %s: %s", ctx->socket,
				 strerror(-r));
		set_err(code, message, "transport", m);
		return -1;
	}
	const char *t = proto_type(reply);
	if (t && strcmp(t, "error") == 0) {
		const char *c = proto_str(reply, "code");
		const char *m = proto_str(reply, "message");
		set_err(code, message, c ? c : "error", m ? m : "unknown error");
		json_decref(reply);
		return -1;
	}
	if (data) {
		json_t *d = json_object_get(reply, "data");
		*data = d ? json_incref(d) : json_object();
	}
	json_decref(reply);
	return 0;
}

int cli_call_raw(struct cli_ctx *ctx, const char *type, json_t *args, json_t **data,
		 unsigned timeout_ms, char **code, char **message)
{
	return cli_stream_raw(ctx, type, args, data, timeout_ms, NULL, code, message);
}

int cli_call(struct cli_ctx *ctx, const char *type, json_t *args, json_t **data,
	     unsigned timeout_ms)
{
	char *code = NULL, *message = NULL;
	int r = cli_call_raw(ctx, type, args, data, timeout_ms, &code, &message);
	if (r < 0) {
		cli_fail("%s", message ? message : "request failed");
		free(code);
		free(message);
		return 1;
	}
	return 0;
}

int cli_request(struct cli_ctx *ctx, const char *type, json_t *args, unsigned timeout_ms,
		json_t **answer)
{
	json_t *req = args ? json_incref(args) : NULL, *d = NULL;
	if (answer)
		*answer = NULL;
	int r = cli_call(ctx, type, args, &d, timeout_ms);
	if (r == 0)
		cli_output(ctx, req, d, NULL);
	json_decref(req);
	if (answer && r == 0)
		*answer = d;
	else
		json_decref(d);
	return r;
}

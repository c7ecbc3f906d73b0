/* sc_local.c - run N ranks as forked processes over loopback TCP (spark-bench
 * --local and the unit tests). Listening sockets are bound before the fork so
 * no port can be taken in between. */
#include "sc_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int sc_local_listeners(int n, int *fds, char **peers, size_t peerlen)
{
	for (int i = 0; i < n; i++)
		fds[i] = -1;
	for (int i = 0; i < n; i++) {
		struct sockaddr_in a = {.sin_family = AF_INET};
		socklen_t al = sizeof(a);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    listen(fd, SC_MAX_WORLD) < 0 || getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
			int e = -errno;
			if (fd >= 0)
				close(fd);
			for (int j = 0; j < i; j++)
				close(fds[j]);
			return e;
		}
		fds[i] = fd;
		snprintf(peers[i], peerlen, "127.0.0.1:%u", ntohs(a.sin_port));
	}
	return 0;
}

int sc_local_run(int n, sc_local_fn fn, void *arg, int timeout_ms)
{
	int fds[SC_MAX_WORLD];
	char store[SC_MAX_WORLD][32];
	char *peers[SC_MAX_WORLD];
	pid_t pids[SC_MAX_WORLD];
	int status_out = 0, left, rc;
	uint64_t dl;

	if (n < 1 || n > SC_MAX_WORLD)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		peers[i] = store[i];
	if ((rc = sc_local_listeners(n, fds, peers, sizeof(store[0]))) < 0)
		return rc;
	fflush(stdout);
	fflush(stderr);
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			for (int j = 0; j < n; j++)
				if (j != i)
					close(fds[j]);
			_exit(fn(i, n, (const char *const *)peers, fds[i], arg) & 0xff);
		}
		if (pids[i] < 0) {
			for (int j = 0; j < i; j++)
				kill(pids[j], SIGKILL);
			for (int j = 0; j < i; j++)
				waitpid(pids[j], NULL, 0);
			for (int j = 0; j < n; j++)
				close(fds[j]);
			return -EAGAIN;
		}
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	left = n;
	dl = sc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (left > 0) {
		int reaped = 0;
		for (int i = 0; i < n; i++) {
			int st;
			pid_t p;
			if (pids[i] <= 0)
				continue;
			p = waitpid(pids[i], &st, WNOHANG);
			if (p == pids[i] || (p < 0 && errno == ECHILD)) {
				int code = p < 0 ? 127
				           : WIFEXITED(st) ? WEXITSTATUS(st)
				                           : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
				pids[i] = 0;
				left--;
				reaped = 1;
				if (code && !status_out)
					status_out = code;
			}
		}
		if (reaped)
			continue;
		if (timeout_ms > 0 && sc_now_ns() > dl) {
			for (int i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
			if (!status_out)
				status_out = 124;
			timeout_ms = 0; /* now reap the killed ones */
			continue;
		}
		{
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
	}
	return status_out;
}

/* Latency on a netdev's egress: netem when the kernel has it, else a "delay
 * line" made of two tiny tc BPF programs and a helper process:
 *
 *   IF egress (clsact, direct action): frames not marked RESEND get the mark
 *     TAG|ifindex and are redirected to the ingress of lo;
 *   lo ingress: frames with a TAG mark are dropped, after packet taps saw them;
 *   the helper (comm "sim-delay", living in the namespace) reads them from
 *     lo with an AF_PACKET socket (filtered on its mark, virtio-net headers so
 *     GSO and partial checksums survive), holds each for MS, and sends it on
 *     IF with SO_MARK RESEND, which the egress program lets through.
 *
 * Raw sockets on IF see only the delayed copy; a socket on lo (or "any")
 * also sees the diverted frames. */
#include "sim_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <linux/virtio_net.h>
#include <arpa/inet.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MARK_RESEND 0x53500001u
#define MARK_TAG_HI 0x5351u /* upper 16 bits of a diverted frame's mark */
#define LO_IFINDEX 1        /* lo is ifindex 1 in every namespace */
#define FILTER_PRIO 0x5350

/* ---- BPF programs ---- */

#define INSN(c, d, s, o, i) ((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define MARK_OFF ((short)offsetof(struct __sk_buff, mark))

static int prog_load(const struct bpf_insn *insns, unsigned n)
{
	union bpf_attr a;
	memset(&a, 0, sizeof a);
	a.prog_type = BPF_PROG_TYPE_SCHED_CLS;
	a.insn_cnt = n;
	a.insns = (uint64_t)(uintptr_t)insns;
	a.license = (uint64_t)(uintptr_t) "GPL";
	int fd = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a);
	return fd < 0 ? -errno : fd;
}

/* Egress of the delayed netdev: divert to lo unless it is our own resend. */
static int prog_divert(int ifindex)
{
	const int tag = (int)((MARK_TAG_HI << 16) | ((unsigned)ifindex & 0xffff));
	const struct bpf_insn p[] = {
	    INSN(BPF_LDX | BPF_MEM | BPF_W, 2, 1, MARK_OFF, 0),
	    INSN(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 6, (int)MARK_RESEND),
	    INSN(BPF_ALU64 | BPF_MOV | BPF_K, 2, 0, 0, tag),
	    INSN(BPF_STX | BPF_MEM | BPF_W, 1, 2, MARK_OFF, 0),
	    INSN(BPF_ALU64 | BPF_MOV | BPF_K, 1, 0, 0, LO_IFINDEX),
	    INSN(BPF_ALU64 | BPF_MOV | BPF_K, 2, 0, 0, BPF_F_INGRESS),
	    INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_redirect),
	    INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	    INSN(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, TC_ACT_OK),
	    INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	};
	return prog_load(p, sizeof p / sizeof p[0]);
}

/* Ingress of lo: drop diverted frames once the taps have seen them. */
static int prog_sink(void)
{
	const struct bpf_insn p[] = {
	    INSN(BPF_LDX | BPF_MEM | BPF_W, 2, 1, MARK_OFF, 0),
	    INSN(BPF_ALU64 | BPF_RSH | BPF_K, 2, 0, 0, 16),
	    INSN(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 2, (int)MARK_TAG_HI),
	    INSN(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, TC_ACT_OK),
	    INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	    INSN(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, TC_ACT_SHOT),
	    INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	};
	return prog_load(p, sizeof p / sizeof p[0]);
}

/* ---- tc objects by raw rtnetlink (libnl-route has no clsact or cls_bpf) ---- */

static int tc_request(struct nl_sock *sk, int type, int flags, int ifindex, uint32_t parent,
		      uint32_t handle, uint32_t info, const char *kind, int bpf_fd)
{
	struct nl_msg *m = nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_ACK | flags);
	if (!m)
		return -ENOMEM;
	struct tcmsg t = {.tcm_family = AF_UNSPEC, .tcm_ifindex = ifindex, .tcm_parent = parent,
			  .tcm_handle = handle, .tcm_info = info};
	int r = nlmsg_append(m, &t, sizeof t, NLMSG_ALIGNTO);
	if (r == 0 && kind)
		r = nla_put_string(m, TCA_KIND, kind);
	if (r == 0 && bpf_fd >= 0) {
		struct nlattr *o = nla_nest_start(m, TCA_OPTIONS);
		if (!o || nla_put_u32(m, TCA_BPF_FD, (uint32_t)bpf_fd) < 0 ||
		    nla_put_string(m, TCA_BPF_NAME, "sparkctl-sim") < 0 ||
		    nla_put_u32(m, TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT) < 0)
			r = -NLE_NOMEM;
		else
			nla_nest_end(m, o);
	}
	if (r == 0)
		r = nl_send_auto(sk, m);
	nlmsg_free(m);
	if (r < 0)
		return -EIO;
	r = nl_wait_for_ack(sk);
	if (r == 0)
		return 0;
	return r == -NLE_EXIST ? -EEXIST : r == -NLE_OBJ_NOTFOUND ? -ENOENT : -EIO;
}

static int clsact_add(struct nl_sock *sk, int ifindex)
{
	int r = tc_request(sk, RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL, ifindex, TC_H_CLSACT,
			   TC_H_MAKE(TC_H_CLSACT, 0), 0, "clsact", -1);
	return r == -EEXIST ? 0 : r;
}

static int clsact_del(struct nl_sock *sk, int ifindex)
{
	int r = tc_request(sk, RTM_DELQDISC, 0, ifindex, TC_H_CLSACT, TC_H_MAKE(TC_H_CLSACT, 0), 0,
			   "clsact", -1);
	return r == -ENOENT || r == -EIO ? 0 : r;
}

static int bpf_attach(struct nl_sock *sk, int ifindex, uint32_t where, int fd)
{
	return tc_request(sk, RTM_NEWTFILTER, NLM_F_CREATE | NLM_F_REPLACE, ifindex,
			  TC_H_MAKE(TC_H_CLSACT, where), 1,
			  TC_H_MAKE((uint32_t)FILTER_PRIO << 16, htons(ETH_P_ALL)), "bpf", fd);
}

/* ---- the helper process ---- */

struct held {
	uint64_t due_us;
	size_t len;
	uint8_t *buf;
};

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

#define HOLD_MAX 16384
#define FRAME_MAX (sizeof(struct virtio_net_hdr) + 65536 + 64)

static void __attribute__((noreturn)) delay_loop(int rx, int tx, int ms)
{
	static struct held q[HOLD_MAX];
	size_t head = 0, count = 0;
	uint8_t *scratch = malloc(FRAME_MAX);
	if (!scratch)
		_exit(1);
	for (;;) {
		int timeout = -1;
		uint64_t now = now_us();
		while (count && q[head].due_us <= now) {
			struct held *h = &q[head];
			struct virtio_net_hdr *vh = (struct virtio_net_hdr *)h->buf;
			vh->flags &= (uint8_t)~VIRTIO_NET_HDR_F_DATA_VALID;
			if (send(tx, h->buf, h->len, 0) < 0 && errno == EINTR)
				continue;
			free(h->buf);
			head = (head + 1) % HOLD_MAX;
			count--;
		}
		if (count) {
			uint64_t wait = q[head].due_us - now;
			timeout = (int)((wait + 999) / 1000);
		}
		struct pollfd pfd = {.fd = rx, .events = POLLIN};
		int pr = poll(&pfd, 1, timeout);
		if (pr < 0 && errno != EINTR)
			_exit(1);
		if (pr <= 0)
			continue;
		for (;;) {
			ssize_t n = recv(rx, scratch, FRAME_MAX, MSG_DONTWAIT);
			if (n <= (ssize_t)sizeof(struct virtio_net_hdr))
				break;
			if (count == HOLD_MAX)
				continue; /* full: drop, like a queue limit */
			struct held *h = &q[(head + count) % HOLD_MAX];
			h->buf = malloc((size_t)n);
			if (!h->buf)
				continue;
			memcpy(h->buf, scratch, (size_t)n);
			h->len = (size_t)n;
			h->due_us = now_us() + (uint64_t)ms * 1000u;
			count++;
		}
	}
}

static int helper_sockets(int ifindex, int *rxo, int *txo)
{
	const uint32_t tag = (MARK_TAG_HI << 16) | ((unsigned)ifindex & 0xffff);
	struct sock_filter code[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_MARK)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, tag, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K, 0x40000),
	    BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
	int one = 1, rcvbuf = 8 << 20;
	unsigned mark = MARK_RESEND;
	/* Protocol 0: receives nothing until the filter is on and bind() names lo. */
	int rx = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
	int tx = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (rx < 0 || tx < 0)
		return -errno;
	if (setsockopt(rx, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) < 0 ||
	    setsockopt(rx, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) < 0 ||
	    setsockopt(tx, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) < 0 ||
	    setsockopt(tx, SOL_SOCKET, SO_MARK, &mark, sizeof mark) < 0)
		return -errno;
	setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
	struct sockaddr_ll lr = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
				 .sll_ifindex = LO_IFINDEX};
	struct sockaddr_ll lt = {.sll_family = AF_PACKET, .sll_protocol = 0, .sll_ifindex = ifindex};
	if (bind(rx, (struct sockaddr *)&lr, sizeof lr) < 0 ||
	    bind(tx, (struct sockaddr *)&lt, sizeof lt) < 0)
		return -errno;
	*rxo = rx;
	*txo = tx;
	return 0;
}

/* Is pid a delay helper living in namespace fd nsfd? */
static bool is_helper(pid_t pid, int nsfd)
{
	char p[64], comm[32] = "";
	snprintf(p, sizeof p, "/proc/%d/comm", (int)pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return false;
	if (!fgets(comm, sizeof comm, f))
		comm[0] = 0;
	fclose(f);
	if (strncmp(comm, "sim-delay", 9) != 0)
		return false;
	struct stat a, b;
	snprintf(p, sizeof p, "/proc/%d/ns/net", (int)pid);
	return stat(p, &a) == 0 && fstat(nsfd, &b) == 0 && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

static void helper_stop(pid_t pid, int nsfd)
{
	if (pid <= 0 || !is_helper(pid, nsfd))
		return;
	kill(pid, SIGKILL);
	for (int i = 0; i < 200 && sim_pid_alive(pid); i++) {
		waitpid(pid, NULL, WNOHANG);
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	waitpid(pid, NULL, WNOHANG);
}

static int helper_start(int nsfd, int ifindex, int ms, pid_t *out)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return r;
	}
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		setsid();
		prctl(PR_SET_NAME, "sim-delay", 0, 0, 0);
		int rx = -1, tx = -1, e = 0;
		if (setns(nsfd, CLONE_NEWNET) < 0)
			e = errno;
		if (e == 0)
			e = -helper_sockets(ifindex, &rx, &tx);
		if (write(pfd[1], &e, sizeof e) < 0 || e)
			_exit(1);
		int keep[3] = {rx, tx, -1};
		int devnull = open("/dev/null", O_RDWR);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		for (int fd = 3; fd < 1024; fd++)
			if (fd != keep[0] && fd != keep[1])
				close(fd);
		delay_loop(rx, tx, ms);
	}
	close(pfd[1]);
	int e = -1;
	ssize_t n;
	do {
		n = read(pfd[0], &e, sizeof e);
	} while (n < 0 && errno == EINTR);
	close(pfd[0]);
	if (n != (ssize_t)sizeof e || e != 0) {
		waitpid(pid, NULL, 0);
		return e > 0 ? -e : -EIO;
	}
	*out = pid;
	return 0;
}

int simx_delay(struct simnets *n, struct sim_end *e)
{
	int i = simx_idx(n, e->ns);
	if (i < 0)
		return i;
	struct nl_sock *sk = n->sk[i];
	int ifindex = simnet_ifindex(sk, e->ifname);
	if (ifindex < 0)
		return ifindex;
	/* Whatever was there goes first. */
	helper_stop(e->delay_pid, n->fd[i]);
	e->delay_pid = 0;
	clsact_del(sk, ifindex);
	simnet_delay(sk, e->ifname, 0);
	if (e->delay_ms <= 0)
		return 0;
	int r = simnet_delay(sk, e->ifname, e->delay_ms);
	if (r != -ENODEV && r != -ENOENT && r != -EOPNOTSUPP)
		return r; /* netem did it, or failed for another reason */
	/* No netem in this kernel: the delay line. */
	pid_t pid = 0;
	if ((r = helper_start(n->fd[i], ifindex, e->delay_ms, &pid)) < 0)
		return r;
	int sink = prog_sink(), divert = prog_divert(ifindex);
	r = sink < 0 ? sink : divert < 0 ? divert : 0;
	if (r == 0)
		r = clsact_add(sk, LO_IFINDEX);
	if (r == 0)
		r = bpf_attach(sk, LO_IFINDEX, TC_H_MIN_INGRESS, sink);
	if (r == 0)
		r = clsact_add(sk, ifindex);
	if (r == 0)
		r = bpf_attach(sk, ifindex, TC_H_MIN_EGRESS, divert);
	if (sink >= 0)
		close(sink);
	if (divert >= 0)
		close(divert);
	if (r < 0) {
		clsact_del(sk, ifindex);
		helper_stop(pid, n->fd[i]);
		return r;
	}
	e->delay_pid = pid;
	return 0;
}

/* serve_head.c: the head side of the serve service (serve.h).
 * SKELETON: filled in by the services work of issue 19. */
#include "serve.h"

void sh_svc_start(struct agent *a, const struct svc_req *q) { (void)a; svc_error(q, "unavailable", "services are not built yet"); }
void sh_svc_ls(struct agent *a, const struct svc_req *q) { (void)a; svc_error(q, "unavailable", "services are not built yet"); }
void sh_svc_show(struct agent *a, const struct svc_req *q) { (void)a; svc_error(q, "unavailable", "services are not built yet"); }
void sh_svc_logs(struct agent *a, const struct svc_req *q) { (void)a; svc_error(q, "unavailable", "services are not built yet"); }
void sh_svc_stop(struct agent *a, const struct svc_req *q) { (void)a; svc_error(q, "unavailable", "services are not built yet"); }
void sh_svc_restart(struct agent *a, const struct svc_req *q) { (void)a; svc_error(q, "unavailable", "services are not built yet"); }
void sh_svc_watch(struct agent *a, const struct svc_req *q) { (void)a; svc_error(q, "unavailable", "services are not built yet"); }
void sh_health(struct agent *a, const char *node_id, const json_t *msg) { (void)a; (void)node_id; (void)msg; }
void sh_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg) { (void)a; (void)ev; (void)arg; }
int sh_start(struct agent *a) { (void)a; return 0; }
void sh_stop(struct agent *a) { (void)a; }
void sh_free(struct agent *a) { (void)a; }

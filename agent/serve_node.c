/* serve_node.c: the node side of the serve service (serve.h).
 * SKELETON: filled in by the services work of issue 19. */
#include "serve.h"

void sn_health_watch(struct agent *a, const char *from, const json_t *msg) { (void)a; (void)from; (void)msg; }
void sn_health_unwatch(struct agent *a, const char *from, const json_t *msg) { (void)a; (void)from; (void)msg; }
void sn_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg) { (void)a; (void)ev; (void)arg; }
int sn_start(struct agent *a) { (void)a; return 0; }
void sn_stop(struct agent *a) { (void)a; }
void sn_free(struct agent *a) { (void)a; }

/* settle: memory after bursts (agent.h, AGENT_SETTLE_MS). Work that
 * allocates a lot at once calls agent_busy; the 1 s timers call agent_settle,
 * which after a quiet spell drops SQLite's caches and trims the heap. In the
 * library, so that whatever links the agent (sparkd, the fuzz targets) runs
 * the same code. */
#include "agent.h"

#include "util.h"

#include <malloc.h>

void agent_busy(struct agent *a)
{
	a->busy_ms = util_now_ms();
	a->unsettled = true;
}

void agent_settle(struct agent *a)
{
	if (!a->unsettled || util_now_ms() - a->busy_ms < AGENT_SETTLE_MS)
		return;
	a->unsettled = false;
	if (a->hd.db)
		db_release_memory(a->hd.db);
	malloc_trim(0);
}

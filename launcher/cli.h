/* cli.h - the old path of what the agent takes from the CLI's header: the
 * exit statuses, now launcher/exit_status.h.  Kept only so that
 * launcher/agent/agent_node.c, whose include names this path, builds while
 * the agent is being rewritten; it goes once that include names
 * "launcher/exit_status.h".
 */
#include "launcher/exit_status.h"

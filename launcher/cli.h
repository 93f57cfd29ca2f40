/* cli.h - the old path of launcher/cli/cli.h, kept only so that
 * launcher/agent/agent_node.c (which names this path for dt_cli_job_exit)
 * builds while it is being rewritten; it goes once that include names
 * "launcher/cli/cli.h".
 */
#include "launcher/cli/cli.h"

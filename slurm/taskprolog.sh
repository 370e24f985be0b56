#!/bin/sh
# taskprolog.sh: slurmd TaskProlog (slurm.conf: TaskProlog=<libexec>/elastic/slurm/taskprolog.sh).
#
# Runs as the job's user before every task (the batch script included). Each "export NAME=value"
# line it prints is set in the task's environment: here ELASTIC_CONTROL_SOCKET (the socket of
# this node's daemon for the allocation; elasticctl uses it before its config file's
# control.socket) and ELASTIC_SLURM_LOG_DIR (where the worker logs of this node stay). Prints
# nothing when the allocation has no daemon on this node. Never fails: a TaskProlog error
# would fail the user's task, and elasticctl reports a missing daemon clearly anyway.
PATH=/usr/local/bin:/usr/bin:/bin
export PATH
here=$(cd "$(dirname "$0")" && pwd -P) || exit 0
. "$here/lib.sh"
es_init taskprolog 2>/dev/null || exit 0
if [ -S "$ES_SOCKET" ]; then
  echo "export ELASTIC_CONTROL_SOCKET=$ES_SOCKET"
  echo "export ELASTIC_SLURM_LOG_DIR=$ES_LOG_DIR"
fi
exit 0

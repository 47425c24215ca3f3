#!/usr/bin/env bash
# A stand-in for ssh that makes one machine look like several nodes to Open MPI's mpirun
# (`--mca plm_rsh_agent fake_node_ssh.sh`, a hostfile of made-up names such as `nodeA slots=2`).
# mpirun calls it as `fake_node_ssh.sh HOST COMMAND...` to start its daemon (orted) on HOST; it runs
# COMMAND here instead, as if on HOST:
#  - in a UTS namespace whose host name is HOST where one can be made (`unshare --uts` as root with
#    CAP_SYS_ADMIN, else `unshare --user --map-root-user --uts`), so every rank on HOST sees it;
#    without either the host name stays this machine's and only Open MPI's own view tells the
#    nodes apart;
#  - with its own temporary directory $WICK_FAKE_NODES_DIR/HOST for the daemon's session directory
#    and the shared-memory segments (two daemons on one machine would otherwise share both and
#    collide: the vader segments are named by host name and local rank);
#  - with WICK_FAKE_NODE=HOST in the environment, so a test can find the ranks of one node.
# It records how it ran in $WICK_FAKE_NODES_DIR/HOST/mode: "uts", "user+uts" or "none".
# WICK_FAKE_NODES_UTS=off skips the namespaces, =user tries only the user namespace (to test those paths).
set -u
host=$1
shift
dir=${WICK_FAKE_NODES_DIR:?fake_node_ssh.sh: set WICK_FAKE_NODES_DIR}/$host
mkdir -p "$dir"
export TMPDIR=$dir OMPI_MCA_orte_tmpdir_base=$dir OMPI_MCA_btl_vader_backing_directory=$dir WICK_FAKE_NODE=$host
# The command as mpirun wrote it for a remote shell: one string to run with sh -c.
command="$*"
# shellcheck disable=SC2016  # $1 and $2 are expanded by the inner shell
inner='hostname "$1" && exec /bin/sh -c "$2"'
namespaces=${WICK_FAKE_NODES_UTS:-auto}
if [ "$namespaces" != off ]; then
  if [ "$namespaces" != user ] && unshare --uts /bin/sh -c "hostname $host" 2>/dev/null; then
    echo uts >"$dir/mode"
    exec unshare --uts /bin/sh -c "$inner" sh "$host" "$command"
  fi
  if unshare --user --map-root-user --uts /bin/sh -c "hostname $host" 2>/dev/null; then
    echo user+uts >"$dir/mode"
    exec unshare --user --map-root-user --uts /bin/sh -c "$inner" sh "$host" "$command"
  fi
fi
echo none >"$dir/mode"
exec /bin/sh -c "$command"

#!/bin/sh
# in-pod.sh ROOT MOUNT CMD...: run by start_plugin inside the plugin's own
# mount and PID namespaces (unshare): mount the node's driver root where the
# chart's DaemonSet mounts it, then become the plugin.
set -e
root=$1 mnt=$2
shift 2
mount --bind "$root" "$mnt"
exec "$@"

#!/bin/sh
# Write nginx's rollbox-nodes.conf (for deploy/nginx/rollbox.conf) on stdout: one upstream for every node, one for
# each node alone, and the map from a node's name (as given to `rollbox serve --node NAME`) to its upstream.
#
#     deploy/nginx/nodes.sh a=10.0.0.11:8080 b=10.0.0.12:8080 > /etc/nginx/conf.d/rollbox-nodes.conf
#
# With --resolve DNS (nginx >= 1.27.3), nginx resolves the nodes' host names through DNS while it runs, not once at
# start: for nodes whose addresses change (the pods of a StatefulSet).
set -eu
resolver=""
if [ "${1:-}" = "--resolve" ]; then
  resolver="$2"
  shift 2
fi
if [ $# -eq 0 ]; then
  echo "usage: nodes.sh [--resolve DNS] NAME=HOST:PORT..." >&2
  exit 2
fi
for pair in "$@"; do
  name=${pair%%=*}
  if ! printf '%s\n' "$name" | grep -Eqx '[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?' || [ "$pair" = "$name" ]; then
    echo "nodes.sh: '$pair' is not NAME=HOST:PORT with NAME as given to rollbox serve --node" >&2
    exit 2
  fi
done
option=""
if [ -n "$resolver" ]; then
  option=" resolve"
  echo "resolver $resolver valid=10s;"
fi
echo "upstream rollbox_any {"
[ -n "$resolver" ] && echo "    zone rollbox_any 64k;"
for pair in "$@"; do echo "    server ${pair#*=}$option;"; done
echo "    keepalive 64;"
echo "}"
for pair in "$@"; do
  echo "upstream rollbox_node_${pair%%=*} {"
  [ -n "$resolver" ] && echo "    zone rollbox_node_${pair%%=*} 64k;"
  echo "    server ${pair#*=}$option;"
  echo "    keepalive 16;"
  echo "}"
done
echo "map \$rollbox_node \$rollbox_upstream {"
echo "    default rollbox_any;"
for pair in "$@"; do echo "    ${pair%%=*} rollbox_node_${pair%%=*};"; done
echo "}"

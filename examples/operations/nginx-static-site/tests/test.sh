# Start nginx with the agent's configuration, as the instruction says, and check what it serves: /health, the
# site's index, and a file written just now (which no configuration could have known in advance).
cd /workspace
reward=0
probe="probe-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ').txt"
echo "$probe" > "site/$probe"
if nginx -t -c /workspace/nginx.conf -e stderr; then
    nginx -c /workspace/nginx.conf -e stderr -g 'daemon off;' &
    server=$!
    for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:8080/health && break; sleep 0.1; done
    if [ "$(curl -sf http://127.0.0.1:8080/health)" = "ok" ] \
        && curl -sf http://127.0.0.1:8080/ | grep -q "<title>rollbox status</title>" \
        && [ "$(curl -sf "http://127.0.0.1:8080/$probe")" = "$probe" ]; then
        reward=1
    fi
    kill "$server"
    wait "$server"
fi
echo "$reward" > "$ROLLBOX_REWARD_DIR/reward.txt"

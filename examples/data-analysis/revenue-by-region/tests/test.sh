cd /workspace
if python3 "$ROLLBOX_TESTS/check.py"; then echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"; else echo 0 > "$ROLLBOX_REWARD_DIR/reward.txt"; fi

"""Check /workspace/answer.json against the answer computed from the pristine orders (this copy, never the
workspace's, which the agent could have edited)."""

import csv
import json
import sys
from pathlib import Path

orders = Path(__file__).with_name("orders.csv")
expected: dict[str, float] = {}
with orders.open(newline="") as f:
    for row in csv.DictReader(f):
        expected.setdefault(row["region"], 0.0)
        if "2024-07-01" <= row["date"] <= "2024-09-30" and row["status"] == "shipped":
            expected[row["region"]] += int(row["quantity"]) * float(row["unit_price"])

try:
    answer = json.loads(Path("/workspace/answer.json").read_text())
    got = answer["revenue_by_region"]
    top = answer["top_region"]
except (OSError, ValueError, KeyError, TypeError) as exc:
    sys.exit(f"answer.json is missing or not in the asked form: {exc!r}")
if not isinstance(got, dict) or set(got) != set(expected):
    sys.exit(f"revenue_by_region must have exactly the regions {sorted(expected)}")
for region, value in expected.items():
    if not isinstance(got[region], int | float) or isinstance(got[region], bool) or abs(got[region] - value) > 0.01:
        sys.exit(f"{region}: expected {value:.2f}, got {got[region]!r}")
if top != max(expected, key=expected.__getitem__):
    sys.exit(f"top_region: got {top!r}")
print("answer.json is right")

"""Q3 2024 revenue of shipped orders per region, written to answer.json."""

import csv
import json

revenue: dict[str, float] = {}
with open("data/orders.csv", newline="") as f:
    for row in csv.DictReader(f):
        revenue.setdefault(row["region"], 0.0)
        if "2024-07-01" <= row["date"] <= "2024-09-30" and row["status"] == "shipped":
            revenue[row["region"]] += int(row["quantity"]) * float(row["unit_price"])
answer = {
    "revenue_by_region": {region: round(value, 2) for region, value in sorted(revenue.items())},
    "top_region": max(revenue, key=revenue.__getitem__),
}
with open("answer.json", "w") as f:
    json.dump(answer, f)

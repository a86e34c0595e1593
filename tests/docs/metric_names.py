#!/usr/bin/env python3
"""Prints the metric names every PromQL expression of a Grafana dashboard (.json) or a Prometheus
rules file (.yml) refers to, one per line (sorted, unique).  Exits 2 when the file has none.
With --as-rules OUT it writes the expressions instead as recording rules (Grafana's variables replaced
by sample values), so that `promtool check rules OUT` parses every one of them.
With --labels it prints, per expression, each label it uses (groupings, matchers, the legend or the
alert's {{ $labels.x }}) followed by the metrics of that expression: "label metric metric ..."."""
import json
import re
import sys

import yaml

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
            "offset", "inf", "nan", "atan2"}


def dashboard_exprs(node):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            yield node["expr"]
        if node.get("type") == "query":  # a templating variable: its query is PromQL (label_values)
            query = node.get("query")
            yield query.get("query", "") if isinstance(query, dict) else query
        for value in node.values():
            yield from dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_exprs(item)


def rules_exprs(doc):
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            yield rule["expr"]


def dashboard_uses(node):
    """(expression, text naming its labels): a target's expr with its legend."""
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            yield node["expr"], node.get("legendFormat", "")
        for value in node.values():
            yield from dashboard_uses(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_uses(item)


def rules_uses(doc):
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            yield rule["expr"], " ".join(str(v) for v in rule.get("annotations", {}).values())


def labels_used(expr, text):
    found = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        found.update(x.strip() for x in group.split(",") if x.strip())
    for matchers in re.findall(r"\{([^}]*)\}", re.sub(r'"(\\.|[^"\\])*"', '""', expr)):
        found.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    found.update(re.findall(r"\{\{\s*(?:\$labels\.)?([a-zA-Z_]\w*)\s*\}\}", text))
    found.discard("__name__")
    return found


def names(expr):
    expr = re.sub(r'"(\\.|[^"\\])*"', '""', expr)          # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)                    # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)                   # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,[^)]*\)", r"\1", expr)  # Grafana
    expr = re.sub(r"\$\{?\w+\}?", "", expr)                  # Grafana variables
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr):
        word, call = match.group(1), match.group(2)
        if call or word in KEYWORDS:
            continue
        yield word


GRAFANA_VALUES = {"$__rate_interval": "5m", "$__interval": "1m", "$job": "kmproxy", "$instance": ".*"}


def write_as_rules(exprs, out):
    rules = []
    for i, expr in enumerate(exprs):
        if expr.startswith("label_values("):
            expr = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", expr)
        for var, value in GRAFANA_VALUES.items():
            expr = expr.replace(var, value)
        rules.append({"record": f"kmproxy_dashboard:expr{i}", "expr": expr})
    with open(out, "w", encoding="utf-8") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)


def main():
    args = sys.argv[1:]
    out = None
    if args[:1] == ["--as-rules"]:
        out, args = args[1], args[2:]
    labels = args[:1] == ["--labels"]
    if labels:
        args = args[1:]
    path = args[0]
    with open(path, encoding="utf-8") as f:
        doc = json.load(f) if path.endswith(".json") else yaml.safe_load(f)
    exprs = list(dashboard_exprs(doc) if path.endswith(".json") else rules_exprs(doc))
    if labels:
        uses = dashboard_uses(doc) if path.endswith(".json") else rules_uses(doc)
        lines = sorted({f"{label} {' '.join(sorted(set(names(expr))))}"
                        for expr, text in uses for label in labels_used(expr, text)})
        print("\n".join(lines))
        return 0 if lines else 2
    if out:
        write_as_rules(exprs, out)
        return 0 if exprs else 2
    found = sorted({n for e in exprs for n in names(e)})
    if not found:
        print(f"{path}: no expressions", file=sys.stderr)
        return 2
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

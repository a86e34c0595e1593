#!/usr/bin/env python3
"""Checks a Prometheus rules file against a runbook: every alert has a runbook_url annotation
"docs/runbook.md#<anchor>" and the runbook has a heading whose GitHub anchor is <anchor>.
Usage: runbook_urls.py RULES.yml RUNBOOK.md; exits 1 naming each alert that fails."""
import re
import sys

import yaml


def anchors(markdown):
    found = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found


def main():
    rules_path, runbook_path = sys.argv[1:3]
    with open(rules_path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    with open(runbook_path, encoding="utf-8") as f:
        have = anchors(f.read())
    bad = []
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            if "alert" not in rule:
                continue
            url = rule.get("annotations", {}).get("runbook_url", "")
            m = re.fullmatch(r"docs/runbook\.md#([\w\-]+)", url)
            if not m:
                bad.append(f"{rule['alert']}: runbook_url {url!r} is not docs/runbook.md#<anchor>")
            elif m.group(1) not in have:
                bad.append(f"{rule['alert']}: {runbook_path} has no section #{m.group(1)}")
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

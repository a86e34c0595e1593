#!/usr/bin/env python3
"""Writes docs/commands.md on stdout from the commands' own help: `kmproxy --help` names the commands,
each command's --help is shown, and each subcommand its usage names (`kmproxy CMD SUB`) whose --help
differs from its command's.  The hand-written part of the existing file (from the KEEP marker on) is
kept as it is.  Usage: commands_md.py KMPROXY EXISTING_COMMANDS_MD (`make docs`; tests/docs checks it)."""
import re
import subprocess
import sys

KEEP = "<!-- Hand-written from here on: `make docs` keeps it as it is. -->"


def help_of(binary, *words):
    run = subprocess.run([binary, *words, "--help"], capture_output=True, text=True, timeout=30, check=False)
    if run.returncode != 0:
        sys.exit(f"commands_md.py: kmproxy {' '.join(words)} --help exited {run.returncode}: {run.stderr}")
    return run.stdout.rstrip("\n")


def commands(top_help):
    listed = top_help.split("commands:", 1)[1] if "commands:" in top_help else ""
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", listed, re.M)]


def subcommands(command, text):
    found = []
    for m in re.finditer(rf"kmproxy {command} ([a-z][a-z|-]*)", text):
        for sub in m.group(1).split("|"):
            if sub not in found:
                found.append(sub)
    return found


def section(title, text):
    return f"## `{title}`\n\n```\n{text}\n```\n"


def main():
    binary, existing = sys.argv[1:3]
    with open(existing, encoding="utf-8") as f:
        current = f.read()
    kept = current[current.index(KEEP):] if KEEP in current else KEEP + "\n"
    top = help_of(binary)
    out = ["# Commands\n",
           "<!-- Generated from every command's and subcommand's --help by tests/docs/commands_md.py.\n"
           "     Do not edit above the hand-written part: change the usage text in proxy/cli and run `make docs`. -->\n",
           section("kmproxy --help", top)]
    for command in commands(top):
        text = help_of(binary, command)
        out.append(section(f"kmproxy {command} --help", text))
        for sub in subcommands(command, text):
            sub_text = help_of(binary, command, sub)
            if sub_text != text:
                out.append(section(f"kmproxy {command} {sub} --help", sub_text))
    sys.stdout.write("\n".join(out) + "\n" + kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())

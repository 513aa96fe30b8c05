#!/usr/bin/env python3
"""Checks (or fixes) that every `deps = [...]` list in the BUILD files is
sorted as buildifier sorts it, each label once (buildifier is not packaged
for Debian).

    tools/lint/build_deps.py            # check: lists each unsorted list, exit 1
    tools/lint/build_deps.py --fix      # sort them in place

Order (buildifier's): plain strings, then ":local" labels, then "//pkg"
labels, then "@repo" labels; within a group by the label's parts split at
'.' and ':'. A comment line or a blank line inside a list starts a block
of its own that is sorted apart, as buildifier does; a label's trailing
comment moves with it.
"""
import argparse
import pathlib
import re
import subprocess
import sys

_ITEM = re.compile(r'^\s*"([^"]*)",\s*(#.*)?$')


def _key(label):
    phase = 0
    if label.startswith(":"):
        phase = 1
    elif label.startswith("//"):
        phase = 2
    elif label.startswith("@"):
        phase = 3
    return (phase, re.split(r"[.:]", label), label)


def _sorted_lines(lines):
    """`lines` of one list's body: returns them sorted block by block."""
    out, block = [], []

    seen = set()

    def flush():
        block.sort(key=lambda line: _key(_ITEM.match(line).group(1)))
        for line in block:
            label = _ITEM.match(line).group(1)
            if label not in seen:  # a label twice: Bazel refuses the rule
                seen.add(label)
                out.append(line)
        block.clear()

    for line in lines:
        if _ITEM.match(line):
            block.append(line)
        else:
            flush()
            out.append(line)
    flush()
    return out


def process(path, fix):
    """Returns the 1-based line numbers of unsorted deps lists in `path`."""
    lines = path.read_text().splitlines(keepends=True)
    unsorted = []
    i = 0
    while i < len(lines):
        if re.match(r"^\s*deps\s*=\s*\[\s*$", lines[i]):
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*\]", lines[j]):
                j += 1
            body = lines[i + 1:j]
            fixed = _sorted_lines(body)
            if fixed != body:
                unsorted.append(i + 1)
                lines[i + 1:j] = fixed
            i = j
        i += 1
    if unsorted and fix:
        path.write_text("".join(lines))
    return unsorted


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="sort in place")
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parents[2]
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard",
         "*BUILD.bazel", "*BUILD"],
        cwd=root, check=True, capture_output=True, text=True).stdout.split()
    bad = 0
    for name in files:
        path = root / name
        if not path.exists():
            continue
        for line in process(path, args.fix):
            bad += 1
            print(f"{name}:{line}: deps not sorted or repeated" +
                  (" (fixed)" if args.fix else ""))
    if bad and not args.fix:
        print(f"{bad} unsorted deps list(s): run tools/lint/build_deps.py --fix")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Size figures of memest's own source (issue 12's before/after figures), from one command:

    scripts/code_figures.py [--top N]

Counts every tracked .cc/.h file outside tests/, bench/ and third-party folders: the largest
files, the functions longer than 60 lines (universal-ctags' start and end lines, signature to
closing brace) and the longest ones, the `static_cast<size_t>` count, and the includes per layer
(scripts/check_layers.py's layers: which other folders each one's files include).
"""
import collections
import pathlib
import re
import subprocess
import sys

SKIP = ("tests/", "bench/", "build")


def sources():
    out = subprocess.run(["git", "ls-files", "*.cc", "*.h"], capture_output=True, text=True,
                         check=True).stdout.split()
    return [f for f in out if not f.startswith(SKIP)]


def functions(files):
    tags = subprocess.run(["ctags", "-x", "--_xformat=%N\t%F\t%n\t%e\t%K", "--fields=+ne",
                           "--kinds-C++=f", "--language-force=C++", *files],
                          capture_output=True, text=True, check=True).stdout
    rows = []
    for line in tags.splitlines():
        parts = line.split("\t")
        if len(parts) < 5 or not parts[3].isdigit():
            continue
        name, path, start, end = parts[0], parts[1], int(parts[2]), int(parts[3])
        rows.append((end - start + 1, path, start, name))
    return sorted(rows, reverse=True)


def includes(files):
    edges = collections.defaultdict(collections.Counter)
    for f in files:
        layer = "include/memest" if f.startswith("include/memest/") else f.split("/")[0]
        for line in pathlib.Path(f).read_text(errors="replace").splitlines():
            m = re.match(r'\s*#\s*include\s+"([^/"]+)/', line)
            if m and m.group(1) != layer.split("/")[-1]:
                edges[layer][m.group(1)] += 1
    return edges


def main():
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 10
    files = sources()
    sizes = sorted(((sum(1 for _ in open(f, errors="replace")), f) for f in files), reverse=True)
    print(f"{len(files)} source files, {sum(n for n, _ in sizes):,} lines")
    print("largest files:")
    for n, f in sizes[:5]:
        print(f"  {n:5d}  {f}")
    rows = functions(files)
    print(f"functions: {len(rows)}, over 60 lines: {sum(1 for r in rows if r[0] > 60)}")
    for n, path, start, name in rows[:top]:
        print(f"  {n:4d}  {path}:{start}  {name}")
    casts = sum(pathlib.Path(f).read_text(errors="replace").count("static_cast<size_t>")
                for f in files)
    print(f"static_cast<size_t>: {casts}")
    print("includes per layer (folder -> folders it includes: count):")
    for layer, targets in sorted(includes(files).items()):
        print(f"  {layer}: " + ", ".join(f"{t} {n}" for t, n in sorted(targets.items())))


if __name__ == "__main__":
    main()

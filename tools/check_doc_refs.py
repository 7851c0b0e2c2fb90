#!/usr/bin/env python3
"""tools/check_doc_refs.py — every reference to a file of the repository that the code and docs make
resolves: a docs file with a section mark and a quoted heading (or §Heading) names an existing file with a heading that starts
with those words, and a `src/...`, `include/...`, `tests/...`, `tools/...` or `bench/...` path names
a file or folder that exists. Run by `./dev test` (a stale reference is a failing test).

Usage: tools/check_doc_refs.py [ROOT]   (exit 1 and one line per broken reference)
"""
import pathlib
import re
import subprocess
import sys

SECTION = re.compile(r'(docs/[a-z0-9_-]+\.md|README\.md|CHANGELOG\.md)\s*§\s*(?:"([^"]+)"|([A-Za-z][\w-]*))')
# a Markdown link to a docs file (relative to the linking file) followed by a section mark
LINKED = re.compile(r'\]\(([^)\s]+\.md)\)\s*§\s*(?:"([^"]+)"|([A-Za-z][\w-]*))')
PATH = re.compile(r'(?<![\w/.-])((?:src|include|tests|tools|bench|docs|configs|python|apps)/[\w./*{},-]+)')
COMMENT = re.compile(r"^\s*(///|//|#|\*)\s?")
TEXT_SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".toml", ".txt"}


def headings(md: pathlib.Path):
    out = []
    for line in md.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            out.append(line.lstrip("#").strip().replace("`", ""))
    return out


def expand_braces(ref: str):
    m = re.search(r"\{([^{}]*)\}", ref)
    if not m:
        return [ref]
    return [x for alt in m.group(1).split(",") for x in expand_braces(ref[:m.start()] + alt + ref[m.end():])]


def path_exists(root: pathlib.Path, ref: str) -> bool:
    ref = ref.rstrip(".,;:)")
    for one in expand_braces(ref):  # a brace set: every member must exist
        if "*" in one:  # a glob: something must match it
            if not list(root.glob(one)) and not list((root / "src").glob(one)):
                return False
        elif not ((root / one).exists() or (root / "src" / one).exists()):  # src/ is an include root
            return False
    return True


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    bad = []
    cache = {}
    for name in files:
        p = root / name
        if p.suffix not in TEXT_SUFFIXES or name.startswith(("results/", "bench/results/")) \
                or name == "CHANGELOG.md" or not p.is_file():
            continue
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        for n, line in enumerate(lines, 1):
            if line.lstrip().startswith("#include"):
                continue
            # a reference may wrap: the next comment line's text joins this one (a reference found
            # in both is checked twice, which reports a broken one twice at most)
            if n < len(lines):
                line = line + " " + COMMENT.sub("", lines[n]).strip()
            for m in SECTION.finditer(line):
                doc, title = m.group(1), (m.group(2) or m.group(3))
                target = root / doc
                if not target.exists():
                    bad.append(f"{name}:{n}: {doc} does not exist")
                    continue
                hs = cache.setdefault(doc, headings(target))
                if not any(h.startswith(title.replace("`", "")) for h in hs):
                    bad.append(f"{name}:{n}: {doc} has no section '{title}'")
            for m in LINKED.finditer(line):
                doc, title = m.group(1), (m.group(2) or m.group(3))
                target = (p.parent / doc).resolve()
                if not target.exists():
                    bad.append(f"{name}:{n}: {doc} does not exist")
                elif not any(h.startswith(title.replace("`", "")) for h in headings(target)):
                    bad.append(f"{name}:{n}: {doc} has no section '{title}'")
            for m in PATH.finditer(line):
                if not path_exists(root, m.group(1)):
                    bad.append(f"{name}:{n}: {m.group(1)} does not exist")
    for b in dict.fromkeys(bad):
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

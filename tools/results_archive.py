#!/usr/bin/env python3
"""tools/results_archive.py — the per-step files of results/ kept as one tar archive per study.

results/<study>/runs.tar.xz holds the raw files of the study's runs (metrics.jsonl, logs, each run's
config.toml), each member named by its path from the archive's own folder: `tar -xJf runs.tar.xz`
in that folder gives back the folders the text names (e.g. results/stale-delta-study/runs/<cond>/).
The readers (tools/study_report.py) take those paths as they are: a path that is not on disk is
looked up in the archive of the nearest folder that is (see `node`), or written through an archive
(`.../runs.tar.xz/runs/<cond>`). A plain folder of runs (a fresh `octet compare --out`) is read as before.

  tools/results_archive.py pack ARCHIVE PATH...     pack PATHs (files or folders, named from ARCHIVE's
                                                    folder) into ARCHIVE, reproducibly (sorted, mtime 0,
                                                    owner 0, xz -9e); refuses a PATH outside that folder
  tools/results_archive.py list ARCHIVE             the members
  tools/results_archive.py check ARCHIVE PATH...    every file under PATH is in ARCHIVE with the same bytes

Standard library only (tarfile, lzma), like the report, so it runs on the GPU machine's python3.
"""
import fnmatch
import io
import lzma
import sys
import tarfile
from pathlib import Path, PurePosixPath

ARCHIVE_SUFFIXES = (".tar.xz", ".txz", ".tar.gz", ".tgz", ".tar.bz2", ".tar")
DEFAULT_ARCHIVE = "runs.tar.xz"


def is_archive_name(p):
    return any(str(p).endswith(s) for s in ARCHIVE_SUFFIXES)


_TREES = {}


class _Tree:
    """Every regular file of one archive, read once (the archives are a few MB; xz is read in one pass)."""

    def __init__(self, path):
        self.path = Path(path)
        self.files, self.dirs = {}, {""}
        with tarfile.open(self.path, "r:*") as tf:
            for m in tf:
                name = str(PurePosixPath(m.name.lstrip("/")))
                name = "" if name == "." else name.removeprefix("./")
                if m.isdir():
                    self._add_dirs(name)
                elif m.isfile():
                    self.files[name] = tf.extractfile(m).read()
                    self._add_dirs(str(PurePosixPath(name).parent))

    def _add_dirs(self, name):
        p = PurePosixPath(name)
        for q in [p, *p.parents]:
            self.dirs.add("" if str(q) == "." else str(q))

    def children(self, member):
        pre = member + "/" if member else ""
        out = set()
        for n in list(self.files) + list(self.dirs):
            if n.startswith(pre) and n != member and n:
                out.add(n[len(pre):].split("/", 1)[0])
        return sorted(out)


def tree(path):
    key = Path(path).resolve()
    if key not in _TREES:
        _TREES[key] = _Tree(path)
    return _TREES[key]


class ArchivePath:
    """A file or folder inside an archive, with the few pathlib.Path methods the readers use. str() is
    the path it stands for (as the caller wrote it), so tables that print a folder print the same
    text whether the runs are on disk or packed."""

    def __init__(self, tree_, member, shown):
        self._tree, self.member, self._shown = tree_, member, Path(shown)

    def __truediv__(self, name):
        m = str(PurePosixPath(self.member) / name) if self.member else str(PurePosixPath(name))
        return ArchivePath(self._tree, m, self._shown / name)

    def __str__(self):
        return str(self._shown)

    def __repr__(self):
        return f"ArchivePath({self._tree.path}!{self.member})"

    def __lt__(self, other):
        return str(self) < str(other)

    def __eq__(self, other):
        return isinstance(other, ArchivePath) and (self._tree, self.member) == (other._tree, other.member)

    def __hash__(self):
        return hash((id(self._tree), self.member))

    @property
    def name(self):
        return self._shown.name

    @property
    def archive(self):
        return self._tree.path

    def exists(self):
        return self.is_file() or self.is_dir()

    def is_file(self):
        return self.member in self._tree.files

    def is_dir(self):
        return self.member in self._tree.dirs

    def iterdir(self):
        return (self / c for c in self._tree.children(self.member))

    def glob(self, pattern):
        """One path component, fnmatch syntax (what the readers use: "seed-*")."""
        if "/" in pattern:
            raise ValueError("ArchivePath.glob takes one path component")
        return (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    def read_bytes(self):
        try:
            return self._tree.files[self.member]
        except KeyError:
            raise FileNotFoundError(f"{self} ({self.member} in {self._tree.path})") from None

    def read_text(self, encoding="utf-8"):
        return self.read_bytes().decode(encoding)

    def files(self):
        """(member path relative to this folder, bytes) of every file under it."""
        pre = self.member + "/" if self.member else ""
        return [(n[len(pre):], b) for n, b in sorted(self._tree.files.items()) if n.startswith(pre)]

    def extract_to(self, dest):
        """Writes this folder's files under dest/ (for a reader that needs real files: `octet plot`)."""
        for rel, data in self.files():
            f = Path(dest) / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
        return Path(dest)


def node(path):
    """`path` itself if it is on disk; else the same path inside an archive: (1) written through one
    (a component of `path` is an archive file: the rest is the member), or (2) packed into the
    runs.tar.xz of the nearest folder above it that is on disk (the member is the path from that
    folder). `path` unchanged if neither holds (callers then see a missing path)."""
    if isinstance(path, ArchivePath):
        return path
    p = Path(path)
    if p.exists():
        return p
    parts = p.parts
    for i in range(1, len(parts)):
        a = Path(*parts[:i])
        if is_archive_name(a.name) and a.is_file():
            member = str(PurePosixPath(*parts[i:]))
            t = tree(a)
            return ArchivePath(t, member, p) if member in t.files or member in t.dirs else p
    for anc in p.parents:
        if anc.is_dir():
            a = anc / DEFAULT_ARCHIVE
            if a.is_file():
                member = str(PurePosixPath(*p.relative_to(anc).parts))
                t = tree(a)
                if member in t.files or member in t.dirs:
                    return ArchivePath(t, member, p)
            break
    return p


def pack(archive, paths):
    """A reproducible archive of `paths`, members named from the archive's folder."""
    archive = Path(archive)
    base = archive.parent.resolve()
    files = []
    for p in paths:
        p = Path(p).resolve()
        if p != base and base not in p.parents:
            sys.exit(f"results_archive: {p} is not under {base}")
        files += [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    names = sorted({str(PurePosixPath(*f.relative_to(base).parts)): f for f in files}.items())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, f in names:
            info = tarfile.TarInfo(name)
            data = f.read_bytes()
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tf.addfile(info, io.BytesIO(data))
    archive.write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    return [n for n, _ in names]


def check(archive, paths):
    """Every file under `paths` is in `archive` with the same bytes; returns the differences."""
    t = _Tree(archive)
    base = Path(archive).parent.resolve()
    bad = []
    for p in paths:
        p = Path(p).resolve()
        for f in ([p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())):
            name = str(PurePosixPath(*f.relative_to(base).parts))
            if t.files.get(name) != f.read_bytes():
                bad.append(name)
    return bad


def main(argv):
    if len(argv) < 2 or argv[0] not in ("pack", "list", "check") or (argv[0] != "list" and len(argv) < 3):
        sys.exit(__doc__.split("\n\n")[1])
    cmd, archive, paths = argv[0], argv[1], argv[2:]
    if cmd == "pack":
        names = pack(archive, paths)
        print(f"results_archive: {len(names)} files -> {archive} ({Path(archive).stat().st_size:,} bytes)")
    elif cmd == "list":
        for n, b in sorted(_Tree(archive).files.items()):
            print(f"{len(b):>10} {n}")
    else:
        bad = check(archive, paths)
        for n in bad:
            print(f"results_archive: {n}: missing or different in {archive}", file=sys.stderr)
        print(f"results_archive: {'OK' if not bad else f'{len(bad)} differences'}")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1:])

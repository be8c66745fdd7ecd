#!/usr/bin/python3
"""Extracts plain UTF-8 text from the Debian packages that
scripts/fetch_corpus.sh unpacked, one text document per source file:

    <cache>/text/<package>/<path>.txt
    <cache>/manifest.json   package names, versions, sha256 of every document

Usage: extract_corpus.py --cache .cache/corpus PACKAGE...

Standard library only, plus the programs Debian uses to render the sources:
groff (man pages) and pod2text (Perl's POD). A package already extracted at
the same version by the same extractor is skipped. A package that was not
unpacked is recorded as missing and left out.
"""

import argparse
import concurrent.futures
import gzip
import hashlib
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import zlib

from rdata import RReader

# Bump when the text produced for any package changes.
EXTRACTOR_VERSION = 1
WORKERS = os.cpu_count() or 2


# --- text clean-up shared by every source -------------------------------------

def decode(raw):
    """Bytes to str: UTF-8 where valid, else Latin-1 (a few old files)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # all but \t and \n
BLANK_RUNS = re.compile(r"\n{3,}")


def overstrike(line):
    """A line as a typewriter prints it: a backspace steps back and the next
    character overstrikes; of "_" and a letter the letter is kept ("x\bx"
    is bold x, "___\b\b\bnot" is underlined "not")."""
    cells, at = [], 0
    for ch in line:
        if ch == "\b":
            at = max(0, at - 1)
            continue
        if at == len(cells):
            cells.append(ch)
        elif cells[at] in ("_", " ") or ch != "_":
            cells[at] = ch
        at += 1
    return "".join(cells)


def tidy(text):
    """Plain text: no overstrike or terminal escapes, \\n line ends, no
    trailing spaces, at most one blank line in a row, one final newline."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [overstrike(line) if "\b" in line else line for line in text.split("\n")]
    text = CONTROL_CHARS.sub("", ANSI_ESCAPE.sub("", "\n".join(line.rstrip() for line in lines)))
    text = BLANK_RUNS.sub("\n\n", text).strip("\n")
    return text + "\n" if text else ""


def read_maybe_gz(path):
    with open(path, "rb") as f:
        raw = f.read()
    return gzip.decompress(raw) if path.endswith(".gz") else raw


def files_under(root, suffixes, exclude=()):
    """Regular files (not links) under root whose names end with one of
    suffixes, as sorted paths relative to root."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        if any(rel_dir == e or rel_dir.startswith(e + "/") for e in exclude):
            continue
        for name in filenames:
            full = os.path.join(dirpath, name)
            if name.endswith(suffixes) and os.path.isfile(full) and not os.path.islink(full):
                found.append(os.path.normpath(os.path.join(rel_dir, name)))
    return sorted(found)


def text_name(rel):
    """Output name of a source file: compression and markup suffixes become .txt."""
    for suffix in (".gz", ".html", ".pod", ".txt"):
        if rel.endswith(suffix):
            rel = rel[: -len(suffix)]
    return rel + ".txt"


def run(cmd, stdin=None):
    env = dict(os.environ, LC_ALL="C.UTF-8")
    done = subprocess.run(cmd, input=stdin, capture_output=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError("%s failed: %s" % (cmd[0], decode(done.stderr)[:300]))
    return done.stdout


# --- one extractor per kind of source -------------------------------------------
# Each returns a list of (output name, source path relative to the package
# tree, text).

def plain_files(tree, root, suffixes, exclude=()):
    base = os.path.join(tree, root)
    return [(text_name(rel), os.path.join(root, rel), decode(read_maybe_gz(os.path.join(base, rel))))
            for rel in files_under(base, suffixes, exclude)]


def linux_doc(tree, helpers):
    # The reStructuredText sources; translations/ is not English.
    return plain_files(tree, "usr/share/doc/linux-doc-6.1/Documentation", (".rst.gz", ".rst"),
                       exclude=("translations",))


def python_doc(tree, helpers):
    return plain_files(tree, "usr/share/doc/python3.11/html/_sources", (".rst.txt",))


def perl_doc(tree, helpers):
    root = "usr/share/perl/5.36.0/pod"
    names = files_under(os.path.join(tree, root), (".pod",))
    render = lambda rel: decode(run(["pod2text", "--width=78", os.path.join(tree, root, rel)]))
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        texts = list(pool.map(render, names))
    return [(text_name(rel), os.path.join(root, rel), text) for rel, text in zip(names, texts)]


def man_pages(tree, helpers):
    """Man pages rendered as `man` would, without its pager and formatting."""
    root = "usr/share/man"
    pages = []
    for rel in files_under(os.path.join(tree, root), (".gz",)):
        source = read_maybe_gz(os.path.join(tree, root, rel))
        first = [l for l in source.split(b"\n") if l.strip() and not l.startswith((b'.\\"', b"'\\\""))]
        if first and first[0].startswith(b".so "):
            continue  # an alias of another page
        pages.append((rel, source))
    # -t: tables; -rLL: line length; -rcR=1: one continuous page;
    # -P-cbou: no escape sequences, no bold/underline overstrike.
    cmd = ["groff", "-t", "-mandoc", "-Tutf8", "-rLL=78n", "-rcR=1", "-P-cbou"]
    render = lambda page: decode(run(cmd, stdin=page[1]))
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        texts = list(pool.map(render, pages))
    return [(text_name(rel), os.path.join(root, rel), text) for (rel, _), text in zip(pages, texts)]


class HtmlText(html.parser.HTMLParser):
    """The readable text of an HTML page: paragraphs on their own lines,
    <pre> kept as it is, navigation bars, <head> and scripts left out."""

    BLOCKS = {"p", "div", "br", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "tr",
              "table", "ul", "ol", "dl", "blockquote", "hr", "section", "title"}
    SKIP_TAGS = {"head", "script", "style"}
    SKIP_CLASSES = {"navheader", "navfooter", "toc"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.stack, self.skip_depth, self.pre_depth = [], [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "hr", "meta", "link", "img", "input", "col"):  # void elements
            if tag in ("br", "hr") and not self.skip_depth:
                self.out.append("\n")
            return
        classes = set((dict(attrs).get("class") or "").split())
        skip = tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES)
        self.stack.append((tag, skip))
        self.skip_depth += skip
        self.pre_depth += tag == "pre"
        if tag in self.BLOCKS and not self.skip_depth:
            self.out.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "table") else "\n")
        elif tag in ("td", "th") and not self.skip_depth:
            self.out.append(" ")

    def handle_endtag(self, tag):
        if not any(t == tag for t, _ in self.stack):
            return  # stray end tag
        while self.stack:
            t, skip = self.stack.pop()
            self.skip_depth -= skip
            self.pre_depth -= t == "pre"
            if t in self.BLOCKS and not self.skip_depth:
                self.out.append("\n")
            if t == tag:
                break

    def handle_data(self, data):
        if self.skip_depth:
            return
        if not self.pre_depth:
            data = re.sub(r"\s+", " ", data)
            if not self.out or self.out[-1].endswith("\n"):
                data = data.lstrip()  # no indent at the start of a paragraph
        if data:
            self.out.append(data)

    def text(self):
        return "".join(self.out)


def html_to_text(raw):
    parser = HtmlText()
    parser.feed(decode(raw))
    parser.close()
    return parser.text()


def postgresql_doc(tree, helpers):
    root = "usr/share/doc/postgresql-doc-15/html"
    return [(text_name(rel), os.path.join(root, rel), html_to_text(read_maybe_gz(os.path.join(tree, root, rel))))
            for rel in files_under(os.path.join(tree, root), (".html",))]


def fortunes(tree, helpers):
    root = "usr/share/games/fortunes"
    base = os.path.join(tree, root)
    names = [n for n in sorted(os.listdir(base))
             if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(base, n))
             and not os.path.islink(os.path.join(base, n))]
    return [(n + ".txt", os.path.join(root, n), decode(read_maybe_gz(os.path.join(base, n)))) for n in names]


def bible_kjv(tree, helpers):
    """The King James Bible, one document per book, printed by the `bible`
    program of bible-kjv (run from its unpacked tree) from bible-kjv-text's data."""
    program = os.path.join(helpers["bible-kjv"], "usr/bin/bible")
    data = os.path.join(tree, "usr/lib")
    out = decode(run([program, "-p", data, "-f", "Genesis 1:1-Revelation 22:21"]))
    books = []  # [abbreviation, lines]; lines look like "Ge1:1 In the beginning ..."
    for line in out.split("\n"):
        m = re.match(r"^(\d?[A-Za-z]+)(\d+:\d+ .*)$", line)
        if not m:
            continue
        if not books or books[-1][0] != m.group(1):
            books.append([m.group(1), []])
        books[-1][1].append(m.group(2))
    if len(books) != 66:
        raise RuntimeError("bible: expected 66 books, got %d" % len(books))
    return [("%02d-%s.txt" % (i + 1, abbr), "usr/lib/bible.data", "\n".join(lines))
            for i, (abbr, lines) in enumerate(books)]


def janeaustenr(tree, helpers):
    """The six novels, from R's lazy-load database (an index .rdx and the
    zlib-compressed objects in .rdb)."""
    root = "usr/lib/R/site-library/janeaustenr/data"
    with open(os.path.join(tree, root, "Rdata.rdx"), "rb") as f:
        index = RReader(gzip.decompress(f.read())).item()
    with open(os.path.join(tree, root, "Rdata.rdb"), "rb") as f:
        db = f.read()
    docs = []
    for name, (offset, length) in sorted(index["variables"].items()):
        block = db[offset:offset + length]  # 4-byte length, then a zlib stream
        lines = RReader(zlib.decompress(block[4:])).item()
        if not isinstance(lines, list) or not all(isinstance(l, (str, type(None))) for l in lines):
            raise RuntimeError("janeaustenr: %s is not a character vector" % name)
        docs.append((name + ".txt", os.path.join(root, "Rdata.rdb"), "\n".join(l or "" for l in lines)))
    return docs


# package -> (extractor, helper packages whose trees it needs)
EXTRACTORS = {
    "linux-doc-6.1": (linux_doc, ()),
    "python3.11-doc": (python_doc, ()),
    "perl-doc": (perl_doc, ()),
    "postgresql-doc-15": (postgresql_doc, ()),
    "manpages": (man_pages, ()),
    "manpages-dev": (man_pages, ()),
    "r-cran-janeaustenr": (janeaustenr, ()),
    "bible-kjv-text": (bible_kjv, ("bible-kjv",)),
    "fortunes": (fortunes, ()),
}
# Packages that only help extract others (their text is not in the corpus).
HELPERS = {"bible-kjv": "provides the `bible` program that prints bible-kjv-text"}


# --- driver ------------------------------------------------------------------------

def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def read_control(path):
    fields = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def deb_info(cache, name, deb):
    """Where the package came from and where its licence is."""
    path = os.path.join(cache, "debs", deb)
    digest = None
    if os.path.exists(path):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    doc_dir = os.path.join(cache, "pkgs", name, "usr/share/doc", name)
    if os.path.islink(doc_dir):  # e.g. manpages-dev -> manpages: the licence is in that package
        name = os.path.basename(os.readlink(doc_dir))
    copyright = os.path.join("pkgs", name, "usr/share/doc", name, "copyright")
    return {"deb": deb, "deb_sha256": digest,
            "copyright": copyright if os.path.exists(os.path.join(cache, copyright)) else None}


def write_atomically(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def extract_package(name, tree, helpers, out_dir):
    """Writes the documents of one package into out_dir (a fresh temporary
    folder) and returns their manifest entries."""
    extractor, _ = EXTRACTORS[name]
    entries = []
    for out_name, source, text in extractor(tree, helpers):
        data = tidy(text).encode("utf-8")
        if not data:
            continue
        path = os.path.join(out_dir, out_name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        entries.append({"path": out_name, "source": source, "bytes": len(data), "sha256": sha256_bytes(data)})
    return entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True, help="corpus cache folder (pkgs/ inside, text/ is written)")
    ap.add_argument("packages", nargs="+")
    args = ap.parse_args()

    pkgs_dir, text_dir = os.path.join(args.cache, "pkgs"), os.path.join(args.cache, "text")
    manifest_path = os.path.join(args.cache, "manifest.json")
    os.makedirs(text_dir, exist_ok=True)
    previous = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            previous = {p["name"]: p for p in json.load(f).get("packages", [])}

    versions, debs = {}, {}
    for name in args.packages:
        control = os.path.join(pkgs_dir, name + ".control")
        if os.path.exists(control) and os.path.isdir(os.path.join(pkgs_dir, name)):
            fields = read_control(control)
            versions[name] = fields.get("Version", "unknown")
            debs[name] = fields.get("Deb")

    packages = []
    for name in args.packages:
        entry = {"name": name, "version": versions.get(name)}
        if debs.get(name):
            entry.update(deb_info(args.cache, name, debs[name]))
        if name in HELPERS:
            entry.update(status="ok" if name in versions else "missing", role=HELPERS[name], files=[])
            packages.append(entry)
            continue
        if name not in EXTRACTORS:
            sys.exit("extract_corpus: no extractor for package %s" % name)
        needed = (name,) + EXTRACTORS[name][1]
        lacking = [n for n in needed if n not in versions]
        out_dir = os.path.join(text_dir, name)
        if lacking:
            print("corpus: warning: %s left out (%s not fetched)" % (name, ", ".join(lacking)), file=sys.stderr)
            shutil.rmtree(out_dir, ignore_errors=True)
            entry.update(status="missing", files=[])
            packages.append(entry)
            continue
        key = {"extractor": EXTRACTOR_VERSION, "versions": {n: versions[n] for n in needed}}
        old = previous.get(name)
        if old and old.get("status") == "ok" and old.get("key") == key and os.path.isdir(out_dir):
            packages.append(dict(old, **entry))
            continue
        print("corpus: extracting %s %s" % (name, versions[name]), flush=True)
        tmp_dir = out_dir + ".tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        os.makedirs(tmp_dir)
        helpers = {n: os.path.join(pkgs_dir, n) for n in EXTRACTORS[name][1]}
        try:
            files = extract_package(name, os.path.join(pkgs_dir, name), helpers, tmp_dir)
        except (OSError, RuntimeError, ValueError) as e:  # e.g. groff missing: leave this package out
            print("corpus: warning: %s left out: %s" % (name, e), file=sys.stderr)
            shutil.rmtree(tmp_dir, ignore_errors=True)
            shutil.rmtree(out_dir, ignore_errors=True)
            entry.update(status="failed: %s" % e, files=[])
            packages.append(entry)
            continue
        shutil.rmtree(out_dir, ignore_errors=True)
        os.rename(tmp_dir, out_dir)
        entry.update(status="ok", key=key, documents=len(files), bytes=sum(f["bytes"] for f in files), files=files)
        packages.append(entry)

    ok = [p for p in packages if p["status"] == "ok" and p["name"] not in HELPERS]
    manifest = {
        "description": "Plain-text corpus extracted from Debian 12 packages by tools/extract_corpus.py",
        "extractor_version": EXTRACTOR_VERSION,
        "documents": sum(p["documents"] for p in ok),
        "bytes": sum(p["bytes"] for p in ok),
        "packages": packages,
    }
    write_atomically(manifest_path, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    missing = [p["name"] for p in packages if p["status"] != "ok"]
    print("corpus: %d documents, %.1f MB of text in %s%s" % (
        manifest["documents"], manifest["bytes"] / 1e6, text_dir,
        " (missing: %s)" % ", ".join(missing) if missing else ""))


if __name__ == "__main__":
    main()

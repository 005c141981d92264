#!/bin/sh
# tools/check_links.sh [FILE.md...]: every relative Markdown link of README.md and
# docs/*.md (or of the files given) resolves.  A link `[text](path)` must name a file
# or folder that exists, relative to the file it is in; `path#anchor` and `#anchor`
# must also name a heading of the target Markdown file, as GitHub slugs it: the
# heading's text (link text for links, code spans without their backticks) in lower
# case, every character but letters, digits, spaces, `-` and `_` dropped, spaces made
# `-`, and `-1`, `-2`, ... added to the second, third, ... heading of the same slug.
# Links with a scheme (https:, mailto:) are not checked; nor is anything inside code
# blocks or code spans.  Prints `FILE:LINE: LINK` for each broken one and exits 1,
# else prints one line and exits 0.  POSIX sh and awk; `make check-links` runs it,
# and `make test` with it.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -gt 0 ] || set -- README.md docs/*.md
for f in "$@"; do
    [ -f "$f" ] || { echo "check_links: $f: no such file" >&2; exit 2; }
done

LC_ALL=C awk '
# A line that opens or closes a fenced code block.
function is_fence(line) { return line ~ /^[ \t]*(```|~~~)/ }

# Records the anchors of Markdown file f in anchors[f, slug] (once per file).
function read_anchors(f,    line, fence, t, n, inner, level) {
    if (f in scanned) return
    scanned[f] = 1
    fence = 0
    while ((getline line < f) > 0) {
        if (is_fence(line)) { fence = !fence; continue }
        if (fence || line !~ /^#+[ \t]/) continue
        level = line; sub(/[ \t].*$/, "", level)
        if (length(level) > 6) continue
        t = line
        sub(/^#+[ \t]+/, "", t); sub(/[ \t]+#+[ \t]*$/, "", t); sub(/[ \t]+$/, "", t)
        while (match(t, /\[[^]]*\]\([^)]*\)/)) {     # [text](url) -> text
            inner = substr(t, RSTART + 1, RLENGTH - 1); sub(/\]\(.*$/, "", inner)
            t = substr(t, 1, RSTART - 1) inner substr(t, RSTART + RLENGTH)
        }
        t = tolower(t)
        gsub(/[^a-z0-9 _-]/, "", t)
        gsub(/ /, "-", t)
        n = seen[f, t]++
        anchors[f, (n ? t "-" n : t)] = 1
    }
    close(f)
}

function dir_of(f) { return f ~ /\// ? substr(f, 1, match(f, /\/[^\/]*$/) - 1) : "." }

function exists(p) {
    if (!(p in exist_cache)) exist_cache[p] = system("test -e \"" p "\"") == 0
    return exist_cache[p]
}

function check(file, lineno, link,    path, anchor, i, target) {
    nlinks++
    if (link ~ /^[A-Za-z][A-Za-z0-9+.-]*:/) return        # https:, mailto:, ...
    path = link; anchor = ""
    if ((i = index(link, "#")) > 0) { path = substr(link, 1, i - 1); anchor = substr(link, i + 1) }
    target = path == "" ? file : dir_of(file) "/" path
    if (path != "" && !exists(target)) { broken(file, lineno, link); return }
    if (anchor == "") return
    if (target !~ /\.md$/) return
    read_anchors(target)
    if (!((target, anchor) in anchors)) broken(file, lineno, link)
}

function broken(file, lineno, link) { printf "%s:%d: %s\n", file, lineno, link; nbad++ }

FNR == 1 { fence = 0; nfiles++ }
{
    if (is_fence($0)) { fence = !fence; next }
    if (fence) next
    l = $0
    gsub(/``[^`]*``/, "", l); gsub(/`[^`]*`/, "", l)        # code spans
    while (match(l, /\]\([^)]*\)/)) {
        link = substr(l, RSTART + 2, RLENGTH - 3)
        l = substr(l, RSTART + RLENGTH)
        sub(/^[ \t]*</, "", link); sub(/>?[ \t].*$/, "", link); sub(/>$/, "", link)
        check(FILENAME, FNR, link)
    }
}
END {
    if (nbad) { printf "check_links: %d of %d links broken\n", nbad, nlinks; exit 1 }
    printf "check_links: %d links in %d files resolve\n", nlinks, nfiles
}
' "$@"

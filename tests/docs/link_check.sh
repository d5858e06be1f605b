#!/usr/bin/env bash
# ctest docs_links: every relative link and image in the repository's markdown files resolves:
# the file or folder exists, and a #anchor names a heading of its target (GitHub's slugs).
# Links in fenced code blocks, inline code and one-line HTML comments are not links. First it checks itself on a
# folder with one good and three broken links, so a checker that finds nothing cannot pass.
#   tests/docs/link_check.sh [ROOT]     ROOT: the source tree (default: two levels up)
set -u
fail() { echo "FAIL: $*"; exit 1; }

# Every [text](target) and ![alt](target) outside code, one "line<TAB>target" per link.
links() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)  # inline code
      gsub(/<!--.*-->/, "", line)  # an HTML comment on one line is not rendered
      while (match(line, /\]\([^) \t]+( "[^"]*")?\)/)) {
        target = substr(line, RSTART + 2, RLENGTH - 3)
        sub(/ ".*$/, "", target)
        print NR "\t" target
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

# GitHub's heading anchors of a markdown file: lower case, punctuation but - and _ dropped,
# spaces to -, a repeated heading suffixed -1, -2, ...
anchors() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence || !/^#+[ \t]/ { next }
    {
      h = $0
      sub(/^#+[ \t]+/, "", h); sub(/[ \t]+#*[ \t]*$/, "", h)
      h = tolower(h)
      gsub(/\[|\]\([^)]*\)/, "", h)  # a link in a heading keeps its text
      gsub(/[^a-z0-9 _-]/, "", h)
      gsub(/ /, "-", h)
      n = seen[h]++
      print (n ? h "-" n : h)
    }' "$1"
}

# Checks the markdown files under $1; prints one line per broken link; returns their count.
check_tree() {
  local root=$1 bad=0 md line target path anchor dir
  while IFS= read -r md; do
    dir=$(dirname "$md")
    while IFS=$'\t' read -r line target; do
      case "$target" in
        http://* | https://* | mailto:* | ftp://*) continue ;;
      esac
      path=${target%%#*}
      anchor=
      [ "$path" != "$target" ] && anchor=${target#*#}
      if [ -z "$path" ]; then
        path=$md
      else
        path=$dir/$path
      fi
      if [ ! -e "$path" ]; then
        echo "${md#$root/}:$line: $target: no such file or folder"
        bad=$((bad + 1))
      elif [ -n "$anchor" ] && [[ "$path" == *.md ]] && ! anchors "$path" | grep -qxF "$anchor"; then
        echo "${md#$root/}:$line: $target: ${path#$root/} has no heading with anchor #$anchor"
        bad=$((bad + 1))
      fi
    done < <(links "$md")
  done < <(find "$root" -type d \( -name .git -o -name 'build*' -o -name runs -o -name node_modules \) -prune -o \
             -name '*.md' -type f -print | sort)
  return $((bad > 255 ? 255 : bad))
}

# --- the checker on a folder whose broken links are known --------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs"
cat >"$tmp/README.md" <<'EOF'
# Guide
## Exit codes, and why
[good](docs/a.md#first-part) [good anchor](#exit-codes-and-why) ![img](docs/missing.png)
[broken anchor](docs/a.md#no-such) `[code](not/a/link.md)` [web](https://example.com/x)
```
[fenced](not/a/link.md)
```
[missing](docs/nothing.md) <!-- [commented](not/a/link.md) -->
EOF
printf '# A\n## First part\n' >"$tmp/docs/a.md"
self=$(check_tree "$tmp")
n=$?
[ "$n" = 3 ] || fail "the self-check found $n broken links, expected 3:"$'\n'"$self"
grep -q 'README.md:3: docs/missing.png' <<<"$self" || fail "the self-check missed the missing image: $self"
grep -q 'README.md:4: docs/a.md#no-such' <<<"$self" || fail "the self-check missed the broken anchor: $self"
grep -q 'README.md:8: docs/nothing.md' <<<"$self" || fail "the self-check missed the missing file: $self"

# --- the repository --------------------------------------------------------------------------
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -f "$root/README.md" ] || fail "$root has no README.md (expected the source tree)"
out=$(check_tree "$root")
n=$?
[ "$n" = 0 ] || fail "$n broken link(s) in the markdown files of $root:"$'\n'"$out"
count=$(find "$root" -type d \( -name .git -o -name 'build*' -o -name runs -o -name node_modules \) -prune -o \
          -name '*.md' -type f -print | wc -l)
echo "docs_links: every relative link in $count markdown files resolves"

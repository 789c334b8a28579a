#!/bin/sh
# systemd-analyze verify on a copy of the shipped unit whose ExecStart names
# the built eldrd (verify checks that the binary exists).
set -eu
analyze="$1" unit="$2" eldrd="$3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|^ExecStart=[^ ]*|ExecStart=$eldrd|" "$unit" >"$tmp/eldrd.service"
grep -q "^ExecStart=$eldrd " "$tmp/eldrd.service"
# Policy checks verify does not make: the segment must survive the unit.
grep -q '^RemoveIPC=no$' "$unit"
grep -q '^Type=notify$' "$unit"
if grep -Eq '^(DynamicUser|PrivateTmp|PrivateDevices|PrivateIPC)=yes' "$unit"; then
  echo "eldrd.service: an option that hides or removes /dev/shm segments is on" >&2
  exit 1
fi
out=$("$analyze" verify "$tmp/eldrd.service" 2>&1) || { echo "$out" >&2; exit 1; }
# verify also reports problems as warnings with exit 0: any output about our unit fails.
if echo "$out" | grep -q "eldrd.service"; then
  echo "$out" >&2
  exit 1
fi
echo "eldrd.service verifies"

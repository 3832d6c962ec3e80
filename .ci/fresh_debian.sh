#!/usr/bin/env bash
# README's "two commands", exactly as written in its first ```bash block, on a fresh Debian: a bookworm made here
# with debootstrap (minbase, plus python3 and python3-venv and nothing else), a copy of this checkout and of
# ../shared beside it (the same relative layout), run by an ordinary user with a clean environment. Fails if either
# command fails. This catches what the main CI run cannot: a test that needs a system package, an extra or a
# variable that only the CI machine has.
#
# Runs as root (debootstrap, chroot, mounts). Optional, only to save download time on a machine that keeps them:
#   AGENTSPEC_FRESH_PIP_CACHE  a directory bind-mounted as the user's ~/.cache/pip (made and chowned if missing)
#   AGENTSPEC_FRESH_DEB_CACHE  a directory debootstrap keeps its .deb files in (--cache-dir)
#   AGENTSPEC_FRESH_MIRROR     the Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
shared="$repo/../shared"
suite=bookworm
mirror=${AGENTSPEC_FRESH_MIRROR:-http://deb.debian.org/debian}
user=ci
uid=4242  # a uid of its own: the pip cache is chowned to it on the host

[[ $(id -u) -eq 0 ]] || { echo "fresh_debian.sh needs root (debootstrap, chroot, mount): failing" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debootstrap is not installed: failing" >&2; exit 1; }
command -v git >/dev/null || { echo "git is needed to copy the checkout: failing" >&2; exit 1; }
[[ -d $shared ]] || { echo "no ../shared beside the checkout ($shared): failing" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/agentspec-fresh.XXXXXX")
rootfs="$work/rootfs"
home="/home/$user"
# The checkout and ../shared sit side by side under the user's home, as they do here.
name=$(basename "$repo")
chroot_repo="$home/work/$name"

# Unmounts everything under the chroot (deepest first) and only then deletes it: a delete while a bind mount is
# still there would reach into the host's /dev or the pip cache. Every step may fail without changing the exit
# status of the run.
cleanup() {
  local pid
  # Processes left in the chroot (a server a test started, an interrupted pytest) hold its mounts.
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    if [[ $(readlink "/proc/$pid/root" 2>/dev/null) == "$rootfs" ]]; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  if [[ -d $rootfs ]]; then
    { findmnt -rn -o TARGET | grep -F "$rootfs/" || true; } | sort -r | while read -r target; do
      umount -l "$target" 2>/dev/null || true
    done
    if findmnt -rn -o TARGET | grep -qF "$rootfs/"; then
      echo "fresh_debian.sh: mounts left under $rootfs; not deleting it" >&2
      return 0
    fi
  fi
  rm -rf --one-file-system "$work" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

started=$SECONDS
log() { echo "fresh_debian.sh [$((SECONDS - started)) s]: $*"; }

# The README block: the lines between its first ```bash and the closing ```, a trailing backslash joining lines.
mapfile -t commands < <(awk '
  !inside && /^```bash[[:space:]]*$/ { inside = 1; next }
  inside && /^```/ { exit }
  inside {
    if (sub(/\\$/, "")) { pending = pending $0; next }
    line = pending $0; pending = ""
    if (line ~ /^[[:space:]]*(#|$)/) next
    print line
  }' "$repo/README.md")
[[ ${#commands[@]} -gt 0 ]] || { echo "no \`\`\`bash block in README.md: failing" >&2; exit 1; }

log "debootstrap $suite (minbase + python3, python3-venv) into $rootfs"
deb_cache=()
if [[ -n ${AGENTSPEC_FRESH_DEB_CACHE:-} ]]; then
  mkdir -p "$AGENTSPEC_FRESH_DEB_CACHE"
  deb_cache=(--cache-dir="$(cd "$AGENTSPEC_FRESH_DEB_CACHE" && pwd)")
fi
debootstrap --variant=minbase --include=python3,python3-venv "${deb_cache[@]}" "$suite" "$rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 \
  || { echo "debootstrap failed: failing" >&2; tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# What any machine has besides its packages: name resolution (localhost too), a user, a writable /tmp. And what
# this network needs, never a package: where TLS goes through a proxy with its own CA, the CA bundle the host's pip
# is told to trust (PIP_CERT or /etc/pip.conf), given to the chroot's pip the same way; the host's proxy variables.
cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf"
cp -L /etc/hosts "$rootfs/etc/hosts"  # debootstrap writes none: without it "localhost" does not resolve
pip_cert=${PIP_CERT:-$(sed -n 's/^[[:space:]]*cert[[:space:]]*=[[:space:]]*//p' /etc/pip.conf 2>/dev/null | head -n1)}
if [[ -n $pip_cert && -f $pip_cert ]]; then
  mkdir -p "$rootfs/etc/ssl"
  cp -L "$pip_cert" "$rootfs/etc/ssl/host-ca.crt"
  printf '[global]\ncert = /etc/ssl/host-ca.crt\n' >"$rootfs/etc/pip.conf"
fi
proxies=()
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -n ${!var:-} ]] && proxies+=("$var=${!var}")
done
chroot "$rootfs" /usr/sbin/useradd --create-home --uid "$uid" --user-group --shell /bin/bash "$user"
chmod 1777 "$rootfs/tmp"

# The checkout as a clone would have it (tracked and untracked files, never what .gitignore leaves out: no .venv,
# no runs/), and ../shared beside it.
mkdir -p "$rootfs$chroot_repo" "$rootfs$home/work/shared"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do if [[ -e $f || -L $f ]]; then printf '%s\0' "$f"; fi; done \
  | tar --null -T - -cf -) | tar -xf - -C "$rootfs$chroot_repo"
cp -a "$shared/." "$rootfs$home/work/shared/"
chroot "$rootfs" /bin/chown -R "$user:$user" "$home/work"

# /proc, /sys, /dev with a /dev/shm of its own (rslave: nothing mounted in here propagates back to the host).
mount -t proc proc "$rootfs/proc"
mount --rbind /sys "$rootfs/sys" && mount --make-rslave "$rootfs/sys"
mount --rbind /dev "$rootfs/dev" && mount --make-rslave "$rootfs/dev"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$rootfs/dev/shm"
if [[ -n ${AGENTSPEC_FRESH_PIP_CACHE:-} ]]; then
  mkdir -p "$AGENTSPEC_FRESH_PIP_CACHE" "$rootfs$home/.cache/pip"
  chown -R "$uid:$uid" "$AGENTSPEC_FRESH_PIP_CACHE" "$rootfs$home/.cache"
  mount --bind "$AGENTSPEC_FRESH_PIP_CACHE" "$rootfs$home/.cache/pip"
fi

# Each README command as its own step, so a failure names the command; a clean environment (no CI variables
# such as AGENTSPEC_REQUIRE_ISOLATION or DOCKER_HOST) and the user's own HOME.
status=0
for cmd in "${commands[@]}"; do
  log "running: $cmd"
  set +e
  env -i HOME="$home" USER="$user" LOGNAME="$user" LANG=C.UTF-8 TERM=dumb "${proxies[@]}" \
    PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin \
    chroot --userspec="$uid:$uid" --groups="$uid" "$rootfs" /bin/bash -c "cd \"\$1\" && $cmd" bash "$chroot_repo" </dev/null
  rc=$?
  set -e
  if [[ $rc -ne 0 ]]; then
    log "FAILED (exit $rc): $cmd"
    status=1
    break  # the second command needs what the first one made
  fi
  log "passed: $cmd"
done
log "done, status $status"
exit $status

#!/usr/bin/env bash
# Fresh-root check: runs the README's two set-up commands, exactly as written there, on a brand-new
# Debian 12 root, so a package that scripts/setup.sh forgets (because a developer's machine happens to
# have it) fails here instead of on a user's first command.
#   1. a minimal root (debootstrap --variant=minbase bookworm) from the mirror this machine's apt uses,
#      made once and cached as a tarball (JOULE_FRESH_CACHE, default /var/cache/joule-fresh;
#      JOULE_FRESH_REBUILD=1 makes it again; JOULE_FRESH_LOG=FILE names the log, default a temp file);
#   2. a copy unpacked into a temp dir, given this machine's apt sources and resolv.conf;
#   3. the committed HEAD of this repository cloned into it (uncommitted changes are not tested);
#   4. the README's commands run there in a chroot, as root, with a clean environment and no stdin.
# Needs root and the network; about 4-5 minutes on an idle 2-core machine (the first run ~30 s more).
# Usage: sudo bash scripts/check-fresh.sh
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
suite=bookworm
cache=${JOULE_FRESH_CACHE:-/var/cache/joule-fresh}
tarball=$cache/$suite-minbase-$(dpkg --print-architecture).tar.gz
log=${JOULE_FRESH_LOG:-$(mktemp --tmpdir joule-fresh.XXXXXX.log)}   # everything the stages print
work=$(mktemp -d --tmpdir=/var/tmp joule-fresh.XXXXXX)   # everything mounted or unpacked lives here
root=$work/root
mounts=()             # mount points made under $root, unmounted in reverse order on exit
timings=()            # "seconds  stage" per finished stage
stage="" stage_t0=0 stage_line=1
error_re='(^|[^[:alnum:]_.-])(error|Error|ERROR)([^[:alnum:]_.]|$)|FAILED|\*\*\*Failed|^E: '

say() { echo "check-fresh: $*" | tee -a "$log"; }

# run_stage NAME COMMAND...: runs COMMAND (in a subshell: it sets nothing here) with its output in the log.
# A failure exits the script through set -e; the EXIT trap then reports the stage that failed.
run_stage() {
  stage=$1 stage_t0=$SECONDS stage_line=$(($(wc -l <"$log") + 1))
  shift
  say "[$stage] ..."
  ("$@") >>"$log" 2>&1 </dev/null   # a subshell, so a signal's exit never runs on_exit with the log as stdout
  timings+=("$(printf '%6d s  %s' $((SECONDS - stage_t0)) "$stage")")
  say "[$stage] done in $((SECONDS - stage_t0)) s"
  stage=""
}

# The URI of the first apt source that serves $suite: deb822 files first, then sources.list.
mirror_uri() {
  local f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk -v s="$suite" '
      function flush() { if (ok && uri != "" && !done) { print uri; done = 1 }; ok = 0; uri = "" }
      /^[ \t]*$/ { flush(); next }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
      /^Enabled:[ \t]*no/ { uri = ""; ok = -1 }
      END { flush() }' "$f")
    [ -z "$uri" ] || break
  done
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(sed -E 's/\[[^]]*\]//' /etc/apt/sources.list | awk -v s="$suite" '$1 == "deb" && $3 == s { print $2; exit }')
  fi
  [ -n "$uri" ] || { echo "no apt source for $suite in /etc/apt" >&2; return 1; }
  echo "$uri"
}

# The pristine root: reuse the cached tarball, or debootstrap one and cache it (written atomically).
make_pristine_root() {
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap; }
  local uri; uri=$(mirror_uri)
  echo "debootstrap --variant=minbase $suite from $uri"
  debootstrap --variant=minbase "$suite" "$work/pristine" "$uri"
  mkdir -p "$cache"
  tar --numeric-owner -C "$work/pristine" -czf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf --one-file-system "$work/pristine"
}

# Unpacks a copy of the pristine root and gives it this machine's apt sources (and their keyrings) and DNS.
unpack_root() {
  mkdir -p "$root"
  tar --numeric-owner -C "$root" -xzf "$tarball"
  rm -f "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*
  local f k
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    if [ -f "$f" ]; then cp "$f" "$root$f"; fi
  done
  grep -rhoE '(Signed-By:|signed-by=)[[:space:]]*/[^] ,]+' "$root/etc/apt" | sed -E 's/^[^:=]*[:=][[:space:]]*//' |
    sort -u | while read -r k; do
      [ -e "$root$k" ] || [ ! -f "$k" ] || install -D -m 644 "$k" "$root$k"
    done || true
  rm -f "$root/etc/resolv.conf"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
}

clone_head() {
  git clone --quiet --no-checkout "$repo" "$root/src/joule"
  git -C "$root/src/joule" checkout --quiet --detach "$sha" 2>/dev/null ||
    { git -C "$root/src/joule" fetch --quiet origin "$sha" && git -C "$root/src/joule" checkout --quiet --detach "$sha"; }
  git -C "$root/src/joule" log --oneline -1
}

mount_root() {
  local m
  for m in proc sys dev dev/pts; do
    mkdir -p "$root/$m"
    case $m in
      proc) mount -t proc proc "$root/proc" ;;
      sys) mount -t sysfs sysfs "$root/sys" ;;
      *) mount --bind "/$m" "$root/$m" ;;
    esac
    mounts+=("$root/$m")
  done
}

unmount_all() {
  local i m
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" || umount -l "${mounts[i]}"; done
  mounts=()
  # Anything else still mounted under $work (left by debootstrap or a process in the chroot), deepest first.
  awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do umount -l "$m"; done
}

# in_root COMMAND-LINE: runs it in the clone inside the chroot, as a fresh login would.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "cd /src/joule && $1"
}

on_exit() {
  local rc=$?
  set +e
  unmount_all
  if awk -v w="$work/" 'index($2, w) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
    echo "check-fresh: WARNING: mounts remain under $work; not deleting it" >&2
  else
    rm -rf --one-file-system "$work"
  fi
  if ((rc)); then
    local first; first=$(tail -n +"$stage_line" "$log" | grep -m1 -E "$error_re")
    ((rc != 130 && rc != 143)) || first="interrupted by a signal"
    [ -z "$stage" ] || timings+=("$(printf '%6d s  %s (FAILED)' $((SECONDS - stage_t0)) "$stage")")
    echo "################################################################################"
    echo "### FRESH-ROOT CHECK FAILED in stage: ${stage:-set-up}"
    echo "### first error: ${first:-(no line matched; see the tail below)}"
    echo "################################################################################"
    echo "--- last 40 lines of $log ---"
    tail -n 40 "$log"
  fi
  echo "check-fresh: stage durations:"
  printf '  %s\n' "${timings[@]}"
  if ((rc)); then echo "check-fresh: FAILED (exit $rc; full log: $log)"; else echo "check-fresh: passed (log: $log)"; fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" -eq 0 ] || { echo "check-fresh: run as root (sudo bash scripts/check-fresh.sh)" >&2; exit 1; }
sha=$(git -C "$repo" rev-parse HEAD)
git -C "$repo" diff --quiet HEAD || say "note: uncommitted changes are not tested, only commit $sha"
if [ -f "$tarball" ] && [ "${JOULE_FRESH_REBUILD:-0}" != 1 ]; then
  say "reusing the pristine $suite root $tarball"
else
  run_stage "debootstrap $suite (cached as $tarball)" make_pristine_root
fi
run_stage "unpack a copy of the pristine root" unpack_root
run_stage "clone commit $sha" clone_head
# The two commands of the README's Set-up block, its comments stripped.
mapfile -t commands < <(awk '/^## Set-up/ { s = 1 } s && /^```sh/ { b = 1; next } b && /^```/ { exit } b' \
  "$root/src/joule/README.md" | sed -E 's/[[:space:]]+#.*$//; s/^[[:space:]]+//; /^$/d')
((${#commands[@]} == 2)) || { say "expected 2 commands in README's Set-up block, found ${#commands[@]}"; exit 1; }
mount_root
run_stage "README 1: ${commands[0]}" in_root "${commands[0]}"
run_stage "README 2: ${commands[1]}" in_root "${commands[1]}"
grep -E 'tests passed|Total Test time' "$log" | tail -n 2 || true

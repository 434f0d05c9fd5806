#!/usr/bin/env bash
# Brings up a local Docker engine and the two local test images Nuvira's sandbox tests use.
#
#   scripts/docker-up.sh            # idempotent: safe to run any number of times
#
# What it does, each part only when needed:
#   1. installs Debian's `docker.io` (after `apt-get update`) when `dockerd` is missing, and
#      `busybox-static` when /bin/busybox is missing;
#   2. starts `dockerd --bridge=none --iptables=false --ip-forward=false` in the background
#      (log: /tmp/nuvira-dockerd.log) unless an engine already answers, and waits (bounded)
#      until `docker version` answers;
#   3. builds, with `docker import` (no registry is needed or used):
#      - nuvira-busybox:latest  busybox and its applet symlinks (sh, sleep, cat, wget, ...);
#      - nuvira-host:latest     an empty image, run with read-only bind mounts of the host's
#                               /usr, /lib, /lib64, /bin, /etc (and the Rust toolchain folders)
#                               so the host's cargo and python3 run inside the container.
# Set NUVIRA_DOCKER_WAIT (seconds, default 60) to change how long it waits for the engine.
set -euo pipefail

log() { printf 'docker-up: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "run as root (or install sudo): installing packages and starting dockerd need it"
    SUDO="sudo"
fi

# Without root, talk to the engine through sudo unless this user may use the socket.
dk() {
    if [ -z "$SUDO" ] || docker version >/dev/null 2>&1; then docker "$@"; else $SUDO docker "$@"; fi
}
engine_answers() { dk version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# ---- 1. packages ---------------------------------------------------------------------------
need=()
if ! engine_answers; then
    command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
fi
command -v docker >/dev/null 2>&1 || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
if [ "${#need[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "missing ${need[*]} and no apt-get: install a Docker engine by hand"
    log "installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---- 2. the engine -------------------------------------------------------------------------
if engine_answers; then
    log "engine already answers ($(dk version --format '{{.Server.Version}}'))"
else
    # A socket left behind by a dead daemon makes a new one refuse to start.
    if ! pgrep -x dockerd >/dev/null 2>&1; then
        $SUDO rm -f /var/run/docker.pid
        log "starting dockerd (log: /tmp/nuvira-dockerd.log)"
        # setsid: the daemon must not die with this script's process group.
        $SUDO setsid dockerd --bridge=none --iptables=false --ip-forward=false \
            >/tmp/nuvira-dockerd.log 2>&1 </dev/null &
    else
        log "dockerd is running but does not answer yet; waiting"
    fi
    wait_s="${NUVIRA_DOCKER_WAIT:-60}"
    deadline=$(( $(date +%s) + wait_s ))
    until engine_answers; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            tail -n 20 /tmp/nuvira-dockerd.log >&2 || true
            die "the engine did not answer within ${wait_s}s (see /tmp/nuvira-dockerd.log)"
        fi
        sleep 0.5
    done
    log "engine answers ($(dk version --format '{{.Server.Version}}'))"
fi

# ---- 3. images -----------------------------------------------------------------------------
have_image() { dk image inspect "$1" >/dev/null 2>&1; }

if have_image nuvira-busybox:latest; then
    log "image nuvira-busybox:latest present"
else
    root="$(mktemp -d)"
    trap 'rm -rf "$root"' EXIT
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/workspace" "$root/proc" "$root/sys" "$root/dev"
    chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    ln -s bin "$root/sbin"
    mkdir -p "$root/usr"
    ln -s ../bin "$root/usr/bin"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    tar -C "$root" -c . | dk import \
        --change 'ENV PATH=/bin' --change 'WORKDIR /workspace' --change 'CMD ["/bin/sh"]' \
        - nuvira-busybox:latest >/dev/null
    rm -rf "$root"
    trap - EXIT
    log "built nuvira-busybox:latest"
fi

if have_image nuvira-host:latest; then
    log "image nuvira-host:latest present"
else
    root="$(mktemp -d)"
    mkdir -p "$root/tmp" "$root/workspace"
    chmod 1777 "$root/tmp"
    tar -C "$root" -c . | dk import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'WORKDIR /workspace' \
        - nuvira-host:latest >/dev/null
    rm -rf "$root"
    log "built nuvira-host:latest (run it with read-only mounts of /usr /lib /lib64 /bin /etc)"
fi

dk run --rm --network none nuvira-busybox:latest /bin/true \
    || die "a container of nuvira-busybox:latest did not run (see /tmp/nuvira-dockerd.log)"
log "ready"

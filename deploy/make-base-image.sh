#!/usr/bin/env bash
# Make the base image the Dockerfile builds on when Docker Hub is out of reach: Debian bookworm's
# own Python 3.11, from Debian's packages, imported as one layer.
#
#   deploy/make-base-image.sh [IMAGE]        default IMAGE: local/python:3.11-bookworm
#
# Upstream, the Dockerfile's default base (python:3.11-slim) is pulled instead and this script is
# not needed. Needs root (debootstrap), debootstrap and a reachable Docker engine (DOCKER_HOST).
# Idempotent: an image already there is kept (STRATALOG_BASE_IMAGE_REBUILD=1 makes it again).
# About 2-3 minutes (debootstrap downloads and unpacks ~100 packages); the result is ~125 MB.
set -euo pipefail

image=${1:-local/python:3.11-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${DEBIAN_SUITE:-bookworm}

if [[ ${STRATALOG_BASE_IMAGE_REBUILD:-0} != 1 ]] \
        && docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image already exists"
    exit 0
fi
if [[ $(id -u) != 0 ]]; then
    echo "make-base-image.sh: debootstrap needs root" >&2
    exit 1
fi
command -v debootstrap >/dev/null || {
    echo "make-base-image.sh: debootstrap is not installed (apt-get install debootstrap)" >&2
    exit 1
}

workdir=$(mktemp -d /tmp/stratalog-rootfs.XXXXXX)
trap 'rm -rf "$workdir"' EXIT
rootfs=$workdir/rootfs

started=$SECONDS
echo "debootstrap $suite (minbase + python3, python3-venv) from $mirror ..."
# minbase: essential packages and apt only; python3-venv brings ensurepip, which the Dockerfile's
# build stage uses to make the virtualenv. The log is shown only when it fails.
if ! debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$rootfs" "$mirror" \
        >"$workdir/debootstrap.log" 2>&1; then
    tail -40 "$workdir/debootstrap.log" >&2
    exit 1
fi
# What an image never needs: the downloaded .debs, package lists (run apt-get update first, as
# with upstream images), documentation, manuals and translations. Halves the image.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
       "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
       "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log \
       "$rootfs"/tmp/* "$rootfs"/root/.cache
python_version=$(chroot "$rootfs" python3 --version)
echo "importing $image ($python_version) ..."
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --message "debootstrap --variant=minbase --include=python3,python3-venv $suite" \
    - "$image" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "base image $image: $((size / 1000000)) MB, made in $((SECONDS - started)) s"

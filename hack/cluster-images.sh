#!/usr/bin/env bash
# Builds the local cluster's images and imports them into its containerd
# (there is no registry): the pause image (containerd's sandbox_image), the
# end-to-end tests' S3 server, and the bellows image (`make image`).
# Usage: hack/cluster-images.sh [pause] [s3] [bellows]   (default: all three)
set -euo pipefail
source "$(dirname "$0")/cluster-env.sh"
S3_IMAGE=${S3_IMAGE:-bellows.test/s3:e2e}
E2E_IMAGE=${E2E_IMAGE:-bellows.test/bellows:e2e}
# The end-to-end upgrade scenario moves the release to this second tag of the
# same image, as a user moves to a new version.
E2E_UPGRADE_IMAGE=${E2E_UPGRADE_IMAGE:-bellows.test/bellows:e2e-upgrade}
out=$CLUSTER_DIR/images
mkdir -p "$out"
what=("$@"); [[ ${#what[@]} -gt 0 ]] || what=(pause s3 bellows)
cd "$root"
for w in "${what[@]}"; do
  case $w in
    pause)
      log "building $PAUSE_IMAGE"
      CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/pause" ./e2e/images/pause
      go run ./hack/testimage -binary "$out/pause" -path /pause -ref "$PAUSE_IMAGE" -out "$out/pause.tar"
      tar=$out/pause.tar ;;
    s3)
      log "building $S3_IMAGE"
      CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/s3" ./e2e/images/s3
      go run ./hack/testimage -binary "$out/s3" -path /s3 -ref "$S3_IMAGE" -out "$out/s3.tar"
      tar=$out/s3.tar ;;
    bellows)
      log "building $E2E_IMAGE (make image)"
      make --no-print-directory image IMAGE="$E2E_IMAGE" >&2
      tar=$root/dist/bellows-image.tar ;;
    *) die "unknown image $w (pause, s3, bellows)" ;;
  esac
  ctr_ images import "$tar" >&2
  if [[ $w == bellows ]]; then
    ctr_ images tag --force "$E2E_IMAGE" "$E2E_UPGRADE_IMAGE" >&2
  fi
done

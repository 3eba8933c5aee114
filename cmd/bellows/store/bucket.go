package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"gocloud.dev/gcerrors"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// refuseMissingFileBucket refuses a file:// bucket directory that does
// not exist, before blob.Open would create it: a typo in the path would
// otherwise start an empty cluster beside the real one.
func refuseMissingFileBucket(rawURL string, create bool) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "file" || create {
		return nil
	}
	if _, err := os.Stat(u.Path); errors.Is(err, os.ErrNotExist) {
		return noClusterError(rawURL, "the directory "+u.Path+" does not exist")
	}
	return nil
}

func noClusterError(rawURL, why string) error {
	return fmt.Errorf("--%s %s holds no Bellows cluster (%s; a cluster's bucket has %s): a mistyped path? Give --%s to create a new, empty cluster there",
		contract.FlagBucket, rawURL, why, contract.BucketMarker, contract.FlagCreateBucket)
}

// marker is BucketMarker's content: for a person looking at the bucket.
type marker struct {
	Created time.Time `json:"created"`
	By      string    `json:"by"`
}

// ensureBucketMarker checks that the bucket holds a cluster, or makes it
// one. A bucket without the marker but with regions is a cluster from
// before markers and gets one. An empty one is created only when asked
// (create) or when it is not a file:// bucket: object-store buckets are
// named in a KVCluster, which is the request to create the cluster. The
// first call on a bucket is also where missing credentials show, so its
// errors get a hint.
func ensureBucketMarker(ctx context.Context, b *blob.Bucket, rawURL string, create bool) error {
	restoring, err := b.Exists(ctx, contract.RestoreMarker)
	if err != nil {
		return bucketAccessError(rawURL, err)
	}
	if restoring {
		return fmt.Errorf("--%s %s: a restore into this bucket has not finished (it holds %s): wait for bellows restore, or, if it failed, empty the bucket and restore again",
			contract.FlagBucket, rawURL, contract.RestoreMarker)
	}
	ok, err := b.Exists(ctx, contract.BucketMarker)
	if err != nil {
		return bucketAccessError(rawURL, err)
	}
	if ok {
		return nil
	}
	regions, err := b.List(ctx, "regions/")
	if err != nil {
		return bucketAccessError(rawURL, err)
	}
	if len(regions) == 0 && !create && strings.HasPrefix(rawURL, "file:") {
		return noClusterError(rawURL, "the directory has no "+contract.BucketMarker+" and no regions/")
	}
	host, _ := os.Hostname()
	data, err := json.MarshalIndent(marker{Created: time.Now().UTC(), By: fmt.Sprintf("bellows store, pid %d on %s", os.Getpid(), host)}, "", "  ")
	if err != nil {
		return err
	}
	// Stores of a new cluster start together: the first write wins.
	if err := b.WriteAll(ctx, contract.BucketMarker, data, true); err != nil && !errors.Is(err, blob.ErrExists) {
		return bucketAccessError(rawURL, err)
	}
	return nil
}

// awaitBucket waits, up to wait, for an object-store bucket to answer a
// first request: a store started beside its bucket (a new cluster's pods
// start together) or during the bucket's outage then serves as soon as
// the bucket answers, instead of exiting into a crash loop whose back-off
// grows to minutes. Only what may pass is waited out (refused
// connections, timeouts, 5xx: gcerrors Unknown, Internal,
// DeadlineExceeded, ResourceExhausted); refused credentials and the
// like fail at once. A file:// bucket is a directory: nothing to wait
// for. notify is told of each failed attempt and the wait before the
// next.
func awaitBucket(ctx context.Context, b *blob.Bucket, rawURL string, wait time.Duration, notify func(err error, next time.Duration)) error {
	if strings.HasPrefix(rawURL, "file:") {
		return nil
	}
	eb := backoff.NewExponentialBackOff()
	eb.MaxInterval = 5 * time.Second
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		_, err := b.Exists(ctx, contract.BucketMarker)
		if err != nil && !transientBucketError(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(eb), backoff.WithMaxElapsedTime(wait), backoff.WithNotify(notify))
	if err != nil {
		return bucketAccessError(rawURL, err)
	}
	return nil
}

// transientBucketError reports whether a failed bucket request may
// succeed if tried again.
func transientBucketError(err error) bool {
	if credentialTrouble.MatchString(err.Error()) {
		return false
	}
	switch gcerrors.Code(err) {
	case gcerrors.Unknown, gcerrors.Internal, gcerrors.DeadlineExceeded, gcerrors.ResourceExhausted:
		return true
	}
	return false
}

// credentialTrouble matches what the cloud SDKs say when they find no
// credentials, or are refused the ones they found.
var credentialTrouble = regexp.MustCompile(`(?i)(failed to (retrieve|refresh cached) credentials|no EC2 IMDS role|NoCredentialProviders|` +
	`static credentials are empty|could not find default credentials|InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|` +
	`DefaultAzureCredential|no credentials|unable to load credentials)`)

// bucketAccessError is a failed first access to the bucket as one line:
// what failed, and for credentials where they come from.
func bucketAccessError(rawURL string, err error) error {
	text := strings.Join(strings.Fields(err.Error()), " ")
	loc := credentialTrouble.FindStringIndex(text)
	if loc == nil {
		return fmt.Errorf("--%s %s: %s", contract.FlagBucket, rawURL, oneLine(err))
	}
	// The SDKs' chain of wrapped operations says little more than this.
	cause := clip(text[loc[0]:], 120)
	hint := "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_REGION), or AWS_PROFILE"
	switch {
	case strings.HasPrefix(rawURL, "gs:"):
		hint = "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, or run where workload identity applies"
	case strings.HasPrefix(rawURL, "azblob:"):
		hint = "set AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY (or AZURE_STORAGE_SAS_TOKEN)"
	}
	return fmt.Errorf("--%s %s: no usable credentials: %s; in Kubernetes, the keys of the Secret in spec.bucket.credentialsSecretRef (%s)",
		contract.FlagBucket, rawURL, hint, cause)
}

// oneLine is err's text on one line, clipped: the SDKs' errors span lines
// and wrap several operations.
func oneLine(err error) string { return clip(strings.Join(strings.Fields(err.Error()), " "), 300) }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// probeCreateIfAbsent checks that the bucket honours create-if-absent
// writes, on which every fence of the cluster rests (manifests, the region
// map, the leases, the WAL streams: docs/failover.md §7): it creates one new
// object and then tries to create it again, which must fail. Some
// S3-compatible servers accept If-None-Match and overwrite anyway; on one
// of those, two stores could both believe they own a region.
func probeCreateIfAbsent(ctx context.Context, b *blob.Bucket, rawURL string) error {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	key := contract.CreateIfAbsentProbePrefix + hex.EncodeToString(id[:])
	if err := b.WriteAll(ctx, key, []byte("first"), true); err != nil {
		return bucketAccessError(rawURL, err)
	}
	defer func() { _ = b.Delete(context.WithoutCancel(ctx), key) }()
	err := b.WriteAll(ctx, key, []byte("second"), true)
	switch {
	case errors.Is(err, blob.ErrExists):
		return nil
	case err == nil:
		return fmt.Errorf("--%s %s: the object store overwrote an object that a create-if-absent write (If-None-Match: *) must not replace: "+
			"every ownership fence of the cluster relies on it (docs/failover.md, section 7). Use an object store that honours conditional writes, "+
			"or a version of this one that does", contract.FlagBucket, rawURL)
	default:
		return bucketAccessError(rawURL, err)
	}
}

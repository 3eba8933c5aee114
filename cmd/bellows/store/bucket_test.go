package store

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	_ "github.com/bellows-kv/bellows/storage-engine/blob/clouddrivers" // s3://, as the binary registers it
)

// A store refuses a bucket a restore is still writing (or crashed in),
// whatever else it holds, and says what to do.
func TestABucketBeingRestoredIsRefused(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := ensureBucketMarker(ctx, b, url, true); err != nil {
		t.Fatalf("a new cluster's bucket: %v", err)
	}
	if err := b.WriteAll(ctx, contract.RestoreMarker, []byte("{}"), true); err != nil {
		t.Fatal(err)
	}
	err = ensureBucketMarker(ctx, b, url, true)
	if err == nil || !strings.Contains(err.Error(), "restore") || !strings.Contains(err.Error(), contract.RestoreMarker) {
		t.Fatalf("a bucket holding %s: %v, want a refusal naming the restore", contract.RestoreMarker, err)
	}
}

// s3URL is a bucket on an S3 endpoint at addr, with credentials the fake
// server accepts (any).
func s3URL(t *testing.T, addr string) string {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	return "s3://bellows-test?endpoint=http://" + addr + "&s3ForcePathStyle=true&region=us-east-1"
}

// A store started before its object store answers waits for it, and goes
// on once it does: here the bucket's server starts only after the first
// refused attempt.
func TestAStoreWaitsForABucketThatDoesNotAnswerYet(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	url := s3URL(t, addr)
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var refused int
	srv := &http.Server{Handler: gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true)).Server(), ReadHeaderTimeout: 10 * time.Second}
	defer srv.Close()
	started := make(chan error, 1)
	err = awaitBucket(ctx, b, url, time.Minute, func(err error, next time.Duration) {
		refused++
		if refused == 1 {
			ln, lerr := net.Listen("tcp", addr)
			if lerr != nil {
				started <- lerr
				return
			}
			go func() { _ = srv.Serve(ln) }()
			started <- nil
		}
	})
	if err != nil {
		t.Fatalf("the bucket answered after %d refused attempts, yet: %v", refused, err)
	}
	if refused == 0 {
		t.Fatal("the first attempt succeeded, yet nothing listened")
	}
	if lerr := <-started; lerr != nil {
		t.Fatalf("starting the bucket's server again on %s: %v", addr, lerr)
	}
	if err := ensureBucketMarker(ctx, b, url, false); err != nil {
		t.Fatalf("the marker after the wait: %v", err)
	}
}

// Refused credentials are not waited out: the first refusal is the answer.
func TestRefusedCredentialsAreNotWaitedFor(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided does not exist in our records.</Message></Error>`)
	}))
	defer srv.Close()
	url := s3URL(t, strings.TrimPrefix(srv.URL, "http://"))
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	retries := 0
	err = awaitBucket(ctx, b, url, time.Minute, func(error, time.Duration) { retries++ })
	// A HEAD's refusal has no body to name the cause: the 403 (gcerrors
	// PermissionDenied) is what makes it final.
	if err == nil || !strings.Contains(err.Error(), "--bucket "+url) || !strings.Contains(err.Error(), "403") {
		t.Fatalf("refused credentials: %v, want the refusal, naming the bucket", err)
	}
	if retries != 0 {
		t.Fatalf("refused credentials were tried %d more times", retries)
	}
}

// The probe passes on a bucket that honours create-if-absent writes (a
// directory; the S3 server the end-to-end tests run) and refuses, naming
// the setting, one that accepts If-None-Match and overwrites anyway.
func TestABucketThatIgnoresCreateIfAbsentIsRefused(t *testing.T) {
	ctx := context.Background()
	file := "file://" + t.TempDir()
	fb, err := blob.Open(ctx, file)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if err := probeCreateIfAbsent(ctx, fb, file); err != nil {
		t.Fatalf("a directory: %v", err)
	}

	faker := gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true)).Server()
	honours := httptest.NewServer(faker)
	defer honours.Close()
	// The same server with the condition dropped on the way in: it accepts
	// the header and overwrites, as some S3-compatible servers do.
	ignores := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("If-None-Match")
		faker.ServeHTTP(w, r)
	}))
	defer ignores.Close()
	for _, c := range []struct {
		name string
		srv  *httptest.Server
		ok   bool
	}{{"an S3 server that honours If-None-Match", honours, true}, {"one that ignores it", ignores, false}} {
		url := s3URL(t, strings.TrimPrefix(c.srv.URL, "http://"))
		b, err := blob.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		err = probeCreateIfAbsent(ctx, b, url)
		_ = b.Close()
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "--bucket") || !strings.Contains(err.Error(), "create-if-absent")):
			t.Errorf("%s: %v, want a refusal naming --bucket and create-if-absent", c.name, err)
		}
	}
}

// Command s3 is the end-to-end tests' bucket: an S3-compatible server
// (github.com/johannesboyne/gofakes3, in-memory backend) that the local
// cluster runs as a pod, since MinIO's image cannot be pulled here. Buckets
// are created on first use. It honours If-None-Match: * on PUT, which the
// stores' create-if-absent manifest writes rely on. It does not check
// request signatures: any credentials are accepted.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	listen := flag.String("listen", ":9000", "address of the S3 API")
	flag.Parse()
	faker := gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true), gofakes3.WithoutVersioning(),
		gofakes3.WithTimeSkewLimit(0), gofakes3.WithLogger(gofakes3.StdLog(log.Default(), gofakes3.LogErr, gofakes3.LogWarn)))
	srv := &http.Server{Addr: *listen, Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("s3: listening on %s", *listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("s3: %v", err)
	}
}

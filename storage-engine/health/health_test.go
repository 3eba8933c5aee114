package health

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// The store's and the compactor's /metrics say which build they run.
func TestMetricsServeBuildInfo(t *testing.T) {
	srv := httptest.NewServer(Mux(NewRegistry(), func() error { return nil }, nil))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`bellows_build_info{goversion="go`, `version="dev"} 1`, "go_goroutines ", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

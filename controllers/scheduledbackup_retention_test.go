package controllers

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// Retention keeps the newest keepLast and those finished within maxAge (the
// union when both are set), and always the newest.
func TestScheduledBackupRetentionKeepsTheNewestAndTheYoung(t *testing.T) {
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	r := &ScheduledBackupReconciler{Now: func() time.Time { return now }}
	// b0 finished 1h ago, b1 2 days ago, ... b4 5 days ago (newest first).
	var done []kvapi.Backup
	for i, age := range []time.Duration{time.Hour, 48 * time.Hour, 72 * time.Hour, 96 * time.Hour, 120 * time.Hour} {
		at := metav1.NewTime(now.Add(-age))
		done = append(done, kvapi.Backup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b%d", i)}, Status: kvapi.BackupStatus{StoppedAt: &at}})
	}
	for _, c := range []struct {
		keepLast int32
		maxAge   kvapi.Duration
		want     string
	}{
		{0, "", "[]"},
		{2, "", "[b2 b3 b4]"},
		{0, "80h", "[b3 b4]"},
		{0, "30m", "[b1 b2 b3 b4]"}, // the newest is kept however old
		{4, "50h", "[b4]"},
		{1, "100h", "[b4]"},
	} {
		sb := &kvapi.ScheduledBackup{Spec: kvapi.ScheduledBackupSpec{KeepLast: c.keepLast, MaxAge: c.maxAge}}
		var got []string
		for _, b := range r.expired(sb, done) {
			got = append(got, b.Name)
		}
		if s := fmt.Sprint(got); s != c.want && !(c.want == "[]" && got == nil) {
			t.Errorf("keepLast %d, maxAge %q: deletes %s, want %s", c.keepLast, c.maxAge, s, c.want)
		}
	}
}

package specs

import (
	"slices"
	"testing"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

func TestRestoreJobOnlyWithRecoveryAndNotAStorePod(t *testing.T) {
	c := &kvapi.KVCluster{}
	c.Name, c.Namespace = "restored", "ns"
	c.Spec.Image = "bellows:test"
	c.Spec.Bucket.URL = "s3://new"
	if j := BuildRestoreJob(c); j != nil {
		t.Fatalf("a cluster without bootstrap.recovery gets a restore Job: %+v", j)
	}
	c.Spec.Bootstrap = &kvapi.BootstrapSpec{Recovery: &kvapi.RecoverySpec{Backup: "b1", SourceBucketURL: "s3://old"}}
	j := BuildRestoreJob(c)
	if j.Name != "restored-restore" || j.Labels[contract.LabelComponent] != contract.ComponentRestore ||
		j.Spec.Template.Labels[contract.LabelComponent] != contract.ComponentRestore {
		t.Fatalf("restore Job %s labelled %v, pods %v: want component %s, never the stores' (their Services select by it)", j.Name, j.Labels, j.Spec.Template.Labels, contract.ComponentRestore)
	}
	ctr := j.Spec.Template.Spec.Containers[0]
	if want := []string{"restore", "--from", "s3://old", "--backup", "b1", "--to", "s3://new"}; !slices.Equal(ctr.Args, want) || ctr.Image != "bellows:test" {
		t.Fatalf("restore container %s %v, want bellows:test %v", ctr.Image, ctr.Args, want)
	}
	if j.Spec.Template.Spec.RestartPolicy != "Never" || *j.Spec.Template.Spec.SecurityContext.RunAsNonRoot != true {
		t.Fatalf("restore pod: %+v", j.Spec.Template.Spec)
	}
}

// A recovery to a target time restores with --time, not --backup.
func TestRestoreJobToATargetTimePassesTheTime(t *testing.T) {
	c := &kvapi.KVCluster{}
	c.Name, c.Namespace = "restored", "ns"
	c.Spec.Bucket.URL = "s3://new"
	c.Spec.Bootstrap = &kvapi.BootstrapSpec{Recovery: &kvapi.RecoverySpec{TargetTime: "2026-11-27T10:42:00Z", SourceBucketURL: "s3://old"}}
	got := BuildRestoreJob(c).Spec.Template.Spec.Containers[0].Args
	if want := []string{"restore", "--from", "s3://old", "--time", "2026-11-27T10:42:00Z", "--to", "s3://new"}; !slices.Equal(got, want) {
		t.Fatalf("restore args %v, want %v", got, want)
	}
}

package cli

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// TestOperatorArgumentsParse: every argument the operator gives a store or
// worker pod is a flag of that command here, in a syntax it parses to the
// value the resource asked for. A renamed flag or a size the CLI cannot read
// fails here instead of in a crash-looping pod.
func TestOperatorArgumentsParse(t *testing.T) {
	c := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: "ns"}}
	c.Spec.Bucket.URL = "s3://bucket/prefix"
	c.Spec.Regions.SplitKeys = []string{"g", "p"}
	c.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: "pool"}
	c.Spec.Regions.SplitQPS = ptr.To(int32(2500))
	c.SetDefaults()
	p := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns"}}
	p.Spec.CacheBytes = resource.MustParse("6G")
	p.Spec.TransferRateBytesPerSecond = 12_500_000
	p.SetDefaults()
	args := specs.StoreArgs(c, p)
	if args[0] != "store" {
		t.Fatalf("store args start with %q", args[0])
	}
	cmd := newStoreCommand()
	flags := make([]string, 0, len(args)-1)
	for _, a := range args[1:] {
		// The kubelet expands $(POD_INDEX) from the pod's label.
		flags = append(flags, strings.ReplaceAll(a, "$("+contract.PodIndexEnv+")", "1"))
	}
	if err := cmd.ParseFlags(flags); err != nil {
		t.Fatalf("bellows store does not parse the operator's arguments %q: %v", flags, err)
	}
	for flag, want := range map[string]string{
		contract.FlagBucket:           "s3://bucket/prefix",
		contract.FlagWALDir:           contract.WALMountPath,
		contract.FlagConfig:           contract.EngineConfigPath,
		contract.FlagSplitKeys:        "[g,p]",
		contract.FlagRegionOwner:      "1",
		contract.FlagReplicasFrom:     "ns/kv",
		contract.FlagPeerService:      "ns/kv-headless",
		contract.FlagCompactorService: "ns/pool-compactor",
		contract.FlagListen:           ":7400",
		contract.FlagMetricsListen:    ":9090",
		contract.FlagSplitBytes:       "3000000000", // the pool's m/2
		contract.FlagSplitQPS:         "2500",
	} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("store --%s = %q, want %q", flag, got, want)
		}
	}

	pargs := specs.PoolArgs(p)
	if pargs[0] != "compactor" {
		t.Fatalf("pool args start with %q", pargs[0])
	}
	pcmd := newCompactorCommand()
	if err := pcmd.ParseFlags(pargs[1:]); err != nil {
		t.Fatalf("bellows compactor does not parse the operator's arguments %q: %v", pargs[1:], err)
	}
	for flag, want := range map[string]string{
		contract.FlagCacheBytes:    "6000000000",
		contract.FlagTransferRate:  "1.25e+07",
		contract.FlagDrainTimeout:  contract.DefaultDrainTimeout.String(),
		contract.FlagListen:        ":7500",
		contract.FlagMetricsListen: ":9090",
	} {
		if got := pcmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("compactor --%s = %q, want %q", flag, got, want)
		}
	}
}

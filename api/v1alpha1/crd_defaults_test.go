package v1alpha1

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/bellows-kv/bellows/internal/contract"
)

// crdSchema is the openAPIV3Schema of a generated CRD.
func crdSchema(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// schemaDefaults walks the schema and calls f for every property with a
// default, with its JSON path.
func schemaDefaults(schema map[string]any, path string, f func(path string, def any)) {
	props, _ := schema["properties"].(map[string]any)
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := props[k].(map[string]any)
		if def, ok := p["default"]; ok {
			f(path+"."+k, def)
		}
		schemaDefaults(p, path+"."+k, f)
	}
}

// lookup is the value at a JSON path of v, ok=false when a step is absent.
func lookup(v any, path string) (any, bool) {
	for _, k := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// sameValue compares a schema default with what SetDefaults wrote: equal
// JSON, or equal as quantities ("128Mi" and 134217728) or durations ("10m"
// and "10m0s"); an object default must agree field by field.
func sameValue(def, got any) error {
	if reflect.DeepEqual(def, got) {
		return nil
	}
	if dm, ok := def.(map[string]any); ok {
		gm, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("default %v is an object, SetDefaults wrote %v", def, got)
		}
		for k, dv := range dm {
			if err := sameValue(dv, gm[k]); err != nil {
				return fmt.Errorf(".%s: %w", k, err)
			}
		}
		return nil
	}
	ds, gs := fmt.Sprint(def), fmt.Sprint(got)
	if dq, err := resource.ParseQuantity(ds); err == nil {
		if gq, err := resource.ParseQuantity(gs); err == nil && dq.Cmp(gq) == 0 {
			return nil
		}
	}
	if dd, err := time.ParseDuration(ds); err == nil {
		if gd, err := time.ParseDuration(gs); err == nil && dd == gd {
			return nil
		}
	}
	return fmt.Errorf("the CRD defaults to %v, SetDefaults (internal/contract) to %v", def, got)
}

// notDefaultedInGo are fields whose zero value is valid, so SetDefaults
// cannot tell "unset" from the zero a user wrote; only the API server applies
// their default; they are compared with the contract directly.
var notDefaultedInGo = map[string]any{
	".spec.minReplicas": contract.DefaultPoolMinReplicas, // 0 is a valid lower bound: a pool that may scale to zero
}

// TestCRDDefaultsMatchTheContract: every kubebuilder:default in the
// generated CRDs equals what SetDefaults, which reads internal/contract,
// writes into an empty object.
func TestCRDDefaultsMatchTheContract(t *testing.T) {
	kv := &KVCluster{}
	kv.SetDefaults()
	pool := &CompactionPool{}
	pool.SetDefaults()
	for _, tc := range []struct {
		file string
		obj  any
	}{
		{"kv.bellows.dev_kvclusters.yaml", kv},
		{"kv.bellows.dev_compactionpools.yaml", pool},
	} {
		data, err := json.Marshal(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatal(err)
		}
		n := 0
		schemaDefaults(crdSchema(t, tc.file), "", func(path string, def any) {
			n++
			if want, ok := notDefaultedInGo[path]; ok {
				if err := sameValue(def, want); err != nil {
					t.Errorf("%s %s: %v", tc.file, path, err)
				}
				return
			}
			parent := path[:strings.LastIndex(path, ".")]
			if _, ok := lookup(obj, parent); !ok && parent != "" {
				return // an optional object left out: its fields' defaults apply only inside it
			}
			got, ok := lookup(obj, path)
			if !ok {
				t.Errorf("%s %s: the CRD defaults to %v, SetDefaults leaves it unset", tc.file, path, def)
				return
			}
			if err := sameValue(def, got); err != nil {
				t.Errorf("%s %s: %v", tc.file, path, err)
			}
		})
		if n < 5 {
			t.Errorf("%s: only %d defaults found; is the schema walk broken?", tc.file, n)
		}
	}
}

// TestCRDEnumsMatchTheContract: the CRD accepts exactly the modes the
// engine.yaml schema knows.
func TestCRDEnumsMatchTheContract(t *testing.T) {
	engine, _ := lookupSchema(crdSchema(t, "kv.bellows.dev_kvclusters.yaml"), "spec.engine")
	for path, want := range map[string][]string{
		"memstore.policy": names(contract.MemstorePolicies),
		"offload":         names(contract.OffloadModes),
		"warmup.mode":     names(contract.WarmupModes),
		"syncMode":        names(contract.SyncModes),
	} {
		s, ok := lookupSchema(engine, path)
		if !ok {
			t.Errorf("spec.engine.%s: not in the CRD", path)
			continue
		}
		var got []string
		for _, v := range s["enum"].([]any) {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, want) {
			t.Errorf("spec.engine.%s: the CRD allows %v, engine.yaml %v", path, got, want)
		}
	}
}

func lookupSchema(s map[string]any, path string) (map[string]any, bool) {
	for _, k := range strings.Split(path, ".") {
		props, _ := s["properties"].(map[string]any)
		next, ok := props[k].(map[string]any)
		if !ok {
			return nil, false
		}
		s = next
	}
	return s, true
}

func names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// TestRegionCountBoundMatchesTheStore: the CRD admits no region count the
// storage pods refuse (--regions), which would crash-loop them.
func TestRegionCountBoundMatchesTheStore(t *testing.T) {
	node := crdSchema(t, "kv.bellows.dev_kvclusters.yaml")
	for _, p := range []string{"spec", "regions", "count"} {
		props, _ := node["properties"].(map[string]any)
		node, _ = props[p].(map[string]any)
	}
	max, ok := node["maximum"].(float64)
	if !ok {
		t.Fatalf("spec.regions.count has no maximum in the CRD: %v", node)
	}
	if int(max) != contract.MaxRegionCount {
		t.Fatalf("the CRD's spec.regions.count maximum is %v, the store's is %d (contract.MaxRegionCount)", max, contract.MaxRegionCount)
	}
}
